"""Eager GPU_OPT dispatch without Python per run (nnc/cuda/_ccall.pyx, NodeGraph): a prepared
cuDNN or cuBLAS node captures its calls into a CUDA graph on its first run on a GPU stream, and
later runs on that stream replay it with one cuGraphLaunch from C. Against the fake driver, the
fake cudnn-frontend and the fake cuBLAS (tests/fakes/), which compute in NumPy; the "gpu"
variant runs where a GPU and both libraries exist."""

import gc
import threading
import time

import numpy as np
import pytest
from fakes import cublas as _fake_cublas
from fakes.cuda_driver import Checked, install, real
from fakes.cudnn_frontend import install as install_cudnn
from fakes.env import fake_or_gpu
from test_cuda_cudnn import _case, _gpu, _ref, _tol

import nnc
from nnc import cuda
from nnc.cmd.convolution.gpu import cudnn as cudnn_conv
from nnc.cmd.gemm.gpu import cublas as cublas_gemm
from nnc.cuda import capture as cgraph
from nnc.cuda import memory
from nnc.cuda.driver import CudaGraph
from nnc.cuda.gpu_stream import device_half

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")

CONV = dict(padding=1, activation="relu")


def _untimed(monkeypatch, dnn):
    # Plans untimed: timing captures CUDA graphs of its own, which the counts here leave out.
    monkeypatch.setattr(cudnn_conv, "TUNE", False)
    return dnn


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """The fake driver (one GPU) with the fake cuDNN (``fake.dnn``) and cuBLAS (``fake.blas``)."""
    f = install(monkeypatch)
    f.dnn = _untimed(monkeypatch, install_cudnn(monkeypatch, f, tmp_path))
    f.blas = _fake_cublas.install(monkeypatch, f)
    yield f
    gc.collect()        # free fake buffers while the fake driver is still installed


@pytest.fixture(params=["fake", "gpu"])
def env(request, monkeypatch, tmp_path):
    found = fake_or_gpu(request, libraries=[(cudnn_conv, "cuDNN"), (cublas_gemm, "cuBLAS")])
    if found is None:
        monkeypatch.setenv("NNC_CACHE_DIR", str(tmp_path))
    return found


class _Net:
    """Two GPU_OPT nodes, conv (cuDNN, bias + ReLU fused) and GEMM + bias (cuBLAS), with their
    CPU references; unscheduled, so a run enqueues both on the stream it is given."""

    def __init__(self, seed=3):
        x, w, b = _case((1, 8, 8, 4), (8, 3, 3, 4), seed=seed)
        rng = np.random.default_rng(seed)
        a, m, c = (rng.standard_normal(s).astype(np.float32) for s in ((4, 6), (6, 5), (5,)))
        self.x, self.w, self.b, self.a, self.m, self.c = x, w, b, a, m, c
        self.gx, self.ga = _gpu(x), _gpu(a)
        self.y = nnc.Tensor.empty((1, 8, 8, 8), device="gpu")
        self.z = nnc.Tensor.empty((4, 5), device="gpu")
        self.g = nnc.Graph()
        self.conv = self.g.exec(nnc.Cmd("CONVOLUTION", **CONV), [self.gx, _gpu(w), _gpu(b)],
                                [self.y], name="conv")
        self.gemm = self.g.exec(nnc.Cmd("GEMM"), [self.ga, _gpu(m), _gpu(c)], [self.z],
                                name="fc")
        assert [e.backend for e in self.g.execs] == ["GPU_OPT", "GPU_OPT"]

    def want(self, x=None):
        x = self.x if x is None else x
        return _ref(CONV, x, self.w, self.b), self.a.astype(np.float64) @ self.m + self.c

    def run(self, s):
        memory.fill_zero(self.y)
        memory.fill_zero(self.z)
        self.g.run(stream=s)
        s.wait(timeout=10)
        return self.y.numpy().copy(), self.z.numpy().copy()

    def check(self, got, x=None):
        (y, z), (wy, wz) = got, self.want(x)
        np.testing.assert_allclose(y, wy, **_tol(self.x if x is None else x, self.w, self.b))
        np.testing.assert_allclose(z, wz, rtol=1e-5, atol=1e-5)


def _graphs(s):
    return device_half(s)._node_graphs()


def _captured(s):
    """{node graph index: {key: "graph" or the refusal}} of stream s."""
    return [{k: "graph" if isinstance(v, CudaGraph) else v for k, v in ng.captured().items()}
            for ng in _graphs(s)]


def test_the_first_run_captures_and_later_runs_replay_from_c(fake):
    net = _Net()
    s = nnc.Stream("gpu")
    net.check(net.run(s))
    # First run: each node enqueued as before, then the same calls captured (nothing runs).
    assert len(fake.dnn.executions) == 2 and [c[0] for c in fake.blas.calls] == ["sgemm"] * 4
    assert fake.calls.count("cuStreamBeginCapture") == 2 and len(fake.live_execs) == 2
    assert _captured(s) == [{"ieee": "graph"}, {"ieee": "graph"}]
    del fake.c_calls[:]
    for _ in range(3):
        net.check(net.run(s))
    # Later runs: no library call, no capture, one cuGraphLaunch per node, from C.
    assert len(fake.dnn.executions) == 2 and len(fake.blas.calls) == 4
    assert fake.calls.count("cuStreamBeginCapture") == 2
    assert fake.c_calls.count("cuGraphLaunch") == 3 * 2
    assert fake.calls.count("cuGraphLaunch") == 3 * 2        # none through Python
    assert fake.c_errors == []


def test_replays_give_the_python_paths_bits(monkeypatch, tmp_path):
    got = {}
    for env in ("1", "0"):
        with monkeypatch.context() as m:
            m.setenv("NNC_CUDA_C_CALLS", env)
            f = install(m)
            _untimed(m, install_cudnn(m, f, tmp_path / env))
            _fake_cublas.install(m, f)
            net = _Net()
            s = nnc.Stream("gpu")
            got[env] = [net.run(s) for _ in range(3)]
            assert (f.calls.count("cuGraphLaunch") > 0) == (env == "1")
            assert _graphs(s) == [] or env == "1"
            del net, s
            gc.collect()
    for a, b in zip(got["1"], got["0"]):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)


def test_c_calls_off_keeps_the_python_calls(fake, monkeypatch):
    monkeypatch.setenv("NNC_CUDA_C_CALLS", "0")
    monkeypatch.setattr(cuda.driver.device(0), "ccalls", False)    # asked anew
    net = _Net()
    s = nnc.Stream("gpu")
    for _ in range(3):
        net.check(net.run(s))
    assert len(fake.dnn.executions) == 3 and "cuStreamBeginCapture" not in fake.calls
    assert _graphs(s) == [] and fake.c_calls == []


def test_a_driver_without_cuGraphLaunch_keeps_the_python_calls(monkeypatch, tmp_path):  # noqa: N802
    offer = Checked.c_entry_points

    def without(self):
        points = offer(self)
        del points["cuGraphLaunch"]
        return points

    monkeypatch.setattr(Checked, "c_entry_points", without)
    f = install(monkeypatch)
    f.dnn = _untimed(monkeypatch, install_cudnn(monkeypatch, f, tmp_path))
    _fake_cublas.install(monkeypatch, f)
    net = _Net()
    s = nnc.Stream("gpu")
    for _ in range(3):
        net.check(net.run(s))
    assert _graphs(s) == [] and len(f.dnn.executions) == 3
    assert "cuGraphLaunch" not in f.calls and "cuStreamBeginCapture" not in f.calls
    del net, s
    gc.collect()


def test_each_stream_gets_its_own_graphs_handle_and_workspace(fake):
    net = _Net()
    s1, s2 = nnc.Stream("gpu"), nnc.Stream("gpu")
    for s in (s1, s2, s1, s2):
        net.check(net.run(s))
    assert len(fake.live_execs) == 4 and fake.calls.count("cuStreamBeginCapture") == 4
    # Each stream's execute and its capture used that stream's handle and workspace.
    streams = {e[1] for e in fake.dnn.executions}
    assert len(fake.dnn.executions) == 4 and len(streams) == 2
    for st in streams:
        mine = [e for e in fake.dnn.executions if e[1] == st]
        assert len({id(e[0]) for e in mine}) == 1 and len({e[2] for e in mine}) == 1
    assert len({e[2] for e in fake.dnn.executions}) == 2
    assert len({c[1] for c in fake.blas.calls}) == 2          # a cuBLAS handle per stream


def test_inside_an_outer_capture_the_nodes_record_as_before(fake):
    net = _Net()
    s = nnc.Stream("gpu")
    # The stream's cuDNN and cuBLAS handles and workspaces made (a capture cannot allocate),
    # by commands of the same geometries outside the graph.
    for e in net.g.execs:
        nnc.cmd_exec(e.cmd, [_gpu(t.numpy()) if t is not None else None for t in e.inputs],
                     [nnc.Tensor.empty(e.outputs[0].shape, device="gpu")], stream=s)
    s.wait(timeout=10)
    begun = fake.calls.count("cuStreamBeginCapture")
    # The nodes' first run on this stream is inside a capture: recorded there, no node graph
    # tried (and none remembered as refused).
    cg = cgraph.capture(net.g, s, warmup=False)
    assert fake.calls.count("cuStreamBeginCapture") == begun + 1 and _captured(s) == [{}, {}]
    memory.fill_zero(net.y)
    memory.fill_zero(net.z)
    cg.replay(s)
    s.wait(timeout=10)
    net.check((net.y.numpy(), net.z.numpy()))
    net.check(net.run(s))                           # outside: now the node graphs are made
    assert _captured(s) == [{"ieee": "graph"}, {"ieee": "graph"}]
    executions = len(fake.dnn.executions)
    launches = fake.calls.count("cuGraphLaunch")
    cg2 = cgraph.capture(net.g, s)                  # warm-up replays; the capture records
    assert len(fake.dnn.executions) == executions + 1
    assert fake.calls.count("cuGraphLaunch") == launches + 2
    memory.fill_zero(net.y)
    memory.fill_zero(net.z)
    cg2.replay(s)
    s.wait(timeout=10)
    net.check((net.y.numpy(), net.z.numpy()))
    cg.close()
    cg2.close()


def test_a_capture_refusal_falls_back_and_is_remembered(fake, monkeypatch):
    sgemm = fake.blas.sgemm

    def refuses_capture(*args):
        if fake.capture_stack:
            raise _fake_cublas.cuBLASError(_fake_cublas.NOT_SUPPORTED)
        return sgemm(*args)

    monkeypatch.setattr(fake.blas, "sgemm", refuses_capture)
    net = _Net()
    s = nnc.Stream("gpu")
    for _ in range(4):
        net.check(net.run(s))
    conv, fc = _captured(s)
    assert conv == {"ieee": "graph"}
    assert "cuBLAS failed" in fc["ieee"]
    # Tried once (the conv's capture and the GEMM's), never again; the GEMM runs its Python
    # calls every run, the conv replays.
    assert fake.calls.count("cuStreamBeginCapture") == 2
    assert len([c for c in fake.blas.calls if c[0] == "sgemm"]) == 4 * 2
    assert len(fake.dnn.executions) == 2


def test_stream_close_frees_the_graphs(fake):
    net = _Net()
    s = nnc.Stream("gpu")
    net.run(s)
    net.run(s)
    assert len(fake.live_execs) == 2
    device_half(s).cuda.close()
    assert fake.live_execs == set()
    with pytest.raises(nnc.CUDAError, match="closed"):
        net.g.run(stream=s)


def test_dropping_the_stream_frees_the_graphs(fake):
    net = _Net()
    s = nnc.Stream("gpu")
    net.run(s)
    assert len(fake.live_execs) == 2
    del s
    net.g.run()                     # the graph's runtime lets go of the scheduled streams
    gc.collect()
    assert fake.live_execs == set()


def test_a_precision_change_picks_another_graph(fake):
    net = _Net()
    s = nnc.Stream("gpu")
    ieee = net.run(s)
    try:
        cuda.set_precision("tf32")
        tf32 = net.run(s)
        assert not np.array_equal(tf32[1], ieee[1])      # cuBLAS's TF32 product
        for p, want in (("ieee", ieee), ("tf32", tf32), ("ieee", ieee), ("tf32", tf32)):
            cuda.set_precision(p)
            for u, v in zip(net.run(s), want):
                np.testing.assert_array_equal(u, v)
    finally:
        cuda.set_precision("ieee")
    assert _captured(s) == [{"ieee": "graph", "tf32": "graph"}] * 2
    assert fake.calls.count("cuStreamBeginCapture") == 4 and len(fake.live_execs) == 4
    assert len(fake.dnn.executions) == 4


def test_a_repointed_node_never_replays_the_old_pointers(fake):
    net = _Net()
    s = nnc.Stream("gpu")
    net.check(net.run(s))
    net.check(net.run(s))
    x2, _, _ = _case((1, 8, 8, 4), (8, 3, 3, 4), seed=9)
    y2 = nnc.Tensor.empty((1, 8, 8, 8), device="gpu")
    net.conv.set_io([_gpu(x2), _gpu(net.w), _gpu(net.b)], [y2])
    for _ in range(2):
        memory.fill_zero(y2)
        got = net.run(s)
        assert not got[0].any()                     # the old output is not written any more
        np.testing.assert_allclose(y2.numpy(), net.want(x2)[0], **_tol(x2, net.w, net.b))
    # A backend change re-binds too: GPU_REF's kernel, then cuDNN again on a new graph.
    for backend in ("GPU_REF", "GPU_OPT"):
        net.conv.backend = backend
        memory.fill_zero(y2)
        net.run(s)
        np.testing.assert_allclose(y2.numpy(), net.want(x2)[0], **_tol(x2, net.w, net.b))


def test_two_threads_on_two_streams(fake):
    nets = [_Net(seed=3), _Net(seed=4)]
    streams = [nnc.Stream("gpu"), nnc.Stream("gpu")]
    failures = []

    def work(net, s):
        try:
            for _ in range(6):
                net.g.run(stream=s)
                assert s.wait(timeout=10)
        except BaseException as e:  # reported below, never swallowed
            failures.append(e)

    threads = [threading.Thread(target=work, args=(n, s)) for n, s in zip(nets, streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and failures == []
    for net, s in zip(nets, streams):
        net.check((net.y.numpy(), net.z.numpy()))
        assert _captured(s) == [{"ieee": "graph"}, {"ieee": "graph"}]
    assert fake.c_errors == [] and len(fake.live_execs) == 4


def test_waiting_on_a_stream_never_queries_it_while_it_captures(fake, monkeypatch):
    """Another thread's wait() polling the stream while a node captures on it must neither fail
    nor invalidate the capture (CUDA refuses to query a capturing stream; the fake does too)."""
    begin = fake.cuStreamBeginCapture
    capturing = threading.Event()

    def slow_begin(st, mode):
        r = begin(st, mode)
        capturing.set()
        time.sleep(0.1)                 # the waiter polls meanwhile
        return r

    monkeypatch.setattr(fake, "cuStreamBeginCapture", slow_begin)
    net = _Net()
    s = nnc.Stream("gpu")
    fake.busy = True                    # the stream "runs" until the run's host function
    waited, failures = [], []

    def wait():
        try:
            waited.append(s.wait(timeout=20))
        except BaseException as e:  # reported below, never swallowed
            failures.append(e)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.05)                    # polling, outside every lock
    runner = threading.Thread(target=lambda: net.g.run(stream=s))
    runner.start()
    assert capturing.wait(timeout=10)
    runner.join(timeout=30)
    waiter.join(timeout=30)
    assert not runner.is_alive() and not waiter.is_alive()
    assert failures == [] and waited == [True]
    assert _captured(s) == [{"ieee": "graph"}, {"ieee": "graph"}]
    net.check((net.y.numpy(), net.z.numpy()))


def test_node_graphs_replay_correctly(env):
    """On the fakes and on a GPU: several runs agree with the CPU, and every node replays a
    graph of its own (a refusal names why: cudnn-frontend's execute or cuBLAS not capturing)."""
    net = _Net()
    s = nnc.Stream("gpu")
    for _ in range(4):
        net.check(net.run(s))
    for i, entry in enumerate(_captured(s)):
        assert entry == {"ieee": "graph"}, f"node {i} did not capture: {entry}"
