"""NNC's test/unit/nnc/forward.tests.c, convolution and pool cases, ported as upstream builds
them: the same shapes, the command's hint from ``hint_auto`` on the input and output shapes,
the same fills and expected values, compared as ``REQUIRE_MATRIX_EQ`` does (128 ulps, which is
``nnc.tensor_eq``). Each case runs on every CPU backend of its command at every kernel ISA level.
The transposed-convolution cases are in test_conv_transpose.py.

Where upstream writes its expected values in closed form (the non-uniform weights), the same
sums are taken here directly in float64 (exact for these integers)."""

import numpy as np
import pytest

import nnc


def _cpu_backends(name):
    return [b for b in nnc.backends(name) if b.startswith("CPU")]


# CPU_OPT_WINOGRAD takes 3x3 stride-1 kernels only (winograd.tests.c's cases, test_nnc_winograd.py).
_CONV_BACKENDS = [b for b in _cpu_backends("CONVOLUTION") if b != "CPU_OPT_WINOGRAD"]


def _conv(a, w, bias, out_shape, backend):
    """CMD_CONVOLUTION_FORWARD with ccv_nnc_hint_auto(cmd.info, a->info, b->info)."""
    hint = nnc.hint_auto(nnc.Cmd("CONVOLUTION"), [a.shape, w.shape], out_shape)
    b = np.full(out_shape, np.nan, np.float32)
    inputs = [a, w] if bias is None else [a, w, bias]
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=backend, **hint), inputs, [b])
    return b, hint


def _conv_exact(a, w, hint):
    """The float64 sums upstream's closed forms add up: NHWC a [H, W, C], w [O, kh, kw, C]."""
    top, left, bottom, right = hint["padding"]
    sh, sw = hint["stride"]
    x = np.pad(a.astype(np.float64), ((top, bottom), (left, right), (0, 0)))
    o, kh, kw, _ = w.shape
    rows = (x.shape[0] - kh) // sh + 1
    cols = (x.shape[1] - kw) // sw + 1
    out = np.zeros((rows, cols, o))
    for i in range(kh):
        for j in range(kw):
            patch = x[i:i + (rows - 1) * sh + 1:sh, j:j + (cols - 1) * sw + 1:sw, :]
            out += patch @ w[:, i, j, :].astype(np.float64).T
    return out


@pytest.mark.parametrize("backend", _CONV_BACKENDS)
def test_convolutional_network_of_11x11_on_225x185_with_uniform_weights(kernel_isa, backend):
    a = np.ones((225, 185, 3), np.float32)
    w = np.ones((4, 11, 11, 3), np.float32)
    bias = np.zeros(4, np.float32)
    b, _ = _conv(a, w, bias, (55, 45, 4), backend)
    c = np.empty((55, 45, 4), np.float32)
    for y in range(55):
        for x in range(45):
            corner = x in (0, 44) and y in (0, 54)
            edge = x in (0, 44) or y in (0, 54)
            c[y, x, :] = 300 if corner else (330 if edge else 363)
    assert nnc.tensor_eq(b, c)


@pytest.mark.parametrize("backend", _CONV_BACKENDS)
def test_convolutional_network_of_5x3_on_17x27_with_uniform_weights(kernel_isa, backend):
    a = np.ones((17, 27, 1), np.float32)
    w = np.ones((4, 5, 3, 1), np.float32)
    bias = np.zeros(4, np.float32)
    b, _ = _conv(a, w, bias, (17, 27, 4), backend)
    c = np.empty((17, 27, 4), np.float32)
    for y in range(17):
        for x in range(27):
            if x in (0, 26) and y in (0, 16):
                v = 6
            elif x in (0, 26) and y in (1, 15):
                v = 8
            elif y in (0, 16):
                v = 9
            elif x in (0, 26):
                v = 10
            elif y in (1, 15):
                v = 12
            else:
                v = 15
            c[y, x, :] = v
    assert nnc.tensor_eq(b, c)


@pytest.mark.parametrize("backend", _CONV_BACKENDS)
def test_convolutional_network_of_11x11_on_225x185_with_non_uniform_weights(kernel_isa, backend):
    a = np.arange(1, 225 * 185 + 1, dtype=np.float32).reshape(225, 185, 1)
    w = np.tile(np.arange(1, 11 * 11 + 1, dtype=np.float32), 4).reshape(4, 11, 11, 1)
    bias = np.zeros(4, np.float32)
    b, hint = _conv(a, w, bias, (55, 45, 4), backend)
    c = _conv_exact(a, w, hint)
    # Upstream regularises both by 1e-7 "so it is within the tolerance".
    assert nnc.tensor_eq(b * np.float32(1e-7), (c * 1e-7).astype(np.float32))


@pytest.mark.parametrize("backend", _CONV_BACKENDS)
def test_convolutional_network_of_3x5_on_27x27_with_non_uniform_weights(kernel_isa, backend):
    a = np.arange(1, 27 * 27 + 1, dtype=np.float32).reshape(27, 27, 1)
    w = np.tile(np.arange(1, 3 * 5 + 1, dtype=np.float32), 4).reshape(4, 3, 5, 1)
    bias = np.zeros(4, np.float32)
    b, hint = _conv(a, w, bias, (27, 27, 4), backend)
    assert hint == {"stride": (1, 1), "padding": (1, 2, 1, 2)}
    assert nnc.tensor_eq(b, _conv_exact(a, w, hint).astype(np.float32))


@pytest.mark.parametrize("backend", _CONV_BACKENDS)
def test_convolution_with_no_bias(kernel_isa, backend):
    rng = np.random.default_rng(1)              # upstream: dsfmt seeded 1, values in (0, 1]
    a = (1 - rng.random((27, 27, 1))).astype(np.float32)
    w = (1 - rng.random((4, 3, 5, 1))).astype(np.float32)
    bias = np.zeros(4, np.float32)
    bg, _ = _conv(a, w, bias, (27, 27, 4), backend)
    b, _ = _conv(a, w, None, (27, 27, 4), backend)
    assert nnc.tensor_eq(b, bg)


def _pool(name, size, side, out_side, backend):
    """CMD_{MAX,AVERAGE}_POOL_FORWARD(size, size) on a [side, side, 1] of i + 1."""
    a = np.arange(1, side * side + 1, dtype=np.float32).reshape(side, side, 1)
    hint = nnc.hint_auto(nnc.Cmd(name, size=size), [a.shape], (out_side, out_side, 1))
    b = np.full((out_side, out_side, 1), np.nan, np.float32)
    nnc.cmd_exec(nnc.Cmd(name, size=size, backend=backend, **hint), [a], [b])
    return b


def _grid(side, first, row, col):
    y, x = np.mgrid[0:side, 0:side]
    return (first + y * row + x * col).astype(np.float32).reshape(side, side, 1)


_POOLS = [
    # (upstream name, command, window, input side, output side, c[y, x] = first + y*row + x*col)
    ("maximum pool network of 55x55 with window of 3x3 and stride of 2", "MAX_POOL", 3, 55, 27,
     (113, 110, 2)),
    ("maximum pool network of 57x57 with window of 3x3 and stride of 3", "MAX_POOL", 3, 57, 19,
     (117, 171, 3)),
    ("maximum pool network of 54x54 with window of 2x2 and stride of 2", "MAX_POOL", 2, 54, 27,
     (56, 108, 2)),
    ("average pool network of 55x55 with window of 3x3 and stride of 2", "AVG_POOL", 3, 55, 27,
     (57, 110, 2)),
    ("average pool network of 57x57 with window of 3x3 and stride of 3", "AVG_POOL", 3, 57, 19,
     (59, 171, 3)),
    ("average pool network of 54x54 with window of 2x2 and stride of 2", "AVG_POOL", 2, 54, 27,
     (28.5, 108, 2)),
]


@pytest.mark.parametrize("case", _POOLS, ids=[p[0] for p in _POOLS])
def test_pool_networks(kernel_isa, case):
    _, name, size, side, out_side, (first, row, col) = case
    for backend in _cpu_backends(name):
        b = _pool(name, size, side, out_side, backend)
        assert nnc.tensor_eq(b, _grid(out_side, first, row, col)), backend
