"""GELU spelled out in elementary operators (x * 0.5 * (1 + erf(x / sqrt 2)), as PyTorch's
exporters write nn.GELU) loads as one GELU command (nnc/onnx/_patterns.py), in every grouping
and operand order exporters use, with the same results as onnxruntime running the five nodes;
runs that only look alike, or whose parts are read elsewhere, stay as they are."""

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402
from test_onnx import check, close, commands, model, nnc_run, ort_run  # noqa: E402

RNG = np.random.default_rng(17)
SQRT2 = math.sqrt(2.0)


def gelu_model(grouping="outer_half", scale="div", swap=False, sqrt2=SQRT2,
               half=0.5, one=1.0):
    """MatMul -> the spelled-out GELU -> y. ``grouping``: (x * (1 + erf)) * 0.5 ("outer_half")
    or (x * 0.5) * (1 + erf) ("inner_half"); ``scale``: x / sqrt 2 as a Div or a Mul by its
    reciprocal; ``swap``: every commutative node's operands the other way round."""
    def order(a, b):
        return [b, a] if swap else [a, b]

    inits = {"w": (RNG.standard_normal((6, 5)) * 0.5).astype(np.float32),
             "sqrt2": np.array(sqrt2 if scale == "div" else 1 / sqrt2, np.float32),
             "one": np.array(one, np.float32), "half": np.array(half, np.float32)}
    nodes = [h.make_node("MatMul", ["a", "w"], ["x"]),
             h.make_node("Div", ["x", "sqrt2"], ["d"]) if scale == "div"
             else h.make_node("Mul", order("x", "sqrt2"), ["d"]),
             h.make_node("Erf", ["d"], ["e"]),
             h.make_node("Add", order("e", "one"), ["p"])]
    if grouping == "outer_half":
        nodes += [h.make_node("Mul", order("x", "p"), ["m"]),
                  h.make_node("Mul", order("m", "half"), ["y"])]
    else:
        nodes += [h.make_node("Mul", order("x", "half"), ["m"]),
                  h.make_node("Mul", order("m", "p"), ["y"])]
    return model(nodes, {"a": [4, 6]}, {"y": None}, inits)


@pytest.mark.parametrize("grouping", ["outer_half", "inner_half"])
@pytest.mark.parametrize("scale", ["div", "mul"])
@pytest.mark.parametrize("swap", [False, True])
def test_spelled_out_gelu_loads_as_one_gelu(grouping, scale, swap):
    m = gelu_model(grouping, scale, swap)
    loaded = check(m)
    assert commands(loaded) == ["GEMM", "GELU"]
    for _ in range(2):
        feeds = {"a": (RNG.standard_normal((4, 6)) * 3).astype(np.float32)}
        close(nnc_run(loaded, feeds)[0], ort_run(m, feeds)[0], rtol=1e-5)


@pytest.mark.parametrize("kw", [{"sqrt2": 1.5}, {"half": 0.4}, {"one": 2.0}])
def test_other_constants_are_not_gelu(kw):
    m = gelu_model(**kw)
    loaded = check(m)
    assert "GELU" not in commands(loaded)
    feeds = {"a": RNG.standard_normal((4, 6)).astype(np.float32)}
    close(nnc_run(loaded, feeds)[0], ort_run(m, feeds)[0], rtol=1e-5)


@pytest.mark.parametrize("read", ["e", "p", "m", "d"])
def test_a_part_read_elsewhere_is_not_rewritten(read):
    """A value inside the run that another node, or the graph's outputs, also reads keeps the
    run as it is (a GELU would leave that value unmade)."""
    m = gelu_model()
    m.graph.output.append(h.make_tensor_value_info(read, TP.FLOAT, None))
    loaded = check(m)
    assert "GELU" not in commands(loaded)
    feeds = {"a": RNG.standard_normal((4, 6)).astype(np.float32)}
    for got, want in zip(nnc_run(loaded, feeds), ort_run(m, feeds)):
        close(got, want, rtol=1e-5)


def test_erf_of_another_value_is_not_gelu():
    """x * 0.5 * (1 + erf(z / sqrt 2)) with z not x: no GELU."""
    m = gelu_model()
    m.graph.node[1].input[0] = "a2"
    m.graph.node.insert(1, h.make_node("Neg", ["x"], ["a2"]))
    loaded = check(m)
    assert "GELU" not in commands(loaded)
    feeds = {"a": RNG.standard_normal((4, 6)).astype(np.float32)}
    close(nnc_run(loaded, feeds)[0], ort_run(m, feeds)[0], rtol=1e-5)


def linear_model(bias_shape=(5,), swap=False, w_const=True, out_product=False):
    """[2, 3, 6] @ w [6, 5] + bias: a linear layer on a batch of rows, as exporters write it."""
    inits = {"b": RNG.standard_normal(bias_shape).astype(np.float32)}
    inputs = {"a": [2, 3, 6]}
    if w_const:
        inits["w"] = RNG.standard_normal((6, 5)).astype(np.float32)
    else:
        inputs["w"] = [6, 5]
    nodes = [h.make_node("MatMul", ["a", "w"], ["p"]),
             h.make_node("Add", ["b", "p"] if swap else ["p", "b"], ["y"])]
    outputs = {"y": None, "p": None} if out_product else {"y": None}
    return model(nodes, inputs, outputs, inits)


def _feeds(m):
    return {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
            .astype(np.float32) for i in m.graph.input if i.name not in
            {t.name for t in m.graph.initializer}}


@pytest.mark.parametrize("bias_shape", [(5,), (1, 5), (1, 1, 5)])
@pytest.mark.parametrize("swap", [False, True])
def test_matmul_plus_bias_row_loads_as_one_gemm(bias_shape, swap):
    m = linear_model(bias_shape, swap)
    loaded = check(m)
    assert commands(loaded) == ["GEMM"]
    (e,) = loaded.graph.execs
    assert len(e.inputs) == 3 and tuple(e.inputs[2].shape) == (5,)
    for _ in range(2):
        feeds = _feeds(m)
        close(nnc_run(loaded, feeds)[0], ort_run(m, feeds)[0], rtol=1e-5)


@pytest.mark.parametrize("kw", [{"bias_shape": (3, 5)}, {"bias_shape": (1, 1, 1, 5)},
                                {"w_const": False}, {"out_product": True}])
def test_other_adds_after_a_matmul_stay_adds(kw):
    """A bias that is not one row (or would broadcast the product to more axes), weights that
    are an input, or a product the graph also outputs: a GEMM and an ADD, as before."""
    m = linear_model(**kw)
    loaded = check(m)
    assert commands(loaded) == ["GEMM", "ADD"]
    feeds = _feeds(m)
    for got, want in zip(nnc_run(loaded, feeds), ort_run(m, feeds)):
        close(got, want, rtol=1e-5)
