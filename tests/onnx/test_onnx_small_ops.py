"""nnc.onnx for LRN, Sum, Mean, Dropout (its mask output, training_mode) and Identity with
optional inputs: against onnxruntime on small models, save round trips, and the refusals.
Tolerance as in tests/onnx/test_onnx.py."""

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import (  # noqa: E402
    check,
    close,
    commands,
    model,
    nnc_run,
    ort_run,
    saved_runs,
)

import nnc.onnx  # noqa: E402

h = onnx.helper
TP = onnx.TensorProto
RNG = np.random.default_rng(33)


@pytest.mark.parametrize("size, alpha, beta, bias", [(5, 1e-4, 0.75, 1.0), (3, 0.5, 0.6, 2.0),
                                                    (1, 1.0, 1.0, 0.5), (7, 0.01, 0.5, 1.0)])
def test_lrn_after_conv_and_round_trip(size, alpha, beta, bias):
    w = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("LRN", ["c"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)]
    m = model(nodes, {"x": [2, 3, 6, 5]}, {"y": None}, {"w": w})
    loaded = check(m)
    assert "LRN" in commands(loaded)
    saved = saved_runs(loaded, {"x": RNG.standard_normal((2, 3, 6, 5)).astype(np.float32)})
    assert "LRN" in {n.op_type for n in saved.graph.node}


def test_lrn_refusals():
    node = h.make_node("LRN", ["x"], ["y"], size=3)
    with pytest.raises(nnc.onnx.UnsupportedError, match="only \\[N, C, H, W\\] inputs"):
        nnc.onnx.load(model([node], {"x": [1, 4, 5]}, {"y": None}))


@pytest.mark.parametrize("op", ["Sum", "Mean"])
@pytest.mark.parametrize("shapes", [[[2, 3, 4]], [[2, 3, 4]] * 2, [[2, 3, 4]] * 4,
                                    [[2, 3, 4], [3, 4], [1, 3, 1]]])
def test_sum_and_mean(op, shapes):
    names = [f"i{k}" for k in range(len(shapes))]
    node = h.make_node(op, names, ["y"])
    check(model([node], dict(zip(names, shapes)), {"y": None}))


@pytest.mark.parametrize("op", ["Sum", "Mean"])
def test_sum_and_mean_of_images_and_constants_stay_nhwc(op):
    w = RNG.standard_normal((4, 3, 1, 1)).astype(np.float32)
    b = RNG.standard_normal((4, 1, 1)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["a"]), h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node(op, ["a", "c", "b"], ["y"])]
    loaded = check(model(nodes, {"x": [1, 3, 5, 6]}, {"y": None}, {"w": w, "b": b}))
    assert commands(loaded).count("TRANSPOSE") == 2     # in once, out once: the sum is NHWC
    saved_runs(loaded, {"x": RNG.standard_normal((1, 3, 5, 6)).astype(np.float32)})


def dropout_model(outputs, inputs=("x",), inits=None, opset=17):
    nodes = [h.make_node("Dropout", list(inputs), ["d", "mask"][:len(outputs)]),
             h.make_node("Identity", ["d"], ["y"])]
    outs = [h.make_tensor_value_info("y", TP.FLOAT, None)]
    if len(outputs) > 1 and outputs[1]:
        outs.append(h.make_tensor_value_info("mask", TP.BOOL, None))
    g = h.make_graph(nodes, "t", [h.make_tensor_value_info("x", TP.FLOAT, [2, 5])], outs,
                     [onnx.numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("inputs, inits", [
    (("x",), None),
    (("x", "ratio"), {"ratio": np.array(0.5, np.float32)}),
    (("x", "", "tm"), {"tm": np.array(False)}),                # an optional input left out
    (("x", "ratio", "tm"), {"ratio": np.array(0.2, np.float32), "tm": np.array(False)}),
])
def test_dropout_inference_with_its_mask_output(inputs, inits):
    m = dropout_model(["d", "mask"], inputs, inits)
    loaded = nnc.onnx.load(m)
    feeds = {"x": RNG.standard_normal((2, 5)).astype(np.float32)}
    got, want = nnc_run(loaded, feeds), ort_run(m, feeds)
    close(got[0], want[0])
    assert got[1].dtype == np.uint8 and want[1].dtype == np.bool_
    assert got[1].shape == want[1].shape and (got[1] == want[1]).all()
    assert set(commands(loaded)) <= {"DATA_TRANSFER", "NOOP"}


def test_dropout_mask_unused_and_training_mode_refused():
    m = dropout_model(["d", "mask"], ("x",))
    del m.graph.output[1]                               # the mask has a name, no reader
    check(m)
    m = dropout_model(["d"], ("x", "", "tm"), {"tm": np.array(True)})
    with pytest.raises(nnc.onnx.UnsupportedError, match="training_mode must be a constant False"):
        nnc.onnx.load(m)


def test_ceil_mode_pools_save_round_trip():
    nodes = [h.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                         ceil_mode=1),
             h.make_node("AveragePool", ["p"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                         pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)]
    loaded = check(model(nodes, {"x": [1, 3, 13, 12]}, {"y": None}))
    saved = saved_runs(loaded, {"x": RNG.standard_normal((1, 3, 13, 12)).astype(np.float32)})
    pools = [n for n in saved.graph.node if n.op_type in ("MaxPool", "AveragePool")]
    assert [a.i for n in pools for a in n.attribute if a.name == "ceil_mode"] == [1, 1]
