"""SCALED_DOT_PRODUCT_ATTENTION (NNC: cmd/scaled_dot_product_attention, test/unit/nnc/
attention.tests.c): CPU_REF against an explicit per-row definition, CPU_OPT against CPU_REF at
every kernel level and thread count, NNC's own check (the command equals the graph of
TRANSPOSE, SCALAR_MUL, GEMM, SOFTMAX, GEMM), masks, causal rows, views and bad calls."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnc

NAME = "SCALED_DOT_PRODUCT_ATTENTION"


def by_rows(q, k, v, mask, scale, causal):
    """The definition row by row in float64: q [b, sq, h, d], k [b, sk, hk, d], v [b, sk, hk,
    dv], mask broadcast to [b, h, sq, sk]."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    b, sq, h, _ = q.shape
    sk, hk, dv = k.shape[1], k.shape[2], v.shape[3]
    m = None if mask is None else np.broadcast_to(mask.astype(np.float64), (b, h, sq, sk))
    out = np.zeros((b, sq, h, dv))
    for bi in range(b):
        for hi in range(h):
            kh = hi // (h // hk)
            for x in range(sq):
                end = min(sk, x + sk - sq + 1) if causal else sk
                if end <= 0:
                    continue
                s = [scale * float(q[bi, x, hi] @ k[bi, y, kh]) for y in range(end)]
                if m is not None:
                    s = [s[y] + m[bi, hi, x, y] for y in range(end)]
                top = max(s)
                e = [math.exp(t - top) for t in s]
                total = sum(e)
                out[bi, x, hi] = sum(e[y] / total * v[bi, y, kh] for y in range(end))
    return out


def run(backend, ins, out_shape, dtype, **params):
    out = np.full(out_shape, np.nan, dtype)
    nnc.cmd_exec(nnc.Cmd(NAME, backend=backend, **params), ins, [out])
    return out


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)


CASES = [  # b, sq, sk, h, hk, d, dv
    (2, 5, 7, 4, 2, 8, 6),              # grouped-query heads, v_dim != head_dim
    (1, 6, 6, 3, 3, 4, 4),
    (2, 7, 4, 2, 1, 3, 5),              # more queries than keys: causal rows with no key
    (1, 1, 9, 2, 2, 5, 3),              # one query (decoding)
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask_kind", ["none", "2d", "per_batch", "per_head"])
def test_every_backend_matches_the_row_by_row_definition(kernel_isa, case, causal, mask_kind):
    rng = np.random.default_rng(1)
    b, sq, sk, h, hk, d, dv = case
    mask_shape = {"none": None, "2d": (sq, sk), "per_batch": (b, 1, sq, sk),
                  "per_head": (1, h, sq, sk)}[mask_kind]
    for dtype in ("float32", "float64"):
        q = rng.uniform(-1, 1, (b, sq, h, d)).astype(dtype)
        k = rng.uniform(-1, 1, (b, sk, hk, d)).astype(dtype)
        v = rng.uniform(-1, 1, (b, sk, hk, dv)).astype(dtype)
        mask = None if mask_shape is None else rng.uniform(-2, 2, mask_shape).astype(dtype)
        ins = [q, k, v] + ([] if mask is None else [mask])
        want = by_rows(q, k, v, mask, 0.7, causal)
        for backend in ("CPU_REF", "CPU_OPT"):
            got = run(backend, ins, (b, sq, h, dv), dtype, scale=0.7, is_causal=causal)
            np.testing.assert_allclose(got, want, **tol(dtype))
        if causal and sq > sk:
            assert (got[:, : sq - sk] == 0).all()        # rows that see no key


def test_rank_3_is_one_head():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 5, 4), (2, 6, 4),
                                                                    (2, 6, 3)))
    want = by_rows(q[:, :, None], k[:, :, None], v[:, :, None], None, 0.5, True)[:, :, 0]
    for backend in ("CPU_REF", "CPU_OPT"):
        got = run(backend, [q, k, v], (2, 5, 3), "float32", scale=0.5, is_causal=True)
        np.testing.assert_allclose(got, want, **tol("float32"))


def test_nnc_attention_equals_its_fine_grained_graph():
    """NNC attention.tests.c: TRANSPOSE q, k, v to [b, h, s, d], SCALAR_MUL q by the scale, GEMM
    q . k^T, SOFTMAX over the keys, GEMM by v, TRANSPOSE back: the command's result."""
    rng = np.random.default_rng(3)
    b, s, h, d, dv = 2, 16, 3, 8, 12
    q = rng.uniform(0, 1, (b, s, h, d)).astype(np.float32)
    k = rng.uniform(0, 1, (b, s, h, d)).astype(np.float32)
    v = rng.uniform(0, 1, (b, s, h, dv)).astype(np.float32)
    tq, tk = np.zeros((b, h, s, d), np.float32), np.zeros((b, h, s, d), np.float32)
    tv, sq_ = np.zeros((b, h, s, dv), np.float32), np.zeros((b, h, s, d), np.float32)
    qk, r = np.zeros((b, h, s, s), np.float32), np.zeros((b, h, s, dv), np.float32)
    tr = np.zeros((b, s, h, dv), np.float32)
    g = nnc.Graph()
    for src, dst in ((q, tq), (k, tk), (v, tv)):
        g.exec(nnc.Cmd("TRANSPOSE", perm=(0, 2, 1, 3)), [src], [dst])
    g.exec(nnc.Cmd("SCALAR_MUL", a=1 / 8), [tq], [sq_])
    g.exec(nnc.Cmd("GEMM", transpose_b=True), [sq_, tk], [qk])
    rows = nnc.Tensor(qk).view((b * h * s, s))
    g.exec(nnc.Cmd("SOFTMAX"), [rows], [rows])
    g.exec(nnc.Cmd("GEMM"), [qk, tv], [r])
    g.exec(nnc.Cmd("TRANSPOSE", perm=(0, 2, 1, 3)), [r], [tr])
    g.run()
    for backend in ("CPU_REF", "CPU_OPT"):
        got = run(backend, [q, k, v], (b, s, h, dv), "float32", scale=1 / 8)
        np.testing.assert_allclose(got, tr, rtol=1e-5, atol=1e-6)


@st.composite
def attention_cases(draw):
    hk = draw(st.integers(1, 3))
    return dict(b=draw(st.integers(1, 2)), sq=draw(st.integers(1, 9)),
                sk=draw(st.integers(1, 9)), hk=hk, h=hk * draw(st.integers(1, 2)),
                d=draw(st.integers(0, 6)), dv=draw(st.integers(1, 6)),
                causal=draw(st.booleans()), mask=draw(st.booleans()),
                dtype=draw(st.sampled_from(["float32", "float64"])))


@settings(max_examples=60, deadline=None)
@given(case=attention_cases())
def test_random_shapes_c_backend_matches_cpu_ref(case):
    rng = np.random.default_rng(4)
    c = case
    dt = c["dtype"]
    q = rng.uniform(-1, 1, (c["b"], c["sq"], c["h"], c["d"])).astype(dt)
    k = rng.uniform(-1, 1, (c["b"], c["sk"], c["hk"], c["d"])).astype(dt)
    v = rng.uniform(-1, 1, (c["b"], c["sk"], c["hk"], c["dv"])).astype(dt)
    ins = [q, k, v] + ([rng.uniform(-1, 1, (c["sq"], c["sk"])).astype(dt)] if c["mask"] else [])
    shape = (c["b"], c["sq"], c["h"], c["dv"])
    params = dict(scale=0.3, is_causal=c["causal"])
    np.testing.assert_allclose(run("CPU_OPT", ins, shape, dt, **params),
                               run("CPU_REF", ins, shape, dt, **params), **tol(dt))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 197, 197, 2, 2, 64, 64), (4, 40, 40, 12, 12, 16, 16)],
                         ids=["rows_split", "heads"])
def test_parts_on_the_pool(kernel_isa, threads, shape):
    rng = np.random.default_rng(5)
    b, sq, sk, h, hk, d, dv = shape
    q = rng.standard_normal((b, sq, h, d)).astype(np.float32)
    k = rng.standard_normal((b, sk, hk, d)).astype(np.float32)
    v = rng.standard_normal((b, sk, hk, dv)).astype(np.float32)
    want = run("CPU_REF", [q, k, v], (b, sq, h, dv), "float32", scale=d ** -0.5, is_causal=True)
    nnc.set_intra_op_threads(threads)
    try:
        got = run("CPU_OPT", [q, k, v], (b, sq, h, dv), "float32", scale=d ** -0.5,
                  is_causal=True)
    finally:
        nnc.set_intra_op_threads(None)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_views_of_a_fused_qkv_buffer_and_layouts_blas_cannot_take():
    """q, k, v as slices of one [b, s, 3, h, d] projection (strided, no copy) run on CPU_OPT; a
    head_dim without unit stride is refused by CPU_OPT and runs on CPU_REF by default."""
    rng = np.random.default_rng(6)
    b, s, h, d = 2, 5, 3, 4
    qkv = rng.standard_normal((b, s, 3, h, d)).astype(np.float32)
    buf = nnc.Tensor(qkv)
    views = [buf.view((b, s, h, d), i * h * d, (s * 3 * h * d, 3 * h * d, d, 1)) for i in range(3)]
    want = by_rows(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], None, 0.5, False)
    cmd = nnc.Cmd(NAME, scale=0.5)
    out = np.zeros((b, s, h, d), np.float32)
    assert nnc.cmd.command.cmd_backends_for(cmd, views, [out])[0].name == "CPU_OPT"
    np.testing.assert_allclose(run("CPU_OPT", views, out.shape, "float32", scale=0.5), want,
                               **tol("float32"))
    odd = nnc.Tensor(np.ascontiguousarray(np.swapaxes(qkv[:, :, 0], -1, -2)))
    q_t = odd.view((b, s, h, d), 0, (s * d * h, d * h, 1, h))   # head_dim strided by h
    assert [x.name for x in nnc.cmd.command.cmd_backends_for(cmd, [q_t] + views[1:], [out])] \
        == ["CPU_REF"]
    nnc.cmd_exec(cmd, [q_t] + views[1:], [out])
    np.testing.assert_allclose(out, want, **tol("float32"))


def test_a_mask_hiding_a_whole_row_gives_nan_on_both_backends():
    q = np.ones((1, 2, 1, 2), np.float32)
    mask = np.zeros((2, 3), np.float32)
    mask[1] = -np.inf
    for backend in ("CPU_REF", "CPU_OPT"):
        got = run(backend, [q, q[:, :1].repeat(3, 1), q[:, :1].repeat(3, 1), mask], (1, 2, 1, 2),
                  "float32", scale=1.0)
        np.testing.assert_allclose(got[0, 0], [[1, 1]])
        assert np.isnan(got[0, 1]).all()


@pytest.mark.parametrize("shapes, fragment", [
    ([(1, 4, 2, 8), (1, 5, 2, 7), (1, 5, 2, 8), (1, 4, 2, 8)], "head_dim 8 differs"),
    ([(1, 4, 3, 8), (1, 5, 2, 8), (1, 5, 2, 8), (1, 4, 3, 8)], "not a multiple"),
    ([(1, 4, 2, 8), (1, 5, 2, 8), (1, 6, 2, 8), (1, 4, 2, 8)], "must have k's seq_k"),
    ([(2, 4, 2, 8), (1, 5, 2, 8), (1, 5, 2, 8), (2, 4, 2, 8)], "batch sizes differ"),
    ([(1, 4, 2, 8), (1, 5, 2, 8), (1, 5, 2, 8), (1, 4, 2, 7)], "output 0 should have shape"),
    ([(1, 4, 2, 8), (1, 5, 2, 8), (1, 5, 2, 8), (5, 4), (1, 4, 2, 8)], "attn_mask must be"),
    ([(1, 4, 2, 8), (1, 5, 2, 8), (1, 5, 2, 8), (1, 3, 4, 5), (1, 4, 2, 8)], "attn_mask must"),
    ([(1, 4, 8), (1, 5, 2, 8), (1, 5, 2, 8), (1, 4, 8)], "must all be"),
])
def test_bad_shapes_are_command_errors(shapes, fragment):
    arrays = [np.zeros(s, np.float32) for s in shapes]
    for backend in ("CPU_REF", "CPU_OPT"):
        with pytest.raises(nnc.CommandError, match=fragment):
            nnc.cmd_exec(nnc.Cmd(NAME, scale=1.0, backend=backend), arrays[:-1], arrays[-1:])


def test_bad_parameters():
    with pytest.raises(nnc.CommandError, match="needs scale=s"):
        nnc.Cmd(NAME)
    with pytest.raises(nnc.CommandError, match="needs scale=s"):
        nnc.Cmd(NAME, scale=float("nan"))
    with pytest.raises(nnc.CommandError, match="is_causal must be True or False"):
        nnc.Cmd(NAME, scale=1.0, is_causal=2)
    with pytest.raises(nnc.CommandError, match="unknown parameters"):
        nnc.Cmd(NAME, scale=1.0, dropout=0.1)
    with pytest.raises(nnc.CommandError, match="floating-point"):
        x = np.zeros((1, 2, 1, 2), np.int32)
        nnc.cmd_exec(nnc.Cmd(NAME, scale=1.0), [x, x, x], [x.copy()])
