"""nnc.cuda's host side against a fake driver (tests/fakes/cuda_driver.py): GPU tensors, copies,
DATA_TRANSFER, every GPU_REF backend's argument packing and launch geometry (the fake emulates
each kernel from its raw parameters), streams and events, graph runs and capture/replay.

Where the real cuda.bindings is installed and no driver is, every driver call is also checked
against the real bindings' argument conversion. None of this runs a kernel on a GPU:
tests/test_cuda_gpu.py does, where a GPU exists.
"""

import ctypes
import gc
import threading

import numpy as np
import pytest
from fakes.cuda_driver import REAL_CHECK, real
from fakes.env import fake_or_gpu, second_gpu, two_gpu_fake

import nnc
from nnc.cuda import capture as cgraph
from nnc.cuda import driver as drv
from nnc.cuda import memory, runner

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")



@pytest.fixture
def fake(monkeypatch):
    yield from two_gpu_fake(monkeypatch)


@pytest.fixture(params=["fake", "gpu"])
def env(request):
    """The fake driver, then (where one exists) the real GPU: numeric tests run on both."""
    return fake_or_gpu(request)


def gpu(a, dev="gpu:0"):
    return memory.from_numpy(np.asarray(a), dev)


def fake_calls(f, name):
    return f.calls.count(name)


def test_real_check_is_active_on_a_machine_without_driver():
    # On CI (cuda-bindings installed, no driver library) the argument check must really run.
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        assert REAL_CHECK
    else:
        assert not REAL_CHECK       # with a driver, real calls would run on fake handles


def test_gpu_tensors_and_host_copies(env):
    t = nnc.Tensor.zeros((2, 3), "float64", device=second_gpu())
    assert t.device == second_gpu() and t.shape == (2, 3) and t.dtype == np.float64
    assert f"device='{second_gpu()}'" in repr(t)
    got = t.numpy()
    assert got.shape == (2, 3) and (got == 0).all()
    got[0, 0] = 5                                   # a copy, not an alias
    assert t.numpy()[0, 0] == 0
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    g = gpu(a)
    np.testing.assert_array_equal(g.numpy(), a)
    np.testing.assert_array_equal(np.asarray(g), a)
    with pytest.raises(ValueError, match="copy=False"):
        g.__array__(copy=False)
    v = g.view((4, 2), offset=1, strides=(6, 3))    # a strided view of device memory
    np.testing.assert_array_equal(v.numpy(), a[:, 1::3])
    assert nnc.Tensor.empty((0, 3), device="gpu").numpy().shape == (0, 3)
    if env is not None:
        assert fake_calls(env, "cuCtxSetCurrent") >= 1 and fake_calls(env, "cuMemHostAlloc")


def test_memory_is_freed_with_the_last_tensor(fake):
    t = nnc.Tensor.empty((1000,), device="gpu")
    v = t.view((10,), offset=5)
    n = len(fake.buffers)
    del t
    gc.collect()
    assert len(fake.buffers) == n                   # the view keeps the buffer alive
    del v
    gc.collect()
    assert len(fake.buffers) == n - 1


def test_device_name_and_driver_version(env):
    d = drv.device(0)
    assert isinstance(d.name, str) and d.name and "\0" not in d.name and d.name == d.name.strip()
    major, minor = drv.driver_version()
    assert major >= 12 and 0 <= minor < 100
    if env is not None:
        assert d.name == "Fake GPU 0" and (major, minor) == (13, 0)
        calls = fake_calls(env, "cuDeviceGetName")
        assert drv.device(0).name == "Fake GPU 0"
        assert fake_calls(env, "cuDeviceGetName") == calls        # asked once per device
        env.cuDeviceGetName = lambda n, dev: (real.CUresult.CUDA_ERROR_INVALID_DEVICE, b"")
        with pytest.raises(nnc.CUDAError, match="cuDeviceGetName failed"):
            _ = drv.device(1).name


def test_contexts_are_made_current_per_thread(fake):
    nnc.Tensor.empty((4,), device="gpu")
    before = fake.calls.count("cuCtxSetCurrent")
    nnc.Tensor.empty((4,), device="gpu")
    assert fake.calls.count("cuCtxSetCurrent") == before     # cached on this thread
    th = threading.Thread(target=lambda: nnc.Tensor.empty((4,), device="gpu"))
    th.start()
    th.join()
    assert fake.calls.count("cuCtxSetCurrent") == before + 1


def test_data_transfer_host_device_and_between_devices(env):
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    d0 = nnc.Tensor.empty((3, 5), device="gpu:0")
    d1 = nnc.Tensor.empty((3, 5), device=second_gpu())
    back = np.zeros_like(a)
    cmd = nnc.Cmd("DATA_TRANSFER")
    nnc.cmd_exec(cmd, [a], [d0])
    nnc.cmd_exec(cmd, [d0], [d1])
    nnc.cmd_exec(cmd, [d1], [back])
    np.testing.assert_array_equal(back, a)
    if env is not None:
        assert {"cuMemcpyHtoDAsync", "cuMemcpyPeerAsync", "cuMemcpyDtoHAsync"} <= set(env.calls)
    # Asynchronous on a stream, from pinned host memory, several pairs at once.
    s = nnc.Stream("gpu:0")
    p = memory.pinned((3, 5), "float32")
    p.numpy()[...] = a * 2
    d2 = nnc.Tensor.empty((3, 5), device="gpu:0")
    out = memory.pinned((3, 5), "float32")
    nnc.cmd_exec(cmd, [p, d0], [d2, out], stream=s)
    s.wait()
    np.testing.assert_array_equal(d2.numpy(), a * 2)
    np.testing.assert_array_equal(out.numpy(), a)
    with pytest.raises(nnc.CommandError, match="no backend"):
        nnc.cmd_exec(cmd, [a, d0], [np.zeros_like(a), d1])    # a host-to-host pair


def test_backend_choice_follows_the_device(env):
    x = gpu(np.ones(4, np.float32))
    y = nnc.Tensor.empty((4,), device="gpu")
    cmd = nnc.Cmd("SCALAR_MUL", a=3.0)
    nnc.cmd_exec(cmd, [x], [y])
    np.testing.assert_array_equal(y.numpy(), [3, 3, 3, 3])
    assert nnc.backends("EWSUM", device="gpu") == ["GPU_REF"]
    assert "GPU_REF" not in nnc.backends("EWSUM", device="cpu")
    with pytest.raises(nnc.CommandError, match="no backend of EWSUM accepts"):
        nnc.cmd_exec(nnc.Cmd("EWSUM"), [x, np.ones(4, np.float32)], [y])   # mixed devices
    with pytest.raises(nnc.CommandError, match=r"takes gpu \['float32', 'float64', 'float16'\]"):
        nnc.cmd_exec(nnc.Cmd("EWSUM", backend="GPU_REF"), [np.ones(4, np.float32)],
                     [np.ones(4, np.float32)])
    with pytest.raises(nnc.CommandError, match="no backend"):
        nnc.cmd_exec(nnc.Cmd("EWSUM"), [gpu(np.ones(4, np.int32))],
                     [nnc.Tensor.empty((4,), "int32", device="gpu")])
    with pytest.raises(nnc.CommandError, match="device must be"):
        nnc.backends("EWSUM", device="tpu")


EW_CASES = [
    ("EWSUM", {}, 10), ("EWSUM", {}, 1), ("EWPROD", {}, 3), ("EWDIV", {}, 2),
    ("EWEXP", {}, 1), ("EWLOG", {}, 1), ("RELU", {}, 1), ("SCALAR_MUL", {"a": -1.5}, 1),
    ("SOFTMAX", {}, 1),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, params, n_in", EW_CASES)
def test_elementwise_and_softmax_match_cpu_ref(env, name, params, n_in, dtype):
    rng = np.random.default_rng(1)
    xs = [rng.uniform(0.5, 3, (3, 7)).astype(dtype) for _ in range(n_in)]
    want = np.zeros((3, 7), dtype)
    nnc.cmd_exec(nnc.Cmd(name, backend="CPU_REF", **params), xs, [want])
    out = nnc.Tensor.empty((3, 7), dtype, device="gpu")
    cmd = nnc.Cmd(name, **params)
    nnc.cmd_exec(cmd, [gpu(x) for x in xs], [out])
    # docs/commands.md's element-wise tolerance (the GPU's expf/logf are within 2 ulp).
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)
    if name == "EWDIV":
        nnc.cmd_exec(cmd, [None, gpu(xs[1])], [out])
        np.testing.assert_allclose(out.numpy(), 1 / xs[1], rtol=1e-6, atol=1e-6)


def test_set_several_outputs(env):
    a, b = nnc.Tensor.empty((3,), device="gpu"), nnc.Tensor.empty((2, 2), "float64", "gpu")
    nnc.cmd_exec(nnc.Cmd("SET", value=-2.5), [], [a, b])
    assert (a.numpy() == -2.5).all() and (b.numpy() == -2.5).all()


GEMM_SHAPES = {"matrix": ((4, 6), (6, 5)), "batched": ((3, 4, 6), (3, 6, 5)),
               "shared_w": ((3, 4, 6), (6, 5)), "vector": ((6,), (6, 5)),
               "vector_batched_w": ((6,), (3, 6, 5)), "batched_w": ((4, 6), (3, 6, 5))}


def _t(shape, flag):
    return shape[:-2] + shape[-2:][::-1] if flag and len(shape) >= 2 else shape


GEMM_CASES = [(kind, ta, tb) for kind in GEMM_SHAPES for ta in (False, True)
              for tb in (False, True) if not (ta and len(GEMM_SHAPES[kind][0]) == 1)]


@pytest.mark.parametrize("kind, ta, tb", GEMM_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_gemm_geometry_matches_cpu_ref(env, kind, ta, tb, bias):
    a_shape, w_shape = GEMM_SHAPES[kind]
    rng = np.random.default_rng(2)
    a = rng.standard_normal(_t(a_shape, ta)).astype(np.float32)
    w = rng.standard_normal(_t(w_shape, tb)).astype(np.float32)
    ins = [a, w] + ([rng.standard_normal(5).astype(np.float32)] if bias else [])
    # Pinned: where cuBLAS loads, GPU_OPT would be the default (tests/cuda/test_cuda_cublas.py).
    cmd = nnc.Cmd("GEMM", transpose_a=ta, transpose_b=tb, backend="GPU_REF")
    from nnc.cmd.gemm import gemm_shape

    shape = gemm_shape(cmd, a.shape, w.shape)
    want = np.zeros(shape, np.float32)
    nnc.cmd_exec(nnc.Cmd("GEMM", transpose_a=ta, transpose_b=tb, backend="CPU_REF"), ins, [want])
    out = nnc.Tensor.empty(shape, device="gpu")
    nnc.cmd_exec(cmd, [gpu(x) for x in ins], [out])
    eps = float(np.finfo(np.float32).eps)           # docs/commands.md's dot-product bound
    k = w.shape[-1] if tb else w.shape[-2]
    atol = k * eps * np.abs(a).max() * np.abs(w).max() + (eps * np.abs(ins[2]).max() if bias
                                                          else 0)
    np.testing.assert_allclose(out.numpy(), want, rtol=4 * eps, atol=atol)


CONV_CASES = [
    dict(x=(2, 7, 6, 4), w=(6, 3, 3, 4), stride=1, padding=1, groups=1),
    dict(x=(1, 9, 8, 4), w=(4, 3, 2, 2), stride=(2, 1), padding=(1, 0, 0, 1), groups=2),
    dict(x=(5, 5, 3), w=(2, 1, 1, 3), stride=1, padding=0, groups=1),
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("slice_out", [False, True])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_convolution_matches_cpu_ref(env, case, slice_out, activation):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(case["x"]).astype(np.float32)
    w = rng.standard_normal(case["w"]).astype(np.float32)
    bias = rng.standard_normal(case["w"][0]).astype(np.float32)
    params = {k: case[k] for k in ("stride", "padding", "groups")}
    if activation:
        params["activation"] = activation      # the fused epilogue of Graph.simplify
    from nnc.cmd.convolution import conv_shape

    shape = conv_shape(nnc.Cmd("CONVOLUTION", **params), x.shape, w.shape)
    want = np.zeros(shape, np.float32)
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF", **params), [x, w, bias], [want])
    if slice_out:
        # The output is a channel slice of a wider buffer, as in Inception's concat.
        buf = nnc.Tensor.zeros(shape[:-1] + (shape[-1] + 3,), device="gpu")
        pixels = int(np.prod(shape[:-1]))
        out = buf.view(shape, offset=1, strides=_nhwc_strides(shape, shape[-1] + 3))
        assert pixels and runner.pixel_stride(out) == shape[-1] + 3
    else:
        out = nnc.Tensor.empty(shape, device="gpu")
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", **params), [gpu(x), gpu(w), gpu(bias)], [out])
    # docs/commands.md: atol = K eps max|x| max|w| + eps max|bias|, rtol = 4 eps (float32).
    k = w.shape[1] * w.shape[2] * w.shape[3]
    eps = float(np.finfo(np.float32).eps)
    atol = k * eps * np.abs(x).max() * np.abs(w).max() + eps * np.abs(bias).max()
    np.testing.assert_allclose(out.numpy(), want, rtol=4 * eps, atol=atol)
    if slice_out:
        full = buf.numpy()
        assert (full[..., 0] == 0).all() and (full[..., -2:] == 0).all()   # untouched


def _nhwc_strides(shape, ps):
    strides, step = [1], ps
    for d in reversed(shape[:-1]):
        strides.insert(0, step)
        step *= d
    return tuple(strides)


@pytest.mark.parametrize("kind", ["MAX_POOL", "AVG_POOL"])
@pytest.mark.parametrize("params", [dict(size=3, stride=2), dict(size=3, stride=1, padding=1),
                                    dict(size=(2, 3), padding=(1, 1, 0, 0))])
def test_pooling_matches_cpu_ref(env, kind, params):
    x = np.random.default_rng(4).standard_normal((2, 7, 8, 3))
    if kind == "AVG_POOL" and "padding" in params:
        params = dict(params, count_include_pad=True)
    from nnc.cmd.pooling import pool_shape

    shape = pool_shape(nnc.Cmd(kind, **params), x.shape)
    want = np.zeros(shape)
    nnc.cmd_exec(nnc.Cmd(kind, backend="CPU_REF", **params), [x], [want])
    out = nnc.Tensor.empty(shape, "float64", device="gpu")
    nnc.cmd_exec(nnc.Cmd(kind, **params), [gpu(x)], [out])
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)


def test_pixel_stride():
    t = nnc.Tensor.empty((2, 3, 4, 5))
    assert runner.pixel_stride(t) == 5
    assert runner.pixel_stride(t.view((2, 3, 4, 2), 1, (60, 20, 5, 1))) == 5
    assert runner.pixel_stride(t.view((2, 3, 2, 5), 0, (60, 20, 10, 1))) == 10
    assert runner.pixel_stride(t.view((2, 3, 4, 2), 0, (60, 20, 5, 2))) is None
    assert runner.pixel_stride(t.view((2, 3, 4, 5), 0, (60, 20, 4, 1))) is None  # overlap
    assert runner.pixel_stride(nnc.Tensor.empty((4, 5))) is None


def test_struct_layouts_match_c():
    class Window(ctypes.Structure):
        _fields_ = [("n", ctypes.c_longlong)] + [(k, ctypes.c_int) for k in (
            "h", "w", "c", "ho", "wo", "o", "kh", "kw", "sh", "sw", "pt", "pl", "groups",
            "count_include_pad", "relu")] + [("x_ps", ctypes.c_longlong),
                                             ("o_ps", ctypes.c_longlong)]

    assert runner.WINDOW_T.itemsize == ctypes.sizeof(Window) == 88
    for name, _ in Window._fields_:
        assert runner.WINDOW_T.fields[name][1] == getattr(Window, name).offset, name
    params, keep = drv.pack_args([np.float32(2.5), np.uint64(0xDEADBEEF), np.int64(-3)])
    assert ctypes.c_float.from_address(int(params[0])).value == 2.5
    assert ctypes.c_uint64.from_address(int(params[1])).value == 0xDEADBEEF
    assert ctypes.c_int64.from_address(int(params[2])).value == -3
    with pytest.raises(nnc.CUDAError, match="not a C scalar"):
        drv.pack_args([np.array(["x"])])


def test_streams_events_and_errors(fake):
    s1, s2 = nnc.Stream("gpu:0"), nnc.Stream("gpu")
    ev = nnc.Signal("gpu")
    assert type(s1) is nnc.Stream and type(ev) is nnc.Signal
    assert s1.kind == "gpu:0" and s2.kind == "gpu:0" and ev.kind == "gpu:0"
    assert repr(s1).startswith("<nnc.Stream gpu:0 #")
    assert s1.query() and ev.query() and not ev.emitted
    s1.emit(ev)
    s2.wait_signal(ev)
    assert ev.emitted
    assert fake.calls[-2:] == ["cuEventRecord", "cuStreamWaitEvent"]
    assert s2.wait() is True and ev.wait() is True
    with pytest.raises(nnc.StreamError, match="own kind"):
        s1.emit(nnc.Signal())                   # a GPU stream records CUDA events only
    with pytest.raises(nnc.StreamError, match="own kind"):
        nnc.Stream().wait_signal(ev)            # a CPU worker cannot wait on a CUDA event
    with pytest.raises(nnc.StreamError, match="own kind"):
        nnc.Stream("gpu:1").emit(ev)            # nor a stream of another GPU record it
    nnc.Stream("gpu:1").wait_signal(ev)         # but wait on it (cuStreamWaitEvent allows it)
    with pytest.raises(nnc.NNCError, match="unknown stream kind"):
        nnc.Stream("gpu:x")
    with pytest.raises(nnc.CUDAError, match="no gpu:7"):
        nnc.Stream("gpu:7")
    with pytest.raises(nnc.CUDAError, match="no gpu:7"):
        nnc.Signal("gpu:7")
    fake.cuStreamSynchronize = lambda s: (real.CUresult.CUDA_ERROR_LAUNCH_FAILED,)
    with pytest.raises(nnc.StreamError) as info:
        s1.wait()
    assert isinstance(info.value.__cause__, nnc.CUDAError)
    assert "CUDA_ERROR_LAUNCH_FAILED" in str(info.value)
    fake.cuStreamQuery = lambda s: (real.CUresult.CUDA_ERROR_NOT_READY,)
    assert s1.query() is False
    assert s1.wait(timeout=0.05) is False       # wait(timeout=) polls instead of blocking


def test_aliases_on_both_kinds(fake):
    for kind in ("cpu", "gpu"):
        s, t = nnc.Stream(kind), nnc.Stream(kind)
        sig = s.record_event()
        assert type(sig) is nnc.Signal and sig.kind == s.kind and sig.emitted
        mine = nnc.Signal(kind)
        assert s.record_event(mine) is mine
        t.wait_event(sig)
        t.synchronize()
        sig.synchronize()
        with pytest.raises(nnc.StreamError, match="own kind"):
            t.wait_event(nnc.Signal("gpu" if kind == "cpu" else "cpu"))


def test_callbacks_run_on_the_watcher_after_the_work(fake):
    s = nnc.Stream("gpu")
    seen = []
    s.add_callback(lambda: seen.append(threading.current_thread().name))
    s.add_callback(lambda: 1 / 0)
    assert "cuLaunchHostFunc" in fake.calls
    with pytest.raises(nnc.StreamError, match="ZeroDivisionError") as info:
        s.wait()                                 # waits for the watcher, then reports
    assert seen == ["nnc-cuda-hostfn"] and isinstance(info.value.__cause__, ZeroDivisionError)
    s.wait()                                     # reported once
    x = gpu(np.ones(3, np.float32))
    nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", a=3.0), [x], [x], stream=s)   # launched at once
    with s:
        pass
    np.testing.assert_array_equal(x.numpy(), [3, 3, 3])
    with pytest.raises(nnc.CommandError, match="GPU backends only"):
        nnc.cmd_exec(nnc.Cmd.custom(lambda i, o: None), [np.ones(2)], [np.ones(2)], stream=s)

    def wait_inside():
        s.wait()

    s.add_callback(wait_inside)
    with pytest.raises(nnc.StreamError, match="watcher"):
        s.wait()

    async def main():
        nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x], stream=s)
        await s

    import asyncio

    asyncio.run(main())
    np.testing.assert_array_equal(x.numpy(), [6, 6, 6])


def test_capture_records_and_replay_reruns(env):
    x = gpu(np.ones(3, np.float32))
    s = nnc.Stream("gpu")
    cmd = nnc.Cmd("SCALAR_MUL", a=2.0)
    # Load the kernel before capturing: module loading is no stream work to capture.
    nnc.cmd_exec(cmd, [gpu(np.ones(3, np.float32))], [nnc.Tensor.empty((3,), device="gpu")])
    cg = drv.CudaGraph.capture(s, lambda: nnc.cmd_exec(cmd, [x], [x], stream=s))
    np.testing.assert_array_equal(x.numpy(), [1, 1, 1])     # captured, not run
    cg.replay(s)
    cg.replay(s)
    s.wait()
    np.testing.assert_array_equal(x.numpy(), [4, 4, 4])
    cg.close()
    with pytest.raises(nnc.CUDAError, match="closed"):
        cg.replay(s)

    def boom():
        raise RuntimeError("inside capture")

    with pytest.raises(RuntimeError, match="inside capture"):
        drv.CudaGraph.capture(s, boom)
    if env is not None:
        assert env.capturing is None and env.calls[-1] == "cuGraphDestroy"   # capture ended
    cg = drv.CudaGraph.capture(s, lambda: nnc.cmd_exec(cmd, [x], [x], stream=s))
    cg.replay(s)                                              # the stream works again
    s.wait()
    np.testing.assert_array_equal(x.numpy(), [8, 8, 8])


def test_capture_refuses_unsafe_calls_and_the_stream_recovers(fake):
    # As CUDA in thread-local capture mode: allocating on the capturing thread is refused and
    # invalidates the capture; it must raise CUDAError, not record a broken graph. Loading a
    # kernel's module is refused the same way, so nnc loads one first needed mid-capture with
    # the thread's mode relaxed (capture(warmup=False) on a kernel never loaded).
    x = gpu(np.ones(3, np.float32))
    s = nnc.Stream("gpu")
    with pytest.raises(nnc.CUDAError, match="CAPTURE"):
        drv.CudaGraph.capture(s, lambda: nnc.Tensor.empty((4,), device="gpu"))
    assert fake.capturing is None                     # capture ended
    g = nnc.Graph()
    g.exec(nnc.Cmd("EWEXP"), [x], [x])
    cg = cgraph.capture(g, s, warmup=False)
    assert fake.capture_invalidated is None
    cg.replay(s)
    s.wait()
    np.testing.assert_allclose(x.numpy(), np.exp(np.ones(3)), rtol=1e-6)
    # Another thread may allocate while this one captures (thread-local mode); a tensor that
    # dies on the capturing thread is freed once the capture has ended, not during it.
    live = len(fake.buffers)

    def during_capture():
        box = []
        t = threading.Thread(target=lambda: box.append(nnc.Tensor.empty((4,), device="gpu")))
        t.start()
        t.join(10)
        assert box and box[0].size == 4
        box.clear()                                   # the last reference dies here
        assert len(fake.buffers) == live + 1          # not freed yet

    drv.CudaGraph.capture(s, during_capture).close()
    assert len(fake.buffers) == live and fake.capture_invalidated is None


def _diamond(dev="gpu"):
    """a -> (b, c) -> d on GPU tensors: y = 2x + (x + x); returns graph, x, y."""
    g = nnc.Graph()
    x = gpu(np.arange(6, dtype=np.float32), dev)
    t1, t2, t3, y = (nnc.Tensor.empty((6,), device=dev) for _ in range(4))
    a = g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [t1])
    b = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [t1], [t2])
    c = g.exec(nnc.Cmd("EWSUM"), [t1, t1], [t3])
    d = g.exec(nnc.Cmd("EWSUM"), [t2, t3], [y])
    g.concat(a, b)
    g.concat(a, c)
    g.concat(b, d)
    g.concat(c, d)
    return g, x, y


def test_graph_run_without_stream_uses_gpu_backends(env):
    g, x, y = _diamond()
    g.run()
    np.testing.assert_array_equal(y.numpy(), 4 * np.arange(6))
    assert [e.backend for e in g.execs] == ["GPU_REF"] * 4


def test_scheduled_run_and_capture(env):
    g, x, y = _diamond()
    sched = nnc.static_schedule(g, stream_type="gpu")
    assert sched.stream_type == "gpu" and sched.stream_count == 2 and sched.signal_count >= 1
    s = nnc.Stream("gpu")
    g.run(stream=s)
    g.run(stream=s)
    s.wait()
    np.testing.assert_array_equal(y.numpy(), 4 * np.arange(6))
    cg = cgraph.capture(g, s)              # after one warm-up run
    memory.fill_zero(y)
    assert (y.numpy() == 0).all()
    nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [np.ones(6, np.float32)], [x])
    for _ in range(3):
        cg.replay(s)
    s.wait()
    np.testing.assert_array_equal(y.numpy(), [4] * 6)   # replay reads x's memory anew
    # The captured run's bookkeeping ran once, at capture: the graph is idle, not "running"
    # (replays do not count), and runs normally again.
    g.concat(g.execs[0], g.execs[3])
    g.run(stream=s)
    s.wait()
    g.run()                                              # synchronous form


def test_scheduled_run_goes_through_the_schedules_waits_and_records(fake):
    """The same runner as on CPU streams: begin recorded on the caller, entry streams wait on
    it, every node waits on its waits and records its signal, stream 0 waits on the exits
    and records end, which the caller's stream waits on; the finish is one host function."""
    g, x, y = _diamond()
    sched = nnc.static_schedule(g, stream_type="gpu")
    s = nnc.Stream("gpu")
    g.run(stream=s)                     # first run: compiles, loads, creates streams/events
    s.wait()
    del fake.calls[:]
    g.run(stream=s)
    want = ["cuEventRecord", "cuStreamWaitEvent"]           # begin; stream 0 waits on it
    want += ["cuStreamWaitEvent"] * len(sched.entry_streams)
    for e in sched.order:
        es = sched[e]
        want += ["cuStreamWaitEvent"] * len(es.waits) + ["cuLaunchKernel"]
        want += ["cuEventRecord"] * len(es.signals)
    want += ["cuStreamWaitEvent"] * len(sched.exit_waits)
    want += ["cuLaunchHostFunc", "cuEventRecord", "cuStreamWaitEvent"]   # finish, end
    calls = [c for c in fake.calls if c != "cuCtxSetCurrent"]
    assert calls == want
    s.wait()
    np.testing.assert_array_equal(y.numpy(), 4 * np.arange(6))
    with pytest.raises(nnc.ScheduleError, match="stream_type='cpu'"):
        g.run(stream=nnc.Stream())              # a GPU schedule on a CPU stream
    cpu = nnc.Graph()
    cpu.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [np.ones(2, np.float32)], [np.ones(2, np.float32)])
    nnc.static_schedule(cpu)
    with pytest.raises(nnc.ScheduleError, match="stream_type='gpu:0'"):
        cpu.run(stream=s)


def test_gpu_graph_errors(fake):
    h = nnc.Graph()
    h.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [np.ones(2, np.float32)], [np.ones(2, np.float32)])
    nnc.static_schedule(h, stream_type="gpu")
    s = nnc.Stream("gpu")
    with pytest.raises(nnc.StreamError, match="GPU backends only"):
        h.run(stream=s)                 # raised at enqueue
    s.wait()
    w = nnc.Graph()
    body = nnc.Graph()
    noop = body.exec(nnc.Cmd("NOOP"))
    w.while_(body)
    body.set_while_expr(lambda count: count < 2, breakpoints=[noop])
    nnc.static_schedule(w, stream_type="gpu")
    # A Python expression needs the host (nnc.Compare is captured: test_cuda_conditional.py).
    with pytest.raises(nnc.GraphError, match="expression is a Python callable"):
        cgraph.capture(w, s)
    with pytest.raises(nnc.StreamError, match="not a GPU stream"):
        cgraph.capture(_diamond()[0], nnc.Stream())


def test_to_gpu_keeps_views_and_edges(env):
    g, x, y = _diamond("gpu")
    cpu = nnc.Graph()
    buf = nnc.Tensor(np.zeros((2, 3), np.float32))
    src = nnc.Tensor(np.arange(3, dtype=np.float32))
    a = cpu.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [src], [buf.view((3,), offset=0)], name="a")
    b = cpu.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [src], [buf.view((3,), offset=3)], name="b")
    c = cpu.exec(nnc.Cmd("EWSUM"), [buf.view((3,), 0), buf.view((3,), 3)],
                 [nnc.Tensor(np.zeros(3, np.float32))], name="c")
    cpu.concat(a, c)
    cpu.concat(b, c)
    new, mapping = cgraph.to_gpu(cpu)
    assert [e.name for e in new.execs] == ["a", "b", "c"]
    assert [o.name for o in new.execs[0].outgoings] == ["c"]
    assert all(t.device == "gpu:0" for e in new.execs for t in e.inputs + e.outputs)
    new.run()
    gbuf = mapping[id(buf._owner_object)]
    np.testing.assert_array_equal(gbuf.numpy(), [[0, 2, 4], [0, 3, 6]])
    np.testing.assert_array_equal(new.execs[2].outputs[0].numpy(), [0, 5, 10])
    assert (buf.numpy() == 0).all()                 # the CPU graph's memory is untouched


def test_inception_on_gpu_matches_cpu(env):
    from nnc.models.inception import build_inception_v3_model

    m = build_inception_v3_model(size=75)
    m.graph.run()
    want = m.output.numpy().copy()
    m.graph.simplify()                  # the GPU runs the fused CONVOLUTION + ReLU nodes
    new, mapping = cgraph.to_gpu(m.graph)
    out = mapping[id(m.output._owner_object)]
    sched = nnc.static_schedule(new, stream_type="gpu")
    assert sched.stream_count > 1
    s = nnc.Stream("gpu")
    new.run(stream=s)
    s.wait()
    # Softmax of float32 logits after ~100 float32 layers; CPU BLAS and the GPU sum in other
    # orders, so compare as probabilities.
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-3, atol=1e-6)
    memory.fill_zero(out)
    cg = cgraph.capture(new, s)
    memory.fill_zero(out)
    cg.replay(s)
    s.wait()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-3, atol=1e-6)


def test_gpu_host_benchmark_runs_on_a_null_driver(monkeypatch):
    from benchmarks import gpu_host

    gpu_host.install_null_driver(monkeypatch.setattr)
    r = gpu_host.run(size=75, repeat=2, log=lambda *a: None)
    assert r["nodes"] > 200 and r["stream_count"] > 1 and "GPU_REF" in r["backends"]
    assert set(r["us_per_node"]) == {"sequential", "eager", "replay"}
    assert all(v > 0 for v in r["us_per_node"].values())
    assert "host us / node" in gpu_host.render(r)
    # The GPU_OPT set: cuDNN's and cuBLAS's fakes, every library node replaying its own graph.
    opt = r["sets"]["GPU_OPT"]
    assert opt["backends"].get("GPU_OPT", 0) > 50 and opt["launched_ops"] < opt["nodes"]
    assert all(v > 0 for v in opt["us_per_launched_op"].values())
    assert r["node_graphs"]["captured"] >= 2 * opt["backends"]["GPU_OPT"]
    assert r["node_graphs"]["refused"] == []
    gc.collect()


def test_coroutine_waits_on_a_cuda_stream_through_the_c_host_function(fake):
    from nnc.coro import Scheduler, WaitFor

    s = nnc.Stream("gpu")
    assert s.coro_arm(lambda: None) is False        # idle: no host function, no hand-off
    seen = []

    def task():
        seen.append("before")
        yield WaitFor(s)
        seen.append(threading.current_thread().name)

    fake.busy = True
    sched = Scheduler("test-cuda")
    sched.spawn(task())
    assert seen == ["before"]                       # suspended; the caller went on
    assert sched.join(timeout=5)
    assert seen[1] == "test-cuda"                    # resumed on the scheduler's one thread
    assert "cuLaunchHostFunc" in fake.calls


def test_graph_across_two_gpus(fake):
    """A schedule puts each node on a stream of its GPU (tests/cuda/test_cuda_multi_gpu.py
    has the rest); without one every node is launched on the caller's stream, so a node whose
    tensors are on another GPU is refused when it is launched."""
    g = nnc.Graph()
    x = gpu(np.arange(4, dtype=np.float32))
    x1, b1 = (nnc.Tensor.empty((4,), device="gpu:1") for _ in range(2))
    n2 = g.exec(nnc.Cmd("DATA_TRANSFER"), [x], [x1])
    n3 = g.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [x1], [b1])
    g.concat(n2, n3)
    s = nnc.Stream("gpu:0")
    with pytest.raises(nnc.CommandError, match="tensors are on gpu:1 but the stream is on gpu:0"):
        g.run(stream=s)
    s.wait()
    nnc.static_schedule(g, stream_type="gpu")
    g.run(stream=s)
    s.wait()
    np.testing.assert_array_equal(b1.numpy(), 3 * np.arange(4))


def test_while_and_case_of_on_a_gpu_stream(fake):
    """A loop whose expression reads a host copy of GPU data, and a branch chosen from one,
    run by nnc.run.flow on GPU streams: the coroutine waits through a host function that
    posts to the scheduler's inbox without the GIL; the caller's stream holds later work until
    the run's end is emitted."""
    x = gpu(np.ones(4, np.float32))
    h = nnc.Tensor(np.zeros(4, np.float32))             # host memory: the expression's input
    g = nnc.Graph()
    body = nnc.Graph()
    mul = body.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x])
    copy = body.exec(nnc.Cmd("DATA_TRANSFER"), [x], [h])
    body.concat(mul, copy)
    loop = g.while_(body)
    body.set_while_expr(lambda count, hv: hv[0] < 50, inputs=[h], breakpoints=[copy])
    y = nnc.Tensor.empty((4,), device="gpu")
    c = g.case_of([h], [])
    g.set_case_of_expr(c, lambda hv: int(hv[0] >= 64))
    for k, a in enumerate((10.0, 100.0)):
        b = nnc.Graph()
        b.exec(nnc.Cmd("SCALAR_MUL", a=a), [x], [y])
        g.set_case_of(c, b, k)
    g.concat(loop, c)
    s = nnc.Stream("gpu")
    with pytest.raises(nnc.ScheduleError, match="stream_type='gpu'"):
        g.run(stream=s)                                  # control flow needs a GPU schedule
    nnc.static_schedule(g, stream_type="gpu")
    del fake.calls[:]
    fake.busy = True                    # the first WaitFor suspends: the scheduler finishes
    g.run(stream=s)
    assert not s.query()                # the end is not emitted yet: later work is held
    after = gpu(np.zeros(4, np.float32))
    nnc.cmd_exec(nnc.Cmd("SCALAR_MUL", a=1.0), [y], [after], stream=s)   # held until the end
    assert s.wait(timeout=10)
    s.wait()
    assert body.while_count == 5                         # 2, 4, ..., 64: the 6th test fails
    np.testing.assert_array_equal(h.numpy(), [64] * 4)
    np.testing.assert_array_equal(y.numpy(), [6400] * 4)     # branch 1 ran on the GPU
    np.testing.assert_array_equal(after.numpy(), [6400] * 4)  # after the run, not before
    assert "cuLaunchHostFunc" in fake.calls


def test_gpu_tensor_as_expression_input_is_refused(fake):
    x = gpu(np.ones(2, np.float32))
    g = nnc.Graph()
    body = nnc.Graph()
    n = body.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x])
    g.while_(body)
    body.set_while_expr(lambda count, xv: count < 2, inputs=[x], breakpoints=[n])
    nnc.static_schedule(g, stream_type="gpu")
    s = nnc.Stream("gpu")
    with pytest.raises(nnc.GraphError, match="a Python expression.s inputs must be host tensors"):
        g.run(stream=s)
    s.wait()


def test_the_fake_captures_only_the_streams_in_a_capture(fake):
    """As CUDA, on which threads sharing a GPU rely: while one stream captures, work enqueued
    on another stream runs at once (a fake that recorded it into the open capture gave another
    thread's eager convolutions wrong results); a stream joins the capture by waiting on an
    event recorded on a member, and leaves it when the capture ends."""
    f = fake
    f.cuCtxSetCurrent(f.cuDevicePrimaryCtxRetain(f.cuDeviceGet(0)[1])[1])
    a, b, c = (f.cuStreamCreate(0)[1] for _ in range(3))
    ev = f.cuEventCreate(0)[1]
    buf = np.zeros(16, np.uint8)
    ptr = buf.ctypes.data
    none = real.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
    assert f.cuStreamBeginCapture(a, 0)[0] == 0
    f.cuMemsetD8Async(ptr, 1, 4, b)                     # not in the capture: runs now
    f.cuMemsetD8Async(ptr + 4, 2, 4, a)                 # the capturing stream: recorded
    assert buf[:8].tolist() == [1] * 4 + [0] * 4
    assert f.cuStreamGetCaptureInfo(b)[1] == none
    assert f.cuStreamGetCaptureInfo(a)[1] != none
    f.cuEventRecord(ev, a)
    f.cuStreamWaitEvent(c, ev, 0)                       # c joins the capture
    f.cuMemsetD8Async(ptr + 8, 3, 4, c)
    assert buf[8:12].tolist() == [0] * 4 and f.cuStreamGetCaptureInfo(c)[1] != none
    err, graph = f.cuStreamEndCapture(a)
    assert err == 0
    f.cuMemsetD8Async(ptr + 12, 4, 4, c)                # the capture ended: runs now
    assert buf[12:].tolist() == [4] * 4 and f.cuStreamGetCaptureInfo(c)[1] == none
    f.cuGraphLaunch(f.cuGraphInstantiate(graph, 0)[1], a)
    assert buf.tolist() == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4
