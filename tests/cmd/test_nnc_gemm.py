"""NNC's test/unit/nnc/gemm.tests.c and cblas.tests.c forward cases, ported as upstream builds
them: the same shapes and values, NNC's ``TRANSPOSE(i, j)`` of the last two axes as
``transpose_a`` / ``transpose_b``, compared as ``REQUIRE_TENSOR_EQ`` does (``nnc.tensor_eq``).
Every case runs on each CPU backend of GEMM (cblas.tests.c pins CPU_OPT's cblas algorithm; nnc's
CPU_OPT is its BLAS backend) at every kernel ISA level. Upstream's dsfmt stream (seeded 0, values
in (0, 1]) is a seeded NumPy stream: those cases compare two computations of the same data."""

import numpy as np
import pytest

import nnc

_BACKENDS = [b for b in nnc.backends("GEMM") if b.startswith("CPU")]

# (file, upstream name, a (shape, data), b, bias or None, transpose_a, transpose_b, c's shape,
#  upstream's expected c: its products written out, evaluated)
_CASES = [
    ('cblas.tests.c', 'gemm no transpose',
     ((4, 2), [1, 2, 3, 4, 5, 6, 7, 8]),
     ((2, 3), [7, 8, 9, 10, 11, 12]),
     None, False, False, (4, 3),
     [27, 30, 33, 61, 68, 75, 95, 106, 117, 129, 144, 159]),
    ('cblas.tests.c', 'gemm transpose a',
     ((2, 4), [1, 3, 5, 7, 2, 4, 6, 8]),
     ((2, 3), [7, 8, 9, 10, 11, 12]),
     None, True, False, (4, 3),
     [27, 30, 33, 61, 68, 75, 95, 106, 117, 129, 144, 159]),
    ('cblas.tests.c', 'gemm transpose b',
     ((4, 2), [1, 2, 3, 4, 5, 6, 7, 8]),
     ((3, 2), [7, 10, 8, 11, 9, 12]),
     None, False, True, (4, 3),
     [27, 30, 33, 61, 68, 75, 95, 106, 117, 129, 144, 159]),
    ('cblas.tests.c', 'gemm transpose a and b',
     ((2, 4), [1, 3, 5, 7, 2, 4, 6, 8]),
     ((3, 2), [7, 10, 8, 11, 9, 12]),
     None, True, True, (4, 3),
     [27, 30, 33, 61, 68, 75, 95, 106, 117, 129, 144, 159]),
    ('cblas.tests.c', 'gemm no transpose with bias',
     ((4, 2), [1, 2, 3, 4, 5, 6, 7, 8]),
     ((2, 3), [7, 8, 9, 10, 11, 12]),
     ((4, 3), [1, -1, 1, 1, -1, 1, 1, -1, 1, 1, -1, 1]), False, False, (4, 3),
     [28, 29, 34, 62, 67, 76, 96, 105, 118, 130, 143, 160]),
    ('cblas.tests.c', 'gemm no transpose batch 2',
     ((2, 4, 2), [1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9]),
     ((2, 3), [7, 8, 9, 10, 11, 12]),
     None, False, False, (2, 4, 3),
     [27, 30, 33, 61, 68, 75, 95, 106, 117, 129, 144, 159,
      44, 49, 54, 78, 87, 96, 112, 125, 138, 146, 163, 180]),
    ('cblas.tests.c', 'gemm transpose a batch 2',
     ((2, 2, 4), [1, 3, 5, 7, 2, 4, 6, 8, 2, 4, 6, 8, 3, 5, 7, 9]),
     ((2, 3), [7, 8, 9, 10, 11, 12]),
     ((3,), [-1, 0, 1]), True, False, (2, 4, 3),
     [26, 30, 34, 60, 68, 76, 94, 106, 118, 128, 144, 160,
      43, 49, 55, 77, 87, 97, 111, 125, 139, 145, 163, 181]),
    ('cblas.tests.c', 'gemm transpose b batch 2',
     ((2, 4, 2), [1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9]),
     ((2, 3, 2), [7, 10, 8, 11, 9, 12, 80, 110, 90, 120, 10, 13]),
     ((2, 1, 3), [-1, 0, 1, 2, 3, -4]), False, True, (2, 4, 3),
     [26, 30, 34, 60, 68, 76, 94, 106, 118, 128, 144, 160,
      492, 543, 55, 872, 963, 101, 1252, 1383, 147, 1632, 1803, 193]),
    ('gemm.tests.c', '[[1, 2], [3, 4], [5, 6], [7, 8]] * [[7, 8, 9], [10, 11, 12]]',
     ((4, 2), [1, 2, 3, 4, 5, 6, 7, 8]),
     ((2, 3), [7, 8, 9, 10, 11, 12]),
     None, False, False, (4, 3),
     [27, 30, 33, 61, 68, 75, 95, 106, 117, 129, 144, 159]),
    ('gemm.tests.c', '[1, 2] * [[7, 8, 9], [10, 11, 12]]',
     ((2,), [1, 2]),
     ((2, 3), [7, 8, 9, 10, 11, 12]),
     None, False, False, (3,),
     [27, 30, 33]),
    ('gemm.tests.c', '[[1, 2], [3, 4], [5, 6], [7, 8]] * [[7, 10], [8, 11], [9, 12]]^T',
     ((4, 2), [1, 2, 3, 4, 5, 6, 7, 8]),
     ((3, 2), [7, 10, 8, 11, 9, 12]),
     None, False, True, (4, 3),
     [27, 30, 33, 61, 68, 75, 95, 106, 117, 129, 144, 159]),
    ('gemm.tests.c', '[[1, 3, 5, 7], [2, 4, 6, 8]]^T * [[7, 10], [8, 11], [9, 12]]^T',
     ((1, 2, 4), [1, 3, 5, 7, 2, 4, 6, 8]),
     ((3, 2), [7, 10, 8, 11, 9, 12]),
     None, True, True, (1, 4, 3),
     [27, 30, 33, 61, 68, 75, 95, 106, 117, 129, 144, 159]),
    ('gemm.tests.c', '[[1, 2], [3, 4], [5, 6], [7, 8]] * [[7, 8, 9], [10, 11, 12]] + [-1, 0, 1]',
     ((4, 2), [1, 2, 3, 4, 5, 6, 7, 8]),
     ((2, 3), [7, 8, 9, 10, 11, 12]),
     ((3,), [-1, 0, 1]), False, False, (4, 3),
     [26, 30, 34, 60, 68, 76, 94, 106, 118, 128, 144, 160]),
    ('gemm.tests.c',
      '[[1, 2], [3, 4], [5, 6], [7, 8]], [[2, 3], [4, 5], [6, 7], [8, 9]] * [[7, 8, 9],'
      ' [10, 11, 12]]',
     ((2, 4, 2), [1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9]),
     ((2, 3), [7, 8, 9, 10, 11, 12]),
     None, False, False, (2, 4, 3),
     [27, 30, 33, 61, 68, 75, 95, 106, 117, 129, 144, 159,
      44, 49, 54, 78, 87, 96, 112, 125, 138, 146, 163, 180]),
    ('gemm.tests.c',
      '[[1, 2], [3, 4], [5, 6], [7, 8]], [[2, 3], [4, 5], [6, 7], [8, 9]] * [[7, 8, 9],'
      ' [10, 11, 12]], [[80, 90, 10], [110, 120, 13]]',
     ((2, 4, 2), [1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9]),
     ((2, 2, 3), [7, 8, 9, 10, 11, 12, 80, 90, 10, 110, 120, 13]),
     None, False, False, (2, 4, 3),
     [27, 30, 33, 61, 68, 75, 95, 106, 117, 129, 144, 159,
      490, 540, 59, 870, 960, 105, 1250, 1380, 151, 1630, 1800, 197]),
    ('gemm.tests.c',
      '[[1, 3, 5, 7], [2, 4, 6, 8]], [[2, 4, 6, 8], [3, 5, 7, 9]]^T * [[7, 8, 9], [10, '
      '11, 12]] + [-1, 0, 1]',
     ((2, 2, 4), [1, 3, 5, 7, 2, 4, 6, 8, 2, 4, 6, 8, 3, 5, 7, 9]),
     ((2, 3), [7, 8, 9, 10, 11, 12]),
     ((3,), [-1, 0, 1]), True, False, (2, 4, 3),
     [26, 30, 34, 60, 68, 76, 94, 106, 118, 128, 144, 160,
      43, 49, 55, 77, 87, 97, 111, 125, 139, 145, 163, 181]),
    ('gemm.tests.c',
      '[[1, 2], [3, 4], [5, 6], [7, 8]], [[2, 3], [4, 5], [6, 7], [8, 9]] * [[7, 10], '
      '[8, 11], [9, 12]], [[80, 110], [90, 120], [10, 13]]^T + [-1, 0, 1], [2, 3, -4]',
     ((2, 4, 2), [1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9]),
     ((2, 3, 2), [7, 10, 8, 11, 9, 12, 80, 110, 90, 120, 10, 13]),
     ((2, 1, 3), [-1, 0, 1, 2, 3, -4]), False, True, (2, 4, 3),
     [26, 30, 34, 60, 68, 76, 94, 106, 118, 128, 144, 160,
      492, 543, 55, 872, 963, 101, 1252, 1383, 147, 1632, 1803, 193]),
]


@pytest.mark.parametrize("backend", _BACKENDS)
@pytest.mark.parametrize("case", _CASES, ids=[f"{c[0]}: {c[1]}" for c in _CASES])
def test_gemm_cases_exactly(kernel_isa, backend, case):
    _, _, (a_shape, a), (b_shape, b), bias, transpose_a, transpose_b, c_shape, ctp = case
    inputs = [np.float32(a).reshape(a_shape), np.float32(b).reshape(b_shape)]
    if bias is not None:
        inputs.append(np.float32(bias[1]).reshape(bias[0]))
    c = np.full(c_shape, np.nan, np.float32)
    cmd = nnc.Cmd("GEMM", transpose_a=transpose_a, transpose_b=transpose_b, backend=backend)
    nnc.cmd_exec(cmd, inputs, [c])
    assert nnc.tensor_eq(c, np.float32(ctp).reshape(c_shape))


def _dsfmt(rng, *shape, scale=1):
    """dsfmt_genrand_open_close(&dsfmt) / scale: values in (0, 1] / scale."""
    return ((1 - rng.random(shape)) / scale).astype(np.float32)


@pytest.mark.parametrize("backend", _BACKENDS)
@pytest.mark.parametrize("with_bias", [True, False], ids=["cblas forward gemm",
                                                          "cblas forward gemm no bias"])
def test_cblas_forward_gemm(kernel_isa, backend, with_bias):
    """The first row alone on the default backend equals the first row of ten on the pinned
    one (upstream: ten rows on the GPU or CPU_OPT's cblas, one on the default)."""
    rng = np.random.default_rng(0)
    hw = _dsfmt(rng, 64, 128, scale=64 * 128)
    hbias = _dsfmt(rng, 64)
    ha1 = _dsfmt(rng, 10, 128)
    ha = ha1[:1].copy()
    extra = [hbias] if with_bias else []
    hb = np.full((1, 64), np.nan, np.float32)
    nnc.cmd_exec(nnc.Cmd("GEMM", transpose_b=True), [ha, hw] + extra, [hb])
    b = np.full((10, 64), np.nan, np.float32)
    nnc.cmd_exec(nnc.Cmd("GEMM", transpose_b=True, backend=backend), [ha1, hw] + extra, [b])
    assert nnc.tensor_eq(b[:1], hb)


def _transpose(x, i, j):
    """CMD_TRANSPOSE_FORWARD(i, j) into a new tensor."""
    perm = list(range(x.ndim))
    perm[i], perm[j] = perm[j], perm[i]
    out = np.full(tuple(x.shape[p] for p in perm), np.nan, np.float32)
    nnc.cmd_exec(nnc.Cmd("TRANSPOSE", perm=tuple(perm)), [x], [out])
    return out


@pytest.mark.parametrize("backend", _BACKENDS)
def test_cblas_handle_permute(kernel_isa, backend):
    rng = np.random.default_rng(0)
    w = _dsfmt(rng, 64, 2, 128, scale=64 * 128)
    a = _dsfmt(rng, 10, 2, 128)
    at, wt = _transpose(a, 0, 1), _transpose(w, 0, 1)
    cmd = nnc.Cmd("GEMM", transpose_b=True, backend=backend)
    bt = np.full((2, 10, 64), np.nan, np.float32)
    nnc.cmd_exec(cmd, [at, wt], [bt])
    av = nnc.Tensor(a).view((2, 10, 128), 0, (128, 2 * 128, 1))
    wv = nnc.Tensor(w).view((2, 64, 128), 0, (128, 2 * 128, 1))
    b = np.full((2, 10, 64), np.nan, np.float32)
    nnc.cmd_exec(cmd, [av, wv], [b])
    assert nnc.tensor_eq(b, bt)


_BATCHED = [
    # (upstream name, w batched [2, 64, 4, 128] (else [64, 128]), bias [64], compare cblas)
    ("generalized batched gemm with batch (2, 4)", True, False, False),
    ("generalized batched gemm with batch (2, 4) and broadcast", False, False, False),
    ("generalized batched gemm with batch (2, 4) with bias", True, True, False),
    ("generalized batched gemm with batch (2, 4) with bias and broadcast", False, True, False),
    ("generalized batched gemm with batch (2, 4) compare cblas", True, False, True),
    ("generalized batched gemm with batch (2, 4) and broadcast compare cblas", False, False, True),
    ("generalized batched gemm with batch (2, 4) with bias compare cblas", True, True, True),
    ("generalized batched gemm with batch (2, 4) with bias and broadcast compare cblas",
     False, True, True),
]


@pytest.mark.parametrize("backend", _BACKENDS)
@pytest.mark.parametrize("case", _BATCHED, ids=[c[0] for c in _BATCHED])
def test_generalized_batched_gemm(kernel_isa, backend, case):
    """a [2, 10, 4, 128] seen as [2, 4, 10, 128] through strides, times w (batched the same
    way, or one [64, 128] broadcast): equal to the GEMM of the TRANSPOSE(1, 2) copies, those
    seen as 8 batches of [10, 128]. The "compare cblas" cases pin the backend of the strided
    GEMM only (upstream: CPU_OPT's cblas against the default)."""
    _, w_batched, with_bias, compare = case
    rng = np.random.default_rng(0)
    w = (_dsfmt(rng, 2, 64, 4, 128, scale=64 * 128) if w_batched
         else _dsfmt(rng, 64, 128, scale=64 * 128))
    bias = [_dsfmt(rng, 64, scale=64)] if with_bias else []
    a = _dsfmt(rng, 2, 10, 4, 128)
    at = _transpose(a, 1, 2)
    av = nnc.Tensor(a).view((2, 4, 10, 128), 0, (10 * 4 * 128, 128, 4 * 128, 1))
    if w_batched:
        wt = _transpose(w, 1, 2)
        wv = nnc.Tensor(w).view((2, 4, 64, 128), 0, (64 * 4 * 128, 128, 4 * 128, 1))
    else:
        wt = wv = w
    b = np.full((2, 4, 10, 64), np.nan, np.float32)
    nnc.cmd_exec(nnc.Cmd("GEMM", transpose_b=True, backend=backend), [av, wv] + bias, [b])
    bt = nnc.Tensor(np.full((2, 4, 10, 64), np.nan, np.float32))
    if compare:
        nnc.cmd_exec(nnc.Cmd("GEMM", transpose_b=True), [at, wt] + bias, [bt])
    else:
        atv = nnc.Tensor(at).view((8, 10, 128), 0, (10 * 128, 128, 1))
        wtv = nnc.Tensor(wt).view((8, 64, 128), 0, (64 * 128, 128, 1)) if w_batched else wt
        btv = bt.view((8, 10, 64), 0, (10 * 64, 64, 1))
        nnc.cmd_exec(nnc.Cmd("GEMM", transpose_b=True, backend=backend), [atv, wtv] + bias, [btv])
    assert nnc.tensor_eq(b, bt)
