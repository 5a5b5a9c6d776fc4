"""nnc's own float32 GEMM tiles (nnc/cmd/gemm/sgemm_kernel.h) through CONVOLUTION's CPU_OPT, at
every ISA level this machine runs: tile edges (rows and columns that do not fill a tile, half
panels), groups, the channel split of few-pixel layers, strided views, the fused bias and ReLU,
NaN, and the same bits whichever split or thread count computes them."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cmd_nn import close_dot

import nnc
from nnc.base import isa as cpu_isa


def conv64(x, w, bias, stride, pad, groups, relu=False):
    """NHWC convolution in float64 by patches (x: [n, h, w, c], w: [o, kh, kw, c/groups])."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    (sh, sw), (pt, pl, pb, pr) = stride, pad
    xp = np.zeros((n, h + pt + pb, wd + pl + pr, c))
    xp[:, pt:pt + h, pl:pl + wd] = x
    ho, wo = (h + pt + pb - kh) // sh + 1, (wd + pl + pr - kw) // sw + 1
    out = np.zeros((n, ho, wo, o))
    og = o // groups
    for i in range(kh):
        for j in range(kw):
            win = xp[:, i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw]
            for g in range(groups):
                out[..., g * og:(g + 1) * og] += (win[..., g * cg:(g + 1) * cg]
                                                  @ w[g * og:(g + 1) * og, i, j].T)
    if bias is not None:
        out += bias
    return np.maximum(out, 0) if relu else out


def run_conv(x, w, bias, out, **params):
    ins = [x, w] if bias is None else [x, w, bias]
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_OPT", **params), ins, [out])
    return out


# The kernel_isa fixture holds for every generated case (it only sets a level).
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(o=st.integers(1, 70), c=st.integers(1, 9), k=st.sampled_from([(1, 1), (3, 3), (1, 3)]),
       hw=st.integers(1, 9), relu=st.booleans(), with_bias=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_tile_edges_match_float64(kernel_isa, o, c, k, hw, relu, with_bias, seed):
    """Every output-channel count 1..70 (full, half and masked panels of every ISA) and pixel
    counts that leave a partial row tile."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, hw, hw + 1, c)).astype(np.float32)
    w = rng.standard_normal((o, *k, c)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32) if with_bias else None
    pad = (k[0] // 2, k[1] // 2, k[0] // 2, k[1] // 2)
    want = conv64(x, w, bias, (1, 1), pad, 1, relu)
    out = np.full(want.shape, np.nan, np.float32)
    run_conv(x, w, bias, out, padding=pad, activation="relu" if relu else None)
    close_dot(out, want, "float32", k[0] * k[1] * c, x, w, bias=bias)


@pytest.mark.parametrize("pixels", range(1, 26))
def test_every_row_count_of_a_tile_matches_float64(kernel_isa, pixels):
    """1 to 25 pixels: every count of rows a block's last tile may hold at every level (the
    9-row tile of a 3x3 map on AVX-512 among them), each on a full and a half panel."""
    rng = np.random.default_rng(pixels)
    x = rng.standard_normal((1, 1, pixels, 40)).astype(np.float32)
    w = rng.standard_normal((48, 1, 1, 40)).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    want = conv64(x, w, bias, (1, 1), (0, 0, 0, 0), 1, relu=True)
    out = np.full(want.shape, np.nan, np.float32)
    run_conv(x, w, bias, out, activation="relu")
    close_dot(out, want, "float32", 40, x, w, bias=bias)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape, wshape, params", [
    # Each above CPU_OPT's 4M multiply-adds, so two threads split it.
    ((1, 8, 8, 512), (200, 1, 1, 512), {}),                            # channel split, 1x1
    ((1, 9, 9, 96), (72, 3, 3, 96), dict(padding=1)),                  # channel split, im2col
    ((2, 37, 33, 12), (40, 3, 3, 12), dict(padding=1)),                # row parts
    ((1, 100, 98, 8), (48, 3, 3, 4), dict(stride=2, padding=1, groups=2)),  # groups
    ((1, 160, 150, 3), (32, 3, 3, 3), dict(stride=2)),                 # the first layer's C = 3
])
def test_splits_and_threads_give_the_same_bits(kernel_isa, threads, shape, wshape, params):
    """Each output value is the same sum in the same order whichever part (of rows or of
    channels) computes it: one thread and two give identical bits, close to float64."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    bias = rng.standard_normal(wshape[0]).astype(np.float32)
    cmd = nnc.Cmd("CONVOLUTION", **params)
    want = conv64(x, w, bias, cmd.stride, cmd.padding, cmd.groups)
    outs = []
    for t in (1, threads):
        nnc.set_intra_op_threads(t)
        try:
            outs.append(run_conv(x, w, bias, np.full(want.shape, np.nan, np.float32), **params))
        finally:
            nnc.set_intra_op_threads(None)
    np.testing.assert_array_equal(outs[0], outs[1])
    close_dot(outs[1], want, "float32", wshape[1] * wshape[2] * wshape[3], x, w, bias=bias)


def test_strided_input_and_uneven_output_rows(kernel_isa):
    """A channel slice of a wider input, and an output whose rows are not one even run of
    pixels (a row stride wider than its pixels): rows go to the tiles one by one."""
    rng = np.random.default_rng(5)
    big = rng.standard_normal((2, 7, 9, 11)).astype(np.float32)
    x = nnc.Tensor(big).view((2, 7, 9, 6), 3, (7 * 9 * 11, 9 * 11, 11, 1))
    w = rng.standard_normal((20, 3, 3, 6)).astype(np.float32)
    buf = np.full((2, 7, 10, 24), -5.0, np.float32)
    out = nnc.Tensor(buf).view((2, 7, 9, 20), 2, (7 * 10 * 24, 10 * 24, 24, 1))
    run_conv(x, w, None, out, padding=1)
    want = conv64(big[..., 3:9], w, None, (1, 1), (1, 1, 1, 1), 1)
    close_dot(out.numpy(), want, "float32", 54, big, w, bias=None)
    assert (buf[..., :2] == -5).all() and (buf[..., 22:] == -5).all() and (buf[:, :, 9] == -5).all()


def test_nan_propagates_through_the_fused_relu(kernel_isa):
    x = np.ones((1, 4, 4, 5), np.float32)
    x[0, 1, 2, 3] = np.nan
    w = np.ones((40, 1, 1, 5), np.float32)
    out = run_conv(x, w, np.zeros(40, np.float32), np.zeros((1, 4, 4, 40), np.float32),
                   activation="relu")
    assert np.isnan(out[0, 1, 2]).all()
    assert (out[0, 0] == 5).all()


def test_isa_levels_agree_within_tolerance():
    """Different levels may round differently (FMA or not), never by more than the dot-product
    tolerance."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 12, 12, 16)).astype(np.float32)
    w = rng.standard_normal((50, 3, 3, 16)).astype(np.float32)
    want = conv64(x, w, None, (1, 1), (1, 1, 1, 1), 1)
    for level in cpu_isa.supported_isas():
        old = cpu_isa.set_cpu_isa(level)
        try:
            out = run_conv(x, w, None, np.zeros(want.shape, np.float32), padding=1)
        finally:
            cpu_isa.set_cpu_isa(old)
        close_dot(out, want, "float32", 144, x, w, bias=None)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("wshape, params", [
    ((40, 3, 3, 6), dict(padding=1)),                                  # packed tiles (float32)
    ((6, 3, 3, 1), dict(padding=1, groups=6)),                         # depthwise
    ((40, 1, 1, 6), {}),                                               # pointwise
])
@pytest.mark.parametrize("act", [None, "relu", (0.0, 6.0), (-0.5, float("inf"))])
def test_residual_and_clamp_epilogue_every_backend(kernel_isa, dtype, wshape, params, act):
    """out = act(conv + bias + residual) on CPU_OPT (every path) and CPU_REF; the residual may
    be a strided view (a channel slice), and NaN stays NaN through the clamp."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 9, 8, 6)).astype(dtype)
    x[0, 4, 4, :] = np.nan
    w = rng.standard_normal(wshape).astype(dtype)
    bias = rng.standard_normal(wshape[0]).astype(dtype)
    o = wshape[0]
    wide = rng.standard_normal((2, 9, 8, o + 3)).astype(dtype)
    residual = nnc.Tensor(wide).view((2, 9, 8, o), 1, (9 * 8 * (o + 3), 8 * (o + 3), o + 3, 1))
    extra = {} if act is None else (dict(activation="relu") if act == "relu"
                                    else dict(activation="clamp", clamp=act))
    cmd = nnc.Cmd("CONVOLUTION", **params)
    want = conv64(x, w, bias, cmd.stride, cmd.padding, cmd.groups) + wide[..., 1:o + 1]
    if act == "relu":
        want = np.maximum(want, 0)
    elif act is not None:
        want = np.minimum(np.maximum(want, act[0]), act[1])
    for backend in ("CPU_OPT", "CPU_REF"):
        out = np.full(want.shape, -3.0, dtype)
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=backend, **params, **extra),
                     [x, w, bias, residual], [out])
        assert (np.isnan(out) == np.isnan(want)).all()
        ok = ~np.isnan(want)
        eps = float(np.finfo(dtype).eps)
        np.testing.assert_allclose(out[ok], want[ok], rtol=1e-5 if dtype == "float32" else 1e-12,
                                   atol=60 * eps * 20)


def test_clamp_and_residual_are_checked():
    x = np.ones((1, 4, 4, 3), np.float32)
    w = np.ones((5, 1, 1, 3), np.float32)
    out = np.zeros((1, 4, 4, 5), np.float32)
    with pytest.raises(nnc.CommandError, match="clamp=.*goes with activation='clamp'"):
        nnc.Cmd("CONVOLUTION", clamp=(0, 6))
    with pytest.raises(nnc.CommandError, match="clamp=.*goes with activation='clamp'"):
        nnc.Cmd("CONVOLUTION", activation="clamp")
    for bad in ((6, 0), (float("nan"), 1), "ab", (1,), None):
        with pytest.raises(nnc.CommandError, match="clamp must be"):
            nnc.Cmd("CONVOLUTION", activation="clamp", clamp=bad)
    with pytest.raises(nnc.CommandError, match="residual .* should have shape"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION"), [x, w, None, np.ones((1, 4, 4, 4), np.float32)],
                     [out])
    # The residual may be the output itself (out = conv + out), not a part of it.
    out[...] = 2
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION"), [x, w, None, out], [out])
    np.testing.assert_array_equal(out, np.full(out.shape, 5, np.float32))
    wide = nnc.Tensor(np.zeros((1, 4, 4, 6), np.float32))
    strides = (96, 24, 6, 1)
    with pytest.raises(nnc.CommandError, match="overlaps input 3"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION"),
                     [nnc.Tensor(x), nnc.Tensor(w), None,
                      wide.view((1, 4, 4, 5), offset=1, strides=strides)],
                     [wide.view((1, 4, 4, 5), offset=0, strides=strides)])
    # No GPU or Winograd backend takes a residual or a clamp: selection never picks one.
    cmd = nnc.Cmd("CONVOLUTION", activation="clamp", clamp=(0, 6), backend="CPU_OPT_WINOGRAD")
    with pytest.raises(nnc.CommandError, match="does not accept"):
        nnc.cmd_exec(cmd, [np.ones((1, 6, 6, 3), np.float32), np.ones((5, 3, 3, 3), np.float32)],
                     [np.zeros((1, 4, 4, 5), np.float32)])


def _one_conv_graph(w, relu=False):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1, 10, 10, w.shape[-1])).astype(np.float32)
    y = np.zeros((1, 10, 10, w.shape[0]), np.float32)
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", padding=1, activation="relu" if relu else None,
                   backend="CPU_OPT"), [x, w], [y])
    return g, x, y


def test_frozen_weights_are_packed_once_and_kept(kernel_isa):
    """Frozen weights: the packed copy is made on the first run and counted by Graph.memory();
    results equal the unfrozen run's bit for bit; another ISA level packs a copy of its own."""
    rng = np.random.default_rng(12)
    w = rng.standard_normal((40, 3, 3, 6)).astype(np.float32)
    g, x, y = _one_conv_graph(w)
    g.run()
    want = y.copy()
    assert g.memory()["packed_bytes"] == 0          # not frozen: packed per call, nothing kept
    assert g.freeze()
    y[...] = np.nan
    g.run()
    np.testing.assert_array_equal(y, want)
    packed = g.memory()["packed_bytes"]
    assert packed >= w.nbytes                       # the copy is kept ...
    g.run()
    assert g.memory()["packed_bytes"] == packed     # ... and made once
    np.testing.assert_array_equal(y, want)
    for level in cpu_isa.supported_isas():
        if level == kernel_isa:
            continue
        old = cpu_isa.set_cpu_isa(level)
        try:
            g.run()
        finally:
            cpu_isa.set_cpu_isa(old)
        close_dot(y, conv64(x, w, None, (1, 1), (1, 1, 1, 1), 1), "float32", 54, x, w, bias=None)
        assert g.memory()["packed_bytes"] > packed  # its own layout, its own copy
        packed = g.memory()["packed_bytes"]


def test_unfrozen_weights_written_between_runs_are_used(kernel_isa):
    """Weights that are not frozen are packed on every call: a write between runs (through the
    array the graph was built from) shows in the next run, never a stale packed copy."""
    rng = np.random.default_rng(14)
    w = rng.standard_normal((40, 3, 3, 6)).astype(np.float32)
    g, x, y = _one_conv_graph(w)
    for _ in range(3):
        g.run()
        close_dot(y, conv64(x, w, None, (1, 1), (1, 1, 1, 1), 1), "float32", 54, x, w, bias=None)
        w *= -1.5
    assert g.memory()["packed_bytes"] == 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("a_shape, w_shape, params", [
    ((2048,), (1000, 2048), dict(transpose_b=True)),     # a batch-1 fully connected layer
    ((7, 33), (33, 70), {}),                              # w as [K, N]
    ((3, 5, 33), (70, 33), dict(transpose_b=True)),       # a batch on a, one w
    ((33, 7), (70, 33), dict(transpose_a=True, transpose_b=True)),  # a's K not contiguous: BLAS
    ((300, 64), (48, 64), dict(transpose_b=True)),        # a half panel at the end
])
def test_gemm_through_the_tiles(kernel_isa, threads, a_shape, w_shape, params):
    rng = np.random.default_rng(21)
    a = rng.standard_normal(a_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    bias_n = w_shape[0] if params.get("transpose_b") else w_shape[1]
    bias = rng.standard_normal(bias_n).astype(np.float32)
    a64 = np.swapaxes(a, -1, -2).astype(np.float64) if params.get("transpose_a") else a
    w64 = (w.T if params.get("transpose_b") else w).astype(np.float64)
    want = a64 @ w64 + bias
    nnc.set_intra_op_threads(threads)
    try:
        out = np.full(want.shape, np.nan, np.float32)
        nnc.cmd_exec(nnc.Cmd("GEMM", backend="CPU_OPT", **params), [a, w, bias], [out])
    finally:
        nnc.set_intra_op_threads(None)
    k = w64.shape[0]
    eps = float(np.finfo(np.float32).eps)
    atol = k * eps * float(np.abs(a).max()) * float(np.abs(w).max()) * 2 + eps * 4
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("a_shape, k, w_shape", [
    ((197, 3072), 3072, (3072, 40)),        # rows 12 KiB apart (ViT's MLP down-projection)
    ((2, 70, 1024), 1024, (1024, 36)),      # a batch on a, rows 4 KiB apart
    ((90, 2048), 300, (300, 48)),           # the first 300 of rows 8 KiB apart
], ids=["vit_mlp", "batched", "sliced"])
def test_gemm_rows_4k_apart_copied_apart_give_the_same_bits(kernel_isa, a_shape, k, w_shape):
    """Rows of a a multiple of 4 KiB apart are copied apart in each part before the tiles
    read them (they would share one L1 set): same values, same sums, same bits."""
    from nnc.cmd.gemm import cpu_opt as gemm_opt

    rng = np.random.default_rng(23)
    buf = rng.standard_normal(a_shape).astype(np.float32)
    a = nnc.Tensor(buf)
    if k != a_shape[-1]:
        a = a.view(a_shape[:-1] + (k,), offset=0, strides=(a_shape[-1], 1))
    w = rng.standard_normal(w_shape).astype(np.float32)
    bias = rng.standard_normal(w_shape[1]).astype(np.float32)
    want = a.numpy().astype(np.float64) @ w.astype(np.float64) + bias
    got = {}
    was = gemm_opt._tune_copies(False)
    try:
        for copies in (False, True):
            gemm_opt._tune_copies(copies)
            for threads in (1, 2):
                nnc.set_intra_op_threads(threads)
                out = nnc.Tensor(np.full(want.shape, np.nan, np.float32))
                nnc.cmd_exec(nnc.Cmd("GEMM", backend="CPU_OPT"),
                             [a, nnc.Tensor(w), nnc.Tensor(bias)], [out])
                got[copies, threads] = out.numpy().view(np.int32).copy()
    finally:
        nnc.set_intra_op_threads(None)
        gemm_opt._tune_copies(was)
    for key, v in got.items():
        np.testing.assert_array_equal(v, got[False, 1], err_msg=str(key))
    eps = float(np.finfo(np.float32).eps)
    atol = k * eps * float(np.abs(buf).max()) * float(np.abs(w).max()) * 2 + eps * 4
    np.testing.assert_allclose(got[True, 1].view(np.float32), want, rtol=1e-5, atol=atol)


def test_gemm_frozen_weights_packed_once_and_unfrozen_ones_repacked(kernel_isa):
    rng = np.random.default_rng(22)
    a = rng.standard_normal((1, 256)).astype(np.float32)
    w = rng.standard_normal((100, 256)).astype(np.float32)
    y = np.zeros((1, 100), np.float32)
    g = nnc.Graph()
    g.exec(nnc.Cmd("GEMM", transpose_b=True, backend="CPU_OPT"), [a, w], [y])
    for _ in range(2):
        g.run()
        np.testing.assert_allclose(y, a @ w.T, rtol=1e-5, atol=1e-4)
        w *= -2.0                           # not frozen: the next run sees it
    assert g.memory()["packed_bytes"] == 0
    g.freeze()
    g.run()
    np.testing.assert_allclose(y, a @ w.T, rtol=1e-5, atol=1e-4)
    packed = g.memory()["packed_bytes"]
    assert packed >= w.nbytes
    g.run()
    assert g.memory()["packed_bytes"] == packed
