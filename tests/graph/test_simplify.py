"""Graph.simplify: a CONVOLUTION and the in-place epilogue that alone follows it (an ADD of a
residual, a RELU, a CLAMP) become one convolution (NNC: ccv_nnc_symbolic_graph_simplify with
CCV_NNC_SIMPLIFY_OPS_FUSION; here on the concrete graph), and the fused convolution itself."""

import threading

import numpy as np
import pytest

import nnc
from nnc.models.inception import build_inception_v3


def _conv_relu_graph(pinned=False, extra_reader=False, out_of_place=False):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 9, 9, 4)).astype(np.float32)
    w = rng.standard_normal((6, 3, 3, 4)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    y = np.zeros((1, 9, 9, 6), np.float32)
    z = np.zeros_like(y)
    g = nnc.Graph()
    conv = g.exec(nnc.Cmd("CONVOLUTION", padding=1, backend="CPU_OPT" if pinned else None),
                  [x, w, b], [y])
    relu = g.exec(nnc.Cmd("RELU"), [y], [z if out_of_place else y])
    g.concat(conv, relu)
    if extra_reader:
        g.concat(conv, g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [y], [z]))
    return g, conv, relu, (x, w, b), (z if out_of_place else y)


def test_conv_then_in_place_relu_fuses_and_gives_the_same_result():
    g, conv, relu, (x, w, b), y = _conv_relu_graph()
    g.run()
    want = y.copy()
    assert want.min() == 0 and (want > 0).any()        # the ReLU mattered
    y[...] = np.nan
    assert g.simplify() == 1
    assert conv.cmd.params["activation"] == "relu" and relu.cmd.name == "NOOP"
    assert [e.index for e in conv.outgoings] == [relu.index]   # edges kept
    g.run()
    np.testing.assert_array_equal(y, want)
    assert g.simplify() == 0                           # nothing left to fuse
    assert "NOOP" in g.dot()


@pytest.mark.parametrize("case", ["pinned", "extra_reader", "out_of_place"])
def test_what_simplify_leaves_alone(case):
    """A pinned backend is the user's choice; a second reader of the convolution's output
    must see it before the ReLU; a RELU into another tensor is no epilogue."""
    g, conv, relu, _, _ = _conv_relu_graph(**{case: True})
    assert g.simplify() == 0
    assert "activation" not in conv.cmd.params and relu.cmd.name == "RELU"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", ["CPU_OPT", "CPU_REF"])
def test_fused_convolution_equals_conv_then_relu(backend, dtype):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 11, 10, 6)).astype(dtype)
    w = rng.standard_normal((8, 3, 3, 3)).astype(dtype)
    for bias in (None, rng.standard_normal(8).astype(dtype)):
        want = np.zeros((2, 11, 10, 8), dtype)
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=1, groups=2, backend="CPU_REF"),
                     [x, w, bias], [want])
        np.maximum(want, 0, out=want)
        got = np.full_like(want, np.nan)
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=1, groups=2, activation="relu",
                             backend=backend), [x, w, bias], [got])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        assert (got >= 0).all()


def test_activation_must_be_one_the_convolution_fuses():
    with pytest.raises(nnc.CommandError,
                       match="activation must be None, 'relu', 'clamp', 'hard_swish' or 'swish'"):
        nnc.Cmd("CONVOLUTION", activation="gelu")


def test_inception_fuses_every_convolution_and_runs_identically_scheduled():
    g, _, out = build_inception_v3(size=75)
    g.run()
    want = out.numpy().copy()
    convs = sum(e.cmd.name == "CONVOLUTION" for e in g.topsort())
    assert g.simplify() == convs == 94
    nnc.static_schedule(g, max_streams=2)
    s = nnc.Stream()
    g.run(stream=s)
    s.wait()
    np.testing.assert_array_equal(out.numpy(), want)


def _residual_graph(act="relu", add_order=0, p=1.0, residual_shape=(1, 9, 9, 6)):
    """r = x2 * 0.5 (the residual's producer), y = conv(x), y = y + r (in place), then y's
    activation in place: ResNet's block tail."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 9, 9, 4)).astype(np.float32)
    x2 = rng.standard_normal(residual_shape).astype(np.float32)
    w = rng.standard_normal((6, 3, 3, 4)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    r = np.zeros(residual_shape, np.float32)
    y = np.zeros((1, 9, 9, 6), np.float32)
    g = nnc.Graph()
    make_r = g.exec(nnc.Cmd("SCALAR_MUL", a=0.5), [x2], [r])
    conv = g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w, b], [y])
    add = g.exec(nnc.Cmd("ADD", p=p), [y, r] if add_order == 0 else [r, y], [y])
    g.concat(conv, add)
    g.concat(make_r, add)
    tail = add
    if act == "relu":
        tail = g.exec(nnc.Cmd("RELU"), [y], [y])
    elif act == "relu6":
        tail = g.exec(nnc.Cmd("CLAMP", min=0, max=6), [y], [y])
    elif act == "clamp_hi":
        tail = g.exec(nnc.Cmd("CLAMP", max=0.5), [y], [y])     # no lower bound (NaN)
    if tail is not add:
        g.concat(add, tail)
    return g, dict(make_r=make_r, conv=conv, add=add, tail=tail), y


@pytest.mark.parametrize("act", ["relu", "relu6", "clamp_hi", None])
@pytest.mark.parametrize("add_order", [0, 1])
def test_residual_add_and_activation_fold_into_the_convolution(act, add_order):
    g, n, y = _residual_graph(act, add_order)
    g.run()
    want = y.copy()
    y[...] = np.nan
    assert g.simplify() == (2 if act else 1)
    conv = n["conv"].cmd
    assert n["add"].cmd.name == "NOOP" and len(n["conv"].inputs) == 4
    if act is not None:
        assert n["tail"].cmd.name == "NOOP"
    assert conv.params.get("activation") == {"relu": "relu", None: None}.get(act, "clamp")
    if act == "clamp_hi":
        assert conv.params["clamp"] == (-np.inf, 0.5)
    # The residual's producer now runs before the convolution that reads it.
    assert n["conv"].index in [e.index for e in n["make_r"].outgoings]
    g.run()
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    assert g.simplify() == 0
    nnc.static_schedule(g, max_streams=2)
    s = nnc.Stream()
    y[...] = np.nan
    g.run(stream=s)
    s.wait(timeout=30)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", ["scaled_add", "broadcast_add"])
def test_adds_that_are_not_a_residual_stay(case):
    """An ADD with p != 1 scales the convolution; a broadcast operand is no residual."""
    kw = dict(p=2.0) if case == "scaled_add" else dict(residual_shape=(1, 1, 1, 6))
    g, n, y = _residual_graph(None, **kw)
    g.run()
    want = y.copy()
    assert g.simplify() == 0 and n["add"].cmd.name == "ADD"
    g.run()
    np.testing.assert_array_equal(y, want)


def test_simplify_keeps_a_node_on_its_backend():
    """A fusion the node's backend cannot run is not made: a float64 convolution pinned to
    nothing but run by a backend without clamp stays unfused rather than moving to CPU_REF."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 8, 8, 4))
    w = rng.standard_normal((4, 3, 3, 4))
    y = np.zeros((1, 8, 8, 4))
    g = nnc.Graph()
    conv = g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y])
    g.concat(conv, g.exec(nnc.Cmd("CLAMP", min=0, max=6), [y], [y]))
    before = conv.backend
    g.simplify()
    assert conv.backend == before


def test_simplify_refuses_while_running_elsewhere():
    g, _, _ = _residual_graph("relu")
    started, release = threading.Event(), threading.Event()
    blocker = g.exec(nnc.Cmd.custom(lambda ins, outs: (started.set(), release.wait(10))))
    s = nnc.Stream()
    g.run(stream=s)
    try:
        assert started.wait(10)
        with pytest.raises(nnc.GraphError):
            g.simplify()
    finally:
        release.set()
        s.wait(timeout=30)
    del blocker


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("act", ["HARD_SWISH", "SWISH"])
@pytest.mark.parametrize("groups", [1, 4])
def test_hard_swish_and_swish_fold_and_give_the_same_bits(act, groups, residual):
    """conv (+ ADD) + an in-place HARD_SWISH or SWISH folds into activation="hard_swish" or
    "swish"; the fused CPU_OPT convolution applies the element-wise command's own function, so
    the graph's output is bit for bit the unfused run's."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 9, 9, 4)).astype(np.float32)
    w = rng.standard_normal((4 if groups == 4 else 6, 3, 3, 4 // groups)).astype(np.float32)
    b = rng.standard_normal(w.shape[0]).astype(np.float32)
    r = rng.standard_normal((1, 9, 9, w.shape[0])).astype(np.float32)
    y = np.zeros((1, 9, 9, w.shape[0]), np.float32)
    g = nnc.Graph()
    conv = g.exec(nnc.Cmd("CONVOLUTION", padding=1, groups=groups), [x, w, b], [y])
    prev = conv
    if residual:
        prev = g.exec(nnc.Cmd("ADD"), [y, r], [y])
        g.concat(conv, prev)
    tail = g.exec(nnc.Cmd(act), [y], [y])
    g.concat(prev, tail)
    g.run()
    want = y.copy()
    y[...] = np.nan
    assert g.simplify() == (2 if residual else 1)
    assert conv.cmd.params["activation"] == act.lower() and tail.cmd.name == "NOOP"
    assert conv.backend == "CPU_OPT"
    g.run()
    np.testing.assert_array_equal(y, want)

