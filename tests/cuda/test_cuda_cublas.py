"""GPU_OPT backends (cuBLAS through nvmath-python) against fakes: the fake driver of
tests/fakes/cuda_driver.py and the fake cuBLAS of tests/fakes/cublas.py, which checks each call as
cuBLAS documents it and computes it in NumPy on the fake device memory. Where nvmath-python and
cuda-bindings are installed and no driver is, every call is also made on the real bindings
(argument conversion only). The ``env`` variants run again on a real GPU where one exists.
"""

import gc
import subprocess
import sys
import threading
import types

import numpy as np
import pytest
from fakes import cublas as _fake_cublas
from fakes.cuda_driver import FakeDriver, install, real
from fakes.env import fake_or_gpu
from test_cuda_runtime import GEMM_CASES, GEMM_SHAPES, _t

import nnc
from nnc.cmd.command import cmd_backends_for
from nnc.cmd.gemm import gemm_shape
from nnc.cmd.gemm.gpu import cublas as cublas_gemm
from nnc.cuda import capture as cgraph
from nnc.cuda import driver as drv
from nnc.cuda import memory

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")

TIMEOUT = 60                            # seconds: bound on every thread join



@pytest.fixture
def fake(monkeypatch):
    """The fake driver with two GPUs; ``fake.cublas``: the fake cuBLAS GPU_OPT uses."""
    f = install(monkeypatch, count=2)
    f.cublas = _fake_cublas.install(monkeypatch, f)
    yield f
    gc.collect()        # free fake buffers while the fake driver is still installed


@pytest.fixture(params=["fake", "gpu"])
def env(request):
    """The fakes, then (where a GPU and cuBLAS exist) the real thing."""
    return fake_or_gpu(request, libraries=[(cublas_gemm, "cuBLAS")])


def gpu(a, dev="gpu:0"):
    return memory.from_numpy(np.asarray(a), dev)


def backend_fn(name):
    return next(b for b in nnc.command_info("GEMM").backends if b.name == name).py_exec


# ---------------------------------------------------------------------------------------------
# GEMM (nnc/cmd/gemm/gpu/cublas.py)
# ---------------------------------------------------------------------------------------------

def _reference(ta, tb, ins, dtype):
    cmd = nnc.Cmd("GEMM", transpose_a=ta, transpose_b=tb, backend="CPU_REF")
    want = np.zeros(gemm_shape(cmd, ins[0].shape, ins[1].shape), dtype)
    nnc.cmd_exec(cmd, ins, [want])
    return want


def _tolerance(dtype, a, w, k, bias):
    """docs/commands.md's dot-product bound: k·eps·max|a|·max|w| (+ eps·max|bias|)."""
    eps = float(np.finfo(dtype).eps)
    atol = k * eps * np.abs(a).max(initial=0) * np.abs(w).max(initial=0)
    return dict(rtol=4 * eps, atol=atol + (eps * np.abs(bias).max() if bias is not None else 0))


def test_gpu_opt_is_the_default_when_cublas_loads(fake):
    assert nnc.backends("GEMM", device="gpu") == ["GPU_OPT", "GPU_REF"]
    a, w = gpu(np.ones((2, 3), np.float32)), gpu(np.ones((3, 4), np.float32))
    out = nnc.Tensor.empty((2, 4), device="gpu")
    cmd = nnc.Cmd("GEMM")
    assert [b.name for b in cmd_backends_for(cmd, [a, w], [out])] == ["GPU_OPT", "GPU_REF"]
    g = nnc.Graph()
    g.exec(cmd, [a, w], [out])
    g.run()
    assert g.execs[0].backend == "GPU_OPT"
    np.testing.assert_array_equal(out.numpy(), np.full((2, 4), 3))
    assert [c[0] for c in fake.cublas.calls] == ["sgemm"]
    assert "nnc_gemm_f32" not in fake.launches


def test_without_cublas_gemm_runs_on_gpu_ref(fake, monkeypatch):
    reason = "nvmath-python is not installed (pip install 'nnc-graph[gpu-opt]')"
    monkeypatch.setattr(cublas_gemm, "_probed", (None, reason))
    assert not cublas_gemm.available() and cublas_gemm.unavailable_reason() == reason
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = nnc.Tensor.empty((2, 2), device="gpu")
    ins = [gpu(a), gpu(np.ones((3, 2), np.float32))]
    nnc.cmd_exec(nnc.Cmd("GEMM"), ins, [out])
    np.testing.assert_array_equal(out.numpy(), [[3, 3], [12, 12]])
    assert fake.launches == ["nnc_gemm_f32"] and fake.cublas.calls == []
    with pytest.raises(nnc.CUDAError, match=r"GEMM/GPU_OPT needs cuBLAS.*nnc-graph\[gpu-opt\]"):
        nnc.cmd_exec(nnc.Cmd("GEMM", backend="GPU_OPT"), ins, [out])
    # The handle of a stream cannot be made either (a backend called directly).
    with pytest.raises(nnc.CUDAError, match="gpu-opt"):
        cublas_gemm.handle(drv.device(0).sync_stream())


def test_probe_names_what_to_install(monkeypatch):
    lib, reason = cublas_gemm._probe()
    if lib is None:                     # this machine: no driver (or no nvmath)
        assert "nnc-graph[gpu-opt]" in reason
    monkeypatch.setitem(sys.modules, "nvmath", None)     # import nvmath -> ImportError
    monkeypatch.setitem(sys.modules, "nvmath.bindings", None)
    lib, reason = cublas_gemm._probe()
    assert lib is None and reason.startswith("nvmath-python is not installed")
    assert "pip install 'nnc-graph[gpu-opt]'" in reason


def test_import_nnc_imports_neither_nvmath_nor_cuda_bindings():
    code = ("import sys, nnc; bad = [m for m in sys.modules if m.startswith(('nvmath', "
            "'cuda.bindings'))]; print(bad); assert not bad, bad; "
            "assert 'GPU_OPT' in nnc.backends('GEMM', device='gpu')")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("kind, ta, tb", GEMM_CASES)
def test_gemm_matches_cpu_ref(env, kind, ta, tb, bias, dtype):
    a_shape, w_shape = GEMM_SHAPES[kind]
    rng = np.random.default_rng(7)
    a = rng.standard_normal(_t(a_shape, ta)).astype(dtype)
    w = rng.standard_normal(_t(w_shape, tb)).astype(dtype)
    b = rng.standard_normal(5).astype(dtype) if bias else None
    ins = [a, w] + ([b] if bias else [])
    want = _reference(ta, tb, ins, dtype)
    # A fresh output full of NaN: without a bias cuBLAS must not read it (beta = 0).
    out = gpu(np.full(want.shape, np.nan, dtype))
    cmd = nnc.Cmd("GEMM", transpose_a=ta, transpose_b=tb)
    nnc.cmd_exec(cmd, [gpu(x) for x in ins], [out])
    k = w.shape[-1] if tb else w.shape[-2]
    np.testing.assert_allclose(out.numpy(), want, **_tolerance(dtype, a, w, k, b))
    if env is not None:
        names = [c[0] for c in env.cublas.calls]
        # shared_w is folded into one GEMM unless a is transposed (its batches then do not
        # continue each other's rows).
        batched = kind in ("batched", "vector_batched_w", "batched_w") or kind == "shared_w" and ta
        prefix = "s" if dtype == "float32" else "d"
        want_names = [f"{prefix}gemm" + ("_strided_batched" if batched else "")]
        assert names == want_names * (2 if bias else 1)
        assert "nnc_gemm_f32" not in env.launches and "nnc_gemm_f64" not in env.launches


def test_strided_views_and_sliced_output(env):
    rng = np.random.default_rng(8)
    base_a = rng.standard_normal((4, 9)).astype(np.float32)
    base_w = rng.standard_normal((7, 6)).astype(np.float32)
    bias = rng.standard_normal(12).astype(np.float32)
    ga, gw, gb = gpu(base_a), gpu(base_w), gpu(bias)
    a = ga.view((4, 6), offset=2, strides=(9, 1))           # columns 2..8 of each row
    w = gw.view((6, 5), offset=1, strides=(1, 6))           # a transposed, offset view
    b = gb.view((5,), offset=1, strides=(2,))               # every other element
    wide = gpu(np.full((4, 8), -7, np.float32))
    out = wide.view((4, 5), offset=3, strides=(8, 1))       # columns 3..7: row stride 8
    nnc.cmd_exec(nnc.Cmd("GEMM"), [a, w, b], [out])
    an, wn, bn = base_a[:, 2:8], base_w.reshape(-1)[1:31].reshape(5, 6).T, bias[1:11:2]
    want = an.astype(np.float64) @ wn + bn
    got = wide.numpy()
    np.testing.assert_allclose(got[:, 3:], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[:, :3], -7)           # outside the view: untouched
    if env is not None:
        assert [c[0] for c in env.cublas.calls] == ["sgemm", "sgemm"]


def test_batched_output_slices_and_broadcast_batch(env):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((3, 4, 6)).astype(np.float64)
    w = rng.standard_normal((6, 5)).astype(np.float64)
    wide = gpu(np.zeros((3, 4, 7)))
    out = wide.view((3, 4, 5), offset=1, strides=(28, 7, 1))
    # a[:, ::-1]-free strided batch: every other batch of a 6-batch buffer.
    big = np.concatenate([a, a * 0 + 99], axis=0)[[0, 3, 1, 4, 2, 5]]
    ga = gpu(big).view((3, 4, 6), offset=0, strides=(48, 6, 1))
    nnc.cmd_exec(nnc.Cmd("GEMM"), [ga, gpu(w)], [out])
    np.testing.assert_allclose(wide.numpy()[:, :, 1:6], a @ w, rtol=1e-12, atol=1e-12)
    if env is not None:
        # a's batches are not rows of one matrix: a strided batched call, w's stride 0.
        (name, _, _), = env.cublas.calls
        assert name == "dgemm_strided_batched"


def test_shared_w_is_one_gemm_of_all_rows(fake):
    a = np.arange(24, dtype=np.float32).reshape(3, 4, 2)
    w = np.ones((2, 3), np.float32)
    out = nnc.Tensor.empty((3, 4, 3), device="gpu")
    nnc.cmd_exec(nnc.Cmd("GEMM"), [gpu(a), gpu(w)], [out])
    np.testing.assert_array_equal(out.numpy(), a @ w)
    assert [c[0] for c in fake.cublas.calls] == ["sgemm"]      # folded: 12 rows at once


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_inf_and_k0(env):
    a = np.array([[1.0, np.inf], [2.0, 3.0]], np.float32)
    w = np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)
    bias = np.array([np.nan, -np.inf], np.float32)
    want = _reference(False, False, [a, w, bias], np.float32)
    out = gpu(np.zeros((2, 2), np.float32))
    nnc.cmd_exec(nnc.Cmd("GEMM"), [gpu(a), gpu(w), gpu(bias)], [out])
    np.testing.assert_array_equal(out.numpy(), want)       # NaN, Inf, -Inf where CPU_REF has
    # K = 0: the bias, or zeros, whatever out held.
    e_a, e_w = gpu(np.zeros((3, 0), np.float32)), gpu(np.zeros((0, 2), np.float32))
    out = gpu(np.full((3, 2), np.nan, np.float32))
    nnc.cmd_exec(nnc.Cmd("GEMM"), [e_a, e_w, gpu(np.array([1.5, -2], np.float32))], [out])
    np.testing.assert_array_equal(out.numpy(), [[1.5, -2]] * 3)
    nnc.cmd_exec(nnc.Cmd("GEMM"), [e_a, e_w], [out])
    np.testing.assert_array_equal(out.numpy(), np.zeros((3, 2)))
    # A zero-size output: nothing to do, no call.
    calls = len(env.cublas.calls) if env is not None else 0
    nnc.cmd_exec(nnc.Cmd("GEMM"), [gpu(np.zeros((0, 3), np.float32)),
                                   gpu(np.ones((3, 2), np.float32))],
                 [nnc.Tensor.empty((0, 2), device="gpu")])
    if env is not None:
        assert len(env.cublas.calls) == calls


def test_refused_layouts_fall_back_to_gpu_ref(fake):
    base = gpu(np.arange(48, dtype=np.float32).reshape(6, 8))
    a = base.view((3, 4), offset=0, strides=(16, 2))        # no unit stride on either axis
    w = gpu(np.ones((4, 2), np.float32))
    out = nnc.Tensor.empty((3, 2), device="gpu")
    cmd = nnc.Cmd("GEMM")
    assert [b.name for b in cmd_backends_for(cmd, [a, w], [out])] == ["GPU_REF"]
    nnc.cmd_exec(cmd, [a, w], [out])
    host = np.arange(48, dtype=np.float32).reshape(6, 8)[::2, ::2]
    np.testing.assert_array_equal(out.numpy(), host @ np.ones((4, 2)))
    assert fake.cublas.calls == [] and fake.launches == ["nnc_gemm_f32"]
    with pytest.raises(nnc.CommandError, match="GPU_OPT of GEMM does not accept.*unit stride"):
        nnc.cmd_exec(nnc.Cmd("GEMM", backend="GPU_OPT"), [a, w], [out])
    with pytest.raises(nnc.CommandError, match="does not accept"):   # host tensors
        nnc.cmd_exec(nnc.Cmd("GEMM", backend="GPU_OPT"), [np.ones((2, 2), np.float32)] * 2,
                     [np.zeros((2, 2), np.float32)])


def test_plan_refuses_what_cublas_cannot_express():
    def t(shape, strides):
        return types.SimpleNamespace(shape=shape, strides=strides, ndim=len(shape))

    cmd = nnc.Cmd("GEMM")
    ok = cublas_gemm.plan(cmd, t((4, 6), (6, 1)), t((6, 5), (5, 1)), None, t((4, 5), (5, 1)))
    assert ok is not None and (ok.m, ok.n, ok.k, ok.ldc, ok.batch) == (5, 4, 6, 5, 1)
    assert ok.wop == (0, 5) and ok.aop == (0, 6)            # OP_N both: wᵀ and aᵀ as they lie
    big = 2 ** 31
    for a, w, out in [
        (t((big, 2), (2, 1)), t((2, 3), (3, 1)), t((big, 3), (3, 1))),       # M beyond int32
        (t((4, 6), (big, 1)), t((6, 5), (5, 1)), t((4, 5), (5, 1))),         # lda beyond int32
        (t((4, 6), (3, 1)), t((6, 5), (5, 1)), t((4, 5), (5, 1))),           # ld < rows: overlap
        (t((4, 6), (6, 1)), t((6, 5), (5, 1)), t((4, 5), (1, 4))),           # out N-stride 4
        (t((2, 4, 6), (24, 6, 1)), t((6, 5), (5, 1)), t((2, 4, 5), (5, 5, 1))),  # batches overlap
        (t((2, 4, 6), (-24, 6, 1)), t((6, 5), (5, 1)), t((2, 4, 5), (20, 5, 1))),  # negative
    ]:
        assert cublas_gemm.plan(cmd, a, w, None, out) is None
    # A bias whose elements are spaced evenly is fine; one spread by stride 0 is not.
    a, w, out = t((4, 6), (6, 1)), t((6, 5), (5, 1)), t((4, 5), (5, 1))
    assert cublas_gemm.plan(cmd, a, w, t((5,), (3,)), out).bias == (1, 3)
    assert cublas_gemm.plan(cmd, a, w, t((5,), (0,)), out) is None


def test_one_handle_per_stream_set_to_it_with_a_workspace(fake):
    a, w = gpu(np.ones((2, 3), np.float32)), gpu(np.ones((3, 2), np.float32))
    out = nnc.Tensor.empty((2, 2), device="gpu")
    s1, s2 = nnc.Stream("gpu"), nnc.Stream("gpu")
    for s in (s1, s2, s1, s2, s1):
        nnc.cmd_exec(nnc.Cmd("GEMM"), [a, w], [out], stream=s)
    s1.wait()
    s2.wait()
    cu1, cu2 = drv.cuda_stream(s1), drv.cuda_stream(s2)
    h1, h2 = cublas_gemm.handle(cu1), cublas_gemm.handle(cu2)
    assert len(fake.cublas.handles) == 2 and h1.handle != h2.handle
    st1, st2 = fake.cublas.handles[h1.handle], fake.cublas.handles[h2.handle]
    assert st1.stream == int(cu1.handle) and st2.stream == int(cu2.handle)
    size = 32 << 20                                         # the fake GPU is sm_90 (Hopper)
    assert cublas_gemm.workspace_size(cu1.device) == size
    assert st1.workspace == (memory.workspace(cu1, size), size) != st2.workspace
    by_handle = {}
    for _, h, stream in fake.cublas.calls:
        by_handle.setdefault(h, set()).add(stream)
    assert by_handle == {h1.handle: {int(cu1.handle)}, h2.handle: {int(cu2.handle)}}
    assert [len([c for c in fake.cublas.calls if c[1] == h.handle]) for h in (h1, h2)] == [3, 2]
    # Closing a stream drains it, then destroys its handle (before the stream itself).
    id1 = h1.handle
    cu1.close()
    assert fake.cublas.destroyed == [id1] and h1.handle is None and id1 not in fake.cublas.handles
    # An nnc.Stream dropped: its CUDA stream closes on collection, and the handle with it.
    del s2, cu2
    gc.collect()
    assert len(fake.cublas.destroyed) == 2 and fake.cublas.handles == {}
    # A closed CudaStream makes no new handle.
    with pytest.raises(nnc.CUDAError, match="closed"):
        cublas_gemm.handle(cu1)
    with pytest.raises(nnc.CUDAError, match="destroyed"):
        h1.run(cu1, [])
    workspace_older = cublas_gemm.workspace_size(types.SimpleNamespace(arch=80))
    assert workspace_older == 4 << 20


def test_two_streams_from_two_threads(fake):
    rng = np.random.default_rng(10)
    a = rng.standard_normal((2, 8, 6)).astype(np.float32)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    want = a.astype(np.float64) @ w + bias
    ga, gw, gb = gpu(a), gpu(w), gpu(bias)
    errors, streams = [], {}

    def work(i):
        try:
            s = streams[i] = nnc.Stream("gpu")
            outs = [nnc.Tensor.empty((2, 8, 3), device="gpu") for _ in range(10)]
            for out in outs:
                nnc.cmd_exec(nnc.Cmd("GEMM"), [ga, gw, gb], [out], stream=s)
            s.wait()
            for out in outs:
                np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(TIMEOUT)
    assert not any(th.is_alive() for th in threads), "a GEMM thread hung"
    assert not errors, errors
    # Each stream's 20 calls (bias broadcast + product, 10 times) on its own handle.
    for s in streams.values():
        cu = drv.cuda_stream(s)
        h = cublas_gemm.handle(cu).handle
        assert [c[2] for c in fake.cublas.calls if c[1] == h] == [int(cu.handle)] * 20


def test_one_stream_from_two_threads_serialises_the_handle(fake, monkeypatch):
    """Two threads enqueuing on one CUDA stream never interleave calls on its handle."""
    a, w = gpu(np.ones((4, 4), np.float32)), gpu(np.ones((4, 4), np.float32))
    bias = gpu(np.ones(4, np.float32))
    cs = drv.CudaStream(0)
    inside, overlaps, ks = [0], [], []
    real_gemm = fake.cublas.sgemm

    def slow_gemm(*args):
        ks.append(args[5])
        inside[0] += 1
        if inside[0] > 1:
            overlaps.append(args)
        try:
            threading.Event().wait(0.001)           # give the other thread a chance
            real_gemm(*args)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(fake.cublas, "sgemm", slow_gemm)
    fn, errors = backend_fn("GPU_OPT"), []

    def work():
        try:
            for _ in range(20):
                fn(nnc.Cmd("GEMM"), [a, w, bias], [nnc.Tensor.empty((4, 4), device="gpu")],
                   stream=cs)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(TIMEOUT)
    assert not any(th.is_alive() for th in threads) and not errors, errors
    assert overlaps == [] and len(fake.cublas.calls) == 80
    # A GEMM's two calls (bias broadcast, then product) are adjacent on the handle.
    assert ks == [1, 4] * 40
    cs.close()


def _fc_graph(dtype="float32"):
    """x -> (x @ w1 + b1, x @ w2ᵀ) -> sum: two GEMMs on different streams, then EWSUM."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 6)).astype(dtype)
    w1 = rng.standard_normal((6, 5)).astype(dtype)
    w2 = rng.standard_normal((5, 6)).astype(dtype)
    b1 = rng.standard_normal(5).astype(dtype)
    gx = gpu(x)
    t1, t2, y = (nnc.Tensor.empty((4, 5), dtype, device="gpu") for _ in range(3))
    g = nnc.Graph()
    n1 = g.exec(nnc.Cmd("GEMM"), [gx, gpu(w1), gpu(b1)], [t1])
    n2 = g.exec(nnc.Cmd("GEMM", transpose_b=True), [gx, gpu(w2)], [t2])
    n3 = g.exec(nnc.Cmd("EWSUM"), [t1, t2], [y])
    g.concat(n1, n3)
    g.concat(n2, n3)

    def want(xv):
        return xv.astype(np.float64) @ w1 + b1 + xv @ w2.T

    return g, gx, y, want(x), want


def test_scheduled_run_and_capture_replay(env):
    g, gx, y, want, want_of = _fc_graph()
    sched = nnc.static_schedule(g, stream_type="gpu")
    assert sched.stream_count == 2
    s = nnc.Stream("gpu")
    g.run(stream=s)
    g.run(stream=s)
    s.wait()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    assert [e.backend for e in g.execs] == ["GPU_OPT", "GPU_OPT", "GPU_REF"]
    if env is not None:
        handles = {c[1] for c in env.cublas.calls}
        assert len(handles) == 2                # the two GEMMs ran on the schedule's 2 streams
        created = len(env.cublas.handles)
    cg = cgraph.capture(g, s)                   # a warm-up run, then the captured one
    memory.fill_zero(y)
    x2 = np.full((4, 6), 0.5, np.float32)
    nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [x2], [gx])
    if env is not None:
        calls = len(env.cublas.calls)
        assert len(env.cublas.handles) == created       # no handle made while capturing
    for _ in range(3):
        cg.replay(s)
    s.wait()
    np.testing.assert_allclose(y.numpy(), want_of(x2), rtol=1e-5, atol=1e-5)
    if env is not None:
        assert len(env.cublas.calls) == calls   # replay is the captured graph, no new enqueue


def test_gemm_in_a_captured_while_loop(env):
    """A while loop whose body multiplies on cuBLAS, captured into a CUDA WHILE node: the body
    runs on streams no warm-up used, so its handle is made mid-capture (this crashed on an
    H200 before the handle was made with the capture mode relaxed)."""
    rng = np.random.default_rng(3)
    a0 = np.linalg.qr(rng.standard_normal((64, 64)))[0].astype(np.float32)
    x0 = rng.standard_normal((64, 1)).astype(np.float32)
    a, x = gpu(a0), gpu(x0)
    y = nnc.Tensor.empty((64, 1), device="gpu")
    g, body = nnc.Graph(), nnc.Graph()
    head = body.exec(nnc.Cmd("NOOP"))
    mv = body.exec(nnc.Cmd("GEMM"), [a, x], [y])
    body.concat(head, mv)
    body.concat(mv, body.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [y], [x]))
    g.while_(body)
    body.set_while_expr(nnc.Compare("count", "<", 12), [], [head])
    nnc.static_schedule(g, stream_type="gpu")
    s = nnc.Stream("gpu")
    cg = cgraph.capture(g, s, warmup=False)
    assert body.execs[1].backend == "GPU_OPT"
    for _ in range(2):
        nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [x0.copy()], [x])
        cg.replay(s)
        s.wait()
        want = np.linalg.matrix_power(a0.astype(np.float64), 12) @ x0
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-4, atol=1e-4)
        assert cg.while_count(body) == 12

def test_prepared_ops_pack_once(fake, monkeypatch):
    g, gx, y, want, _ = _fc_graph("float64")
    nnc.static_schedule(g, stream_type="gpu")
    s = nnc.Stream("gpu")
    planned = []
    real_plan = cublas_gemm.plan
    monkeypatch.setattr(cublas_gemm, "plan", lambda *a: planned.append(1) or real_plan(*a))
    for _ in range(3):
        g.run(stream=s)
    s.wait()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12, atol=1e-12)
    # Two GEMM nodes: planned once each (accept at compile, body at prepare), not per run.
    runs_planned = len(planned)
    g.run(stream=s)
    s.wait()
    assert len(planned) == runs_planned
    # 3 calls a run (bias + product, product), made on the first run and once more into each
    # node's CUDA graph; the later runs replay those graphs (nnc.cuda._ccall.NodeGraph).
    assert len([c for c in fake.cublas.calls if c[0] == "dgemm"]) == 2 * 3
    assert fake.calls.count("cuGraphLaunch") == 3 * 2


def test_autotune_times_both_and_keeps_a_correct_result(fake):
    g, gx, y, want, _ = _fc_graph()
    g.run()
    calls, launches = len(fake.cublas.calls), fake.launches.count("nnc_gemm_f32")
    g.autotune()
    # Both GPU backends of each GEMM were timed (on scratch GPU copies).
    assert len(fake.cublas.calls) > calls and fake.launches.count("nnc_gemm_f32") > launches
    assert {e.backend for e in g.execs[:2]} <= {"GPU_OPT", "GPU_REF"}
    memory.fill_zero(y)
    g.run()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_cublas_error_is_a_cuda_error(fake, monkeypatch):
    def failing(*args):
        raise _fake_cublas.cuBLASError(_fake_cublas.EXECUTION_FAILED)

    monkeypatch.setattr(fake.cublas, "sgemm", failing)
    with pytest.raises(nnc.CUDAError, match="cuBLAS failed.*status 13"):
        nnc.cmd_exec(nnc.Cmd("GEMM"), [gpu(np.ones((2, 2), np.float32))] * 2,
                     [nnc.Tensor.empty((2, 2), device="gpu")])
    monkeypatch.setattr(fake.cublas, "create", failing)
    with pytest.raises(nnc.CUDAError, match="cublasCreate failed"):
        cublas_gemm.handle(drv.CudaStream(0))


def test_real_check_is_active_without_a_driver():
    if _fake_cublas.real is not None:
        assert _fake_cublas.REAL_CHECK == (not _fake_cublas._driver_library_present())


@pytest.mark.skipif(not hasattr(FakeDriver, "unsafe"), reason="the fake driver does not "
                    "enforce CUDA's capture rules here")
def test_first_gemm_on_a_stream_while_capturing_makes_its_handle(fake):
    """Making a handle allocates, which capture refuses in thread-local mode (the capture is
    then invalidated); nnc makes it with the thread's capture mode relaxed, as CUDA's own
    libraries do around lazy allocations, so the GEMM is captured, not refused."""
    a, w = gpu(np.ones((2, 2), np.float32)), gpu(np.ones((2, 2), np.float32))
    out = nnc.Tensor.empty((2, 2), device="gpu")
    s = nnc.Stream("gpu")
    cg = drv.CudaGraph.capture(s, lambda: nnc.cmd_exec(nnc.Cmd("GEMM"), [a, w], [out], stream=s))
    assert fake.capture_invalidated is None and len(fake.cublas.handles) == 1
    memory.fill_zero(out)
    cg.replay(s)
    s.wait()
    np.testing.assert_array_equal(out.numpy(), np.full((2, 2), 2))


@pytest.mark.skipif(not hasattr(FakeDriver, "unsafe"), reason="the fake driver does not "
                    "enforce CUDA's capture rules here")
def test_an_allocation_outside_the_relaxed_scope_still_invalidates_a_capture(fake):
    """The relaxed scope is only around library state: a tensor allocated mid-capture is
    still refused, and the capture fails with the reason instead of baking in a bad graph."""
    s = nnc.Stream("gpu")

    def fn():
        nnc.Tensor.empty((2, 2), device="gpu")
    with pytest.raises(nnc.CUDAError, match="cuMemAlloc failed"):
        drv.CudaGraph.capture(s, fn)
    assert fake.capture_stack == []
    with drv.capture_relaxed():         # outside a capture: no driver call at all
        pass
    assert "cuThreadExchangeStreamCaptureMode" not in fake.calls
