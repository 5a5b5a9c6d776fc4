"""CONVOLUTION through cuDNN (nnc/cmd/convolution/gpu/cudnn.py) against fakes: the fake driver of
tests/fakes/cuda_driver.py and the fake cuDNN frontend of tests/fakes/cudnn_frontend.py. Where the
real frontend imports, our graphs are also recorded on it and the fake's surface is checked against
it. The "gpu" variants run on a real GPU where one (and the library) exists."""

import gc
import inspect
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
from fakes.cuda_driver import install, real
from fakes.cudnn_frontend import FakeCudnn
from fakes.cudnn_frontend import install as install_cudnn
from test_cuda_runtime import _nhwc_strides

import nnc
from nnc import cuda
from nnc.cmd.command import cmd_backends_for
from nnc.cmd.convolution import conv_shape
from nnc.cmd.convolution.gpu import cudnn as cudnn_conv
from nnc.cuda import capture as cgraph
from nnc.cuda import driver as drv
from nnc.cuda import memory

_no_bindings = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                  "driver borrows its enums and handle types)")



@pytest.fixture
def conv_drv(monkeypatch):
    """The fake CUDA driver (two GPUs), as tests/cuda/test_cuda_runtime.py's ``fake``."""
    yield install(monkeypatch, count=2)
    gc.collect()        # free fake buffers while the fake driver is still installed


@pytest.fixture
def dnn(conv_drv, monkeypatch, tmp_path):
    """The fake cuDNN frontend over the fake driver (its plan cache in tmp_path)."""
    yield install_cudnn(monkeypatch, conv_drv, tmp_path)
    gc.collect()


@pytest.fixture
def no_cudnn(conv_drv, monkeypatch):
    """The fake driver, and the frontend not installed (its import fails; probed anew)."""
    monkeypatch.setitem(sys.modules, "cudnn", None)
    monkeypatch.setattr(cudnn_conv, "_status", None)
    yield conv_drv


@pytest.fixture(params=["fake", "gpu"])
def dnn_env(request, monkeypatch, tmp_path):
    """The fakes, then (where a GPU and cuDNN exist) the real GPU: None there. Either way
    the timed-plan cache is the test's, never the user's."""
    if request.param == "gpu":
        if not cuda.available():
            pytest.skip(f"no GPU: {cuda.unavailable_reason()}")
        if not cudnn_conv.available():
            pytest.skip(f"no cuDNN: {cudnn_conv.unavailable_reason()}")
        monkeypatch.setenv("NNC_CACHE_DIR", str(tmp_path))
        yield None
    else:
        if real is None:
            pytest.skip("cuda-bindings is not installed (the fake driver needs its types)")
        yield request.getfixturevalue("dnn")


def _gpu(a, dev="gpu:0"):
    return memory.from_numpy(np.asarray(a, np.float32), dev)


def _ref(params, x, w, bias):
    shape = conv_shape(nnc.Cmd("CONVOLUTION", **params), x.shape, w.shape)
    want = np.zeros(shape, np.float32)
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF", **params),
                 [x, w] + ([bias] if bias is not None else []), [want])
    return want


def _tol(x, w, bias):
    # docs/commands.md: atol = K eps max|x| max|w| + eps max|bias|, rtol = 4 eps (float32).
    eps = float(np.finfo(np.float32).eps)
    k = max(1, w.shape[1] * w.shape[2] * w.shape[3])
    big = (np.abs(x).max() if x.size else 0) * (np.abs(w).max() if w.size else 0)
    return dict(rtol=4 * eps, atol=k * eps * big + (eps * np.abs(bias).max()
                                                     if bias is not None else 0) + 1e-30)


def _case(x_shape, w_shape, seed=3, bias=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    return x, w, b


def _run_conv(params, x, w, b, out=None, backend=None, stream=None):
    shape = conv_shape(nnc.Cmd("CONVOLUTION", **params), x.shape, w.shape)
    out = nnc.Tensor.empty(shape, device="gpu") if out is None else out
    ins = [_gpu(x), _gpu(w)] + ([_gpu(b)] if b is not None else [])
    cmd = nnc.Cmd("CONVOLUTION", backend=backend, **params)
    nnc.cmd_exec(cmd, ins, [out], stream=stream)
    return out


CONV_CASES = [   # tests/cuda/test_cuda_runtime.py's, and more
    dict(x=(2, 7, 6, 4), w=(6, 3, 3, 4), stride=1, padding=1, groups=1),
    dict(x=(1, 9, 8, 4), w=(4, 3, 2, 2), stride=(2, 1), padding=(1, 0, 0, 1), groups=2),
    dict(x=(5, 5, 3), w=(2, 1, 1, 3), stride=1, padding=0, groups=1),
    dict(x=(2, 8, 9, 4), w=(8, 3, 3, 4), stride=2, padding=(0, 2, 1, 0), groups=1),  # asym.
    dict(x=(1, 6, 6, 8), w=(8, 3, 3, 1), stride=1, padding=1, groups=8),     # depthwise
    dict(x=(2, 5, 7, 12), w=(16, 1, 1, 12), stride=1, padding=0, groups=1),  # 1x1
    dict(x=(1, 7, 7, 6), w=(9, 1, 7, 2), stride=1, padding=(0, 3), groups=3),  # 1x7, groups
]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("slice_out", [False, True])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_cudnn_convolution_matches_cpu_ref(dnn_env, case, slice_out, activation):
    x, w, b = _case(case["x"], case["w"])
    params = {k: case[k] for k in ("stride", "padding", "groups")}
    if activation:
        params["activation"] = activation
    want = _ref(params, x, w, b)
    shape = want.shape
    out = None
    if slice_out:
        # A channel slice of a wider buffer (Inception's concat), 16-byte aligned: channel
        # offset 4 and a pixel stride of O + 8.
        buf = nnc.Tensor.zeros(shape[:-1] + (shape[-1] + 8,), device="gpu")
        out = buf.view(shape, offset=4, strides=_nhwc_strides(shape, shape[-1] + 8))
    cmd = nnc.Cmd("CONVOLUTION", **params)
    ins = [_gpu(x), _gpu(w), _gpu(b)]
    out = out if out is not None else nnc.Tensor.empty(shape, device="gpu")
    assert cmd_backends_for(cmd, ins, [out])[0].name == "GPU_OPT"       # the default choice
    nnc.cmd_exec(cmd, ins, [out])
    np.testing.assert_allclose(out.numpy(), want, **_tol(x, w, b))
    if slice_out:
        full = buf.numpy()
        assert (full[..., :4] == 0).all() and (full[..., 4 + shape[-1]:] == 0).all()
    if dnn_env is not None:
        assert dnn_env.executions and "nnc_conv_f32" not in dnn_env.driver.launches
        d = dnn_env.executions[-1][3]
        assert d["relu"] == (activation == "relu") and d["bias"] and d["groups"] == case["groups"]


def test_layout_mapping_and_notes(dnn):
    x, w, b = _case((2, 7, 6, 4), (6, 3, 3, 4))
    params = dict(stride=(2, 1), padding=(1, 0, 2, 1))
    shape = conv_shape(nnc.Cmd("CONVOLUTION", **params), x.shape, w.shape)
    buf = nnc.Tensor.zeros(shape[:-1] + (12,), device="gpu")
    out = buf.view(shape, offset=4, strides=_nhwc_strides(shape, 12))
    _run_conv(params, x, w, b, out=out)
    (d,) = dnn.builds
    assert d["x"] == ([2, 4, 7, 6], [168, 1, 24, 4])               # NCHW dims, NHWC strides
    assert d["w"] == ([6, 4, 3, 3], [36, 1, 12, 4])                # KRSC
    ho, wo = shape[1:3]
    assert d["y"] == ([2, 6, ho, wo], [ho * wo * 12, 1, wo * 12, 12])   # the slice's stride
    assert d["pre"] == [1, 0] and d["post"] == [2, 1] and d["stride"] == [2, 1]
    assert {n.name for n in dnn.deselected[0]} >= {"TENSOR_CORE", "DOWN_CONVERT_INPUTS",
                                                   "REDUCED_PRECISION_REDUCTION", "FFT"}
    np.testing.assert_allclose(out.numpy(), _ref(params, x, w, b), **_tol(x, w, b))


def test_no_bias_and_batchless_input(dnn):
    x, w, _ = _case((5, 6, 3), (4, 3, 3, 3), bias=False)
    params = dict(padding=1, activation="relu")
    out = _run_conv(params, x, w, None)
    np.testing.assert_allclose(out.numpy(), _ref(params, x, w, None), **_tol(x, w, None))
    assert not dnn.executions[-1][3]["bias"] and dnn.executions[-1][3]["relu"]


def test_registered_priority_and_no_import_at_import_nnc():
    assert nnc.backends("CONVOLUTION", device="gpu")[:2] == ["GPU_OPT", "GPU_REF"]
    b = [b for b in nnc.Cmd("CONVOLUTION").info.backends if b.name == "GPU_OPT"]
    assert b and b[0].priority == 20 and b[0].device == "gpu"
    assert sorted(b[0].datatype_names) == ["float16", "float32"]
    code = ("import sys, nnc; bad = [m for m in ('cudnn', 'cuda.bindings') if m in sys.modules];"
            " assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_without_cudnn_gpu_ref_runs_and_pinning_names_the_extra(no_cudnn):
    assert not cudnn_conv.available()
    assert "nnc-graph[gpu-opt]" in cudnn_conv.unavailable_reason()
    x, w, b = _case((2, 7, 6, 4), (6, 3, 3, 4))
    params = dict(padding=1)
    ins, out = [_gpu(x), _gpu(w), _gpu(b)], nnc.Tensor.empty((2, 7, 6, 6), device="gpu")
    assert cmd_backends_for(nnc.Cmd("CONVOLUTION", **params), ins, [out])[0].name == "GPU_REF"
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", **params), ins, [out])
    np.testing.assert_allclose(out.numpy(), _ref(params, x, w, b), **_tol(x, w, b))
    assert "nnc_conv_f32" in no_cudnn.launches
    with pytest.raises(nnc.CUDAError, match=r"GPU_OPT needs cuDNN.*nnc-graph\[gpu-opt\]"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="GPU_OPT", **params), ins, [out])


def test_broken_library_is_unavailable(conv_drv, monkeypatch):
    class Broken:
        @staticmethod
        def backend_version():
            raise RuntimeError("Unable to find symbol cudnnGetVersion")

    monkeypatch.setitem(sys.modules, "cudnn", Broken)
    monkeypatch.setattr(cudnn_conv, "_status", None)
    assert not cudnn_conv.available()
    assert "cannot be loaded" in cudnn_conv.unavailable_reason()
    assert "cudnnGetVersion" in cudnn_conv.unavailable_reason()


def test_float64_runs_on_gpu_ref(dnn):
    x = np.random.default_rng(1).standard_normal((1, 5, 5, 2))
    w = np.random.default_rng(2).standard_normal((3, 3, 3, 2))
    out = nnc.Tensor.empty((1, 3, 3, 3), "float64", device="gpu")
    ins = [memory.from_numpy(x, "gpu"), memory.from_numpy(w, "gpu")]
    assert cmd_backends_for(nnc.Cmd("CONVOLUTION"), ins, [out])[0].name == "GPU_REF"
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION"), ins, [out])
    assert not dnn.builds and not dnn.executions


def test_one_build_per_geometry(dnn):
    x, w, b = _case((2, 7, 6, 4), (6, 3, 3, 4))
    for _ in range(3):
        _run_conv(dict(padding=1), x, w, b)
    assert len(dnn.builds) == 1 and len(dnn.executions) == 3
    # The buffers go in the frontend's ordered form (a list in tensor_uids' order).
    assert dnn.ordered_calls == 3
    _run_conv(dict(padding=1, activation="relu"), x, w, b)      # another epilogue
    _run_conv(dict(padding=0), x, w, b)                           # another shape
    assert len(dnn.builds) == 3
    # Threads asking for one new geometry at once build it once.
    x2, w2, b2 = _case((1, 9, 9, 4), (4, 3, 3, 4))
    errors = []

    def go():
        try:
            _run_conv(dict(padding=1), x2, w2, b2)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors
    assert len(dnn.builds) == 4


def test_refused_configuration_falls_back_to_gpu_ref(dnn):
    dnn.refuse = lambda d: "grouped convolutions not supported" if d["groups"] > 1 else None
    x, w, b = _case((1, 9, 8, 4), (4, 3, 2, 2))
    params = dict(stride=(2, 1), padding=(1, 0, 0, 1), groups=2)
    out = _run_conv(params, x, w, b)
    np.testing.assert_allclose(out.numpy(), _ref(params, x, w, b), **_tol(x, w, b))
    assert not dnn.executions and "nnc_conv_f32" in dnn.driver.launches
    ins = [_gpu(x), _gpu(w), _gpu(b)]
    assert [be.name for be in cmd_backends_for(nnc.Cmd("CONVOLUTION", **params), ins, [out])][0] \
        == "GPU_REF"
    with pytest.raises(nnc.CommandError, match="GPU_OPT of CONVOLUTION does not accept"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="GPU_OPT", **params), ins, [out])
    assert not dnn.builds                                   # refused once, remembered


@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_declined_fusion_runs_the_bare_convolution_and_nncs_epilogue(dnn, activation, with_bias):
    # cuDNN may decline every fused float32 engine (they can all be ones _build excludes):
    # the bare convolution through cuDNN, then nnc's bias_act kernel, on the same stream.
    dnn.refuse = lambda d: "no fused engine" if d["bias"] or d["relu"] else None
    x, w, b = _case((2, 7, 6, 4), (6, 3, 3, 4), bias=with_bias)
    params = dict(padding=1, activation=activation)
    shape = (2, 7, 6, 6)
    buf = nnc.Tensor.zeros((2, 7, 6, 10), device="gpu")          # a concat slice as output
    out = buf.view(shape, offset=4, strides=_nhwc_strides(shape, 10))
    _run_conv(params, x, w, b, out=out)
    np.testing.assert_allclose(out.numpy(), _ref(params, x, w, b), **_tol(x, w, b))
    fused = with_bias or activation
    assert len(dnn.executions) == 1
    assert all(not d["bias"] and not d["relu"] for d in dnn.builds)
    assert ("nnc_bias_act_f32" in dnn.driver.launches) == bool(fused)
    assert "nnc_conv_f32" not in dnn.driver.launches        # not GPU_REF's kernel
    full = buf.numpy()
    assert (full[..., :4] == 0).all()                        # the epilogue stays in its slice
    # A second epilogue of the same geometry reuses the bare plan.
    builds = len(dnn.builds)
    _run_conv(dict(padding=1, activation="relu"), x, w, b, out=out)
    assert len(dnn.builds) == builds


def test_misaligned_slice_falls_back(dnn):
    x, w, b = _case((2, 7, 6, 4), (6, 3, 3, 4))
    shape = (2, 7, 6, 6)
    buf = nnc.Tensor.zeros((2, 7, 6, 9), device="gpu")
    out = buf.view(shape, offset=1, strides=_nhwc_strides(shape, 9))   # 4-byte offset
    _run_conv(dict(padding=1), x, w, b, out=out)
    np.testing.assert_allclose(out.numpy(), _ref(dict(padding=1), x, w, b), **_tol(x, w, b))
    assert not dnn.executions and "nnc_conv_f32" in dnn.driver.launches


def test_zero_size_output_and_zero_channels(dnn):
    x, w, b = _case((0, 5, 5, 3), (4, 3, 3, 3))
    out = _run_conv(dict(padding=1), x, w, b, backend="GPU_OPT")
    assert out.shape == (0, 5, 5, 4) and not dnn.executions and not dnn.driver.launches
    # Zero input channels: out = bias (+ ReLU), as CPU_REF; cuDNN cannot describe C = 0.
    for act in (None, "relu"):
        params = dict(padding=1, activation=act) if act else dict(padding=1)
        x, w, b = _case((2, 4, 4, 0), (5, 3, 3, 0))
        for backend in (None, "GPU_OPT"):
            out = _run_conv(params, x, w, b, backend=backend)
            np.testing.assert_array_equal(out.numpy(), _ref(params, x, w, b))
    assert not dnn.builds


def _stream_cuda(s):
    return drv.cuda_stream(s)


def test_one_handle_per_stream_bound_to_it_and_destroyed_with_it(dnn):
    x, w, b = _case((2, 7, 6, 4), (6, 3, 3, 4))
    s1, s2 = nnc.Stream("gpu"), nnc.Stream("gpu")
    for s in (s1, s2, s1, s2, s1):
        _run_conv(dict(padding=1), x, w, b, stream=s)
    for s in (s1, s2):
        s.wait()
    build_handles = 1                                        # the device's build handle
    # Timing the plan used a private handle, destroyed once timed.
    timing = {h for h, _ in dnn.timed}
    assert len(timing) == 1 and all(h.backend_handle is None for h in timing)
    assert len(dnn.handles) == build_handles + len(timing) + 2
    by_stream = {int(_stream_cuda(s).handle): s for s in (s1, s2)}
    used = {}
    for handle, stream, ws, _ in dnn.executions:
        assert handle.stream == stream and stream in by_stream
        used.setdefault(stream, set()).add(handle)
        assert ws == memory.workspace(_stream_cuda(by_stream[stream]), dnn.workspace)
    assert all(len(hs) == 1 for hs in used.values()) and len(used) == 2
    h1 = next(iter(used[int(_stream_cuda(s1).handle)]))
    assert h1.backend_handle is not None
    _stream_cuda(s1).close()
    assert h1.backend_handle is None                          # destroyed with the stream
    assert dnn.handles[0].backend_handle is not None          # the build handle stays


def test_two_threads_two_streams(dnn):
    x, w, b = _case((2, 7, 6, 4), (6, 3, 3, 4))
    want = _ref(dict(padding=1, activation="relu"), x, w, b)
    results, errors = {}, []

    def work(k):
        try:
            s = nnc.Stream("gpu")
            outs = [_run_conv(dict(padding=1, activation="relu"), x, w, b, stream=s)
                    for _ in range(10)]
            s.wait()
            results[k] = [o.numpy() for o in outs]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "enqueueing threads hung"
    assert not errors, errors
    for outs in results.values():
        for o in outs:
            np.testing.assert_allclose(o, want, **_tol(x, w, b))
    assert len(dnn.executions) == 20 and len(dnn.builds) == 1


def _conv_graph():
    """x -> (conv a, conv b) -> one concat buffer (two channel slices) -> conv c."""
    x, wa, ba = _case((1, 8, 8, 4), (8, 3, 3, 4), seed=5)
    _, wb, bb = _case((1, 8, 8, 4), (8, 1, 1, 4), seed=6)
    _, wc, bc = _case((1, 8, 8, 16), (4, 3, 3, 16), seed=7)
    g = nnc.Graph()
    xt = _gpu(x)
    cat = nnc.Tensor.empty((1, 8, 8, 16), device="gpu")
    sa = cat.view((1, 8, 8, 8), offset=0, strides=_nhwc_strides((1, 8, 8, 8), 16))
    sb = cat.view((1, 8, 8, 8), offset=8, strides=_nhwc_strides((1, 8, 8, 8), 16))
    y = nnc.Tensor.empty((1, 8, 8, 4), device="gpu")
    relu = dict(padding=1, activation="relu")
    a = g.exec(nnc.Cmd("CONVOLUTION", **relu), [xt, _gpu(wa), _gpu(ba)], [sa])
    b = g.exec(nnc.Cmd("CONVOLUTION", activation="relu"), [xt, _gpu(wb), _gpu(bb)], [sb])
    c = g.exec(nnc.Cmd("CONVOLUTION", padding=1), [cat, _gpu(wc), _gpu(bc)], [y])
    g.concat(a, c)
    g.concat(b, c)
    cat_want = np.concatenate([_ref(relu, x, wa, ba), _ref(dict(activation="relu"), x, wb, bb)],
                              axis=-1)
    want = _ref(dict(padding=1), cat_want, wc, bc)
    tol = _tol(cat_want, wc, bc)
    tol["atol"] *= 4                    # two convolutions deep
    return g, xt, y, want, tol


def test_scheduled_multistream_run_and_capture(dnn_env):
    g, xt, y, want, tol = _conv_graph()
    sched = nnc.static_schedule(g, stream_type="gpu")
    assert sched.stream_count == 2
    assert [e.backend for e in g.execs] == ["GPU_OPT"] * 3
    s = nnc.Stream("gpu")
    g.run(stream=s)
    s.wait()
    np.testing.assert_allclose(y.numpy(), want, **tol)
    before = len(dnn_env.executions) if dnn_env is not None else 0
    captured = cgraph.capture(g, s)            # one warm-up run, then the captured one
    memory.fill_zero(y)
    for _ in range(2):
        captured.replay(s)
    s.wait()
    np.testing.assert_allclose(y.numpy(), want, **tol)    # replay reran the cuDNN calls
    if dnn_env is not None:
        # The warm-up run replays each node's own CUDA graph (made by the first run); the
        # capture records each node's execute once; replays rerun the recorded calls
        # without enqueueing anything, and nothing was built again.
        assert len(dnn_env.executions) == before + 3
        assert len({e[1] for e in dnn_env.executions}) >= 2
        assert len(dnn_env.builds) == 3
    captured.close()


# -- the fake against the real frontend (where `cudnn` imports; libcudnn and a driver need not)

try:
    import cudnn as real_cudnn
except Exception:  # not installed (CI without the gpu-opt extra), or broken
    real_cudnn = None

_needs_frontend = pytest.mark.skipif(real_cudnn is None, reason="nvidia-cudnn-frontend is not "
                                     "installed")


def _params(fn):
    return inspect.signature(fn).parameters


def _takes(fn, n):
    """Whether ``fn`` can be called with ``n`` positional arguments: from its signature (``*args``
    takes any count), or for a nanobind function from the signature lines of its docstring, one
    per overload ("name(a: int, /) -> int"; an overloaded one starts "name(*args, **kwargs)")."""
    try:
        params = list(_params(fn).values())
    except ValueError:
        name = fn.__name__
        sigs = re.findall(re.escape(name) + r"\(([^)]*)\)", fn.__doc__ or "")
        for inside in sigs:
            args = [a.strip() for a in inside.split(",") if a.strip() and a.strip() not in "/*"]
            if any(a.startswith("*") and not a.startswith("**") for a in args):
                continue                # the overload dispatcher's line: the others say more
            if len([a for a in args if not a.startswith("**")]) == n:
                return True
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    return len(required) <= n <= len(positional)


def _accepts(real_fn, name):
    ps = _params(real_fn)
    return name in ps or any(p.kind is p.VAR_KEYWORD for p in ps.values())


@_needs_frontend
def test_fake_surface_exists_on_the_real_frontend():
    fake = FakeCudnn(driver=None)
    graph_methods = [m for m in vars(type(fake.pygraph).__mro__[1]) if not m.startswith("_")]
    graph_methods += ["__init__"]
    for m in graph_methods:
        if m in ("cudnn", "desc"):
            continue
        real_fn = getattr(real_cudnn.pygraph, m)
        for p in list(_params(getattr(fake.pygraph, m)))[1:]:
            assert _accepts(real_fn, p), f"pygraph.{m} takes no {p!r}"
    from fakes.cudnn_frontend import Tensor as FakeTensor

    real_tensor = type(real_cudnn.pygraph().tensor(name="t", dim=[1, 1, 1, 1],
                                                   stride=[1, 1, 1, 1]))
    for m in ("set_output", "set_dim", "set_stride", "set_data_type"):
        assert callable(getattr(real_tensor, m)) and callable(getattr(FakeTensor, m))
    for fn in ("create_handle", "set_stream", "destroy_handle", "backend_version"):
        assert _takes(getattr(real_cudnn, fn), len(_params(getattr(fake, fn)))), fn
    for enum_name in ("data_type", "heur_mode", "numerical_note", "knob_type"):
        real_enum = getattr(real_cudnn, enum_name)
        for member in getattr(fake, enum_name).__members__:
            assert hasattr(real_enum, member), f"cudnn.{enum_name}.{member}"
    assert issubclass(real_cudnn.cudnnGraphNotSupportedError, Exception)


@_needs_frontend
@pytest.mark.parametrize("bias, relu, ps", [(True, True, 12), (False, False, 6),
                                             (True, False, 6), (False, True, 9)])
def test_graphs_record_on_the_real_frontend(bias, relu, ps):
    # The real frontend records nnc's graph without a driver (building it needs one): every
    # call and keyword describe() makes is the real API's.
    # The geometry key: dtype, precision, n, h, w, c, x's pixel stride, o, kh, kw, c/groups,
    # ho, wo, y's pixel stride, strides, paddings, bias, relu (cudnn.geometry's order).
    key = ("<f4", "ieee", 2, 7, 6, 4, 4, 6, 3, 3, 2, 4, 6, ps, (2, 1), (1, 0, 2, 1), bias, relu)
    g, x, w, b, y = cudnn_conv.describe(real_cudnn, key)
    assert list(x.dim) == [2, 4, 7, 6] and list(x.stride) == [168, 1, 24, 4]
    assert list(w.dim) == [6, 2, 3, 3] and list(w.stride) == [18, 1, 6, 2]
    assert list(y.dim) == [2, 6, 4, 6] and list(y.stride) == [24 * ps, 1, 6 * ps, ps]
    assert (b is not None) == bias
    names = [n.name for n in g.nodes]
    assert len(names) == 1 + bias + relu


def test_the_mapping_form_where_the_frontend_has_no_ordered_one(dnn, monkeypatch):
    monkeypatch.setattr(cudnn_conv, "_ordered", lambda graph: False)
    x, w, b = _case((2, 7, 6, 4), (6, 3, 3, 4))
    want = _run_conv(dict(padding=1), x, w, b, backend="GPU_REF")
    got = _run_conv(dict(padding=1), x, w, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(dnn.executions) == 1 and dnn.ordered_calls == 0
