"""GEMM, CONVOLUTION, MAX_POOL and AVG_POOL on every backend (NNC: cmd/blas, cmd/convolution,
cmd/pool). References here are explicit Python loops on tiny shapes; tolerances are the ones of
docs/commands.md: for a reduction of length K, |got - ref| <= K * eps * max|a| * max|w| +
eps * max|bias| + 4 * eps * |ref|, eps being the dtype's machine epsilon.
"""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnc
from nnc.cmd import convolution as conv_module

FLOATS = ["float32", "float64", "float16"]


def backends_for(name, dtype):
    return [b.name for b in nnc.command_info(name).backends
            if dtype in b.datatype_names and b.device == "cpu"]


def close_dot(got, want, dtype, k, *operands, bias=None):
    """Compare a float64 reference with a result whose entries are length-k dot products."""
    eps = float(np.finfo(dtype).eps)
    scale = np.prod([float(np.abs(x).max(initial=0)) for x in operands])
    atol = k * eps * scale + eps * (0 if bias is None else float(np.abs(bias).max(initial=0)))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=4 * eps, atol=atol + 1e-30)


def strided(arr):
    """A non-contiguous nnc view holding arr's values (every other element of a buffer)."""
    buf = np.full(arr.size * 2 + 1, -9, arr.dtype)
    strides = [2] * arr.ndim
    for i in range(arr.ndim - 2, -1, -1):
        strides[i] = strides[i + 1] * arr.shape[i + 1]
    view = nnc.Tensor(buf).view(arr.shape, 1, tuple(strides))
    view.numpy()[...] = arr
    return view


# ---- GEMM


def gemm_ref(a, w, bias, ta, tb):
    """op(a) @ op(w) + bias by explicit sums, in float64."""
    a, w = a.astype(np.float64), w.astype(np.float64)
    a = a.swapaxes(-1, -2) if ta else a
    w = w.swapaxes(-1, -2) if tb else w
    vector = a.ndim == 1
    a = a[None] if vector else a
    batches = max(a.shape[0] if a.ndim == 3 else 1, w.shape[0] if w.ndim == 3 else 1)
    m, k = a.shape[-2:]
    n = w.shape[-1]
    out = np.zeros((batches, m, n))
    for b, i, j in itertools.product(range(batches), range(m), range(n)):
        ab = a[b] if a.ndim == 3 else a
        wb = w[b] if w.ndim == 3 else w
        out[b, i, j] = sum(ab[i, q] * wb[q, j] for q in range(k))
        if bias is not None:
            out[b, i, j] += float(bias[j])
    out = out if (a.ndim == 3 or w.ndim == 3) else out[0]
    return out[..., 0, :] if vector else out


GEMM_SHAPES = {  # kind: (a shape, w shape) before transposes, with M=3, K=4, N=5, B=2
    "vector": ((4,), (4, 5)),
    "matrix": ((3, 4), (4, 5)),
    "batched_a": ((2, 3, 4), (4, 5)),
    "batched_w": ((3, 4), (2, 4, 5)),
    "batched_both": ((2, 3, 4), (2, 4, 5)),
    "vector_batched_w": ((4,), (2, 4, 5)),
}


def _t(shape, flag):
    return shape[:-2] + shape[-2:][::-1] if flag else shape


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bias_kind", ["absent", "none", "given"])
@pytest.mark.parametrize("kind", list(GEMM_SHAPES))
def test_gemm_every_backend(kind, bias_kind, dtype):
    rng = np.random.default_rng(5)
    a_shape, w_shape = GEMM_SHAPES[kind]
    for ta, tb in itertools.product([False, True], repeat=2):
        if ta and len(a_shape) == 1:
            continue
        a = rng.standard_normal(_t(a_shape, ta)).astype(dtype)
        w = rng.standard_normal(_t(w_shape, tb)).astype(dtype)
        bias = rng.standard_normal(5).astype(dtype)
        ins = {"absent": [a, w], "none": [a, w, None], "given": [a, w, bias]}[bias_kind]
        want = gemm_ref(a, w, bias if bias_kind == "given" else None, ta, tb)
        got = {}
        for b in backends_for("GEMM", dtype):
            out = np.full(want.shape, np.nan, dtype)
            nnc.cmd_exec(nnc.Cmd("GEMM", transpose_a=ta, transpose_b=tb, backend=b), ins, [out])
            close_dot(out, want, dtype, 4, a, w, bias=bias)
            got[b] = out
        assert set(got) == ({"CPU_REF"} if dtype == "float16"
                            else {"CPU_REF", "CPU_OPT", "CPU_NUMPY"})
        if "CPU_OPT" in got:
            close_dot(got["CPU_OPT"], got["CPU_REF"].astype(np.float64), dtype, 4, a, w, bias=bias)


def test_gemm_nnc_fully_connected_layer():
    """NNC schedule.tests.c: a=[1.4, 0.2], w=[2, 11] (transpose_b) gives 5.0."""
    for b in nnc.backends("GEMM", device="cpu"):
        out = np.zeros((1, 1), np.float32)
        nnc.cmd_exec(nnc.Cmd("GEMM", transpose_b=True, backend=b),
                     [np.array([[1.4, 0.2]], np.float32), np.array([[2, 11]], np.float32)], [out])
        assert abs(out[0, 0] - 5.0) < 1e-6


@pytest.mark.parametrize("backend", ["CPU_NUMPY", "CPU_REF"])
def test_gemm_strided_views(backend):
    rng = np.random.default_rng(2)
    a, w = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    bias = rng.standard_normal(5)
    buf = np.full((3, 8), -9.0)
    out = nnc.Tensor(buf).view((3, 5), 2, (8, 1))  # columns 2..6 of a wider buffer
    nnc.cmd_exec(nnc.Cmd("GEMM", transpose_b=True, backend=backend),
                 [strided(a), strided(w), strided(bias)], [out])
    close_dot(out.numpy(), gemm_ref(a, w, bias, False, True), "float64", 4, a, w, bias=bias)
    assert (buf[:, :2] == -9).all() and (buf[:, 7] == -9).all()
    out2 = strided(np.zeros((3, 5)))
    nnc.cmd_exec(nnc.Cmd("GEMM", transpose_b=True, backend=backend), [a, w, bias], [out2])
    close_dot(out2.numpy(), gemm_ref(a, w, bias, False, True), "float64", 4, a, w, bias=bias)


@pytest.mark.parametrize("params, shapes, fragment", [
    ({}, [(3, 4), (5, 6), (3, 6)], "inner dimensions differ"),
    ({"transpose_b": True}, [(3, 4), (4, 5), (3, 5)], "inner dimensions differ"),
    ({}, [(3, 4), (4, 5), (5,), (3, 6)], "output 0 should have shape (3, 5)"),
    ({}, [(3, 4), (4, 5), (4,), (3, 5)], "bias should have shape (5,)"),
    ({}, [(2, 3, 4), (3, 4, 5), (2, 3, 5)], "batch sizes differ"),
    ({"transpose_a": True}, [(4,), (4, 5), (5,)], "transpose_a needs a matrix"),
    ({}, [(2, 2, 3, 4), (3, 4, 5), (2, 3, 3, 5)], "batch sizes differ"),
    ({}, [(2, 1, 3, 4), (2, 4, 5), (2, 1, 3, 5)], "output 0 should have shape (2, 2, 3, 5)"),
    ({}, [(), (4, 5), (5,)], "a must be [K] or [..., M, K]"),
    ({}, [(3, 4), (4,), (3,)], "w must be [K, N]"),
    ({}, [(2, 3, 4), (4, 5), (3, 1, 5), (2, 3, 5)], "bias should have shape (5,) or one"),
    ({}, [(2, 3, 4), (4, 5), (2, 3, 1), (2, 3, 5)], "broadcasts to the output's (2, 3, 5)"),
    ({}, [(3, 4), (4, 5), (1, 3, 5), (3, 5)], "with N last, got (1, 3, 5)"),
    ({}, [(3, 4), (3, 4)], "GEMM takes 2..3 inputs, got 1"),
])
def test_gemm_bad_shapes(params, shapes, fragment):
    arrays = [np.zeros(s, np.float32) for s in shapes]
    with pytest.raises(nnc.CommandError) as info:
        nnc.cmd_exec(nnc.Cmd("GEMM", **params), arrays[:-1], arrays[-1:])
    assert fragment in str(info.value)


def test_gemm_bad_dtypes_params_and_aliasing():
    a = np.ones((3, 3), np.int32)
    with pytest.raises(nnc.CommandError, match="floating-point"):
        nnc.cmd_exec(nnc.Cmd("GEMM"), [a, a], [np.zeros((3, 3), np.int32)])
    with pytest.raises(nnc.CommandError, match="mixed dtypes"):
        nnc.cmd_exec(nnc.Cmd("GEMM"), [np.ones((3, 3)), np.ones((3, 3), np.float32)],
                     [np.zeros((3, 3))])
    with pytest.raises(nnc.CommandError, match="transpose_a must be True or False"):
        nnc.Cmd("GEMM", transpose_a=2)
    with pytest.raises(nnc.CommandError, match="unknown parameters"):
        nnc.Cmd("GEMM", groups=2)
    x = nnc.Tensor(np.ones((3, 3), np.float32))
    with pytest.raises(nnc.CommandError, match="GEMM cannot run in place"):
        nnc.cmd_exec(nnc.Cmd("GEMM"), [x, np.ones((3, 3), np.float32)], [x])
    h = np.ones((2, 2), np.float16)
    with pytest.raises(nnc.CommandError, match="CPU_OPT of GEMM does not accept float16"):
        nnc.cmd_exec(nnc.Cmd("GEMM", backend="CPU_OPT"), [h, h], [np.zeros((2, 2), np.float16)])


# ---- CONVOLUTION


def conv_ref(x, w, bias, stride, pad, groups):
    """NHWC convolution by explicit loops over every output element, in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    single = x.ndim == 3
    x = x[None] if single else x
    n_img, h, wd, _ = x.shape
    o_ch, kh, kw, cg = w.shape
    og = o_ch // groups
    (sh, sw), (pt, pl, pb, pr) = stride, pad
    ho, wo = (h + pt + pb - kh) // sh + 1, (wd + pl + pr - kw) // sw + 1
    out = np.zeros((n_img, ho, wo, o_ch))
    for n, oh, ow, o in itertools.product(range(n_img), range(ho), range(wo), range(o_ch)):
        g = o // og
        acc = 0.0 if bias is None else float(bias[o])
        for i, j in itertools.product(range(kh), range(kw)):
            r, c = oh * sh + i - pt, ow * sw + j - pl
            if 0 <= r < h and 0 <= c < wd:
                acc += float(x[n, r, c, g * cg:(g + 1) * cg] @ w[o, i, j])
        out[n, oh, ow, o] = acc
    return out[0] if single else out


@st.composite
def conv_cases(draw):
    groups, cg, og = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    kh, kw, sh, sw = (draw(st.integers(1, 3)) for _ in range(4))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, kh - pad[0] - pad[2]), 6))
    wd = draw(st.integers(max(1, kw - pad[1] - pad[3]), 6))
    batch = draw(st.sampled_from([(), (1,), (2,)]))
    with_bias = draw(st.booleans())
    dtype = draw(st.sampled_from(["float32", "float64"]))
    return dict(groups=groups, cg=cg, og=og, k=(kh, kw), stride=(sh, sw), pad=pad,
                x_shape=batch + (h, wd, groups * cg), with_bias=with_bias, dtype=dtype)


@settings(max_examples=100, deadline=None)
@given(case=conv_cases())
def test_convolution_every_backend_random_geometry(case):
    rng = np.random.default_rng(0)
    dtype, groups = case["dtype"], case["groups"]
    x = rng.standard_normal(case["x_shape"]).astype(dtype)
    w = rng.standard_normal((groups * case["og"], *case["k"], case["cg"])).astype(dtype)
    bias = rng.standard_normal(w.shape[0]).astype(dtype) if case["with_bias"] else None
    want = conv_ref(x, w, bias, case["stride"], case["pad"], groups)
    k = case["k"][0] * case["k"][1] * case["cg"]
    cmd_params = dict(stride=case["stride"], padding=case["pad"], groups=groups)
    got = {}
    # CPU_OPT_WINOGRAD takes only 3x3 stride-1 ungrouped windows, with a wider tolerance of
    # its own (tests/cmd/test_winograd.py); the others take every case.
    for b in nnc.backends("CONVOLUTION", device="cpu"):
        out = np.full(want.shape, np.nan, dtype)
        ins = [x, w] if bias is None else [x, w, bias]
        cmd = nnc.Cmd("CONVOLUTION", backend=b, **cmd_params)
        if b == "CPU_OPT_WINOGRAD":
            if case["k"] != (3, 3) or case["stride"] != (1, 1) or groups != 1:
                with pytest.raises(nnc.CommandError, match="does not accept"):
                    nnc.cmd_exec(cmd, ins, [out])
            continue
        nnc.cmd_exec(cmd, ins, [out])
        close_dot(out, want, dtype, k, x, w, bias=bias)
        got[b] = out
    close_dot(got["CPU_OPT"], got["CPU_REF"].astype(np.float64), dtype, k, x, w, bias=bias)


def test_convolution_float16_through_cpu_ref():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 4, 2)).astype(np.float16)
    w = rng.standard_normal((3, 3, 3, 2)).astype(np.float16)
    out = np.zeros((1, 3, 4, 3), np.float16)
    assert backends_for("CONVOLUTION", "float16") == ["CPU_REF"]
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=(0, 1)), [x, w, None], [out])
    close_dot(out, conv_ref(x, w, None, (1, 1), (0, 1, 0, 1), 1), "float16", 18, x, w)


@pytest.mark.parametrize("backend", ["CPU_OPT", "CPU_REF"])
@pytest.mark.parametrize("k, pad", [((1, 1), 0), ((3, 3), 1), ((1, 3), (0, 1))])
def test_convolution_into_concat_slice_and_from_strided_input(backend, k, pad):
    """Inception's pattern: a branch writes its channels into a slice of one concat buffer."""
    rng = np.random.default_rng(4)
    big = rng.standard_normal((2, 5, 6, 7)).astype(np.float32)
    x = nnc.Tensor(big).view((2, 5, 6, 4), 2, (210, 42, 7, 1))  # channels 2..5
    w = rng.standard_normal((3, *k, 4)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    cat = np.full((2, 5, 6, 8), -9.0, np.float32)
    out = nnc.Tensor(cat).view((2, 5, 6, 3), 4, (240, 48, 8, 1))  # channels 4..6
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=pad, backend=backend), [x, w, bias], [out])
    want = conv_ref(big[..., 2:6], w, bias, (1, 1), nnc.Cmd("CONVOLUTION", padding=pad).padding,
                    1)
    close_dot(out.numpy(), want, "float32", k[0] * k[1] * 4, big, w, bias=bias)
    assert (cat[..., :4] == -9).all() and (cat[..., 7] == -9).all()
    # Every-other-element views too (no unit stride anywhere): CPU_REF computes them; the C
    # backend needs contiguous channels and weights, and says so rather than guessing.
    out2 = strided(np.zeros(want.shape, np.float32))
    xs = strided(np.ascontiguousarray(big[..., 2:6]))
    cmd = nnc.Cmd("CONVOLUTION", padding=pad, backend=backend)
    if backend == "CPU_OPT":
        with pytest.raises(nnc.CommandError, match="strided"):
            nnc.cmd_exec(cmd, [xs, strided(w), bias], [out2])
        cmd = nnc.Cmd("CONVOLUTION", padding=pad)       # default selection falls back
    nnc.cmd_exec(cmd, [xs, strided(w), bias], [out2])
    close_dot(out2.numpy(), want, "float32", k[0] * k[1] * 4, big, w, bias=bias)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, k, params", [
    ((3, 40, 37, 6), (5, 3, 3, 6), dict(stride=1, padding=1)),          # im2col, many parts
    ((2, 45, 41, 8), (8, 3, 3, 1), dict(padding=(1, 2, 0, 1), groups=8)),  # depthwise
    ((2, 50, 47, 16), (12, 1, 1, 16), {}),                               # pointwise
    ((2, 30, 29, 6), (6, 3, 2, 2), dict(stride=(2, 1), padding=1, groups=3)),
])
def test_convolution_opt_parts_on_the_pool(shape, k, params, dtype, threads):
    """CPU_OPT cuts big convolutions into parts of output rows that idle pool threads take
    (nnc.base.parallel): every split gives CPU_REF's result, at one thread or several."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(k).astype(dtype)
    bias = rng.standard_normal(k[0]).astype(dtype)
    cmd = nnc.Cmd("CONVOLUTION", backend="CPU_OPT", **params)
    want = np.zeros(conv_module.conv_shape(cmd, shape, k), dtype)
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF", **params), [x, w, bias], [want])
    nnc.set_intra_op_threads(threads)
    try:
        out = np.full(want.shape, np.nan, dtype)
        nnc.cmd_exec(cmd, [x, w, bias], [out])
    finally:
        nnc.set_intra_op_threads(None)
    close_dot(out, want.astype(np.float64), dtype, k[1] * k[2] * k[3], x, w, bias=bias)


@pytest.mark.parametrize("params, x, w, out, fragment", [
    ({"groups": 2}, (4, 4, 3), (2, 1, 1, 1), (4, 4, 2), "groups=2 must divide"),
    ({"groups": 2}, (4, 4, 4), (3, 1, 1, 2), (4, 4, 3), "groups=2 must divide"),
    ({}, (4, 4, 3), (2, 1, 1, 2), (4, 4, 2), "has 2 input channels per group"),
    ({}, (2, 4, 3), (2, 3, 1, 3), (1, 4, 2), "window (3) is larger than the padded height"),
    ({}, (4, 4, 3), (2, 3, 3, 3), (4, 4, 2), "output 0 should have shape (2, 2, 2)"),
    ({}, (1, 1, 4, 4, 3), (2, 1, 1, 3), (1, 1, 4, 4, 2), "must be NHWC"),
    ({}, (4, 4, 3), (2, 1, 3), (4, 4, 2), "w must be [O, kh, kw, C/groups]"),
])
def test_convolution_bad_shapes(params, x, w, out, fragment):
    arrays = [np.zeros(s, np.float32) for s in (x, w, out)]
    with pytest.raises(nnc.CommandError) as info:
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", **params), arrays[:2], arrays[2:])
    assert fragment in str(info.value)


@pytest.mark.parametrize("params, fragment", [
    ({"groups": 0}, "groups must be an int >= 1"),
    ({"stride": 0}, "stride must be >= 1"),
    ({"stride": (1, 2, 3)}, "stride must be an int or a pair"),
    ({"padding": -1}, "padding must be p, (ph, pw) or (top, left, bottom, right)"),
    ({"padding": (1, 2, 3)}, "padding must be p"),
    ({"dilation": 2}, "unknown parameters ['dilation']"),
])
def test_convolution_bad_params(params, fragment):
    with pytest.raises(nnc.CommandError) as info:
        nnc.Cmd("CONVOLUTION", **params)
    assert fragment in str(info.value)


def test_convolution_bias_alias_and_dtype():
    x = np.ones((3, 3, 2), np.float32)
    w = np.ones((2, 1, 1, 2), np.float32)
    with pytest.raises(nnc.CommandError, match="bias should have shape"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION"), [x, w, np.ones(3, np.float32)],
                     [np.zeros((3, 3, 2), np.float32)])
    t = nnc.Tensor(x)
    with pytest.raises(nnc.CommandError, match="cannot run in place"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION"), [t, w], [t])
    with pytest.raises(nnc.CommandError, match="floating-point"):
        i = np.ones((3, 3, 2), np.int64)
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION"), [i, np.ones((2, 1, 1, 2), np.int64)], [i.copy()])


# ---- MAX_POOL and AVG_POOL


def pool_ref(x, kind, size, stride, pad, include_pad=False, ceil=False):
    """Pooling by explicit loops; padding is skipped (max) or counted per include_pad (avg).
    ``ceil``: ONNX's ceil_mode, the output size rounded up, less a last window that would
    start in the end padding; include_pad counts a window's taps inside the padded input."""
    x = x.astype(np.float64)
    single = x.ndim == 3
    x = x[None] if single else x
    n_img, h, wd, ch = x.shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = size, stride, pad
    ho, wo = (h + pt + pb - kh) // sh + 1, (wd + pl + pr - kw) // sw + 1
    if ceil:
        ho, wo = math.ceil((h + pt + pb - kh) / sh) + 1, math.ceil((wd + pl + pr - kw) / sw) + 1
        ho -= (ho - 1) * sh >= h + pt
        wo -= (wo - 1) * sw >= wd + pl
    out = np.zeros((n_img, ho, wo, ch))
    for n, oh, ow, c in itertools.product(range(n_img), range(ho), range(wo), range(ch)):
        vals = [x[n, oh * sh + i - pt, ow * sw + j - pl, c]
                for i in range(kh) for j in range(kw)
                if 0 <= oh * sh + i - pt < h and 0 <= ow * sw + j - pl < wd]
        padded = sum(1 for i in range(kh) for j in range(kw)
                     if oh * sh + i - pt < h + pb and ow * sw + j - pl < wd + pr)
        if kind == "MAX_POOL":
            out[n, oh, ow, c] = max(vals)
        else:
            out[n, oh, ow, c] = sum(vals) / (padded if include_pad else len(vals))
    return out[0] if single else out


@st.composite
def pool_cases(draw):
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = draw(st.sampled_from([None, (1, 1), (2, 1), (2, 3)]))
    pad = (draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)),
           draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)))
    h = draw(st.integers(max(1, kh - pad[0] - pad[2]), 6))
    wd = draw(st.integers(max(1, kw - pad[1] - pad[3]), 6))
    batch = draw(st.sampled_from([(), (2,)]))
    return dict(size=(kh, kw), stride=stride, pad=pad, x_shape=batch + (h, wd, 2),
                kind=draw(st.sampled_from(["MAX_POOL", "AVG_POOL"])),
                include_pad=draw(st.booleans()),
                dtype=draw(st.sampled_from(["float32", "float64"])))


@settings(max_examples=100, deadline=None)
@given(case=pool_cases())
def test_pool_every_backend_random_geometry(case):
    dtype, kind = case["dtype"], case["kind"]
    x = np.random.default_rng(0).standard_normal(case["x_shape"]).astype(dtype)
    params = dict(size=case["size"], stride=case["stride"], padding=case["pad"])
    if kind == "AVG_POOL":
        params["count_include_pad"] = case["include_pad"]
    stride = case["stride"] or case["size"]
    want = pool_ref(x, kind, case["size"], stride, case["pad"], case["include_pad"])
    for b in nnc.backends(kind, device="cpu"):
        out = np.full(want.shape, np.nan, dtype)
        nnc.cmd_exec(nnc.Cmd(kind, backend=b, **params), [x], [out])
        if kind == "MAX_POOL":
            np.testing.assert_array_equal(out, want.astype(dtype))  # a max is exact
        else:
            close_dot(out, want, dtype, case["size"][0] * case["size"][1], x)


@pytest.mark.parametrize("kind, include_pad", [("MAX_POOL", False), ("AVG_POOL", False),
                                               ("AVG_POOL", True)])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_pool_ceil_mode_every_backend(k, kind, include_pad):
    """ceil_mode against the loop definition on every CPU backend: kernels 1-4, strides 1-3,
    pads 0-2 (below the window), odd and even sizes, windows past the end padding."""
    rng = np.random.default_rng(k)
    extra = {"count_include_pad": include_pad} if kind == "AVG_POOL" else {}
    ran = 0
    for s, p, (h, wd) in itertools.product((1, 2, 3), (0, 1, 2), ((k + 2, k + 3), (7, 5))):
        if p >= k:
            continue
        pad = (p, p, max(p - 1, 0), p)
        x = rng.standard_normal((2, h, wd, 5)).astype(np.float32)
        want = pool_ref(x, kind, (k, k), (s, s), pad, include_pad, ceil=True)
        for b in nnc.backends(kind, device="cpu"):
            out = np.full(want.shape, np.nan, np.float32)
            nnc.cmd_exec(nnc.Cmd(kind, backend=b, size=k, stride=s, padding=pad, ceil_mode=True,
                                 **extra), [x], [out])
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6, err_msg=f"{b} s={s} "
                                       f"pad={pad} {h}x{wd}")
            ran += 1
    assert ran


def test_pool_ceil_mode_output_shape():
    """Rounded up, but a window may not start in the end padding (ONNX, PyTorch); without
    ceil_mode the command and its params are as before."""
    from nnc.cmd.pooling import pool_shape

    assert pool_shape(nnc.Cmd("MAX_POOL", size=3, stride=2), (1, 8, 8, 1)) == (1, 3, 3, 1)
    assert pool_shape(nnc.Cmd("MAX_POOL", size=3, stride=2, ceil_mode=True),
                      (1, 8, 8, 1)) == (1, 4, 4, 1)
    # (3 + 1 + 1 - 2) / 2 rounds up to 2, + 1 = 3: that window would start at row 4, in the
    # bottom padding, so it is dropped.
    assert pool_shape(nnc.Cmd("MAX_POOL", size=2, stride=2, padding=1, ceil_mode=True),
                      (3, 3, 1)) == (2, 2, 1)
    assert nnc.Cmd("MAX_POOL", size=2).params == {"size": (2, 2), "stride": (2, 2),
                                                 "padding": (0, 0, 0, 0)}
    assert nnc.Cmd("MAX_POOL", size=2, ceil_mode=False).params == nnc.Cmd("MAX_POOL", size=2).params
    assert nnc.Cmd("MAX_POOL", size=2, ceil_mode=1).params["ceil_mode"] is True
    with pytest.raises(nnc.CommandError, match="output 0 should have shape"):
        nnc.cmd_exec(nnc.Cmd("AVG_POOL", size=3, stride=2), [np.zeros((8, 8, 1))],
                     [np.zeros((4, 4, 1))])


@pytest.mark.parametrize("backend", ["CPU_OPT", "CPU_REF"])
def test_pool_padding_edges(backend):
    x = -np.arange(1.0, 17.0, dtype=np.float32).reshape(1, 4, 4, 1)  # all negative
    out = np.zeros((1, 2, 2, 1), np.float32)
    nnc.cmd_exec(nnc.Cmd("MAX_POOL", size=3, stride=2, padding=1, backend=backend), [x], [out])
    # Padding (zero in a naive implementation) never wins: the corners are real maxima.
    np.testing.assert_array_equal(out[0, :, :, 0], [[-1, -2], [-5, -6]])
    ones = np.ones((4, 4, 1), np.float64)
    avg = np.zeros((2, 2, 1))
    nnc.cmd_exec(nnc.Cmd("AVG_POOL", size=3, stride=2, padding=1, backend=backend), [ones], [avg])
    np.testing.assert_array_equal(avg, 1.0)  # divides by the real elements only (NNC)
    nnc.cmd_exec(nnc.Cmd("AVG_POOL", size=3, stride=2, padding=1, count_include_pad=True,
                         backend=backend), [ones], [avg])
    np.testing.assert_allclose(avg[..., 0], [[4 / 9, 6 / 9], [6 / 9, 1]])


@pytest.mark.parametrize("kind", ["MAX_POOL", "AVG_POOL"])
def test_pool_float16_and_strided(kind):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 4, 3))
    want = pool_ref(x, kind, (2, 2), (1, 2), (1, 0, 0, 1))
    params = dict(size=2, stride=(1, 2), padding=(1, 0, 0, 1))
    assert backends_for(kind, "float16") == ["CPU_REF"]
    out16 = np.zeros(want.shape, np.float16)
    nnc.cmd_exec(nnc.Cmd(kind, **params), [x.astype(np.float16)], [out16])
    np.testing.assert_allclose(out16, want, rtol=2e-3, atol=2e-3)
    # Channels not contiguous: the C backend refuses, the NumPy one and CPU_REF take them.
    cmd = nnc.Cmd(kind, **params)
    taking = [b.name for b in nnc.cmd.command.cmd_backends_for(cmd, [strided(x)], [strided(want)])]
    assert taking == ["CPU_NUMPY", "CPU_REF"]
    for b in taking:
        out = strided(np.zeros(want.shape))
        nnc.cmd_exec(nnc.Cmd(kind, backend=b, **params), [strided(x)], [out])
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(nnc.CommandError, match="CPU_OPT of .* does not accept"):
        nnc.cmd_exec(nnc.Cmd(kind, backend="CPU_OPT", **params), [strided(x)],
                     [strided(np.zeros(want.shape))])


@pytest.mark.parametrize("kind, params, shapes, fragment", [
    ("MAX_POOL", {}, None, "needs size=k"),
    ("MAX_POOL", {"size": 2, "padding": 2}, None, "must be smaller than the window"),
    ("AVG_POOL", {"size": (3, 1), "padding": (0, 1)}, None, "must be smaller than the window"),
    ("AVG_POOL", {"size": 2, "count_include_pad": "yes"}, None, "count_include_pad must be"),
    ("MAX_POOL", {"size": 2, "ceil_mode": "yes"}, None, "ceil_mode must be True or False"),
    ("MAX_POOL", {"size": 2, "dilation": 2}, None, "unknown parameters ['dilation']"),
    ("MAX_POOL", {"size": 0}, None, "size must be >= 1"),
    ("MAX_POOL", {"size": 2}, [(4, 4, 3), (3, 3, 3)], "output 0 should have shape (2, 2, 3)"),
    ("AVG_POOL", {"size": 5}, [(4, 4, 3), (1, 1, 3)], "window (5) is larger"),
    ("MAX_POOL", {"size": 2}, [(4, 4), (2, 2)], "must be NHWC"),
    ("AVG_POOL", {"size": 2}, [(4, 4, 3), (2, 2, 3), (2, 2, 3)], "takes 1 outputs, got 2"),
])
def test_pool_bad_calls(kind, params, shapes, fragment):
    with pytest.raises(nnc.CommandError) as info:
        cmd = nnc.Cmd(kind, **params)
        arrays = [np.zeros(s, np.float32) for s in shapes]
        nnc.cmd_exec(cmd, arrays[:1], arrays[1:])
    assert fragment in str(info.value)
    i = np.zeros((4, 4, 1), np.int32)
    with pytest.raises(nnc.CommandError, match="floating-point"):
        nnc.cmd_exec(nnc.Cmd(kind, size=2), [i], [np.zeros((2, 2, 1), np.int32)])


@pytest.mark.parametrize("backend", ["CPU_OPT", "CPU_REF"])
@pytest.mark.parametrize("k", [(3, 3), (1, 1)])
def test_convolution_without_input_channels_is_the_bias(backend, k):
    """Regression: no input channels (K = 0) once divided by K in CPU_OPT (SIGFPE); every sum
    is empty, so the output is the bias (through a fused ReLU)."""
    x = np.zeros((2, 5, 5, 0), np.float32)
    w = np.zeros((3, *k, 0), np.float32)
    bias = np.array([1.0, -2.0, 0.5], np.float32)
    shape = (2, 6 - k[0], 6 - k[1], 3)
    out = np.full(shape, 9.0, np.float32)
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=backend), [x, w, bias], [out])
    np.testing.assert_array_equal(out, np.broadcast_to(bias, shape))
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=backend, activation="relu"), [x, w], [out])
    assert (out == 0).all()
