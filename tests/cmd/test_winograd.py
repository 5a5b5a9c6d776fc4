"""CONVOLUTION's CPU_OPT_WINOGRAD (nnc/cmd/convolution/winograd.pyx): F(4x4, 3x3) for 3x3 stride-1
convolutions, within docs/commands.md's tolerance of CPU_REF, refusing every other shape, chosen
by autotune where it measures faster."""

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cmd_nn import conv_ref, strided

import nnc
from nnc.cmd.convolution import conv_shape

WINOGRAD = "CPU_OPT_WINOGRAD"
# docs/commands.md, "CPU_OPT_WINOGRAD": this many times CPU_OPT's tolerance.
EXTRA = 16


def close_winograd(got, want, dtype, c, x, w, bias=None):
    """|got - want| <= EXTRA * 9 C eps |x|max |w|max + eps |bias|max (+ 4 eps relative)."""
    eps = float(np.finfo(dtype).eps)
    scale = float(np.abs(x).max(initial=0)) * float(np.abs(w).max(initial=0))
    atol = EXTRA * 9 * c * eps * scale
    atol += eps * (0 if bias is None else float(np.abs(bias).max(initial=0)))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=4 * eps,
                               atol=atol + 1e-30)


def run(x, w, bias, padding, dtype, backend=WINOGRAD):
    cmd = nnc.Cmd("CONVOLUTION", padding=padding, backend=backend)
    out = np.full(conv_shape(cmd, x.shape, w.shape), np.nan, dtype)
    nnc.cmd_exec(cmd, [x, w] if bias is None else [x, w, bias], [out])
    return out


@st.composite
def cases(draw):
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    return dict(
        pad=pad,
        h=draw(st.integers(max(1, 3 - pad[0] - pad[2]), 13)),   # not multiples of the tile
        wd=draw(st.integers(max(1, 3 - pad[1] - pad[3]), 13)),
        c=draw(st.integers(1, 9)), o=draw(st.integers(1, 6)),
        batch=draw(st.sampled_from([(), (1,), (3,)])),
        with_bias=draw(st.booleans()),
        dtype=draw(st.sampled_from(["float32", "float64"])),
        data=draw(st.sampled_from(["normal", "uniform", "scaled"])),
    )


@settings(max_examples=150, deadline=None)
@given(case=cases())
def test_winograd_matches_the_definition(case):
    rng = np.random.default_rng(case["h"] * 100 + case["wd"])
    dtype = case["dtype"]
    draw = {"normal": rng.standard_normal, "uniform": lambda s: rng.uniform(0, 1, s),
            "scaled": lambda s: rng.uniform(-1, 1, s) * 10.0 ** rng.uniform(-3, 3, s)}
    fn = draw[case["data"]]
    x = fn(case["batch"] + (case["h"], case["wd"], case["c"])).astype(dtype)
    w = fn((case["o"], 3, 3, case["c"])).astype(dtype)
    bias = rng.standard_normal(case["o"]).astype(dtype) if case["with_bias"] else None
    want = conv_ref(x, w, bias, (1, 1), case["pad"], 1)
    close_winograd(run(x, w, bias, case["pad"], dtype), want, dtype, case["c"], x, w, bias)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, o, pad", [
    ((2, 30, 29, 70), 66, 1),            # channels past one transform chunk; several parts
    ((1, 37, 38, 130), 5, (0, 2, 1, 0)),  # two chunks and a remainder; asymmetric padding
    ((45, 43, 3), 129, 0),               # no batch axis; O past two chunks
])
def test_winograd_parts_on_the_pool(kernel_isa, shape, o, pad, dtype, threads):
    """Tiles cut into parts that idle pool threads take; the weights transformed in parts too
    (in float32 straight into the GEMM tiles' panels at each ISA level, the last panel's
    columns past O zeroed): every split gives CPU_REF's result, at one thread or several."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((o, 3, 3, shape[-1])).astype(dtype)
    bias = rng.standard_normal(o).astype(dtype)
    want = run(x.astype(np.float64), w.astype(np.float64), bias.astype(np.float64), pad,
               np.float64, "CPU_REF")
    nnc.set_intra_op_threads(threads)
    try:
        got = run(x, w, bias, pad, dtype)
        again = run(x, w, bias, pad, dtype)
    finally:
        nnc.set_intra_op_threads(None)
    close_winograd(got, want, dtype, shape[-1], x, w, bias)
    np.testing.assert_array_equal(got, again)     # deterministic, whatever thread ran a part


@pytest.mark.parametrize("shape, o", [((1, 14, 14, 40), 100), ((2, 7, 7, 24), 40)])
def test_winograd_few_tiles_split_across_output_channels_give_the_same_bits(kernel_isa, shape,
                                                                            o):
    """float32 with few tiles (a 14x14 map is 16 tiles, one part of them): with a helper that
    may join, parts are cut across output channels as well, each making its tiles' V; every
    output is still the same sum, so the bits equal the uncut call's."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((o, 3, 3, shape[-1])).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    size = nnc.get_num_threads()
    try:
        nnc.set_num_threads(2)
        outs = []
        for threads in (1, 2, 1):
            nnc.set_intra_op_threads(threads)
            outs.append(run(x, w, bias, 1, "float32"))
    finally:
        nnc.set_intra_op_threads(None)
        nnc.set_num_threads(size)
    for got in outs[1:]:
        np.testing.assert_array_equal(got.view(np.int32), outs[0].view(np.int32))
    want = conv_ref(x.astype(np.float64), w.astype(np.float64), bias.astype(np.float64),
                    (1, 1), (1, 1, 1, 1), 1)
    close_winograd(outs[1], want, "float32", shape[-1], x, w, bias)


def test_winograd_into_concat_slice_from_strided_input():
    """Inception's pattern: the output is a channel slice of a concat buffer, the input a
    channel slice of another tensor (pixel strides wider than the channels)."""
    rng = np.random.default_rng(4)
    big = rng.standard_normal((2, 11, 9, 7)).astype(np.float32)
    x = nnc.Tensor(big).view((2, 11, 9, 4), 2, (693, 63, 7, 1))       # channels 2..5
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    cat = np.full((2, 11, 9, 8), -9.0, np.float32)
    out = nnc.Tensor(cat).view((2, 11, 9, 3), 4, (792, 72, 8, 1))     # channels 4..6
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=1, backend=WINOGRAD), [x, w, bias], [out])
    want = conv_ref(big[..., 2:6], w, bias, (1, 1), (1, 1, 1, 1), 1)
    close_winograd(out.numpy(), want, "float32", 4, big, w, bias)
    assert (cat[..., :4] == -9).all() and (cat[..., 7] == -9).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_winograd_without_input_channels_gives_the_bias(dtype):
    x, w = np.ones((2, 5, 6, 0), dtype), np.ones((3, 3, 3, 0), dtype)
    bias = np.arange(3, dtype=dtype)
    out = run(x, w, bias, 1, dtype)
    np.testing.assert_array_equal(out, np.broadcast_to(bias, (2, 5, 6, 3)))
    np.testing.assert_array_equal(run(x, w, None, (0, 1, 2, 0), dtype), 0)


def test_winograd_sees_weights_overwritten_between_runs():
    """The weights are transformed on every run: a graph whose weights the user overwrites in
    place computes with the new ones."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 10, 10, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 6)).astype(np.float32)
    out = np.zeros((1, 10, 10, 4), np.float32)
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", padding=1, backend=WINOGRAD), [x, w], [out])
    for _ in range(3):
        g.run()
        close_winograd(out, conv_ref(x, w, None, (1, 1), (1, 1, 1, 1), 1), "float32", 6, x, w)
        w[...] = rng.standard_normal(w.shape)
        x[...] = rng.standard_normal(x.shape)


@pytest.mark.parametrize("params, w_shape, fragment", [
    (dict(stride=2), (2, 3, 3, 4), "stride 1"),
    (dict(stride=(1, 2)), (2, 3, 3, 4), "stride 1"),
    ({}, (2, 5, 5, 4), "3x3 kernels"),
    (dict(padding=(0, 1)), (2, 1, 3, 4), "3x3 kernels"),
    ({}, (2, 1, 1, 4), "3x3 kernels"),
    (dict(groups=2), (2, 3, 3, 2), "groups 1"),
])
def test_winograd_refuses_other_shapes_when_pinned(params, w_shape, fragment):
    x = np.ones((1, 9, 9, 4), np.float32)
    w = np.ones(w_shape, np.float32)
    cmd = nnc.Cmd("CONVOLUTION", backend=WINOGRAD, **params)
    out = np.zeros(conv_shape(cmd, x.shape, w.shape), np.float32)
    with pytest.raises(nnc.CommandError, match=f"{WINOGRAD} of CONVOLUTION does not accept") \
            as info:
        nnc.cmd_exec(cmd, [x, w], [out])
    assert fragment in str(info.value)
    # Default selection takes CPU_OPT for these (exact: sums of a few ones).
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", **params), [x, w], [out])
    want = np.zeros(out.shape, np.float32)
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF", **params), [x, w], [want])
    np.testing.assert_array_equal(out, want)


def test_winograd_refuses_strided_channels_and_float16():
    x = strided(np.ones((6, 6, 2), np.float32))         # every other element: channels too
    with pytest.raises(nnc.CommandError, match="channels contiguous"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=WINOGRAD),
                     [x, np.ones((1, 3, 3, 2), np.float32)], [np.zeros((4, 4, 1), np.float32)])
    h = np.ones((6, 6, 2), np.float16)
    with pytest.raises(nnc.CommandError, match="does not accept float16"):
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=WINOGRAD),
                     [h, np.ones((1, 3, 3, 2), np.float16)], [np.zeros((4, 4, 1), np.float16)])


def test_default_selection_keeps_im2col():
    names = nnc.backends("CONVOLUTION", device="cpu")
    assert names[0] == "CPU_OPT" and WINOGRAD in names and names[-1] == "CPU_REF"
    info = {b.name: b for b in nnc.command_info("CONVOLUTION").backends}
    assert info["CPU_OPT"].priority > info[WINOGRAD].priority > info["CPU_REF"].priority
    assert info[WINOGRAD].is_c
    g = nnc.Graph()
    x, w = np.ones((1, 8, 8, 3), np.float32), np.ones((2, 3, 3, 3), np.float32)
    e = g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [np.zeros((1, 8, 8, 2), np.float32)])
    assert e.backend == "CPU_OPT"


def _clock(fast):
    """A fake time.perf_counter for autotune: the candidate ``fast`` (an index into the
    candidates, timed in that order, one pair of readings each) takes 1 s, the others 5 s."""
    state = {"calls": 0, "now": 0.0, "n": 0}

    def perf_counter():
        k = state["calls"]
        state["calls"] += 1
        if k % 2:
            state["now"] += 1.0 if (k // 2) % state["n"] == fast else 5.0
        return state["now"]

    return state, perf_counter


@pytest.mark.parametrize("winner", [WINOGRAD, "CPU_OPT"])
def test_autotune_picks_winograd_where_it_measures_faster(monkeypatch, winner):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 20, 20, 8)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 8)).astype(np.float32)
    out = np.zeros((1, 20, 20, 5), np.float32)
    # CPU_REF is Python: with C backends accepting, autotune times only those.
    assert nnc.backends("CONVOLUTION", device="cpu") == ["CPU_OPT", WINOGRAD, "CPU_REF"]
    candidates = ["CPU_OPT", WINOGRAD]
    state, clock = _clock(candidates.index(winner))
    state["n"] = len(candidates)
    monkeypatch.setattr(time, "perf_counter", clock)
    cmd = nnc.Cmd("CONVOLUTION", padding=1)
    assert nnc.cmd_autotune(cmd, [x, w], [out]).name == winner
    assert state["calls"] == 2 * 3 * len(candidates)   # every candidate ran, three trials
    # The graph keeps what autotune measured, and its runs compute the convolution with it.
    g = nnc.Graph()
    e = g.exec(cmd, [x, w], [out])
    state["calls"] = 0
    assert g.autotune() == (1 if winner == WINOGRAD else 0)
    monkeypatch.undo()
    assert e.backend == winner
    g.run()
    close_winograd(out, conv_ref(x, w, None, (1, 1), (1, 1, 1, 1), 1), "float32", 8, x, w)


def test_autotune_really_times_winograd():
    """Without a fake clock: autotune runs CPU_OPT_WINOGRAD among the others (no error drops it)
    and keeps one of them; which one is up to the machine."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 40, 40, 32)).astype(np.float32)
    w = rng.standard_normal((32, 3, 3, 32)).astype(np.float32)
    best = nnc.cmd_autotune(nnc.Cmd("CONVOLUTION", padding=1), [x, w],
                            [np.zeros((1, 40, 40, 32), np.float32)])
    assert best.name in ("CPU_OPT", WINOGRAD, "CPU_REF")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_winograd_applies_the_fused_relu(dtype):
    """activation="relu" (Graph.simplify's fusion) is applied in the output transform: the
    result is CPU_REF's conv + bias through max(0, .), and autotune may pick this backend for
    a fused node without changing its output."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 13, 11, 7)).astype(dtype)
    w = rng.standard_normal((9, 3, 3, 7)).astype(dtype)
    bias = rng.standard_normal(9).astype(dtype)
    for b in (bias, None):
        want = np.maximum(conv_ref(x, w, b, (1, 1), (1, 1, 1, 1), 1), 0)
        cmd = nnc.Cmd("CONVOLUTION", padding=1, activation="relu", backend=WINOGRAD)
        out = np.full(want.shape, np.nan, dtype)
        nnc.cmd_exec(cmd, [x, w] if b is None else [x, w, b], [out])
        close_winograd(out, want, dtype, 7, x, w, b)
        assert (out >= 0).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_frozen_weights_transform_once(dtype):
    """Frozen weights' U is made on the first run and kept (Graph.memory counts it); the
    results are those of transforming them per run."""
    rng = np.random.default_rng(31)
    x = rng.standard_normal((1, 12, 12, 8)).astype(dtype)
    w = rng.standard_normal((16, 3, 3, 8)).astype(dtype)
    y = np.zeros((1, 12, 12, 16), dtype)
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", padding=1, backend=WINOGRAD), [x, w], [y])
    g.run()
    want = y.copy()
    assert g.memory()["packed_bytes"] == 0
    g.freeze()
    for _ in range(2):
        y[...] = np.nan
        g.run()
        np.testing.assert_array_equal(y, want)
    itemsize = np.dtype(dtype).itemsize
    assert g.memory()["packed_bytes"] >= 36 * 16 * 8 * itemsize
