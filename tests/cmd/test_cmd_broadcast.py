"""ADD, MUL (NNC's broadcasting), CLAMP and TRANSPOSE: CPU_REF is the definition, CPU_OPT (C
loops) must match it; bad shapes and parameters raise CommandError."""

import math

import numpy as np
import pytest

import nnc


def run(name, backend, ins, out_shape, dtype="float32", **params):
    out = np.full(out_shape, np.nan if np.dtype(dtype).kind == "f" else -1, dtype)
    cmd = nnc.Cmd(name, backend=backend, **params)
    nnc.cmd_exec(cmd, [None if x is None else nnc.Tensor(x) for x in ins], [nnc.Tensor(out)])
    return out


RNG = np.random.default_rng(0)


def run_backends(name, ins, out_shape, dtype="float32", **params):
    """{backend: output} for every backend of ``name`` that accepts these tensors."""
    got = {}
    for backend in nnc.backends(name):
        try:
            got[backend] = run(name, backend, ins, out_shape, dtype, **params)
        except nnc.CommandError as e:
            assert "does not accept" in str(e) and backend != "CPU_REF"
    return got


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("a_shape,b_shape,c_loop", [
    ((2, 3, 4, 5), (2, 3, 4, 5), True),     # same shape
    ((2, 3, 4, 5), (5,), True),             # channel vector (NHWC per-channel constant)
    ((2, 3, 4, 5), (1, 1, 1, 5), True),
    ((5,), (2, 3, 4, 5), True),             # the full tensor second
    ((2, 3, 4, 5), (3, 1, 1), True),        # a middle axis (NCHW per-channel constant)
    ((1, 3, 1, 1), (2, 3, 4, 5), True),     # ... first, so p and q swap
    ((2, 3, 4, 5), (1, 3, 4, 1), True),     # a block of middle axes
    ((2, 3, 4, 5), (2, 1, 1, 1), True),     # a leading axis
    ((2, 3, 4, 5), (3, 1, 5), False),       # two blocks: CPU_REF only
    ((2, 1, 4, 1), (1, 3, 1, 5), False),    # both stretch
    ((2, 3), (), True),                     # a scalar
])
def test_add_mul_broadcast_match_numpy(dtype, a_shape, b_shape, c_loop):
    a = RNG.standard_normal(a_shape).astype(dtype)
    b = RNG.standard_normal(b_shape).astype(dtype)
    shape = np.broadcast_shapes(a_shape, b_shape)
    tol = 2e-3 if dtype == "float16" else 1e-6
    adds = run_backends("ADD", [a, b], shape, dtype, p=0.5, q=-2.0)
    muls = run_backends("MUL", [a, b], shape, dtype, p=3.0)
    # The C loop takes float32/64 when one operand is whole and the other one block of axes.
    c_loop = c_loop and dtype != "float16"
    assert set(adds) == set(muls) == ({"CPU_REF", "CPU_OPT"} if c_loop else {"CPU_REF"})
    for y in adds.values():
        np.testing.assert_allclose(y, 0.5 * a.astype(np.float64) - 2.0 * b, rtol=tol, atol=tol)
    for y in muls.values():
        np.testing.assert_allclose(y, 3.0 * a.astype(np.float64) * b, rtol=tol, atol=tol)


def test_add_mul_default_backend_uses_c_loop_for_channel_broadcast():
    a = RNG.standard_normal((1, 7, 7, 64)).astype(np.float32)
    b = RNG.standard_normal(64).astype(np.float32)
    g = nnc.Graph()
    y = nnc.Tensor.empty(a.shape, dtype="float32")
    e = g.exec(nnc.Cmd("ADD"), [nnc.Tensor(a), nnc.Tensor(b)], [y])
    g.run()
    assert e.cmd.backend == "CPU_OPT"
    np.testing.assert_allclose(y.numpy(), a + b, rtol=1e-6)


def test_add_strided_views_and_in_place():
    buf = RNG.standard_normal((2, 4, 4, 8)).astype(np.float32)
    x = nnc.Tensor(buf)
    view = x.view((2, 4, 4, 3), offset=2, strides=(128, 32, 8, 1))
    before = buf[..., 2:5].copy()
    bias = np.arange(3, dtype=np.float32)
    nnc.cmd_exec(nnc.Cmd("ADD"), [view, nnc.Tensor(bias)], [view])
    np.testing.assert_allclose(buf[..., 2:5], before + bias, rtol=1e-6)


def test_add_without_b_scales_and_rejects_q():
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    got = run_backends("ADD", [a], a.shape, p=2.0, q=0.0)
    assert len(got) == 2
    for y in got.values():
        np.testing.assert_allclose(y, 2 * a, rtol=1e-6)
    with pytest.raises(nnc.CommandError, match="q=0"):
        run("ADD", None, [a], a.shape)


def test_binary_bad_shapes_and_params():
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(nnc.CommandError, match="do not broadcast"):
        run("ADD", None, [a, np.zeros(4, np.float32)], (2, 3))
    with pytest.raises(nnc.CommandError, match="broadcast shape"):
        run("MUL", None, [a, np.zeros(3, np.float32)], (2, 4))
    with pytest.raises(nnc.CommandError, match="mixed dtypes"):
        run("ADD", None, [a, np.zeros(3, np.float64)], (2, 3))
    with pytest.raises(nnc.CommandError, match="floating-point"):
        run("MUL", None, [np.zeros(3, np.int32), np.zeros(3, np.int32)], (3,), "int32")
    with pytest.raises(nnc.CommandError, match="unknown parameters"):
        nnc.Cmd("MUL", q=1.0)
    with pytest.raises(nnc.CommandError, match="finite"):
        nnc.Cmd("ADD", p=math.inf)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("lo,hi", [(0.0, 6.0), (math.nan, 0.5), (-0.5, math.nan),
                                   (math.nan, math.nan)])
def test_clamp(dtype, lo, hi):
    x = (RNG.standard_normal((3, 50)) * 4).astype(dtype)
    x[0, 0] = np.nan
    want = x.copy()
    if not math.isnan(lo):
        want = np.maximum(want, lo)
    if not math.isnan(hi):
        want = np.minimum(want, hi)
    got = run_backends("CLAMP", [x], x.shape, dtype, min=lo, max=hi)
    assert len(got) == (1 if dtype == "float16" else 2)
    for y in got.values():
        np.testing.assert_array_equal(y, want)


def test_clamp_bad_params():
    with pytest.raises(nnc.CommandError, match="greater than max"):
        nnc.Cmd("CLAMP", min=1.0, max=0.0)
    with pytest.raises(nnc.CommandError, match="number or NaN"):
        nnc.Cmd("CLAMP", min="low")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("shape,params", [
    ((2, 3, 5, 7), {"perm": (0, 2, 3, 1)}),   # NCHW -> NHWC
    ((2, 5, 7, 3), {"perm": (0, 3, 1, 2)}),   # NHWC -> NCHW
    ((1, 3, 5, 7), {"perm": (0, 2, 3, 1)}),
    ((33, 65), {"axes": (0, 1)}),             # NNC's swap of two axes
    ((2, 3, 4), {"axes": (0, -1)}),
    ((2, 3, 4, 5), {"perm": (3, 1, 0, 2)}),   # not a batched 2-D transpose: CPU_REF
])
def test_transpose(dtype, shape, params):
    x = RNG.standard_normal(shape).astype(dtype)
    cmd = nnc.Cmd("TRANSPOSE", **params)
    from nnc.cmd.transpose import permutation

    perm = permutation(cmd, len(shape))
    want = np.transpose(x, perm)
    got = run_backends("TRANSPOSE", [x], want.shape, dtype, **params)
    batched = params.get("perm") != (3, 1, 0, 2) and params.get("axes") != (0, -1) \
        and dtype != "int32"
    assert len(got) == (2 if batched else 1)
    for y in got.values():
        np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("rows,cols", [
    (1, 5), (3, 70), (4, 4), (7, 9), (8, 8), (9, 33), (32, 32), (33, 65), (64, 100), (70, 64),
    (300, 40), (523, 17),                       # more than one tile of 256 rows x 16 columns
    (2, 8), (2, 17), (3, 16), (3, 1000), (5, 43), (6, 24), (8, 3), (17, 2), (1000, 3), (43, 5),
    (9, 7), (16, 6),                            # 2-7 rows or columns: 8 at a time
])
def test_transpose_kernel_levels(kernel_isa, rows, cols):
    """transpose_kernel.h's register blocks (8 x 8 AVX2, 4 x 4 SSE2) and their edges, at every
    ISA level, batched: the bits of np.transpose, NaN payloads and infinities included."""
    x = RNG.standard_normal((3, rows, cols)).astype(np.float32)
    bits = x.view(np.uint32)
    bits.flat[::7] = 0x7FC01234                 # a NaN with a payload
    x.flat[1::11] = np.inf
    want = np.ascontiguousarray(np.transpose(x, (0, 2, 1)))
    got = run("TRANSPOSE", "CPU_OPT", [x], want.shape, perm=(0, 2, 1))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    empty = np.zeros((2, 0, cols), np.float32)
    assert run("TRANSPOSE", "CPU_OPT", [empty], (2, cols, 0), perm=(0, 2, 1)).size == 0


@pytest.mark.parametrize("shape", [(3, 3, 1000), (2, 1000, 3), (1, 300, 40), (4, 33, 65),
                                   (5, 7, 9), (1, 2, 17), (1, 523, 17), (1, 17, 523)])
def test_transpose_cut_into_parts_gives_every_value_in_its_place(kernel_isa, shape):
    """A float32 transpose cut over the pool's threads (every size cut: _tune(0)) by ranges of
    rows or columns, batched or not, at pool widths 2 and 3: NumPy's bits, NaN payloads
    included; and a network's input (224 x 224 x 3 to NHWC) at the default size rule."""
    from nnc.cmd.transpose import cpu_opt as transpose_opt

    x = RNG.standard_normal(shape).astype(np.float32)
    x.view(np.uint32).flat[::5] = 0x7FC04321
    want = np.ascontiguousarray(np.transpose(x, (0, 2, 1)))
    size = nnc.get_num_threads()
    old = transpose_opt._tune(0)
    try:
        for width in (2, 3):
            nnc.set_num_threads(width)
            got = run("TRANSPOSE", "CPU_OPT", [x], want.shape, perm=(0, 2, 1))
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        transpose_opt._tune(old)
        image = RNG.standard_normal((1, 3, 224, 224)).astype(np.float32)
        got = run("TRANSPOSE", "CPU_OPT", [image], (1, 224, 224, 3), perm=(0, 2, 3, 1))
        np.testing.assert_array_equal(got, image.transpose(0, 2, 3, 1))
    finally:
        transpose_opt._tune(old)
        nnc.set_num_threads(size)


def test_transpose_bad_params():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(nnc.CommandError, match="exactly one"):
        nnc.Cmd("TRANSPOSE")
    with pytest.raises(nnc.CommandError, match="exactly one"):
        nnc.Cmd("TRANSPOSE", axes=(0, 1), perm=(1, 0))
    with pytest.raises(nnc.CommandError, match="swaps two"):
        nnc.Cmd("TRANSPOSE", axes=(0, 1, 2))
    with pytest.raises(nnc.CommandError, match="not a permutation"):
        run("TRANSPOSE", None, [x], (3, 2), perm=(0, 0))
    with pytest.raises(nnc.CommandError, match="out of range"):
        run("TRANSPOSE", None, [x], (3, 2), axes=(0, 2))
    with pytest.raises(nnc.CommandError, match="should have shape"):
        run("TRANSPOSE", None, [x], (2, 3), perm=(1, 0))
