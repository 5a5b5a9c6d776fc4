"""Precision options on the GPU: nnc.cuda.set_precision ("ieee" / "tf32") for GPU_OPT's float32
CONVOLUTION (cuDNN) and GEMM (cuBLAS), float16 tensors on GPU_OPT and GPU_REF, and
nnc.cuda.capture.to_gpu(dtype="float16").

Against the fakes (tests/fakes/cuda_driver.py, fakes/cudnn_frontend.py, fakes/cublas.py) these check
the plumbing: which cuDNN data types and numerical notes and which cuBLAS compute types reach the
library, that plans of one precision are never reused under the other, what a bound graph and a
captured one do when the precision changes, and the refusals. The fakes compute in float64 and round
to TF32 where a tensor-core engine would, so a precision that did not arrive shows in the numbers
too. The "gpu" variants run the float16 kernels and libraries on a real GPU (skipped without one)
against the float64 CPU reference, within docs/gpu.md's bounds.
"""

import gc

import numpy as np
import pytest
from fakes import cublas as _fake_cublas
from fakes import cudnn_frontend as _fake_cudnn
from fakes.cuda_driver import install, real
from fakes.env import fake_or_gpu

import nnc
from nnc import cuda
from nnc.cmd.convolution import conv_shape
from nnc.cmd.convolution.gpu import cudnn as cudnn_conv
from nnc.cmd.gemm.gpu import cublas as cublas_gemm
from nnc.cuda import capture as cgraph
from nnc.cuda import memory

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")

F16_EPS = float(np.finfo(np.float16).eps)          # 2^-10
TF32_EPS = 2.0 ** -10                               # TF32 keeps float16's 10 mantissa bits


@pytest.fixture(autouse=True)
def strict_after():
    """Every test starts and ends with the default precision, whatever it set."""
    assert cuda.precision() == "ieee"
    yield
    cuda.set_precision("ieee")


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """The fake driver (two GPUs) with the fake cuDNN (``fake.dnn``, its plan cache in
    tmp_path) and cuBLAS (``fake.cublas``) under GPU_OPT."""
    f = install(monkeypatch, count=2)
    f.dnn = _fake_cudnn.install(monkeypatch, f, tmp_path)
    f.cublas = _fake_cublas.install(monkeypatch, f)
    yield f
    gc.collect()        # free fake buffers while the fake driver is still installed


@pytest.fixture
def fake_ref(monkeypatch):
    """The fake driver alone: GPU_REF's kernels (the libraries are unavailable)."""
    f = install(monkeypatch, count=1)
    yield f
    gc.collect()


@pytest.fixture(params=["fake", "gpu"])
def env(request):
    """GPU_REF's kernels on the fake driver, then (where one exists) on the real GPU: None."""
    return fake_or_gpu(request, "fake_ref")


@pytest.fixture(params=["fake", "gpu"])
def opt_env(request):
    """GPU_OPT on the fake libraries, then (where a GPU, cuDNN and cuBLAS exist) the real."""
    return fake_or_gpu(request, libraries=[(lib, lib.__name__)
                                           for lib in (cudnn_conv, cublas_gemm)])


def gpu(a, dev="gpu:0"):
    return memory.from_numpy(np.asarray(a), dev)


def rng_arrays(seed, *shapes, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


# -- the setting ---------------------------------------------------------------------------------

def test_default_set_and_refusals():
    assert cuda.precision() == "ieee" and cuda.PRECISIONS == ("ieee", "tf32")
    cuda.set_precision("tf32")
    assert cuda.precision() == "tf32"
    for bad in ("TF32", "fp16", "highest", "", None, 1, b"tf32", ["tf32"]):
        with pytest.raises(cuda.PrecisionError, match="unknown CUDA float32 precision") as info:
            cuda.set_precision(bad)
        assert isinstance(info.value, nnc.NNCError) and isinstance(info.value, ValueError)
        assert repr(bad) in str(info.value)
    assert cuda.precision() == "tf32"             # a refused value changes nothing
    cuda.set_precision("ieee")
    assert cuda.precision() == "ieee"


# -- cuDNN ----------------------------------------------------------------------------------------

CONV = dict(stride=(1, 1), padding=(1, 1, 1, 1), activation="relu")


def _conv_case(dtype=np.float32, seed=5):
    x, w, b = rng_arrays(seed, (1, 6, 6, 8), (16, 3, 3, 8), (16,))
    return x.astype(dtype), w.astype(dtype), b.astype(dtype)


def _conv64(x, w, b):
    x, w, b = (np.asarray(t, np.float64) for t in (x, w, b))
    want = np.zeros(conv_shape(nnc.Cmd("CONVOLUTION", **CONV), x.shape, w.shape))
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF", **CONV), [x, w, b], [want])
    return want


def _conv_gpu(x, w, b, backend="GPU_OPT"):
    out = nnc.Tensor.empty(conv_shape(nnc.Cmd("CONVOLUTION", **CONV), x.shape, w.shape),
                           x.dtype, device="gpu")
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=backend, **CONV), [gpu(x), gpu(w), gpu(b)],
                 [out])
    return out.numpy().astype(np.float64)


def _notes(fake):
    return [{n.name for n in notes} for notes in fake.dnn.deselected]


def test_cudnn_notes_and_keys_follow_the_precision(fake):
    x, w, b = _conv_case()
    want = _conv64(x, w, b)
    strict = _conv_gpu(x, w, b)
    lossy = {"DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "WINOGRAD_TILE_6x6",
             "WINOGRAD_TILE_13x13"}
    assert _notes(fake) == [lossy | {"TENSOR_CORE"}]
    # The fake's engine is exact but for the float32 store: IEEE float32 reaches it.
    np.testing.assert_allclose(strict, want, rtol=1e-6, atol=1e-5)
    cuda.set_precision("tf32")
    fast = _conv_gpu(x, w, b)
    assert _notes(fake) == [lossy | {"TENSOR_CORE"}, lossy]     # a second plan, tensor cores
    assert not np.array_equal(fast, strict)                    # TF32 inputs reached the engine
    k = w[0].size
    bound = k * 2 * TF32_EPS * np.abs(x).max() * np.abs(w).max()
    assert np.abs(fast - want).max() <= bound
    cuda.set_precision("ieee")
    again = _conv_gpu(x, w, b)
    assert len(fake.dnn.builds) == 2                           # each precision built once
    np.testing.assert_array_equal(again, strict)               # and never mixed up
    ins = [gpu(x), gpu(w), gpu(b)]
    out = nnc.Tensor.empty(want.shape, device="gpu")
    cmd = nnc.Cmd("CONVOLUTION", **CONV)
    keys = {cudnn_conv.geometry(cmd, ins, [out], p) for p in cuda.PRECISIONS}
    assert len(keys) == 2 and {k[1] for k in keys} == {"ieee", "tf32"}
    assert cudnn_conv.geometry(cmd, ins, [out]) == cudnn_conv.geometry(cmd, ins, [out], "ieee")
    st = next(iter(cudnn_conv._devices.values()))
    assert keys <= set(st.plans)


def test_cudnn_float16_is_half_io_with_float_compute(fake):
    x, w, b = _conv_case(np.float16)
    want = _conv64(x, w, b)
    got = _conv_gpu(x, w, b)
    d = fake.dnn.builds[-1]
    F = _fake_cudnn.data_type
    assert d["dtype"] == F.HALF and d["compute"] == (F.FLOAT, F.FLOAT, F.FLOAT)
    assert d["bias"] and d["relu"]                             # fused, in float
    # Tensor cores stay allowed for float16 (float32 accumulation); the lossy notes do not.
    assert _notes(fake) == [{"DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT",
                             "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13"}]
    np.testing.assert_allclose(got, want, rtol=F16_EPS, atol=F16_EPS * np.abs(want).max())
    cuda.set_precision("tf32")
    _conv_gpu(x, w, b)
    assert len(fake.dnn.builds) == 1                           # float16 ignores the precision
    out = nnc.Tensor.empty(want.shape, "float16", device="gpu")
    key = cudnn_conv.geometry(nnc.Cmd("CONVOLUTION", **CONV), [gpu(x), gpu(w), gpu(b)], [out])
    assert key[:2] == ("<f2", None)


def _conv_graph(x, w, b):
    """A one-node GPU graph: (graph, its output tensor)."""
    g = nnc.Graph()
    out = nnc.Tensor.empty(conv_shape(nnc.Cmd("CONVOLUTION", **CONV), x.shape, w.shape),
                           x.dtype, device="gpu")
    g.exec(nnc.Cmd("CONVOLUTION", **CONV), [gpu(x), gpu(w), gpu(b)], [out], name="conv")
    return g, out


def test_a_bound_graph_follows_the_precision_and_a_capture_keeps_its_own(fake):
    x, w, b = _conv_case()
    g, out = _conv_graph(x, w, b)
    nnc.static_schedule(g, stream_type="gpu")
    s = nnc.Stream("gpu")
    g.run(stream=s)                                 # prepares (binds) the node under "ieee"
    s.wait()
    assert g.execs[0].backend == "GPU_OPT"
    strict = out.numpy().copy()
    cuda.set_precision("tf32")
    g.run(stream=s)                                 # the same prepared node, now TF32
    s.wait()
    fast = out.numpy().copy()
    assert not np.array_equal(fast, strict) and len(fake.dnn.builds) == 2
    # Each precision's first run enqueues the execute, then captures it into a CUDA graph of
    # the node (nnc.cuda._ccall.NodeGraph) that later runs under that precision replay.
    assert len(fake.dnn.executions) == 4
    cg = cgraph.capture(g, s)                       # captured under "tf32"
    cuda.set_precision("ieee")
    g.run(stream=s)
    s.wait()
    np.testing.assert_array_equal(out.numpy(), strict)
    memory.fill_zero(out)
    cg.replay(s)                                    # replays the precision it captured
    s.wait()
    np.testing.assert_array_equal(out.numpy(), fast)
    assert len(fake.dnn.builds) == 2                # nothing rebuilt by toggling back


# -- cuBLAS ---------------------------------------------------------------------------------------

def _gemm(a, w, bias, backend="GPU_OPT", **params):
    out = nnc.Tensor.empty(a.shape[:-1] + (w.shape[-1],), a.dtype, device="gpu")
    ins = [gpu(a), gpu(w)] + ([gpu(bias)] if bias is not None else [])
    nnc.cmd_exec(nnc.Cmd("GEMM", backend=backend, **params), ins, [out])
    return out.numpy().astype(np.float64)


def test_cublas_compute_type_follows_the_precision(fake):
    a, w, bias = rng_arrays(7, (5, 64), (64, 9), (9,))
    want = a.astype(np.float64) @ w + bias
    strict = _gemm(a, w, bias)
    assert [c[0] for c in fake.cublas.calls] == ["sgemm", "sgemm"]       # bias, then product
    assert fake.cublas.ex == []
    cuda.set_precision("tf32")
    fast = _gemm(a, w, bias)
    # The bias broadcast stays IEEE (exact); the product runs as TF32 tensor-core math.
    assert [c[0] for c in fake.cublas.calls[2:]] == ["sgemm", "gemm_ex"]
    assert fake.cublas.ex == [("gemm_ex", _fake_cublas.R_32F, _fake_cublas.COMPUTE_32F_FAST_TF32)]
    assert not np.array_equal(fast, strict)
    np.testing.assert_allclose(strict, want, rtol=1e-6, atol=1e-5)
    bound = 64 * 2 * TF32_EPS * np.abs(a).max() * np.abs(w).max()
    assert np.abs(fast - want).max() <= bound


@pytest.mark.parametrize("batched", [False, True])
def test_cublas_float16_is_gemm_ex_with_float_compute(fake, batched):
    shape_a, shape_w = ((3, 4, 32), (3, 32, 6)) if batched else ((4, 32), (32, 6))
    a, w, bias = rng_arrays(8, shape_a, shape_w, (6,), dtype=np.float16)
    want = np.matmul(a.astype(np.float64), w.astype(np.float64)) + bias
    for p in cuda.PRECISIONS:                       # float16 does not depend on it
        cuda.set_precision(p)
        got = _gemm(a, w, bias)
        np.testing.assert_allclose(got, want, rtol=F16_EPS, atol=F16_EPS * np.abs(want).max())
    name = "gemm_strided_batched_ex" if batched else "gemm_ex"
    assert fake.cublas.ex == [(name, _fake_cublas.R_16F, _fake_cublas.COMPUTE_32F)] * 4
    assert not [c for c in fake.cublas.calls if c[0].startswith(("s", "d"))]


def test_a_bound_gemm_switches_its_calls(fake):
    a, w = rng_arrays(9, (4, 128), (128, 8))
    g = nnc.Graph()
    out = nnc.Tensor.empty((4, 8), device="gpu")
    g.exec(nnc.Cmd("GEMM"), [gpu(a), gpu(w)], [out], name="fc")
    nnc.static_schedule(g, stream_type="gpu")
    s = nnc.Stream("gpu")
    for p in ("ieee", "tf32", "ieee", "tf32"):
        cuda.set_precision(p)
        g.run(stream=s)
        s.wait()
    # Each precision's first run: the call, then the same call captured into the node's CUDA
    # graph; the third and fourth runs replay the graph of their precision.
    assert [c[0] for c in fake.cublas.calls] == ["sgemm", "sgemm", "gemm_ex", "gemm_ex"]
    assert fake.calls.count("cuGraphLaunch") == 2


@pytest.mark.parametrize("mode", ["tf32", "float16"])
def test_gpu_opt_within_the_documented_bounds(opt_env, mode):
    """GPU_OPT's CONVOLUTION and GEMM under TF32 and in float16 against float64 (docs/gpu.md's
    table: eps 2 * 2^-10 in the dot-product bound), on the fakes and on a real GPU."""
    dt = np.float16 if mode == "float16" else np.float32
    cuda.set_precision("tf32" if mode == "tf32" else "ieee")
    x, w, b = rng_arrays(13, (1, 12, 12, 64), (32, 3, 3, 64), (32,), dtype=dt)
    want = _conv64(x, w, b)
    got = _conv_gpu(x, w, b)
    eps = 2 * TF32_EPS
    k = w[0].size
    atol = k * eps * np.abs(x).max() * np.abs(w).max() + eps * np.abs(b).max()
    np.testing.assert_allclose(got, want, rtol=eps, atol=atol)
    a, wt, bias = rng_arrays(14, (2, 2048), (2048, 1000), (1000,), dtype=dt)
    want = a.astype(np.float64) @ wt + bias
    got = _gemm(a, wt, bias)
    atol = 2048 * eps * np.abs(a).max() * np.abs(wt).max() + eps * np.abs(bias).max()
    np.testing.assert_allclose(got, want, rtol=eps, atol=atol)


def test_autotune_times_under_the_current_precision(fake):
    a, w = rng_arrays(15, (4, 64), (64, 8))
    g = nnc.Graph()
    out = nnc.Tensor.empty((4, 8), device="gpu")
    g.exec(nnc.Cmd("GEMM"), [gpu(a), gpu(w)], [out], name="fc")
    cuda.set_precision("tf32")
    g.autotune()
    assert ("gemm_ex", _fake_cublas.R_32F, _fake_cublas.COMPUTE_32F_FAST_TF32) in fake.cublas.ex
    assert not [c for c in fake.cublas.calls if c[0] == "sgemm"]


# -- GPU_REF float16 kernels (fake emulation, and the real GPU where there is one) ---------------

def _f16_bound(want, k=1):
    # docs/gpu.md: float16 storage rounds every input and output (eps = 2^-10), accumulation
    # is float32; for a sum of k products the inputs' rounding adds up to k terms' worth.
    return dict(rtol=2 * F16_EPS, atol=2 * F16_EPS * max(1.0, float(np.abs(want).max())) * k)


F16_COMMANDS = [   # (command, parameters, input shapes, output shape)
    ("RELU", {}, [(3, 5, 7)], (3, 5, 7)), ("EWSUM", {}, [(40,), (40,), (40,)], (40,)),
    ("EWPROD", {}, [(9,), (9,)], (9,)), ("EWDIV", {}, [(9,), (9,)], (9,)),
    ("EWEXP", {}, [(2, 8)], (2, 8)), ("SCALAR_MUL", {"a": 0.3}, [(17,)], (17,)),
    ("SOFTMAX", {}, [(3, 1000)], (3, 1000)),
    ("MAX_POOL", dict(size=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1)), [(1, 9, 9, 4)],
     (1, 5, 5, 4)),
    ("AVG_POOL", dict(size=(3, 3), stride=(1, 1), padding=(1, 1, 1, 1),
                      count_include_pad=True), [(1, 7, 7, 4)], (1, 7, 7, 4)),
]


@pytest.mark.parametrize("name, params, shapes, out_shape", F16_COMMANDS)
def test_gpu_ref_float16_matches_float64(env, name, params, shapes, out_shape):
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal(s).astype(np.float16) for s in shapes]
    if name == "EWDIV":
        xs[1] = (np.abs(xs[1]) + 0.5).astype(np.float16)
    cmd64 = nnc.Cmd(name, backend="CPU_REF", **params)
    want = np.zeros(out_shape)
    nnc.cmd_exec(cmd64, [x.astype(np.float64) for x in xs], [want])
    out = nnc.Tensor.empty(out_shape, "float16", device="gpu")
    nnc.cmd_exec(nnc.Cmd(name, backend="GPU_REF", **params), [gpu(x) for x in xs], [out])
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, **_f16_bound(want))
    if env is not None:
        assert any(k.endswith("_f16") for k in env.launches)


def test_gpu_ref_float16_conv_and_gemm(env):
    x, w, b = _conv_case(np.float16)
    want = _conv64(x, w, b)
    got = _conv_gpu(x, w, b, backend="GPU_REF")
    np.testing.assert_allclose(got, want, **_f16_bound(want))
    a, wt, bias = rng_arrays(12, (3, 200), (200, 7), (7,), dtype=np.float16)
    want = a.astype(np.float64) @ wt + bias
    got = _gemm(a, wt, bias, backend="GPU_REF")
    np.testing.assert_allclose(got, want, **_f16_bound(want))
    if env is not None:
        assert {"nnc_conv_f16", "nnc_gemm_f16"} <= set(env.launches)


# -- to_gpu(dtype=...) and Inception-V3 in float16 -----------------------------------------------

def test_to_gpu_converts_floats_and_keeps_views(fake_ref):
    cpu = nnc.Graph()
    buf = nnc.Tensor(np.zeros((2, 3), np.float32))
    src = nnc.Tensor(np.arange(3, dtype=np.float32) + 0.1)
    a = cpu.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [src], [buf.view((3,), offset=0)], name="a")
    b = cpu.exec(nnc.Cmd("SCALAR_MUL", a=3.0), [src], [buf.view((3,), offset=3)], name="b")
    c = cpu.exec(nnc.Cmd("EWSUM"), [buf.view((3,), 0), buf.view((3,), 3)],
                 [nnc.Tensor(np.zeros(3, np.float32))], name="c")
    cpu.concat(a, c)
    cpu.concat(b, c)
    new, mapping = cgraph.to_gpu(cpu, dtype="float16")
    assert {str(t.dtype) for e in new.execs for t in e.inputs + e.outputs} == {"float16"}
    assert src.dtype == np.float32                  # the CPU graph is untouched
    new.run()
    gbuf = mapping[id(buf._owner_object)]
    want = np.array([[0.2, 2.2, 4.2], [0.3, 3.3, 6.3]])
    np.testing.assert_allclose(gbuf.numpy(), want, rtol=2 * F16_EPS)
    np.testing.assert_allclose(new.execs[2].outputs[0].numpy(), want.sum(0), rtol=4 * F16_EPS)
    assert "nnc_ewsum_f16" in fake_ref.launches
    same, _ = cgraph.to_gpu(cpu, dtype=np.float32)
    assert str(same.execs[0].inputs[0].dtype) == "float32"
    for bad in ("int32", "half-ish", 3, object):
        with pytest.raises(nnc.GraphError, match="to_gpu converts floating-point tensors"):
            cgraph.to_gpu(cpu, dtype=bad)
    src.numpy()[1] = 1e5                            # read only: inf in float16 is refused
    with pytest.raises(nnc.GraphError, match="holds 100000, beyond float16's largest"):
        cgraph.to_gpu(cpu, dtype="float16")
    src.numpy()[1] = 1.1
    buf.numpy()[...] = 1e30                         # written by the graph: garbage is fine
    cgraph.to_gpu(cpu, dtype="float16")


def test_to_gpu_keeps_integer_tensors(fake_ref):
    cpu = nnc.Graph()
    x = nnc.Tensor(np.arange(4, dtype=np.int32))
    y = nnc.Tensor(np.zeros(4, np.int32))
    cpu.exec(nnc.Cmd("DATA_TRANSFER"), [x], [y], name="copy")
    new, _ = cgraph.to_gpu(cpu, dtype="float16")
    assert [str(t.dtype) for t in new.execs[0].inputs + new.execs[0].outputs] == ["int32"] * 2


@pytest.mark.slow
@pytest.mark.parametrize("libraries", [False, True])
def test_inception_float16_on_the_gpu_within_its_bound(monkeypatch, tmp_path, libraries):
    """Inception-V3 (75x75) converted to float16: every node has a float16 GPU backend
    (GPU_OPT's cuDNN / cuBLAS fakes, or GPU_REF's kernels alone) and the probabilities stay
    within docs/gpu.md's float16 bound of the float64 CPU run."""
    from nnc.models.inception import build_inception_v3_model

    f = install(monkeypatch, count=1)
    if libraries:
        _fake_cudnn.install(monkeypatch, f, tmp_path)
        _fake_cublas.install(monkeypatch, f)
    m64 = build_inception_v3_model(size=75, dtype="float64", backend="CPU_REF")
    m64.graph.run()
    want = m64.logits.numpy().copy()
    m = build_inception_v3_model(size=75)
    m.graph.simplify()
    new, mapping = cgraph.to_gpu(m.graph, dtype="float16")
    logits = mapping[id(m.logits._owner_object)]
    probs = mapping[id(m.output._owner_object)]
    nnc.static_schedule(new, stream_type="gpu")
    s = nnc.Stream("gpu")
    new.run(stream=s)
    s.wait()
    backends = {e.backend for e in new.execs if e.cmd.name != "NOOP"}
    assert backends <= {"GPU_OPT", "GPU_REF"}
    assert ("GPU_OPT" in backends) == libraries
    got = logits.numpy().astype(np.float64)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= 1e-2, err                         # docs/gpu.md: float16 end to end
    assert np.abs(probs.numpy().astype(np.float64).sum() - 1) <= 1e-2
    del new, logits, probs
    gc.collect()
