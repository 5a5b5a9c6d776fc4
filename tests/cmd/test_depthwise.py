"""CONVOLUTION's CPU_OPT on depthwise float32 convolutions (groups = C = O): nnc's own kernel
(nnc/cmd/convolution/depthwise_kernel.h) at every ISA level this machine runs, against CPU_REF
within docs/commands.md's tolerance, on the geometries its code paths split on (3-wide runs over
1-3 window rows, edge pixels, windows larger than the input, channel tails), with the fused
bias and ReLU, NaN and infinities, strided views and parts on the pool."""

import numpy as np
import pytest
from test_cmd_nn import close_dot

import nnc
from nnc.cmd.convolution import conv_shape, cpu_opt

# Channel counts around the vector widths (4, 8, 16): tails alone, one vector and a tail,
# whole vectors, MobileNet's 144.
CHANNELS = [1, 3, 17, 32, 33, 144]

# (input shape without channels, window, stride, padding)
GEOMETRIES = [
    ((2, 9, 11), (3, 3), 1, 1),                 # MobileNet's 3x3, stride 1
    ((1, 10, 9), (3, 3), 2, 1),                 # stride 2, even and odd sizes
    ((1, 9, 10), (3, 3), 2, (0, 0, 1, 1)),      # TF's SAME: padding only after
    ((1, 8, 9), (5, 5), 1, 2),
    ((1, 9, 8), (5, 5), 2, 2),
    ((1, 9, 9), (7, 7), 1, 3),
    ((1, 7, 8), (3, 1), 1, (1, 0)),
    ((1, 6, 7), (1, 3), 1, (0, 1)),             # a 3-wide run over one window row
    ((1, 7, 8), (3, 3), 1, 0),                  # no padding: no edge pixels
    ((1, 2, 1), (5, 5), 1, 2),                  # the input smaller than the window
    ((2, 2), (3, 3), 2, 3),                     # no batch axis; windows of padding alone
    ((1, 5, 13), (3, 3), 3, (2, 1, 0, 2)),      # stride 3, uneven padding
]


def depthwise(x, w, bias, stride, padding, backend, activation=None, out=None):
    c = x.shape[-1]
    params = dict(stride=stride, padding=padding, groups=c, backend=backend)
    if activation:
        params["activation"] = activation
    cmd = nnc.Cmd("CONVOLUTION", **params)
    if out is None:
        out = np.full(conv_shape(cmd, x.shape, w.shape), np.nan, np.float32)
    nnc.cmd_exec(cmd, [x, w] if bias is None else [x, w, bias], [out])
    return out


def operands(rng, shape, k, c):
    x = rng.standard_normal(shape + (c,)).astype(np.float32)
    w = rng.standard_normal((c, *k, 1)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    return x, w, bias


@pytest.mark.parametrize("shape, k, stride, padding", GEOMETRIES)
def test_depthwise_matches_cpu_ref_at_every_isa(shape, k, stride, padding, kernel_isa):
    rng = np.random.default_rng(0)
    for c in CHANNELS:
        x, w, bias = operands(rng, shape, k, c)
        for b, act in [(None, None), (bias, None), (bias, "relu"), (None, "relu")]:
            want = depthwise(x, w, b, stride, padding, "CPU_REF", act)
            got = depthwise(x, w, b, stride, padding, "CPU_OPT", act)
            close_dot(got, want.astype(np.float64), "float32", k[0] * k[1], x, w, bias=b)
            if act:
                assert (got >= 0).all()


def test_depthwise_nan_and_infinities_as_cpu_ref(kernel_isa):
    """NaN in the input reaches exactly the outputs whose windows hold it, through the ReLU too;
    an infinite weight meets only the input it multiplies, never the padding (a zero there
    would make NaN where the sum has no such term)."""
    rng = np.random.default_rng(1)
    for c in (3, 17, 33):
        x, w, bias = operands(rng, (1, 7, 9), (3, 3), c)
        x[0, 0, 0, :] = np.nan
        x[0, 3, 4, c // 2] = np.nan
        x[0, 6, 8, -1] = np.nan
        w[:, 0, 0, 0] = np.inf
        w[c - 1, 2, 1, 0] = -np.inf
        for stride in (1, 2):
            with np.errstate(invalid="ignore"):     # CPU_REF's NumPy meets inf - inf
                want = depthwise(x, w, bias, stride, 1, "CPU_REF", "relu")
            got = depthwise(x, w, bias, stride, 1, "CPU_OPT", "relu")
            assert np.isnan(want).any() and np.isinf(want).any()
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
            finite = np.isfinite(want)
            close_dot(got[finite], want[finite].astype(np.float64), "float32", 9,
                      x[np.isfinite(x)], w[np.isfinite(w)], bias=bias)


@pytest.mark.parametrize("k", [5, 7])
def test_depthwise_wide_windows_nan_and_infinite_inputs_as_cpu_ref(k, kernel_isa):
    """Finite weights (the kernels that read the columns outside the image as zeros): NaN and
    infinities in the input reach exactly the outputs whose windows hold them, as CPU_REF's."""
    rng = np.random.default_rng(12)
    for c in (5, 17, 40):
        x, w, bias = operands(rng, (1, 11, 13), (k, k), c)
        x[0, 0, 0, :] = np.nan
        x[0, 5, 6, c // 2] = np.inf
        x[0, 10, 12, -1] = -np.inf
        x[0, 4, 0, 0] = np.inf
        for stride in (1, 2):
            with np.errstate(invalid="ignore"):
                want = depthwise(x, w, bias, stride, k // 2, "CPU_REF")
            got = depthwise(x, w, bias, stride, k // 2, "CPU_OPT")
            assert np.isnan(want).any() and np.isinf(want).any()
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
            np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
            finite = np.isfinite(want)
            close_dot(got[finite], want[finite].astype(np.float64), "float32", k * k,
                      x[np.isfinite(x)], w, bias=bias)

@pytest.mark.parametrize("k", [3, 5, 7])
def test_depthwise_strided_views_write_only_their_channels(k, kernel_isa):
    """The input a window of a wider image (pixel and row strides past its channels), the
    output a channel slice of a concat buffer: the kernel reads and writes through the
    strides and leaves the buffer's other channels alone (every window width's path)."""
    rng = np.random.default_rng(2)
    for c in (17, 32):
        n, h, wd, extra = 2, 8, 13, 5
        big = rng.standard_normal((n, h + 2, wd + 3, c + extra)).astype(np.float32)
        sw_, sh_, sn_ = c + extra, (wd + 3) * (c + extra), (h + 2) * (wd + 3) * (c + extra)
        x = nnc.Tensor(big).view((n, h, wd, c), sh_ + 2 * sw_ + 2, (sn_, sh_, sw_, 1))
        xc = np.ascontiguousarray(big[:, 1:h + 1, 2:wd + 2, 2:c + 2])
        w = rng.standard_normal((c, k, k, 1)).astype(np.float32)
        bias = rng.standard_normal(c).astype(np.float32)
        for stride in (1, 2):
            want = depthwise(xc, w, bias, stride, k // 2, "CPU_REF", "relu")
            ho, wo = want.shape[1:3]
            cat = np.full((n, ho, wo, c + 7), -7.0, np.float32)
            out = nnc.Tensor(cat).view((n, ho, wo, c), 3,
                                       (ho * wo * (c + 7), wo * (c + 7), c + 7, 1))
            depthwise(x, w, bias, stride, k // 2, "CPU_OPT", "relu", out=out)
            close_dot(cat[..., 3:c + 3], want.astype(np.float64), "float32", k * k, xc, w,
                      bias=bias)
            assert (cat[..., :3] == -7).all() and (cat[..., c + 3:] == -7).all()


@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_same_bits_in_any_split(threads, kernel_isa):
    """Each output row is summed the same way whichever part computes it: one row per part on
    one or two threads gives the bits of the whole call on one thread."""
    rng = np.random.default_rng(3)
    x, w, bias = operands(rng, (2, 23, 21), (3, 3), 33)
    whole = depthwise(x, w, bias, 1, 1, "CPU_OPT", "relu")
    old = cpu_opt._tune(1 << 19, 1, 0)          # every row its own part, every call split
    nnc.set_intra_op_threads(threads)
    try:
        for _ in range(3):
            split = depthwise(x, w, bias, 1, 1, "CPU_OPT", "relu")
            np.testing.assert_array_equal(split, whole)
    finally:
        nnc.set_intra_op_threads(None)
        cpu_opt._tune(*old)


# 5x5 and 7x7 windows on the kernels that take four pixels at once: rows of several groups,
# edge groups, stride 2, a map narrower than the window's reach (7x7, mostly edges).
WIDE_GEOMETRIES = [
    ((1, 14, 13), (5, 5), 1, 2),
    ((2, 12, 17), (5, 5), 2, 2),
    ((1, 7, 7), (5, 5), 1, 2),
    ((1, 11, 10), (5, 5), 2, (1, 2, 2, 1)),
    ((1, 9, 40), (5, 5), 1, 0),                 # no padding, a row of 36 pixels: two blocks
    ((1, 13, 15), (7, 7), 1, 3),                # ConvNeXt's 7x7
    ((1, 12, 17), (7, 7), 2, 3),
    ((1, 9, 44), (7, 7), 1, 0),
    ((1, 10, 14), (5, 7), 1, (2, 3)),          # windows that are not square
    ((1, 13, 11), (7, 5), 2, (3, 2)),
]


@pytest.mark.parametrize("shape, k, stride, padding", WIDE_GEOMETRIES)
def test_depthwise_wide_windows_match_cpu_ref_at_every_isa(shape, k, stride, padding,
                                                          kernel_isa):
    rng = np.random.default_rng(5)
    for c in (5, 16, 33, 240):
        x, w, bias = operands(rng, shape, k, c)
        for b, act in [(None, None), (bias, "relu"), (bias, "swish")]:
            want = depthwise(x, w, b, stride, padding, "CPU_REF", act)
            got = depthwise(x, w, b, stride, padding, "CPU_OPT", act)
            close_dot(got, want.astype(np.float64), "float32", k[0] * k[1], x, w, bias=b)


@pytest.mark.parametrize("k", [(3, 3), (5, 5), (7, 7)])
def test_depthwise_same_bits_in_any_split_wide(k, kernel_isa):
    """Every pixel sums its taps in one order wherever it lies in a row's groups of four, so
    one row per part gives the bits of the whole call."""
    rng = np.random.default_rng(4)
    x, w, bias = operands(rng, (1, 15, 19), k, 35)
    whole = depthwise(x, w, bias, 1, k[0] // 2, "CPU_OPT", "relu")
    old = cpu_opt._tune(1 << 19, 1, 0)
    nnc.set_intra_op_threads(2)
    try:
        for _ in range(3):
            split = depthwise(x, w, bias, 1, k[0] // 2, "CPU_OPT", "relu")
            np.testing.assert_array_equal(split, whole)
    finally:
        nnc.set_intra_op_threads(None)
        cpu_opt._tune(*old)


@pytest.mark.parametrize("k", [(3, 3), (5, 5)])
def test_frozen_depthwise_weights_are_laid_out_once(k, kernel_isa):
    """Frozen weights' tap-by-tap copy is made on the first run and kept (Graph.memory counts
    it); the results are those of laying them out per call, infinite weights included (the
    kept copy remembers that not every weight is finite: the padding's 0 * inf is NaN)."""
    rng = np.random.default_rng(8)
    for bad in (False, True):
        x, w, bias = operands(rng, (1, 9, 9), k, 40)
        if bad:
            w[7, 0, 0, 0] = np.inf                      # a corner tap: meets the padding
        y = np.zeros((1, 9, 9, 40), np.float32)
        g = nnc.Graph()
        g.exec(nnc.Cmd("CONVOLUTION", groups=40, padding=k[0] // 2, backend="CPU_OPT"),
               [x, w, bias], [y])
        g.run()
        want = y.copy()
        assert g.memory()["packed_bytes"] == 0
        g.freeze()
        for _ in range(2):
            y[...] = -1
            g.run()
            np.testing.assert_array_equal(y, want)
        assert g.memory()["packed_bytes"] >= 40 * k[0] * k[1] * 4
        assert np.isnan(y[0, 0, 0, 7]) == bad


def test_unfrozen_depthwise_weights_changed_between_runs_are_read_again(kernel_isa):
    rng = np.random.default_rng(9)
    x, w, bias = operands(rng, (1, 8, 8), (5, 5), 24)
    wt = nnc.Tensor(w)
    y = nnc.Tensor.zeros((1, 8, 8, 24), dtype="float32")
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", groups=24, padding=2, backend="CPU_OPT"), [x, wt, bias], [y])
    g.run()
    wt.numpy()[...] *= 2
    g.run()
    want = depthwise(x, wt.numpy(), bias, 1, 2, "CPU_REF")
    close_dot(y.numpy(), want.astype(np.float64), "float32", 25, x, wt.numpy(), bias=bias)
