"""CONVOLUTION's fused HARD_SWISH and SWISH activations (activation="hard_swish" / "swish"): CPU_OPT
at every ISA level against CPU_REF, and bit for bit against the convolution followed by the
element-wise command (the epilogue runs that command's own per-element function); every path
(packed tiles, pointwise, grouped, depthwise, the channel split, empty sums, float64), with a
residual, NaN, infinities and large values; the backends that cannot fuse them refuse."""

import numpy as np
import pytest

import nnc
from nnc.cmd.convolution import conv_shape
from nnc.cmd.elementwise.activation import hard_swish64, swish64

ACTS = {"hard_swish": ("HARD_SWISH", hard_swish64), "swish": ("SWISH", swish64)}

CASES = [
    ((2, 9, 8, 5), (37, 3, 3, 5), dict(padding=1)),                      # packed tiles, edges
    ((1, 7, 9, 6), (16, 3, 3, 3), dict(padding=1, groups=2, stride=2)),  # grouped, strided
    ((2, 5, 6, 7), (40, 1, 1, 7), {}),                                   # pointwise
    ((2, 9, 8, 21), (21, 3, 3, 1), dict(padding=1, groups=21)),          # depthwise, tails
    ((1, 6, 6, 19), (19, 5, 5, 1), dict(padding=2, groups=19, stride=2)),  # depthwise 5x5
    ((1, 4, 4, 24), (72, 3, 3, 24), dict(padding=1)),                    # few pixels
]


def _run(backend, x, w, b, r, out, threads=None, **params):
    ins = [x, w, b] if r is None else [x, w, b, r]
    if threads is not None:
        nnc.set_intra_op_threads(threads)
    try:
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=backend, **params), ins, [out])
    finally:
        if threads is not None:
            nnc.set_intra_op_threads(None)
    return out


def _out_shape(cmd, xs, ws):
    return conv_shape(cmd, xs, ws)


def _operands(xs, ws, dtype, seed=4):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(xs) * 2).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)
    return x, w, b, rng


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("xs, ws, params", CASES)
def test_fused_activation_is_conv_then_the_command_bit_for_bit(kernel_isa, xs, ws, params, act,
                                                               residual):
    """float32 CPU_OPT: the fused convolution's bits are those of the unfused convolution then
    the element-wise command's CPU_OPT at the same level, at 1 and 2 threads; both within the
    dot-product tolerance of CPU_REF (the float64 definition)."""
    x, w, b, rng = _operands(xs, ws, np.float32)
    oshape = _out_shape(nnc.Cmd("CONVOLUTION", **params), xs, ws)
    r = rng.standard_normal(oshape).astype(np.float32) if residual else None
    plain = _run("CPU_OPT", x, w, b, r, np.full(oshape, np.nan, np.float32), **params)
    nnc.cmd_exec(nnc.Cmd(ACTS[act][0], backend="CPU_OPT"), [plain], [plain])
    for threads in (1, 2):
        fused = _run("CPU_OPT", x, w, b, r, np.full(oshape, np.nan, np.float32), threads,
                     activation=act, **params)
        np.testing.assert_array_equal(fused.view(np.int32), plain.view(np.int32))
    ref = _run("CPU_REF", x, w, b, r, np.full(oshape, np.nan, np.float32), activation=act,
               **params)
    k = ws[1] * ws[2] * ws[3]
    np.testing.assert_allclose(fused, ref, rtol=1e-5, atol=k * 4e-6)
    assert not np.isnan(fused).any()


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("xs, ws, groups", [((1, 9, 9, 1), (35, 1, 1, 1), 1),
                                            ((1, 3, 3, 27), (27, 1, 1, 1), 27)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_values(kernel_isa, act, xs, ws, groups, dtype):
    """A 1x1 convolution of weight 1 (the GEMM tiles over one input channel; depthwise) passes x
    to the activation unchanged: NaN stays NaN, -inf gives -0 (no NaN), +inf gives +inf, large
    values their limits, on CPU_OPT and CPU_REF alike, as the element-wise command gives them."""
    special = [np.nan, -np.inf, np.inf, -1e30, 1e30, -3.0, 3.0, -1e-7, 1e-30, -88.7, 88.7,
               -200.0, 200.0, 0.5, -0.5, -2.9999]
    x = np.array(special * 16, dtype)[:int(np.prod(xs))].reshape(xs)
    w = np.ones(ws, dtype)
    name, fn = ACTS[act]
    shape = xs[:3] + (ws[0],)
    x_out = np.broadcast_to(x, shape)               # every output channel of a pixel is x's
    want = np.empty(shape, dtype)
    nnc.cmd_exec(nnc.Cmd(name, backend="CPU_OPT"), [np.ascontiguousarray(x_out)], [want])
    defined = fn(x_out.astype(np.float64)).astype(dtype)     # rounded once, as CPU_REF
    ok = ~np.isnan(x_out)
    for backend in ("CPU_OPT", "CPU_REF"):
        out = np.zeros(shape, dtype)
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=backend, groups=groups, activation=act),
                     [x, w], [out])
        assert (np.isnan(out) == ~ok).all()
        assert (np.signbit(out[ok]) == np.signbit(defined[ok])).all()
        np.testing.assert_allclose(out[ok], defined[ok], rtol=4 * np.finfo(dtype).eps, atol=0)
        if backend == "CPU_OPT":             # the same bits, but a NaN's sign (no meaning)
            bits = f"int{x.itemsize * 8}"
            np.testing.assert_array_equal(out[ok].view(bits), want[ok].view(bits))
        neg_inf = out[np.isneginf(x_out)]
        assert neg_inf.size and (neg_inf == 0).all() and np.signbit(neg_inf).all()


@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("xs, ws, params", CASES[:4])
def test_float64_and_empty_sums(act, xs, ws, params):
    """float64 CPU_OPT (BLAS and the epilogue pass) within 1e-12 of CPU_REF; a convolution of no
    input channels is the activation of the bias."""
    x, w, b, rng = _operands(xs, ws, np.float64)
    oshape = _out_shape(nnc.Cmd("CONVOLUTION", **params), xs, ws)
    got = _run("CPU_OPT", x, w, b, None, np.zeros(oshape), activation=act, **params)
    want = _run("CPU_REF", x, w, b, None, np.zeros(oshape), activation=act, **params)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    x0 = np.zeros((1, 3, 3, 0), np.float32)
    w0 = np.zeros((5, 1, 1, 0), np.float32)
    b0 = np.array([-np.inf, -4.0, 0.25, 2.0, 9.0], np.float32)
    out = _run("CPU_OPT", x0, w0, b0, None, np.zeros((1, 3, 3, 5), np.float32),
               activation=act)
    np.testing.assert_allclose(out, np.broadcast_to(ACTS[act][1](b0.astype(np.float64)),
                                                    out.shape), rtol=1e-6)


def test_activation_values_are_checked():
    assert nnc.Cmd("CONVOLUTION", activation="hard_swish").params["activation"] == "hard_swish"
    assert nnc.Cmd("CONVOLUTION", activation="swish").params["activation"] == "swish"
    for bad in ("silu", "hardswish", "SWISH", 3):
        with pytest.raises(nnc.CommandError, match="'hard_swish' or 'swish'"):
            nnc.Cmd("CONVOLUTION", activation=bad)
    with pytest.raises(nnc.CommandError, match="goes with activation='clamp'"):
        nnc.Cmd("CONVOLUTION", activation="swish", clamp=(0, 6))


@pytest.mark.parametrize("act", sorted(ACTS))
def test_backends_without_the_epilogue_refuse_it(act, monkeypatch):
    """Winograd (bias and ReLU only) refuses, so selection never picks it; the GPU backends'
    accept refuses before looking at the tensors (their kernels fuse ReLU only)."""
    x = np.ones((1, 6, 6, 3), np.float32)
    w = np.ones((5, 3, 3, 3), np.float32)
    out = np.zeros((1, 4, 4, 5), np.float32)
    with pytest.raises(nnc.CommandError, match="does not accept"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", activation=act, backend="CPU_OPT_WINOGRAD"),
                     [x, w], [out])
    from nnc.cmd.convolution.gpu import cudnn
    from nnc.cuda import runner

    def no_tensors(*args):
        raise AssertionError("accept looked at the tensors")

    cmd = nnc.Cmd("CONVOLUTION", activation=act)
    monkeypatch.setattr(runner, "pixel_stride", no_tensors)
    assert runner.window_accept(cmd, [x, w], [out]) is False
    monkeypatch.setattr(cudnn, "_load", lambda: (object(), None))
    monkeypatch.setattr(cudnn, "tensors_of", no_tensors)
    assert cudnn._accept(cmd, [x, w], [out]) is False
    with pytest.raises(AssertionError, match="looked at the tensors"):
        cudnn._accept(nnc.Cmd("CONVOLUTION", activation="relu"), [x, w], [out])


def test_fused_swish_in_one_row_tiles_is_the_command_bit_for_bit(kernel_isa):
    """25 output pixels make two full tiles of rows and one of a single row (12 rows a tile on
    AVX-512, 6 on AVX2): the one-row tile applies SWISH to its values as the command does. It
    did not once gcc left that tile's per-value function out of line, compiled for the
    baseline ISA without FMA (act_kernel.h now inlines it always); a few values in a hundred
    thousand differed, so many seeds."""
    xs, ws = (1, 5, 5, 8), (64, 3, 3, 8)
    for seed in range(12):
        x, w, b, _ = _operands(xs, ws, np.float32, seed)
        oshape = _out_shape(nnc.Cmd("CONVOLUTION", padding=1), xs, ws)
        plain = _run("CPU_OPT", x, w, b, None, np.full(oshape, np.nan, np.float32), 1,
                     padding=1)
        nnc.cmd_exec(nnc.Cmd("SWISH", backend="CPU_OPT"), [plain], [plain])
        fused = _run("CPU_OPT", x, w, b, None, np.full(oshape, np.nan, np.float32), 1,
                     activation="swish", padding=1)
        np.testing.assert_array_equal(fused.view(np.int32), plain.view(np.int32),
                                      err_msg=f"seed {seed}")
