"""GEMM with batch dimensions of any rank, broadcast as NumPy's matmul (NNC: cmd/blas,
ccv_nnc_gemm_cpu_ref.c's _ccv_nnc_gbmm), and NNC's bias shapes ([N], per batch [B, 1, N], per
row [M, N], ...): every CPU backend against np.matmul in float64, at every kernel level, with
the tolerance of docs/commands.md (K ulps of the operands' scale)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnc
from nnc.cmd.gemm import bias_fits, one_batch

CPU = ("CPU_REF", "CPU_OPT", "CPU_NUMPY")


def definition(a, w, bias, ta, tb):
    """op(a) @ op(w) + bias in float64 through np.matmul's broadcast."""
    a, w = a.astype(np.float64), w.astype(np.float64)
    a = np.swapaxes(a, -1, -2) if ta else a
    w = np.swapaxes(w, -1, -2) if tb else w
    out = np.matmul(a, w)
    return out if bias is None else out + bias.astype(np.float64)


def assert_dot_close(got, want, dtype, k, *operands):
    eps = float(np.finfo(dtype).eps)
    scale = np.prod([max(float(np.abs(x).max(initial=0)), 1.0) for x in operands])
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=8 * eps,
                               atol=4 * (k + 1) * eps * scale)


def run_all(ins, want, dtype, k, backends=CPU, **params):
    """Run every backend into a NaN-filled output; each must match the definition."""
    for backend in backends:
        out = np.full(want.shape, np.nan, dtype)
        nnc.cmd_exec(nnc.Cmd("GEMM", backend=backend, **params), ins, [out])
        assert_dot_close(out, want, dtype, k, *[x for x in ins if x is not None])


def _t(shape, flag):
    return shape[:-2] + shape[-2:][::-1] if flag else shape


# (a, w) before the transposes, K = 5: ConvNeXt's MLP on [N, H, W, C], attention's Q.K^T and
# P.V, a batch of 1 on either side broadcast, a vector a against a batched w, missing axes.
SHAPES = [
    ((2, 3, 4, 5), (5, 6)),
    ((2, 3, 4, 5), (2, 3, 5, 6)),
    ((1, 3, 4, 5), (2, 1, 5, 6)),
    ((4, 5), (2, 3, 5, 6)),
    ((3, 1, 4, 5), (2, 5, 6)),
    ((5,), (2, 3, 5, 6)),
    ((2, 1, 2, 1, 4, 5), (3, 1, 2, 5, 6)),
    ((2, 3, 1, 5), (2, 3, 5, 1)),
]


def bias_shapes(out_shape, vector):
    n = out_shape[-1]
    shapes = [None, (n,), (1,) * (len(out_shape) - 1) + (n,), out_shape]
    if not vector:
        shapes.append(out_shape[-2:])                           # per row: [M, N]
        shapes.append(out_shape[:-2] + (1, n))                  # per batch entry: [..., 1, N]
    return shapes


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("a_shape, w_shape", SHAPES, ids=[f"{a}x{w}" for a, w in SHAPES])
def test_broadcast_batches_and_bias_shapes_on_every_backend(kernel_isa, a_shape, w_shape, dtype):
    rng = np.random.default_rng(1)
    for ta, tb in itertools.product([False, True], repeat=2):
        if ta and len(a_shape) == 1:
            continue
        a = rng.uniform(-1, 1, _t(a_shape, ta)).astype(dtype)
        w = rng.uniform(-1, 1, _t(w_shape, tb)).astype(dtype)
        plain = definition(a, w, None, ta, tb)
        for bshape in bias_shapes(plain.shape, len(a_shape) == 1):
            bias = None if bshape is None else rng.uniform(-1, 1, bshape).astype(dtype)
            ins = [a, w] + ([] if bias is None else [bias])
            run_all(ins, definition(a, w, bias, ta, tb), dtype, 5,
                    transpose_a=ta, transpose_b=tb)


def test_nnc_gemm_transpose_b_batch_2_with_a_per_batch_bias():
    """NNC cblas.tests.c "gemm transpose b batch 2": a [2, 4, 2], b [2, 3, 2] (transposed),
    bias [2, 1, 3] (one row per batch entry)."""
    a = np.array([1, 2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9], np.float32).reshape(2, 4, 2)
    b = np.array([7, 10, 8, 11, 9, 12, 80, 110, 90, 120, 10, 13], np.float32).reshape(2, 3, 2)
    d = np.array([-1, 0, 1, 2, 3, -4], np.float32).reshape(2, 1, 3)
    want = np.array([
        [1 * 7 + 2 * 10 - 1, 1 * 8 + 2 * 11, 1 * 9 + 2 * 12 + 1],
        [3 * 7 + 4 * 10 - 1, 3 * 8 + 4 * 11, 3 * 9 + 4 * 12 + 1],
        [5 * 7 + 6 * 10 - 1, 5 * 8 + 6 * 11, 5 * 9 + 6 * 12 + 1],
        [7 * 7 + 8 * 10 - 1, 7 * 8 + 8 * 11, 7 * 9 + 8 * 12 + 1],
        [2 * 80 + 3 * 110 + 2, 2 * 90 + 3 * 120 + 3, 2 * 10 + 3 * 13 - 4],
        [4 * 80 + 5 * 110 + 2, 4 * 90 + 5 * 120 + 3, 4 * 10 + 5 * 13 - 4],
        [6 * 80 + 7 * 110 + 2, 6 * 90 + 7 * 120 + 3, 6 * 10 + 7 * 13 - 4],
        [8 * 80 + 9 * 110 + 2, 8 * 90 + 9 * 120 + 3, 8 * 10 + 9 * 13 - 4],
    ], np.float32).reshape(2, 4, 3)
    for backend in CPU:
        out = np.zeros((2, 4, 3), np.float32)
        nnc.cmd_exec(nnc.Cmd("GEMM", transpose_b=True, backend=backend), [a, b, d], [out])
        np.testing.assert_array_equal(out, want)


@st.composite
def broadcast_cases(draw):
    """Batch shapes of ranks 0..3 on either side, each axis equal, 1 or missing on one side."""
    out_batch = draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))
    side = []
    for _ in range(2):
        lead = draw(st.integers(0, len(out_batch)))
        side.append(tuple(draw(st.sampled_from([d, 1])) for d in out_batch[len(out_batch) - lead:]))
    vector = draw(st.booleans())
    return dict(
        a_batch=() if vector else side[0], w_batch=side[1], vector=vector,
        m=draw(st.integers(1, 6)), k=draw(st.integers(0, 7)), n=draw(st.integers(1, 6)),
        ta=draw(st.booleans()) and not vector, tb=draw(st.booleans()),
        bias=draw(st.sampled_from(["none", "n", "rows", "full"])),
        dtype=draw(st.sampled_from(["float32", "float64"])),
    )


@settings(max_examples=120, deadline=None)
@given(case=broadcast_cases())
def test_random_broadcast_batches_match_the_definition(case):
    rng = np.random.default_rng(7)
    dtype, m, k, n = case["dtype"], case["m"], case["k"], case["n"]
    a_shape = (k,) if case["vector"] else case["a_batch"] + ((k, m) if case["ta"] else (m, k))
    w_shape = case["w_batch"] + ((n, k) if case["tb"] else (k, n))
    a = rng.uniform(-1, 1, a_shape).astype(dtype)
    w = rng.uniform(-1, 1, w_shape).astype(dtype)
    out_shape = definition(a, w, None, case["ta"], case["tb"]).shape
    bshape = {"none": None, "n": (n,), "full": out_shape,
              "rows": (1,) + out_shape[-2:] if len(out_shape) >= 2 else (n,)}[case["bias"]]
    bias = None if bshape is None else rng.uniform(-1, 1, bshape).astype(dtype)
    if bias is not None and not bias_fits(bias.shape, out_shape):
        bias = None
    ins = [a, w] + ([] if bias is None else [bias])
    run_all(ins, definition(a, w, bias, case["ta"], case["tb"]), dtype, k,
            transpose_a=case["ta"], transpose_b=case["tb"])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [
    ((512, 3, 4), (512, 4, 3)),         # many tiny matrices: runs of entries per part
    ((12, 197, 64), (12, 64, 197)),     # ViT's Q.K^T per head: one entry per part
    ((2, 6, 50, 32), (32, 40)),         # a shared w through the float32 tiles
])
def test_batch_parts_on_the_pool(kernel_isa, threads, shape):
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, shape[0]).astype(np.float32)
    w = rng.uniform(-1, 1, shape[1]).astype(np.float32)
    bias = rng.uniform(-1, 1, shape[1][-1]).astype(np.float32)
    nnc.set_intra_op_threads(threads)
    try:
        run_all([a, w, bias], definition(a, w, bias, False, False), "float32", a.shape[-1],
                backends=("CPU_OPT",))
    finally:
        nnc.set_intra_op_threads(None)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("frozen", [False, True])
def test_a_batch_one_fully_connected_layer_splits_its_columns_with_the_same_bits(dtype, frozen):
    """One row (a batch-1 fully connected layer) computes little but streams all of w: its
    columns are cut into parts when the pool has helpers, on whole panels, so each output is
    the same sum in the same order at every intra-op setting; values match the definition,
    the bias included, and nothing past the output is written."""
    rng = np.random.default_rng(11)
    k, n = 1280, 1000
    a = rng.uniform(-1, 1, (1, k)).astype(dtype)
    w = rng.uniform(-1, 1, (n, k)).astype(dtype)
    bias = rng.uniform(-1, 1, n).astype(dtype)
    want = definition(a, w, bias, False, True)
    g = nnc.Graph()
    buf = np.full((1, n + 16), np.nan, dtype)
    out = buf[:, :n]
    g.exec(nnc.Cmd("GEMM", transpose_b=True, backend="CPU_OPT"), [a, w, bias], [out])
    if frozen:
        g.freeze()
    got = {}
    try:
        for threads in (1, 2, 1):
            nnc.set_intra_op_threads(threads)
            out[...] = np.nan
            g.run()
            if threads in got:
                assert np.array_equal(out, got[threads])
            got[threads] = out.copy()
    finally:
        nnc.set_intra_op_threads(None)
    assert np.array_equal(got[1], got[2])
    assert_dot_close(got[2], want, dtype, k, a, w, bias)
    assert np.isnan(buf[:, n:]).all()


def test_attention_layout_views_go_to_blas_without_copies():
    """q, k, v in NNC's [batch, seq, heads, head_dim] viewed as [batch, heads, seq, head_dim] (a
    stride permutation, no copy): every matrix has a unit stride on one axis, so CPU_OPT takes
    Q.K^T (transpose_b) and P.V straight from the views."""
    rng = np.random.default_rng(4)
    b, s, h, d = 2, 7, 3, 8
    q = rng.uniform(-1, 1, (b, s, h, d)).astype(np.float32)
    k = rng.uniform(-1, 1, (b, s, h, d)).astype(np.float32)

    def heads_first(x):
        st_ = x.strides
        return nnc.Tensor(x).view((b, h, s, d), 0, (st_[0] // 4, st_[2] // 4, st_[1] // 4, 1))

    qt, kt = heads_first(q), heads_first(k)
    cmd = nnc.Cmd("GEMM", transpose_b=True)
    out = np.zeros((b, h, s, s), np.float32)
    found = nnc.cmd.command.cmd_backends_for(cmd, [qt, kt], [out])
    assert found[0].name == "CPU_OPT"
    want = definition(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), None, False, True)
    run_all([qt, kt], want, "float32", d, transpose_b=True)


@pytest.mark.parametrize("a_shape, bias_shape", [
    ((197, 1, 64), (40,)),              # a transformer's [tokens, batch = 1, features]
    ((3, 5, 1, 64), (3, 5, 1, 40)),     # two axes fold, a bias per entry (rows of it)
    ((6, 9, 64), (6, 1, 40)),           # rows of 9 continue evenly; a bias per entry
    ((4, 7, 64), (4, 7, 40)),           # a bias per row (the epilogue's residual)
], ids=["tokens_batch", "two_axes", "bias_per_entry", "bias_per_row"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batches_that_continue_the_rows_are_one_product(kernel_isa, a_shape, bias_shape,
                                                         dtype):
    """With one w, batch axes whose entries continue a's and the output's rows evenly fold
    into M (one GEMM instead of one per entry, each streaming all of w): the result is the
    definition, and in float32 the bits of the same product written as one 2-D call."""
    rng = np.random.default_rng(31)
    a = rng.uniform(-1, 1, a_shape).astype(dtype)
    w = rng.uniform(-1, 1, (64, 40)).astype(dtype)
    bias = rng.uniform(-1, 1, bias_shape).astype(dtype)
    want = definition(a, w, bias, False, False)
    run_all([a, w, bias], want, dtype, 64)
    if dtype == "float32" and len(bias_shape) == 1:
        flat = np.full((a.size // 64, 40), np.nan, np.float32)
        nnc.cmd_exec(nnc.Cmd("GEMM", backend="CPU_OPT"), [a.reshape(-1, 64), w, bias], [flat])
        out = np.full(want.shape, np.nan, np.float32)
        nnc.cmd_exec(nnc.Cmd("GEMM", backend="CPU_OPT"), [a, w, bias], [out])
        np.testing.assert_array_equal(out.reshape(flat.shape).view(np.int32), flat.view(np.int32))


def test_one_row_entries_that_overlap_stay_batches():
    """[B, 1, K] entries K/2 apart (a sliding window view): as rows they would overlap, which
    BLAS cannot take, so CPU_OPT keeps them as batch entries and still accepts them."""
    rng = np.random.default_rng(33)
    buf = rng.uniform(-1, 1, 16 * 32 + 64).astype(np.float32)
    a = nnc.Tensor(buf).view((17, 1, 64), 0, (32, 64, 1))
    w = rng.uniform(-1, 1, (64, 24)).astype(np.float32)
    windows = np.stack([buf[i * 32:i * 32 + 64] for i in range(17)])[:, None, :]
    want = definition(windows, w, None, False, False)
    cmd = nnc.Cmd("GEMM")
    out = nnc.Tensor(np.full(want.shape, np.nan, np.float32))
    assert nnc.cmd.command.cmd_backends_for(cmd, [a, nnc.Tensor(w)], [out])[0].name == "CPU_OPT"
    nnc.cmd_exec(nnc.Cmd("GEMM", backend="CPU_OPT"), [a, nnc.Tensor(w)], [out])
    assert_dot_close(out.numpy(), want, "float32", 64, buf, w)


def test_batches_whose_rows_do_not_continue_stay_batches():
    """a's entries are slices of a wider buffer (a gap between them): no fold, the same
    result."""
    rng = np.random.default_rng(32)
    buf = rng.uniform(-1, 1, (5, 4, 70)).astype(np.float32)
    a = nnc.Tensor(buf).view((5, 3, 64), 0, (280, 70, 1))
    w = rng.uniform(-1, 1, (64, 24)).astype(np.float32)
    want = definition(buf[:, :3, :64], w, None, False, False)
    out = np.full(want.shape, np.nan, np.float32)
    nnc.cmd_exec(nnc.Cmd("GEMM", backend="CPU_OPT"), [a, nnc.Tensor(w)], [nnc.Tensor(out)])
    assert_dot_close(out, want, "float32", 64, buf, w)


@pytest.mark.parametrize("a_shape, w_shape, bias_shape, out_shape, fragment", [
    ((2, 3, 4, 5), (3, 3, 5, 6), None, (2, 3, 4, 6), "batch sizes differ"),
    ((2, 3, 4, 5), (2, 5, 6), None, (2, 3, 4, 6), "batch sizes differ"),
    ((1, 4, 5), (1, 5, 6), None, (2, 4, 6), "output 0 should have shape (1, 4, 6)"),
    ((2, 4, 5), (5, 6), None, (4, 6), "output 0 should have shape (2, 4, 6)"),
    ((2, 4, 5), (5, 6), (3, 1, 6), (2, 4, 6), "bias should have shape (6,) or one"),
    ((2, 4, 5), (5, 6), (2, 4, 1), (2, 4, 6), "bias should have shape (6,) or one"),
    ((2, 4, 5), (5, 6), (1, 2, 4, 6), (2, 4, 6), "bias should have shape (6,) or one"),
    ((5,), (2, 5, 6), (2, 3, 6), (2, 6), "bias should have shape (6,) or one"),
])
def test_bad_shapes_are_command_errors(a_shape, w_shape, bias_shape, out_shape, fragment):
    ins = [np.zeros(a_shape, np.float32), np.zeros(w_shape, np.float32)]
    if bias_shape is not None:
        ins.append(np.zeros(bias_shape, np.float32))
    for backend in CPU:
        with pytest.raises(nnc.CommandError) as info:
            nnc.cmd_exec(nnc.Cmd("GEMM", backend=backend), ins, [np.zeros(out_shape, np.float32)])
        assert fragment in str(info.value)


def test_gpu_backends_take_only_one_unbroadcast_batch():
    """The GPU backends compute one batch stride and a [N] bias: they must refuse the rest (the
    command then has no GPU backend for it) rather than compute it wrong."""
    assert one_batch((2, 3, 4), (2, 4, 5), (5,))
    assert one_batch((3, 4), (2, 4, 5), None)
    assert one_batch((4,), (4, 5), None)
    assert not one_batch((1, 3, 4), (2, 4, 5), None)
    assert not one_batch((2, 2, 3, 4), (4, 5), None)
    assert not one_batch((3, 4), (2, 2, 4, 5), None)
    assert not one_batch((2, 3, 4), (4, 5), (2, 1, 5))
