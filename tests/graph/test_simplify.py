"""Graph.simplify: a CONVOLUTION and the in-place RELU that alone follows it become one
convolution with activation="relu" (NNC: ccv_nnc_symbolic_graph_simplify with
CCV_NNC_SIMPLIFY_OPS_FUSION; here on the concrete graph), and the fused convolution itself."""

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


def test_activation_must_be_none_or_relu():
    with pytest.raises(nnc.CommandError, match="activation must be None or 'relu'"):
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
