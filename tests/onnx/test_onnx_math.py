"""nnc.onnx for nnc/onnx/_ops_math.py: LeakyRelu, Elu, Selu, Celu, ThresholdedRelu, Softplus,
Softsign, Mish, Swish, Reciprocal and the elementary functions (Floor .. Atanh). Each against
onnxruntime (after a Conv, so NCHW values held as NHWC go through the layout, in place), save/load
round trips writing the operator back, and the attributes the loader refuses."""

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import close, commands, model, nnc_run, ort_run  # noqa: E402
from test_onnx_ops import conv_w, round_trip  # noqa: E402

import nnc.onnx  # noqa: E402

h = onnx.helper
RNG = np.random.default_rng(36)
RTOL = 1e-5

OPS = [("LeakyRelu", {}, "LEAKY_RELU"), ("LeakyRelu", {"alpha": 0.3}, "LEAKY_RELU"),
       ("Elu", {}, "ELU"), ("Elu", {"alpha": 0.5}, "ELU"), ("Selu", {}, "SELU"),
       ("Selu", {"alpha": 2.0, "gamma": 3.0}, "SELU"), ("Celu", {}, "CELU"),
       ("Celu", {"alpha": 2.0}, "CELU"), ("ThresholdedRelu", {}, "THRESHOLDED_RELU"),
       ("ThresholdedRelu", {"alpha": 0.5}, "THRESHOLDED_RELU"), ("Softplus", {}, "SOFTPLUS"),
       ("Softsign", {}, "SOFTSIGN"), ("Mish", {}, "MISH"), ("Floor", {}, "EWFLOOR"),
       ("Ceil", {}, "EWCEIL"), ("Round", {}, "EWROUND"), ("Sign", {}, "EWSIGN"),
       ("Sin", {}, "EWSIN"), ("Cos", {}, "EWCOS"), ("Atan", {}, "EWATAN"),
       ("Sinh", {}, "EWSINH"), ("Cosh", {}, "EWCOSH"), ("Asinh", {}, "EWASINH")]
# Functions defined on part of the line, and tan away from its poles (where float32 and float64
# evaluations part): fed values inside that domain.
DOMAIN = [("Tan", "EWTAN", (-1.3, 1.3)), ("Asin", "EWASIN", (-1, 1)), ("Acos", "EWACOS", (-1, 1)),
          ("Acosh", "EWACOSH", (1, 10)), ("Atanh", "EWATANH", (-1, 1))]


def _values(shape):
    # Halves, so Round's ties to even are exercised, beside ordinary values.
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    x.reshape(-1)[:8] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.0, -0.0]
    return x


@pytest.mark.parametrize("op,attrs,cmd", OPS)
def test_after_conv_in_place_matches_onnxruntime_and_round_trips(op, attrs, cmd):
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node(op, ["c"], ["y"], **attrs)]
    m = model(nodes, {"x": [1, 3, 4, 6]}, {"y": None}, {"w": conv_w()}, opset=18)
    loaded = nnc.onnx.load(m)
    x = (RNG.standard_normal((1, 3, 4, 6)) * 3).astype(np.float32)
    close(nnc_run(loaded, {"x": x})[0], ort_run(m, {"x": x})[0], RTOL)
    assert commands(loaded) == ["TRANSPOSE", "CONVOLUTION", cmd, "TRANSPOSE"]
    e = loaded.graph.topsort()[2]
    assert e.outputs[0].data_ptr == e.inputs[0].data_ptr    # in place: its input's only reader
    saved = round_trip(loaded, m)
    # save's default opset 17 has no Mish: its definition, Mul(x, Tanh(Softplus(x))).
    assert (op if op != "Mish" else "Softplus") in {n.op_type for n in saved.graph.node}


def test_reciprocal_is_ewdiv_without_a_numerator_in_place():
    # After Exp, not a Conv: 1 / x amplifies a Conv's rounding where its output nears 0.
    nodes = [h.make_node("Exp", ["x"], ["e"]), h.make_node("Reciprocal", ["e"], ["y"])]
    m = model(nodes, {"x": [3, 5]}, {"y": None}, opset=17)
    loaded = nnc.onnx.load(m)
    assert commands(loaded) == ["EWEXP", "EWDIV"]
    e = loaded.graph.topsort()[1]
    assert e.inputs[0] is None and e.outputs[0].data_ptr == e.inputs[1].data_ptr
    x = (RNG.standard_normal((3, 5)) * 3).astype(np.float32)
    np.testing.assert_allclose(nnc_run(loaded, {"x": x})[0], ort_run(m, {"x": x})[0], rtol=RTOL)
    saved = round_trip(loaded, m)
    assert "Reciprocal" in {n.op_type for n in saved.graph.node}


@pytest.mark.parametrize("op,attrs,cmd", OPS + [("Reciprocal", {}, "EWDIV")])
def test_plain_values_with_ties_and_zeros_match_onnxruntime(op, attrs, cmd):
    m = model([h.make_node(op, ["x"], ["y"], **attrs)], {"x": [3, 5]}, {"y": None}, opset=18)
    x = _values((3, 5))
    if op == "Reciprocal":
        x[x == 0] = 0.25
    got = nnc_run(nnc.onnx.load(m), {"x": x})[0]
    want = ort_run(m, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-6)
    if op in ("Round", "Floor", "Ceil", "Sign"):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op,cmd,domain", DOMAIN)
def test_functions_on_their_domain_match_onnxruntime(op, cmd, domain):
    m = model([h.make_node(op, ["x"], ["y"])], {"x": [4, 8]}, {"y": None}, opset=18)
    x = RNG.uniform(*domain, (4, 8)).astype(np.float32)
    loaded = nnc.onnx.load(m)
    assert commands(loaded) == [cmd]
    np.testing.assert_allclose(nnc_run(loaded, {"x": x})[0], ort_run(m, {"x": x})[0],
                               rtol=RTOL, atol=1e-6)
    saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs)
    assert op in {n.op_type for n in saved.graph.node}
    np.testing.assert_allclose(ort_run(saved, {saved.graph.input[0].name: x})[0],
                               ort_run(m, {"x": x})[0], rtol=RTOL, atol=1e-6)


def test_swish_is_swish_and_mish_saves_as_its_definition_before_opset_18():
    x = (RNG.standard_normal((2, 7)) * 3).astype(np.float32)
    m = model([h.make_node("Swish", ["x"], ["y"])], {"x": [2, 7]}, {"y": None}, opset=24)
    loaded = nnc.onnx.load(m)
    assert commands(loaded) == ["SWISH"]
    np.testing.assert_allclose(nnc_run(loaded, {"x": x})[0], x / (1 + np.exp(-x)), rtol=RTOL)
    m = model([h.make_node("Mish", ["x"], ["y"])], {"x": [2, 7]}, {"y": None}, opset=18)
    loaded = nnc.onnx.load(m)
    saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs,
                          opset=17)
    assert {"Softplus", "Tanh", "Mul"} <= {n.op_type for n in saved.graph.node}
    assert "Mish" not in {n.op_type for n in saved.graph.node}
    close(ort_run(saved, {saved.graph.input[0].name: x})[0], ort_run(m, {"x": x})[0], RTOL)


@pytest.mark.parametrize("op,attrs,reason", [
    ("LeakyRelu", {"alpha": float("nan")}, "attribute 'alpha'"),
    ("Selu", {"gamma": float("inf")}, "attribute 'gamma'"),
    ("Celu", {"alpha": 0.0}, "attribute 'alpha' = 0"),
    ("Swish", {"alpha": 2.0}, "attribute 'alpha' = 2.0"),
])
def test_refused_attributes_name_the_node_and_attribute(op, attrs, reason):
    m = model([h.make_node(op, ["x"], ["y"], name="act0", **attrs)], {"x": [2, 3]}, {"y": None},
              opset=24 if op == "Swish" else 18)
    with pytest.raises(nnc.onnx.UnsupportedError, match="act0") as info:
        nnc.onnx.load(m)
    assert reason in str(info.value)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [[1], [0, 2], [-1], []])
def test_reduce_log_sum_exp_matches_onnxruntime_and_round_trips(axes, keepdims):
    attrs = {"keepdims": keepdims} | ({"axes": axes} if axes else {})
    m = model([h.make_node("ReduceLogSumExp", ["x"], ["y"], **attrs)], {"x": [2, 3, 4]},
              {"y": None}, opset=17)
    x = (RNG.standard_normal((2, 3, 4)) * 30).astype(np.float32)   # exp alone would overflow
    loaded = nnc.onnx.load(m)
    assert commands(loaded) == ["REDUCE_LOGSUMEXP"]
    np.testing.assert_allclose(nnc_run(loaded, {"x": x})[0], ort_run(m, {"x": x})[0], rtol=RTOL)
    if keepdims:
        saved = round_trip(loaded, m)
        assert "ReduceLogSumExp" in {n.op_type for n in saved.graph.node}


def test_reduce_log_sum_exp_of_an_nhwc_image_after_conv():
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("ReduceLogSumExp", ["c"], ["y"], axes=[1], keepdims=1)]
    m = model(nodes, {"x": [1, 3, 4, 6]}, {"y": None}, {"w": conv_w()}, opset=17)
    x = RNG.standard_normal((1, 3, 4, 6)).astype(np.float32)
    close(nnc_run(nnc.onnx.load(m), {"x": x})[0], ort_run(m, {"x": x})[0], RTOL)


@pytest.mark.parametrize("slope_shape", [[5, 1, 1], [1], [6]])
def test_prelu_after_conv_matches_onnxruntime_and_round_trips(slope_shape):
    # A constant slope is laid out with the NHWC value: per channel it is one trailing row.
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node("PRelu", ["c", "s"], ["y"])]
    slope = RNG.uniform(-0.5, 0.5, slope_shape).astype(np.float32)
    m = model(nodes, {"x": [1, 3, 4, 6]}, {"y": None}, {"w": conv_w(), "s": slope}, opset=17)
    loaded = nnc.onnx.load(m)
    x = RNG.standard_normal((1, 3, 4, 6)).astype(np.float32)
    close(nnc_run(loaded, {"x": x})[0], ort_run(m, {"x": x})[0], RTOL)
    assert commands(loaded) == ["TRANSPOSE", "CONVOLUTION", "PRELU", "TRANSPOSE"]
    saved = round_trip(loaded, m)
    assert "PRelu" in {n.op_type for n in saved.graph.node}


@pytest.mark.parametrize("slope_shape", [[2, 5, 6], [5, 1], [1]])
def test_prelu_of_a_runtime_slope_matches_onnxruntime(slope_shape):
    m = model([h.make_node("PRelu", ["x", "s"], ["y"])], {"x": [2, 5, 6], "s": slope_shape},
              {"y": None}, opset=17)
    feeds = {"x": (RNG.standard_normal((2, 5, 6)) * 3).astype(np.float32),
             "s": RNG.uniform(-1, 1, slope_shape).astype(np.float32)}
    np.testing.assert_array_equal(nnc_run(nnc.onnx.load(m), feeds)[0], ort_run(m, feeds)[0])
