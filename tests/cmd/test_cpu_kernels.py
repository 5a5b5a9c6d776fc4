"""The C backends of GEMM, MAX_POOL, AVG_POOL, ADD, MUL and CLAMP (nnc/cmd/gemm/cpu_opt.pyx,
nnc/cmd/pooling/cpu_opt.pyx with pool_kernel.h, cpu_opt_blas.pyx): each against CPU_REF on random
geometry and on views, split into parts at one and two intra-op threads (the pools' kernel at
every ISA level the machine runs), refusing what it cannot take, and running in a scheduled
graph as C tasks (no Python on the workers)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnc
from nnc.base import isa
from nnc.cmd.pooling import pool_shape

TIMEOUT = 30


def ref_and_opt(name, ins, out_shape, dtype, out_view=None, **params):
    """(CPU_REF's output, CPU_OPT's output) for one command; out_view(shape) makes the CPU_OPT
    output (a view) when given."""
    want = np.full(out_shape, np.nan, dtype)
    nnc.cmd_exec(nnc.Cmd(name, backend="CPU_REF", **params), ins, [want])
    if out_view is None:
        got = np.full(out_shape, np.nan, dtype)
        nnc.cmd_exec(nnc.Cmd(name, backend="CPU_OPT", **params), ins, [got])
        return want, got
    view = out_view(out_shape)
    nnc.cmd_exec(nnc.Cmd(name, backend="CPU_OPT", **params), ins, [view])
    return want, view.numpy()


def assert_dot_close(got, want, dtype, k):
    """got's entries are length-k dot products of values in [-1, 1) scale: k ulps of slack."""
    eps = float(np.finfo(dtype).eps)
    scale = max(float(np.abs(want).max(initial=0)), 1.0)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=8 * eps,
                               atol=(k + 1) * eps * scale * 4)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    nnc.set_intra_op_threads(request.param)
    try:
        yield request.param
    finally:
        nnc.set_intra_op_threads(None)


def concat_slice(shape, dtype, extra=5, offset=2):
    """A view of a wider [..., C + extra] buffer holding channels offset..offset+C: a branch of a
    concat, channels contiguous, pixel stride wider than C."""
    full = shape[:-1] + (shape[-1] + extra,)
    buf = nnc.Tensor(np.full(full, -7.0, dtype))
    strides = [1] * len(full)
    for i in range(len(full) - 2, -1, -1):
        strides[i] = strides[i + 1] * full[i + 1]
    return buf.view(shape, offset, tuple(strides))


# ---- GEMM


def gemm_args(rng, dtype, batch_a, batch_w, m, k, n, ta, tb, bias, vector):
    a_shape = (k,) if vector else ((k, m) if ta else (m, k))
    if batch_a and not vector:
        a_shape = (batch_a,) + a_shape
    w_shape = (n, k) if tb else (k, n)
    if batch_w:
        w_shape = (batch_w,) + w_shape
    a = rng.uniform(-1, 1, a_shape).astype(dtype)
    w = rng.uniform(-1, 1, w_shape).astype(dtype)
    ins = [a, w] + ([rng.uniform(-1, 1, n).astype(dtype)] if bias else [])
    batch = batch_a or batch_w
    out_shape = ((batch,) if batch else ()) + (() if vector else (m,)) + (n,)
    return ins, out_shape


@st.composite
def gemm_cases(draw):
    vector = draw(st.booleans())
    batch = draw(st.sampled_from([0, 1, 3]))
    where = draw(st.sampled_from(["a", "w", "both"])) if batch else "a"
    return dict(
        dtype=draw(st.sampled_from(["float32", "float64"])),
        batch_a=batch if where in ("a", "both") and not vector else 0,
        batch_w=batch if where in ("w", "both") or (vector and batch) else 0,
        m=draw(st.integers(1, 9)), k=draw(st.integers(0, 9)), n=draw(st.integers(1, 9)),
        ta=draw(st.booleans()) and not vector, tb=draw(st.booleans()),
        bias=draw(st.booleans()), vector=vector,
        out_slice=draw(st.booleans()),
    )


@settings(max_examples=80, deadline=None)
@given(case=gemm_cases())
def test_gemm_c_backend_matches_cpu_ref(case):
    rng = np.random.default_rng(1)
    dtype = case.pop("dtype")
    out_slice = case.pop("out_slice")
    ins, out_shape = gemm_args(rng, dtype, **case)
    params = dict(transpose_a=case["ta"], transpose_b=case["tb"])
    view = (lambda s: concat_slice(s, dtype)) if out_slice else None
    want, got = ref_and_opt("GEMM", ins, out_shape, dtype, view, **params)
    assert_dot_close(got, want, dtype, case["k"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemm_c_backend_takes_transposed_and_sliced_views_without_copies(dtype):
    """A transposed view is a BLAS transpose flag; a row slice is a leading dimension."""
    rng = np.random.default_rng(3)
    a_t = rng.uniform(-1, 1, (7, 5)).astype(dtype)          # a = a_t.T: [5, 7], column-major
    wide = rng.uniform(-1, 1, (7, 12)).astype(dtype)        # w = columns 2..8 of a wider array
    a = nnc.Tensor(a_t).view((5, 7), 0, (1, 5))
    w = nnc.Tensor(wide).view((7, 6), 2, (12, 1))
    cmd = nnc.Cmd("GEMM")
    found = nnc.cmd.command.cmd_backends_for(cmd, [a, w], [np.zeros((5, 6), dtype)])
    assert [b.name for b in found][0] == "CPU_OPT"
    want, got = ref_and_opt("GEMM", [a, w], (5, 6), dtype)
    assert_dot_close(got, want, dtype, 7)
    np.testing.assert_allclose(got, a_t.T.astype(np.float64) @ wide[:, 2:8], rtol=1e-5)
    # One row is a GEMV: a vector a with a stride (a column of a_t) is its increment.
    column = nnc.Tensor(a_t).view((7,), 1, (5,))
    for w_op, tb in ((w, False), (nnc.Tensor(np.ascontiguousarray(wide[:, 2:8].T)), True)):
        want, got = ref_and_opt("GEMM", [column, w_op], (6,), dtype, transpose_b=tb)
        assert_dot_close(got, want, dtype, 7)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [
    dict(batch_a=0, batch_w=0, m=600, k=70, n=90, ta=False, tb=True, bias=True, vector=False),
    dict(batch_a=0, batch_w=0, m=1, k=2100, n=1000, ta=False, tb=True, bias=True, vector=False),
    dict(batch_a=0, batch_w=0, m=1, k=2100, n=1000, ta=False, tb=False, bias=True, vector=True),
    dict(batch_a=3, batch_w=3, m=100, k=64, n=200, ta=True, tb=False, bias=False, vector=False),
    dict(batch_a=0, batch_w=4, m=40, k=50, n=300, ta=False, tb=True, bias=True, vector=False),
], ids=["rows", "columns", "vector", "batch", "shared_a"])
def test_gemm_c_backend_parts_on_the_pool(shape, dtype, threads):
    """Large M is cut into row blocks, M = 1 into column blocks: the same result either way."""
    rng = np.random.default_rng(4)
    ins, out_shape = gemm_args(rng, dtype, **shape)
    want, got = ref_and_opt("GEMM", ins, out_shape, dtype, transpose_a=shape["ta"],
                            transpose_b=shape["tb"])
    assert_dot_close(got, want, dtype, shape["k"])


def test_gemm_c_backend_refuses_layouts_blas_cannot_take():
    x = np.zeros((4, 6), np.float32)
    every_other = nnc.Tensor(x).view((4, 3), 0, (6, 2))          # no unit stride at all
    w = np.ones((3, 2), np.float32)
    cmd = nnc.Cmd("GEMM")
    assert [b.name for b in nnc.cmd.command.cmd_backends_for(cmd, [every_other, w],
                                                      [np.zeros((4, 2), np.float32)])] \
        == ["CPU_NUMPY", "CPU_REF"]
    with pytest.raises(nnc.CommandError, match="CPU_OPT of GEMM does not accept"):
        nnc.cmd_exec(nnc.Cmd("GEMM", backend="CPU_OPT"), [every_other, w],
                     [np.zeros((4, 2), np.float32)])
    out = np.zeros((4, 2), np.float32)
    nnc.cmd_exec(cmd, [every_other, w], [out])                    # the default falls back
    np.testing.assert_array_equal(out, 0)
    # Called directly (no command check), a shape mismatch is refused before any write.
    backend = nnc.command_info("GEMM").backends[0]
    assert backend.is_c and backend.name == "CPU_OPT"
    for ins, outs in [
        ([np.ones((3, 4), np.float32), np.ones((5, 2), np.float32)], [np.zeros((3, 2))]),
        ([np.ones((3, 4), np.float32), np.ones((4, 2), np.float32)],
         [np.zeros((3, 3), np.float32)]),
        ([np.ones((2, 3, 4), np.float32), np.ones((3, 4, 2), np.float32)],
         [np.zeros((2, 3, 2), np.float32)]),
        ([np.ones((3, 4), np.float32), np.ones((4, 2), np.float32), np.ones(3, np.float32)],
         [np.zeros((3, 2), np.float32)]),
        ([np.ones((3, 4), np.float32)], [np.zeros((3, 2), np.float32)]),
    ]:
        before = outs[0].copy()
        with pytest.raises(nnc.CommandError, match="failed: INVALID"):
            backend.exec(nnc.Cmd("GEMM"), ins, outs)
        np.testing.assert_array_equal(outs[0], before)


# ---- MAX_POOL and AVG_POOL


@st.composite
def pool_cases(draw):
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    pad = (draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)),
           draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)))
    return dict(
        size=(kh, kw), stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))), padding=pad,
        h=draw(st.integers(max(1, kh - pad[0] - pad[2]), 9)),
        w=draw(st.integers(max(1, kw - pad[1] - pad[3]), 9)),
        c=draw(st.sampled_from([1, 3, 8])), batch=draw(st.sampled_from([(), (1,), (2,)])),
        kind=draw(st.sampled_from(["MAX_POOL", "AVG_POOL"])), include_pad=draw(st.booleans()),
        dtype=draw(st.sampled_from(["float32", "float64"])),
        x_slice=draw(st.booleans()), out_slice=draw(st.booleans()),
    )


def pool_out_shape(x_shape, size, stride, pad):
    h, w = x_shape[-3:-1]
    return (tuple(x_shape[:-3]) + ((h + pad[0] + pad[2] - size[0]) // stride[0] + 1,
                                   (w + pad[1] + pad[3] - size[1]) // stride[1] + 1)
            + (x_shape[-1],))


@settings(max_examples=120, deadline=None)
@given(case=pool_cases())
def test_pool_c_backend_matches_cpu_ref(case):
    dtype, kind = case["dtype"], case["kind"]
    x_shape = case["batch"] + (case["h"], case["w"], case["c"])
    x = np.random.default_rng(2).standard_normal(x_shape).astype(dtype)
    if case["x_slice"]:
        view = concat_slice(x_shape, dtype, extra=3, offset=1)
        view.numpy()[...] = x
        x = view
    params = dict(size=case["size"], stride=case["stride"], padding=case["padding"])
    if kind == "AVG_POOL":
        params["count_include_pad"] = case["include_pad"]
    out_shape = pool_out_shape(x_shape, case["size"], case["stride"], case["padding"])
    view = (lambda s: concat_slice(s, dtype)) if case["out_slice"] else None
    want, got = ref_and_opt(kind, [x], out_shape, dtype, view, **params)
    if kind == "MAX_POOL":
        np.testing.assert_array_equal(got, want)           # a max is exact
    else:
        assert_dot_close(got, want, dtype, case["size"][0] * case["size"][1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind, x_shape, params", [
    ("MAX_POOL", (2, 71, 69, 40), dict(size=3, stride=2)),                  # Inception stem
    ("AVG_POOL", (1, 35, 35, 96), dict(size=3, stride=1, padding=1)),       # Inception branch
    ("AVG_POOL", (2, 8, 8, 512), dict(size=8)),                             # global: channels
    ("AVG_POOL", (1, 7, 7, 1000), dict(size=7, count_include_pad=True)),
    ("MAX_POOL", (3, 40, 30, 5), dict(size=2, stride=(2, 1), padding=(1, 0, 1, 1))),
], ids=["stem", "branch", "global", "global_wide", "odd"])
def test_pool_c_backend_parts_on_the_pool(kind, x_shape, params, dtype, threads):
    x = np.random.default_rng(7).standard_normal(x_shape).astype(dtype)
    cmd = nnc.Cmd(kind, **params)
    out_shape = pool_out_shape(x_shape, cmd.params["size"], cmd.params["stride"],
                               cmd.params["padding"])
    want, got = ref_and_opt(kind, [x], out_shape, dtype, **params)
    if kind == "MAX_POOL":
        np.testing.assert_array_equal(got, want)
    else:
        assert_dot_close(got, want, dtype, int(np.prod(cmd.params["size"])))


def test_max_pool_c_backend_propagates_nan_and_ignores_padding():
    x = -np.arange(1.0, 17.0, dtype=np.float32).reshape(4, 4, 1)
    x[3, 3, 0] = np.nan
    out = np.zeros((2, 2, 1), np.float32)
    nnc.cmd_exec(nnc.Cmd("MAX_POOL", size=3, stride=2, padding=1, backend="CPU_OPT"), [x], [out])
    assert out[0, 0, 0] == -1 and out[0, 1, 0] == -2 and out[1, 0, 0] == -5
    assert math.isnan(out[1, 1, 0])


def test_pool_c_backend_refuses_bad_tensors():
    backend = [b for b in nnc.command_info("AVG_POOL").backends if b.name == "CPU_OPT"][0]
    cmd = nnc.Cmd("AVG_POOL", size=2)
    for ins, outs in [
        ([np.ones((4, 4, 3), np.float32)], [np.zeros((3, 3, 3), np.float32)]),  # wrong shape
        ([np.ones((4, 4, 3), np.float32)], [np.zeros((2, 2, 2), np.float32)]),  # channels
        ([np.ones((4, 4, 3), np.float32)], [np.zeros((2, 2, 3), np.float64)]),  # dtypes
        ([np.ones((2, 4, 4, 3), np.float32)], [np.zeros((1, 2, 2, 3), np.float32)]),  # batch
        ([np.ones((4, 4), np.float32)], [np.zeros((2, 2), np.float32)]),        # not NHWC
        ([np.ones((4, 4, 3), np.int32)], [np.zeros((2, 2, 3), np.int32)]),
    ]:
        before = outs[0].copy()
        with pytest.raises(nnc.CommandError, match="failed: INVALID"):
            backend.exec(cmd, ins, outs)
        np.testing.assert_array_equal(outs[0], before)
    with pytest.raises(nnc.CommandError, match="output 0 should have shape"):
        nnc.cmd_exec(nnc.Cmd("AVG_POOL", size=2, backend="CPU_OPT"),
                     [np.ones((4, 4, 3), np.float32)], [np.zeros((3, 3, 3), np.float32)])


# ---- MAX_POOL and AVG_POOL: pool_kernel.h at every ISA level this machine runs


def bits(a):
    """float32 values as their bit patterns: equal bits, not only equal values (NaN payloads,
    the sign of zero)."""
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


# Channel counts cover each variant's blocks: 4 vectors (AVX-512 64, AVX2 32, baseline 16),
# single vectors, the masked (or scalar) tail, and 1000 channels, whose 3x3 window is wider
# than L1 (walked one channel block at a time).
POOL_KERNEL_CASES = [
    ((1, 7, 9, 1), dict(size=3, stride=2, padding=1)),
    ((2, 6, 5, 3), dict(size=(2, 3), stride=(1, 2), padding=(1, 0, 0, 2))),
    ((1, 8, 8, 17), dict(size=3, stride=1, padding=1)),
    ((5, 4, 33), dict(size=2, stride=1)),
    ((1, 6, 7, 81), dict(size=3, stride=2, padding=(0, 1, 2, 1))),
    ((1, 2, 3, 17), dict(size=(4, 5), stride=1, padding=(1, 2, 1, 2))),   # window > input
    ((1, 5, 5, 33), dict(size=5, stride=5)),                               # global
    ((1, 5, 6, 1000), dict(size=3, stride=1, padding=1)),
    ((1, 3, 4, 1000), dict(size=3, stride=2, padding=(1, 1, 0, 0))),
    # ceil_mode: last windows past the end padding (their divisor with count_include_pad)
    ((1, 13, 13, 64), dict(size=3, stride=2, ceil_mode=True)),              # SqueezeNet
    ((2, 7, 9, 17), dict(size=3, stride=2, padding=1, ceil_mode=True)),
    ((1, 8, 6, 33), dict(size=2, stride=3, padding=(1, 1, 0, 1), ceil_mode=True)),
    ((1, 5, 6, 1000), dict(size=3, stride=2, ceil_mode=True)),
]


@pytest.mark.parametrize("x_shape, params", POOL_KERNEL_CASES,
                         ids=[f"c{s[-1]}_{i}" for i, (s, _) in enumerate(POOL_KERNEL_CASES)])
@pytest.mark.parametrize("kind", ["MAX_POOL", "AVG", "AVG_PAD"])
@pytest.mark.parametrize("views", [False, True], ids=["dense", "views"])
def test_pool_kernel_matches_cpu_ref_at_every_isa(kernel_isa, x_shape, params, kind, views):
    params = dict(params)
    if kind != "MAX_POOL":
        params["count_include_pad"] = kind == "AVG_PAD"
        kind = "AVG_POOL"
    x = np.random.default_rng(len(x_shape) + x_shape[-1]).standard_normal(x_shape)
    x = x.astype(np.float32)
    if views:                       # a channel slice of a wider buffer, in and out
        view = concat_slice(x_shape, "float32", extra=3, offset=1)
        view.numpy()[...] = x
        x = view
    cmd = nnc.Cmd(kind, **params)
    out_shape = pool_shape(cmd, x_shape)
    c = out_shape[-1]
    out_buf = nnc.Tensor(np.full(out_shape[:-1] + (c + 5,), -7.0, np.float32))
    strides = np.array(out_buf.numpy().strides) // 4

    def out_view(shape):            # channels 2..2+c of the buffer
        return out_buf.view(shape, 2, tuple(int(s) for s in strides))

    want, got = ref_and_opt(kind, [x], out_shape, "float32", out_view if views else None,
                            **params)
    if kind == "MAX_POOL":
        np.testing.assert_array_equal(got, want)
    else:
        assert_dot_close(got, want, "float32", int(np.prod(cmd.params["size"])))
    if views:                       # the channels around the slice are untouched
        around = np.concatenate([out_buf.numpy()[..., :2], out_buf.numpy()[..., 2 + c:]], -1)
        assert (around == -7.0).all()


def max_pool_sequential(x, size, stride, pad):
    """MAX_POOL as pool_kernel.h defines it, one float32 at a time: the window's real taps in
    row-major order from the first one's value; a tap replaces the running max when greater or
    NaN, so ties keep the first value and the first NaN wins with its payload."""
    kh, kw = size
    h, w, c = x.shape
    ho = (h + pad[0] + pad[2] - kh) // stride[0] + 1
    wo = (w + pad[1] + pad[3] - kw) // stride[1] + 1
    out = np.zeros((ho, wo, c), np.float32)
    for oh in range(ho):
        for ow in range(wo):
            r0, c0 = oh * stride[0] - pad[0], ow * stride[1] - pad[1]
            for ch in range(c):
                acc = None
                for i in range(max(r0, 0), min(r0 + kh, h)):
                    for j in range(max(c0, 0), min(c0 + kw, w)):
                        v = x[i, j, ch]
                        if acc is None or v > acc or v != v:
                            acc = v
                out[oh, ow, ch] = acc
    return out


def nan_with_payload(payload):
    return np.array([0x7FC00000 | payload], np.uint32).view(np.float32)[0]


@pytest.mark.parametrize("c", [1, 3, 17, 33, 70])
def test_max_pool_kernel_nan_and_ties_bit_for_bit_at_every_isa(kernel_isa, c):
    rng = np.random.default_rng(c)
    x = rng.standard_normal((7, 8, c)).astype(np.float32)
    # NaNs with distinct payloads (first tap of a window, middle, last, two in one window),
    # an inf meeting -inf (the NaN check's sum is NaN, the max is not), and signed zeros.
    x[0, 0, 0] = nan_with_payload(1)
    x[2, 3, c // 2] = nan_with_payload(2)
    x[2, 4, c // 2] = nan_with_payload(3)
    x[6, 7, c - 1] = nan_with_payload(4)
    x[4, 1, :] = np.inf
    x[4, 2, :] = -np.inf
    x[5, 5:, :] = -0.0
    x[6, 5:, :] = 0.0
    x[5, 6, :] = 0.0
    for size, stride, pad in [((3, 3), (2, 2), (1, 1, 1, 1)), ((2, 2), (1, 1), (0, 0, 0, 0)),
                              ((3, 2), (1, 2), (2, 1, 0, 1))]:
        want = max_pool_sequential(x, size, stride, pad)
        got = np.full(want.shape, 7.0, np.float32)
        nnc.cmd_exec(nnc.Cmd("MAX_POOL", size=size, stride=stride, padding=pad,
                             backend="CPU_OPT"), [x], [got])
        np.testing.assert_array_equal(bits(got), bits(want))
        assert np.isnan(got).any()
        ref = np.full(want.shape, 7.0, np.float32)
        nnc.cmd_exec(nnc.Cmd("MAX_POOL", size=size, stride=stride, padding=pad,
                             backend="CPU_REF"), [x], [ref])
        np.testing.assert_array_equal(got, ref)          # NaN where CPU_REF has NaN


@pytest.mark.parametrize("kind, x_shape, params", [
    ("AVG_POOL", (1, 35, 35, 96), dict(size=3, stride=1, padding=1)),      # row parts
    ("AVG_POOL", (2, 8, 8, 520), dict(size=8)),                             # channel parts
    ("MAX_POOL", (1, 17, 17, 300), dict(size=3, stride=2)),
    ("AVG_POOL", (1, 9, 9, 1100), dict(size=3, stride=1, padding=1, count_include_pad=True)),
], ids=["rows", "channels", "max", "blockwise"])
def test_pool_kernel_same_bits_at_every_isa_and_thread_setting(kind, x_shape, params):
    x = np.random.default_rng(3).standard_normal(x_shape).astype(np.float32)
    cmd = nnc.Cmd(kind, backend="CPU_OPT", **params)
    out_shape = pool_out_shape(x_shape, cmd.params["size"], cmd.params["stride"],
                               cmd.params["padding"])
    results = {}
    old = isa.get_cpu_isa()
    try:
        for level in isa.supported_isas():
            isa.set_cpu_isa(level)
            for threads in (1, 2):
                nnc.set_intra_op_threads(threads)
                got = np.full(out_shape, np.nan, np.float32)
                nnc.cmd_exec(cmd, [x], [got])
                results[level, threads] = bits(got)
    finally:
        isa.set_cpu_isa(old)
        nnc.set_intra_op_threads(None)
    first = next(iter(results.values()))
    for key, got in results.items():
        np.testing.assert_array_equal(got, first, err_msg=str(key))


# ---- ADD, MUL and CLAMP


@st.composite
def binary_cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    form = draw(st.sampled_from(["full", "row", "scalar", "none"]))
    other = {"full": shape, "row": (1,) * draw(st.integers(0, 2)) + shape[-1:],
             "scalar": (1,) * draw(st.integers(0, 3)), "none": None}[form]
    return dict(shape=shape, other=other, swap=draw(st.booleans()),
                name=draw(st.sampled_from(["ADD", "MUL"])),
                p=draw(st.sampled_from([1.0, -0.5, 2.0])),
                q=draw(st.sampled_from([1.0, 0.25])),
                dtype=draw(st.sampled_from(["float32", "float64"])),
                inplace=draw(st.booleans()))


@settings(max_examples=120, deadline=None)
@given(case=binary_cases())
def test_add_mul_c_backends_match_cpu_ref(case):
    rng = np.random.default_rng(9)
    dtype, name = case["dtype"], case["name"]
    a = rng.standard_normal(case["shape"]).astype(dtype)
    params = {"p": case["p"]}
    if case["other"] is None:
        ins = [a]
        if name == "ADD":
            params["q"] = 0.0
    else:
        b = rng.standard_normal(case["other"]).astype(dtype)
        ins = [b, a] if case["swap"] else [a, b]
        if name == "ADD":
            params["q"] = case["q"]
    out_shape = np.broadcast_shapes(*[x.shape for x in ins])
    assert [x.name for x in nnc.cmd.command.cmd_backends_for(nnc.Cmd(name, **params), ins,
                                                     [np.zeros(out_shape, dtype)])][0] \
        == "CPU_OPT"
    want = np.zeros(out_shape, dtype)
    nnc.cmd_exec(nnc.Cmd(name, backend="CPU_REF", **params), ins, [want])
    fulls = [x for x in ins if x.shape == out_shape]      # in place needs the exact shape
    if case["inplace"] and fulls:
        full = fulls[0]
        target = nnc.Tensor(full)
        ins = [target if x is full else x for x in ins]
        nnc.cmd_exec(nnc.Cmd(name, backend="CPU_OPT", **params), ins, [target])
        got = full
    else:
        got = np.full(out_shape, np.nan, dtype)
        nnc.cmd_exec(nnc.Cmd(name, backend="CPU_OPT", **params), ins, [got])
    eps = float(np.finfo(dtype).eps)
    np.testing.assert_allclose(got, want, rtol=4 * eps, atol=8 * eps)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, other", [
    ("ADD", "full"), ("ADD", "row"), ("MUL", "row"), ("MUL", "scalar"), ("CLAMP", None),
])
def test_elementwise_c_backends_parts_on_the_pool(name, other, dtype, threads):
    """Over 2**16 elements the loops are cut into parts (whole rows for a row operand)."""
    rng = np.random.default_rng(10)
    shape = (3, 57, 29, 24)                                   # 119,016 elements
    a = rng.standard_normal(shape).astype(dtype)
    if name == "CLAMP":
        ins, params = [a], dict(min=-0.5, max=0.75)
    else:
        b = rng.standard_normal({"full": shape, "row": (24,), "scalar": (1, 1)}[other])
        ins, params = [a, b.astype(dtype)], ({"p": 0.5, "q": 2.0} if name == "ADD" else {})
    want, got = ref_and_opt(name, ins, shape, dtype, **params)
    eps = float(np.finfo(dtype).eps)
    np.testing.assert_allclose(got, want, rtol=4 * eps, atol=8 * eps)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lo, hi", [(0.0, 6.0), (math.nan, 0.5), (-0.5, math.nan),
                                    (math.nan, math.nan), (1.0, 1.0)])
def test_clamp_c_backend_bounds_nan_and_in_place(lo, hi, dtype):
    x = np.array([-7.0, -0.5, 0.0, 0.3, 0.5, 5.9, 6.0, 8.0, np.nan, np.inf, -np.inf], dtype)
    want, got = ref_and_opt("CLAMP", [x], x.shape, dtype, min=lo, max=hi)
    np.testing.assert_array_equal(got, want)
    t = nnc.Tensor(x.copy())
    nnc.cmd_exec(nnc.Cmd("CLAMP", min=lo, max=hi, backend="CPU_OPT"), [t], [t])
    np.testing.assert_array_equal(t.numpy(), want)


def test_elementwise_c_backends_refuse_what_they_cannot_take():
    f = np.float32
    # A middle-axis broadcast and strided views go to CPU_REF by default.
    a, b = np.ones((2, 3, 4), f), np.ones((2, 1, 4), f)
    taking = nnc.cmd.command.cmd_backends_for(nnc.Cmd("ADD"), [a, b], [np.zeros((2, 3, 4), f)])
    assert [x.name for x in taking] == ["CPU_REF"]
    out = np.zeros((2, 3, 4), f)
    nnc.cmd_exec(nnc.Cmd("ADD"), [a, b], [out])
    np.testing.assert_array_equal(out, 2)
    with pytest.raises(nnc.CommandError, match="CPU_OPT of MUL does not accept"):
        nnc.cmd_exec(nnc.Cmd("MUL", backend="CPU_OPT"), [a, b], [out])
    strided = nnc.Tensor(np.ones(8, f)).view((4,), 0, (2,))
    with pytest.raises(nnc.CommandError, match="CPU_OPT of CLAMP does not accept"):
        nnc.cmd_exec(nnc.Cmd("CLAMP", min=0.0, backend="CPU_OPT"), [strided],
                     [np.zeros(4, f)])
    # Called directly, shapes the command check would refuse are refused before any write.
    for name, ins, outs in [
        ("ADD", [np.ones((2, 3), f), np.ones((3, 2), f)], [np.zeros((2, 3), f)]),
        ("ADD", [np.ones((2, 3), f), np.ones(2, f)], [np.zeros((2, 3), f)]),
        ("MUL", [np.ones((2, 3), f), np.ones((2, 3), f)], [np.zeros((3, 2), f)]),
        ("MUL", [np.ones(6, f)], [np.zeros((2, 3), f)]),
        ("ADD", [np.ones((2, 3), f), np.ones((2, 3))], [np.zeros((2, 3), f)]),
        ("CLAMP", [np.ones(6, f)], [np.zeros(5, f)]),
        ("CLAMP", [np.ones(6, f), np.ones(6, f)], [np.zeros(6, f)]),
    ]:
        backend = [x for x in nnc.command_info(name).backends if x.name == "CPU_OPT"][0]
        before = outs[0].copy()
        with pytest.raises(nnc.CommandError, match="failed: INVALID"):
            backend.exec(nnc.Cmd(name), ins, outs)
        np.testing.assert_array_equal(outs[0], before)


def test_command_scalars_reach_the_c_parameters():
    """ADD's q and CLAMP's max travel in nnc_cmd_param_t.b, AVG_POOL's flag in its own field."""
    x = np.full((2, 2), 3.0, np.float32)
    out = np.zeros((2, 2), np.float32)
    nnc.cmd_exec(nnc.Cmd("ADD", p=2.0, q=-1.0, backend="CPU_OPT"), [x, np.ones(2, np.float32)],
                 [out])
    np.testing.assert_array_equal(out, 5.0)
    nnc.cmd_exec(nnc.Cmd("CLAMP", min=-1.0, max=2.5, backend="CPU_OPT"), [x], [out])
    np.testing.assert_array_equal(out, 2.5)
    ones = np.ones((3, 3, 1), np.float32)
    avg = np.zeros((2, 2, 1), np.float32)
    nnc.cmd_exec(nnc.Cmd("AVG_POOL", size=2, stride=2, padding=(1, 1, 0, 0),
                         count_include_pad=True, backend="CPU_OPT"), [ones], [avg])
    np.testing.assert_array_equal(avg[..., 0], [[0.25, 0.5], [0.5, 1.0]])


# ---- a scheduled graph of these nodes runs as C tasks only


def test_scheduled_graph_of_these_commands_runs_only_c_tasks(tmp_path):
    """A residual block's worth of nodes on two streams: every node a C task (kind 1), so no
    worker takes the GIL for them; results equal a sequential run's."""
    rng = np.random.default_rng(11)
    f = np.float32
    x = nnc.Tensor(rng.standard_normal((1, 9, 9, 16)).astype(f))
    pooled = nnc.Tensor.zeros((1, 4, 4, 16), dtype="float32")
    avg = nnc.Tensor.zeros((1, 9, 9, 16), dtype="float32")
    summed = nnc.Tensor.zeros((1, 9, 9, 16), dtype="float32")
    scale = nnc.Tensor(rng.standard_normal(16).astype(f))
    scaled = nnc.Tensor.zeros((1, 9, 9, 16), dtype="float32")
    gap = nnc.Tensor.zeros((1, 1, 1, 16), dtype="float32")
    w = nnc.Tensor(rng.standard_normal((10, 16)).astype(f))
    bias = nnc.Tensor(rng.standard_normal(10).astype(f))
    logits = nnc.Tensor.zeros((1, 10), dtype="float32")
    g = nnc.Graph()
    g.exec(nnc.Cmd("MAX_POOL", size=3, stride=2), [x], [pooled], name="max")
    ap = g.exec(nnc.Cmd("AVG_POOL", size=3, stride=1, padding=1), [x], [avg], name="avg")
    add = g.exec(nnc.Cmd("ADD"), [x, avg], [summed], name="residual")
    mul = g.exec(nnc.Cmd("MUL"), [summed, scale], [scaled], name="scale")
    relu6 = g.exec(nnc.Cmd("CLAMP", min=0.0, max=6.0), [scaled], [scaled], name="relu6")
    head = g.exec(nnc.Cmd("AVG_POOL", size=9), [scaled], [gap], name="gap")
    fc = g.exec(nnc.Cmd("GEMM", transpose_b=True),
                [gap.view((1, 16), 0), w, bias], [logits], name="fc")
    for a, b in [(ap, add), (add, mul), (mul, relu6), (relu6, head), (head, fc)]:
        g.concat(a, b)
    g.run()
    want = [t.numpy().copy() for t in (pooled, logits)]
    for t in (pooled, avg, summed, scaled, gap, logits):
        t.numpy()[...] = 0
    nnc.static_schedule(g, max_streams=2)
    s = nnc.Stream()
    with nnc.trace(tmp_path / "t.json") as tr:
        g.run(stream=s)
        s.wait()
    kinds = {node: kind for _, events in tr.events
             for _t0, _t1, kind, node, _label, _rec in events if node >= 0}
    assert len(kinds) == 7 and set(kinds.values()) == {1}, kinds      # 1: TASK_C
    np.testing.assert_allclose(pooled.numpy(), want[0], rtol=0, atol=0)
    np.testing.assert_allclose(logits.numpy(), want[1], rtol=1e-6, atol=1e-6)


def test_inception_like_concat_of_pool_and_gemm_branches_in_one_buffer():
    """Branches write channel slices of one concat buffer (zero-copy), as Inception's do."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 6, 6, 8)).astype(np.float32)
    buf = nnc.Tensor(np.zeros((2, 6, 6, 20), np.float32))
    strides = (6 * 6 * 20, 6 * 20, 20, 1)
    left = buf.view((2, 6, 6, 8), 0, strides)
    w = rng.standard_normal((8, 12)).astype(np.float32)
    nnc.cmd_exec(nnc.Cmd("AVG_POOL", size=3, stride=1, padding=1), [x], [left])
    flat_out = buf.view((72, 12), 8, (20, 1))                # GEMM rows: pixels, ldc = 20
    nnc.cmd_exec(nnc.Cmd("GEMM"), [x.reshape(72, 8), w], [flat_out])
    want_left = np.zeros((2, 6, 6, 8), np.float32)
    nnc.cmd_exec(nnc.Cmd("AVG_POOL", size=3, stride=1, padding=1, backend="CPU_REF"), [x],
                 [want_left])
    got = buf.numpy()
    np.testing.assert_allclose(got[..., :8], want_left, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[..., 8:], (x.reshape(72, 8) @ w).reshape(2, 6, 6, 12),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["GEMM", "MAX_POOL", "AVG_POOL", "ADD", "MUL", "CLAMP"])
def test_default_backend_is_the_c_one(name):
    first = [b for b in nnc.command_info(name).backends if b.device == "cpu"][0]
    assert first.name == "CPU_OPT" and first.is_c and first.release_gil


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 3, 1, 40), (4, 2, 24, 1), (33, 2, 3, 35)])
def test_transpose_c_backend_equals_numpy_for_every_permutation_it_accepts(dtype, shape):
    """TRANSPOSE's C backend reads the permutation from the Cmd's param: every permutation of
    4 axes that is a batched 2-D transpose (size-1 axes dropped, adjacent ones merged), as perm
    and as axes=(i, j), equals NumPy's; called directly on any other it refuses, writing
    nothing."""
    import itertools

    from nnc.cmd.transpose import batched_2d

    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    c_exec = next(b for b in nnc.command_info("TRANSPOSE").backends if b.name == "CPU_OPT")
    assert c_exec.is_c
    ran = refused = 0
    params = [{"perm": p} for p in itertools.permutations(range(4))]
    params += [{"axes": a} for a in [(1, 3), (-1, 0), (2, 2), (-2, -1)]]
    for p in params:
        perm = p.get("perm")
        if perm is None:
            perm = list(range(4))
            i, j = (a % 4 for a in p["axes"])
            perm[i], perm[j] = j, i
        y = np.full([shape[k] for k in perm], np.nan, dtype)
        if batched_2d(shape, tuple(perm)) is not None:
            nnc.cmd_exec(nnc.Cmd("TRANSPOSE", backend="CPU_OPT", **p), [x], [y])
            np.testing.assert_array_equal(y, np.transpose(x, perm))
            ran += 1
        else:
            with pytest.raises(nnc.NNCError):
                c_exec.exec(nnc.Cmd("TRANSPOSE", **p), [x], [y])
            assert np.isnan(y).all()
            refused += 1
    assert ran >= 8
    assert refused >= 1 or 1 in shape


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
def test_data_transfer_c_backend_copies_strided_views_and_refuses_overlapping_ones(dtype):
    """DATA_TRANSFER's CPU_OPT copies between strided views of one shape (a channel slice of
    an NHWC Concat buffer: runs of the last axis; a reversed or column view: element by element)
    and nothing else of the buffer; called directly on views of one buffer that overlap, it
    refuses, writing nothing."""
    x = (np.arange(2 * 5 * 7 * 9) % 251).astype(dtype).reshape(2, 5, 7, 9)   # never 255
    cases = [((np.s_[:, :, :, 2:6]), np.s_[:, :, :, 4:8]),       # channel slices
             ((np.s_[:, ::-1, :, 1:5]), np.s_[:, :, :, 8:12]),   # a reversed axis
             ((np.s_[..., 3]), np.s_[..., 0]),                   # a column: stride 9, 12
             ((np.s_[:, 1:3]), np.s_[:, 2:4, :, :9])]
    c_opt = next(b for b in nnc.command_info("DATA_TRANSFER").backends if b.name == "CPU_OPT")
    for src, dst in cases:
        out = np.full((2, 5, 7, 12), 255, dtype)
        sv, dv = x[src], out[dst]
        g = nnc.Graph()
        e = g.exec(nnc.Cmd("DATA_TRANSFER"), [_view_of(x, sv)], [_view_of(out, dv)])
        assert e.backend == "CPU_OPT"
        g.run()
        np.testing.assert_array_equal(dv, sv)
        assert np.count_nonzero(out != 255) == sv.size     # nothing outside the view
    # Overlapping views of one buffer (nnc's graphs refuse them): called directly, the C
    # backend refuses them too, writing nothing.
    buf = (np.arange(40) % 251).astype(dtype)
    t = nnc.Tensor(buf)
    a, b = t.view((4, 5), offset=0, strides=(10, 1)), t.view((4, 5), offset=3, strides=(10, 1))
    before = buf.copy()
    with pytest.raises(nnc.NNCError):
        c_opt.exec(nnc.Cmd("DATA_TRANSFER"), [a], [b])
    np.testing.assert_array_equal(buf, before)


def _view_of(base, v):
    """The nnc view of ``base``'s memory that the NumPy view ``v`` of it is."""
    offset = (v.__array_interface__["data"][0] - base.__array_interface__["data"][0])
    return nnc.Tensor(base).view(v.shape, offset=offset // v.itemsize,
                                 strides=tuple(s // v.itemsize for s in v.strides))


# ---- SOFTMAX


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 3, 4, 8, 16, 17, 33, 197, 4099])
def test_softmax_c_backend_matches_cpu_ref_at_every_isa(kernel_isa, dtype, n):
    # Row widths below, at and past each vector width (4, 8, 16 lanes) exercise the vector
    # max's lanes and its scalar tail; a row's maximum placed in the tail and in the first lane.
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((5, n)) * 8).astype(dtype)
    x[1, -1] = 40
    x[2, 0] = 40
    ref = np.empty_like(x)
    nnc.cmd_exec(nnc.Cmd("SOFTMAX", backend="CPU_REF"), [x], [ref])
    got = np.full_like(x, np.nan)
    nnc.cmd_exec(nnc.Cmd("SOFTMAX", backend="CPU_OPT"), [x], [got])
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * 1e-3)
    np.testing.assert_allclose(got.sum(axis=1), 1, rtol=10 * tol)
    # in place: the output is the input
    y = x.copy()
    nnc.cmd_exec(nnc.Cmd("SOFTMAX", backend="CPU_OPT"), [y], [y])
    np.testing.assert_array_equal(y, got)


def test_softmax_c_backend_nan_makes_its_row_nan_at_every_isa(kernel_isa):
    x = np.zeros((3, 37), np.float32)
    x[0, 0] = np.nan     # the first element, the max's start
    x[1, 20] = np.nan    # inside a vector of lanes
    x[2, 36] = np.nan    # in the scalar tail
    got = np.zeros_like(x)
    nnc.cmd_exec(nnc.Cmd("SOFTMAX", backend="CPU_OPT"), [x], [got])
    assert np.isnan(got).all()
    ok = np.zeros((1, 37), np.float32)
    nnc.cmd_exec(nnc.Cmd("SOFTMAX", backend="CPU_OPT"), [ok], [ok])
    np.testing.assert_allclose(ok, 1 / 37, rtol=1e-6)
