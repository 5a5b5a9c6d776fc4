"""Schedules whose nodes run on two GPUs (docs/gpu.md, "Several GPUs"), on the fake driver with
two devices (tests/fakes/cuda_driver.py: one context per device, streams, events and memory
that belong to one, peer copies that check both contexts, and a fault when a kernel touches
another device's memory); the numeric tests run again where a machine has two real GPUs."""


import numpy as np
import pytest
from fakes.cuda_driver import real
from fakes.env import fake_or_gpu, two_gpu_fake

import nnc
from nnc import cuda
from nnc.cuda import capture as cgraph
from nnc.cuda import driver as drv
from nnc.cuda import memory, runner
from nnc.schedule.schedule import POLICIES


@pytest.fixture
def fake(monkeypatch):
    yield from two_gpu_fake(monkeypatch)


@pytest.fixture(params=["fake", "gpu"])
def env(request):
    """The fake driver with two GPUs, then two real GPUs where a machine has them."""
    f = fake_or_gpu(request)
    if f is None and cuda.device_count() < 2:
        pytest.skip(f"one GPU only ({cuda.device_count()}): the test needs two")
    return f


A = np.arange(-8, 8, dtype=np.float32).reshape(4, 4) / 4


def two_gpu_graph(device=lambda i: f"gpu:{i}"):
    """RELU on gpu:0; its result copied to gpu:1 (DATA_TRANSFER, peer) and scaled there, and
    scaled on gpu:0 beside it; the two halves summed on gpu:1. Built on the CPU instead with
    device=lambda i: "cpu" (the reference)."""
    def t(i):
        return nnc.Tensor.zeros((4, 4), device=device(i))

    x0 = memory.from_numpy(A, device(0)) if device(0) != "cpu" else nnc.Tensor(A.copy())
    y0, w0, y1, z1, w1, out = t(0), t(0), t(1), t(1), t(1), t(1)
    g = nnc.Graph()
    relu = g.exec(nnc.Cmd("RELU"), [x0], [y0], name="relu")
    copy = g.exec(nnc.Cmd("DATA_TRANSFER"), [y0], [y1], name="copy")
    mul1 = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [y1], [z1], name="mul1")
    mul0 = g.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [y0], [w0], name="mul0")
    back = g.exec(nnc.Cmd("DATA_TRANSFER"), [w0], [w1], name="back")
    add = g.exec(nnc.Cmd("EWSUM"), [z1, w1], [out], name="add")
    g.concat(relu, copy)
    g.concat(copy, mul1)
    g.concat(relu, mul0)
    g.concat(mul0, back)
    g.concat(mul1, add)
    g.concat(back, add)
    return g, out


def expected():
    g, out = two_gpu_graph(lambda i: "cpu")
    g.run()
    return out.numpy().copy()


def test_a_two_gpu_graph_gives_the_cpu_result_every_way(env):
    want = expected()
    g, out = two_gpu_graph()
    g.run()                                     # synchronous: each node on its GPU's stream
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    sched = nnc.static_schedule(g, stream_type="gpu")
    sched.verify()
    for kind in ("gpu:0", "gpu:1"):             # the caller on either GPU
        out_zero = memory.from_numpy(np.zeros((4, 4), np.float32), "gpu:1")
        nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [out_zero], [out])
        s = nnc.Stream(kind)
        g.run(stream=s)
        s.wait()
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    s = nnc.Stream("gpu:0")
    for _ in range(3):                          # the runtime's streams are reused
        g.run(stream=s)
    s.wait()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


def test_each_node_runs_on_a_stream_of_its_gpu(fake):
    g, _ = two_gpu_graph()
    sched = nnc.static_schedule(g, stream_type="gpu")
    by_name = {e.name: e for e in g.execs}
    gpu_of = {"relu": 0, "mul0": 0, "back": 1, "copy": 1, "mul1": 1, "add": 1}
    for name, i in gpu_of.items():
        # A DATA_TRANSFER runs on the GPU of its output (the destination).
        assert sched.stream_kinds[sched[by_name[name]].streams[0]] == f"gpu:{i}", name
    assert set(sched.stream_kinds) == {"gpu:0", "gpu:1"}
    s = nnc.Stream("gpu:0")
    fake.launched_on.clear()
    g.run(stream=s)
    s.wait()
    ctx = {0: int(drv.device(0).context), 1: int(drv.device(1).context)}
    ran = {(name, c) for name, _stream, c in fake.launched_on}
    assert ran == {("nnc_relu_f32", ctx[0]), ("nnc_scalar_mul_f32", ctx[0]),
                   ("nnc_scalar_mul_f32", ctx[1]), ("nnc_ewsum_f32", ctx[1])}
    for _name, stream, c in fake.launched_on:
        assert fake.ctx_of[stream] == c         # the stream is of the kernel's device
    assert not fake.faults


def test_cross_device_waits_are_events(fake):
    g, out = two_gpu_graph()
    sched = nnc.static_schedule(g, stream_type="gpu")
    crossing = [(e.name, w) for e in sched.order for w in sched[e].waits
                if sched.signal_kinds[w] != sched.stream_kinds[sched[e].streams[0]]]
    assert crossing                             # the graph cannot avoid them
    waits, records = [], []
    wait, record = fake.cuStreamWaitEvent, fake.cuEventRecord

    def wait_event(s, e, flags):
        waits.append((fake.ctx_of[int(s)], fake.ctx_of[int(e)]))
        return wait(s, e, flags)

    def record_event(e, s):
        records.append((fake.ctx_of[int(e)], fake.ctx_of[int(s)]))
        return record(e, s)

    fake.cuStreamWaitEvent, fake.cuEventRecord = wait_event, record_event
    s = nnc.Stream("gpu:1")
    g.run(stream=s)
    s.wait()
    np.testing.assert_allclose(out.numpy(), expected(), rtol=1e-6)
    # Every record is on a stream of the event's device; some waits cross devices.
    assert records and all(a == b for a, b in records)
    assert any(a != b for a, b in waits)


def test_max_streams_caps_each_gpu(fake):
    g, out = two_gpu_graph()
    sched = nnc.static_schedule(g, stream_type="gpu", max_streams=1)
    assert sorted(sched.stream_kinds) == ["gpu:0", "gpu:1"]
    sched.verify()
    s = nnc.Stream("gpu:0")
    g.run(stream=s)
    s.wait()
    np.testing.assert_allclose(out.numpy(), expected(), rtol=1e-6)
    for policy in ("rank", *[p for p in POLICIES if p != "rank"]):
        sched = nnc.static_schedule(g, stream_type="gpu", policy=policy)
        sched.verify()
        for e in sched.order:
            assert sched.stream_kinds[sched[e].streams[0]] == (
                "gpu:0" if e.name in ("relu", "mul0") else "gpu:1"), (policy, e.name)


def test_a_one_gpu_graph_on_gpu1_gets_gpu1_streams(fake):
    x = memory.from_numpy(A, "gpu:1")
    y = nnc.Tensor.empty((4, 4), device="gpu:1")
    g = nnc.Graph()
    g.concat(g.exec(nnc.Cmd("NOOP")), g.exec(nnc.Cmd("RELU"), [x], [y]))
    sched = nnc.static_schedule(g, stream_type="gpu")     # "gpu" is gpu:0: the nodes decide
    assert set(sched.stream_kinds) == {"gpu:1"}
    s = nnc.Stream("gpu:0")
    g.run(stream=s)
    s.wait()
    np.testing.assert_array_equal(y.numpy(), np.maximum(A, 0))
    # One GPU's graph is captured on that GPU's stream; not on another's.
    s1 = nnc.Stream("gpu:1")
    cg = cgraph.capture(g, s1)
    cg.replay(s1)
    s1.wait()
    with pytest.raises(nnc.GraphError, match="one CUDA graph captures the work of one GPU"):
        cgraph.capture(g, s)


def test_a_two_gpu_graph_is_not_captured(fake):
    g, _ = two_gpu_graph()
    nnc.static_schedule(g, stream_type="gpu")
    n = len(fake.calls)
    with pytest.raises(nnc.GraphError, match=r"on gpu:1, and one CUDA graph captures"):
        cgraph.capture(g, nnc.Stream("gpu:0"))
    assert "cuStreamBeginCapture" not in fake.calls[n:]


def test_bad_devices_are_refused(fake):
    with pytest.raises(nnc.CUDAError, match="gpu:7"):
        nnc.Stream("gpu:7")
    with pytest.raises(nnc.CUDAError, match="gpu:7"):
        nnc.Tensor.empty((2,), device="gpu:7")
    g, _ = two_gpu_graph()
    with pytest.raises(nnc.NNCError, match="gpu:7"):
        nnc.static_schedule(g, stream_type="gpu:7")
    # A stream records only its own GPU's events, but waits on any GPU's.
    s0, s1 = nnc.Stream("gpu:0"), nnc.Stream("gpu:1")
    sig = nnc.Signal("gpu:0")
    with pytest.raises(nnc.StreamError, match="emits signals of its own kind"):
        s1.emit(sig)
    s0.emit(sig)
    s1.wait_signal(sig)
    s1.wait()
    with pytest.raises(nnc.StreamError, match="own kind"):
        nnc.Stream().wait_signal(sig)


def test_an_unscheduled_run_keeps_to_the_callers_gpu(fake):
    # Without a schedule every node is launched on the caller's stream: a node of another
    # GPU is refused at launch, naming both, before anything of it runs.
    g, _ = two_gpu_graph()
    s = nnc.Stream("gpu:0")
    with pytest.raises(nnc.CommandError, match="on gpu:1 but the stream is on gpu:0"):
        g.run(stream=s)
    s.wait()
    assert not fake.faults


def test_the_fake_faults_on_another_devices_memory(fake):
    # What the fake learnt so that a wrong stream cannot pass unnoticed: a kernel launched on a
    # gpu:0 stream over gpu:1 memory faults (as the real device would, asynchronously).
    x = memory.from_numpy(A, "gpu:1")
    y = nnc.Tensor.empty((4, 4), device="gpu:1")
    dev0 = drv.device(0)
    f = runner.kernel_function(dev0, "relu", x)
    s = drv.CudaStream(0)
    args = (np.uint64(x.data_ptr), np.int64(4), np.uint64(y.data_ptr), np.int64(4),
            np.int64(16), np.int64(4))
    with pytest.raises(nnc.CUDAError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        drv.launch(f, (1,), (32,), args, s)
    assert fake.faults and fake.faults[0][0] == "nnc_relu_f32"
    # A peer copy names each side's context; the wrong ones are an invalid value.
    z = nnc.Tensor.empty((4, 4), device="gpu:0")
    cu = drv.driver()
    ctx0, ctx1 = drv.device(0).context, drv.device(1).context
    err = cu.cuMemcpyPeerAsync(z.data_ptr, ctx1, x.data_ptr, ctx0, 64, s.handle)[0]
    assert err == real.CUresult.CUDA_ERROR_INVALID_VALUE
    err = cu.cuMemcpyPeerAsync(z.data_ptr, ctx0, x.data_ptr, ctx1, 64, s.handle)[0]
    assert err == real.CUresult.CUDA_SUCCESS
    assert cu.cuDeviceGet(2)[0] == real.CUresult.CUDA_ERROR_INVALID_DEVICE
