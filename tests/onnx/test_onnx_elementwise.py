"""nnc.onnx for the element-wise family's operators: HardSwish, HardSigmoid, Gelu (opset 20),
Erf, Abs, Neg, Div, Sub, Pow, Min and Max (variadic, folded pairwise). Each against onnxruntime
on small models (after a Conv, so NCHW values held as NHWC go through the layout, and on plain
values with broadcasting), save/load round trips, and the forms the loader refuses."""

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import close, commands, model, nnc_run, ort_run  # noqa: E402
from test_onnx_ops import conv_w, round_trip  # noqa: E402

import nnc.onnx  # noqa: E402

h = onnx.helper
RNG = np.random.default_rng(35)
RTOL = 1e-5


def compare(m, feeds=None, **kw):
    loaded = nnc.onnx.load(m, **kw)
    feeds = feeds or {n: (RNG.standard_normal(t.shape) * 3).astype(np.float32)
                      for n, t in zip(loaded.input_names, loaded.inputs)}
    for got, want in zip(nnc_run(loaded, feeds), ort_run(m, feeds)):
        close(got, want, RTOL)
    return loaded


UNARY = [("HardSwish", {}, "HARD_SWISH"), ("HardSigmoid", {}, "HARD_SIGMOID"),
         ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, "HARD_SIGMOID"), ("Erf", {}, "ERF"),
         ("Abs", {}, "EWABS"), ("Neg", {}, "SCALAR_MUL"), ("Gelu", {}, "GELU"),
         ("Gelu", {"approximate": "tanh"}, "GELU")]


@pytest.mark.parametrize("op,attrs,cmd", UNARY)
def test_unary_after_conv_in_place_matches_onnxruntime_and_round_trips(op, attrs, cmd):
    opset = 20 if op == "Gelu" else 17
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node(op, ["c"], ["y"], **attrs)]
    m = model(nodes, {"x": [1, 3, 4, 6]}, {"y": None}, {"w": conv_w()}, opset=opset)
    loaded = compare(m)
    assert commands(loaded) == ["TRANSPOSE", "CONVOLUTION", cmd, "TRANSPOSE"]
    e = loaded.graph.topsort()[2]
    assert e.inputs[0].data_ptr == e.outputs[0].data_ptr    # in place: its input's only reader
    if op == "HardSigmoid":
        # ONNX's float attributes are float32; absent, ONNX's defaults.
        want = {"alpha": 0.2, "beta": 0.5} | {k: float(np.float32(v)) for k, v in attrs.items()}
        assert dict(e.cmd.params) == want
    if op == "Gelu":
        assert e.cmd.params["tanh"] == (attrs.get("approximate") == "tanh")
    saved = round_trip(loaded, m)
    ops = {n.op_type for n in saved.graph.node}
    assert {"HardSwish": "HardSwish", "HardSigmoid": "HardSigmoid", "Erf": "Erf", "Abs": "Abs",
            "Neg": "Neg", "Gelu": "Tanh" if attrs else "Erf"}[op] in ops


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_saves_as_gelu_from_opset_20(approximate):
    m = model([h.make_node("Gelu", ["x"], ["y"], approximate=approximate)], {"x": [2, 9]},
              {"y": None}, opset=20)
    loaded = compare(m)
    x = (RNG.standard_normal((2, 9)) * 3).astype(np.float32)
    want = nnc_run(loaded, {"x": x})[0]
    for opset in (17, 20):
        saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs,
                              input_names=["x"], opset=opset)
        assert ("Gelu" in {n.op_type for n in saved.graph.node}) == (opset >= 20)
        close(ort_run(saved, {"x": x})[0], want, RTOL)


@pytest.mark.parametrize("op,cmd", [("Div", "EWDIV"), ("Sub", "ADD"), ("Pow", "EWPOW"),
                                    ("Min", "MIN"), ("Max", "MAX")])
@pytest.mark.parametrize("b_shape,b_const", [((3, 7), False), ((7,), True), ((1, 7), False),
                                             ((), True), ((3, 1), True)])
def test_binary_with_broadcasting_matches_onnxruntime(op, cmd, b_shape, b_const):
    b = (RNG.uniform(0.5, 2.0, b_shape)).astype(np.float32)
    inputs = {"x": [3, 7]} if b_const else {"x": [3, 7], "b": list(b_shape)}
    nodes = [h.make_node("Abs", ["x"], ["ax"]) if op == "Pow" else
             h.make_node("Identity", ["x"], ["ax"]), h.make_node(op, ["ax", "b"], ["y"])]
    m = model(nodes, inputs, {"y": None}, {"b": b} if b_const else None)
    feeds = {"x": (RNG.standard_normal((3, 7)) * 3).astype(np.float32)}
    if not b_const:
        feeds["b"] = b
    loaded = compare(m, feeds)
    assert commands(loaded)[-1] == cmd
    if op == "Sub":
        assert loaded.graph.topsort()[-1].cmd.params == {"p": 1.0, "q": -1.0}


@pytest.mark.parametrize("op", ["Div", "Sub", "Pow", "Min", "Max"])
def test_binary_after_conv_in_nhwc_and_round_trip(op):
    c = np.array([0.5, 2.0, 1.5, 3.0, 0.25], np.float32).reshape(1, 5, 1, 1)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node("Abs", ["c"], ["a"]),
             h.make_node(op, ["a", "k"], ["y"])]
    m = model(nodes, {"x": [1, 3, 4, 6]}, {"y": None}, {"w": conv_w(), "k": c})
    loaded = compare(m)
    assert commands(loaded) == ["TRANSPOSE", "CONVOLUTION", "EWABS",
                                {"Div": "EWDIV", "Sub": "ADD", "Pow": "EWPOW", "Min": "MIN",
                                 "Max": "MAX"}[op], "TRANSPOSE"]
    saved = round_trip(loaded, m)
    assert op in {n.op_type for n in saved.graph.node}


@pytest.mark.parametrize("op", ["Min", "Max"])
@pytest.mark.parametrize("shapes", [
    [(3, 4)], [(3, 4), (3, 4), (3, 4)], [(2, 1, 1), (1, 3, 1), (1, 1, 4)],
    [(4,), (3, 4), (1,), (3, 1)],
])
def test_variadic_min_max_fold_pairwise(op, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    m = model([h.make_node(op, names, ["y"])], {n: list(s) for n, s in zip(names, shapes)},
              {"y": None})
    loaded = compare(m)
    assert commands(loaded) == [op.upper()] * max(1, len(shapes) - 1)
    round_trip(loaded, m)


def test_min_max_nan_and_edges_match_onnxruntime():
    x = np.array([[np.nan, 1.0, -2.0, 0.0, 5.0, -np.inf]], np.float32)
    k = np.array([[1.0, np.nan, -3.0, -1.0, np.inf, 0.0]], np.float32)
    for op in ("Min", "Max"):
        m = model([h.make_node(op, ["x", "k"], ["y"])], {"x": [1, 6], "k": [1, 6]}, {"y": None})
        got = nnc_run(nnc.onnx.load(m), {"x": x, "k": k})[0]
        want = ort_run(m, {"x": x, "k": k})[0]
        np.testing.assert_array_equal(got, want)


def test_activations_of_large_values_match_onnxruntime():
    x = np.array([[-1e4, -80.0, -30.0, -6.0, -3.0, 0.0, 3.0, 6.0, 30.0, 80.0, 1e4]], np.float32)
    for op, attrs in [("HardSwish", {}), ("HardSigmoid", {}), ("Erf", {}), ("Gelu", {}),
                      ("Gelu", {"approximate": "tanh"})]:
        m = model([h.make_node(op, ["x"], ["y"], **attrs)], {"x": list(x.shape)}, {"y": None},
                  opset=20 if op == "Gelu" else 17)
        got = nnc_run(nnc.onnx.load(m), {"x": x})[0]
        want = ort_run(m, {"x": x})[0]
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-6)


@pytest.mark.parametrize("op,attrs,reason", [
    ("Gelu", {"approximate": "sigmoid"}, "attribute 'approximate' = 'sigmoid'"),
    ("HardSigmoid", {"alpha": float("inf")}, "attribute 'alpha'"),
])
def test_refused_attributes_name_the_node_and_attribute(op, attrs, reason):
    m = model([h.make_node(op, ["x"], ["y"], name="act0", **attrs)], {"x": [2, 3]}, {"y": None},
              opset=20)
    with pytest.raises(nnc.onnx.UnsupportedError, match="act0") as info:
        nnc.onnx.load(m)
    assert reason in str(info.value)
