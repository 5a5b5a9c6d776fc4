"""nnc.onnx for ConvTranspose: against onnxruntime on small models (strides, pads, output
padding, output_shape, auto_pad, group, dilations), saved back as ConvTranspose, and the
refusals. Tolerance as in
tests/onnx/test_onnx.py."""

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import check, close, commands, model, nnc_run, ort_run  # noqa: E402

import nnc.onnx  # noqa: E402

h = onnx.helper
RNG = np.random.default_rng(23)


@pytest.mark.parametrize("x_shape, c_out, kernel, attrs, bias", [
    ((1, 3, 5, 5), 4, (3, 3), {}, True),
    ((2, 4, 4, 5), 6, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ((1, 4, 4, 4), 4, (4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2}, False),
    ((1, 2, 3, 4), 3, (3, 3), {"strides": [2, 2], "output_padding": [1, 1]}, True),
    ((1, 2, 4, 3), 2, (3, 2), {"strides": [3, 2], "dilations": [2, 1], "pads": [1, 0, 0, 1]},
     True),
    ((1, 3, 4, 4), 3, (3, 3), {"strides": [2, 2], "output_shape": [9, 10]}, True),
    ((1, 3, 4, 4), 3, (3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, True),
    ((1, 3, 4, 4), 3, (3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}, True),
    ((1, 3, 4, 4), 3, (3, 3), {"strides": [2, 2], "auto_pad": "VALID"}, True),
    ((1, 6, 4, 4), 6, (3, 3), {"group": 6, "pads": [1, 1, 1, 1]}, True),
])
def test_conv_transpose_matches_onnxruntime(x_shape, c_out, kernel, attrs, bias):
    groups = attrs.get("group", 1)
    inits = {"w": RNG.standard_normal((x_shape[1], c_out // groups) + kernel)
             .astype(np.float32)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = RNG.standard_normal(c_out).astype(np.float32)
        ins.append("b")
    node = h.make_node("ConvTranspose", ins, ["y"], kernel_shape=list(kernel), **attrs)
    loaded = check(model([node], {"x": list(x_shape)}, {"y": None}, inits))
    assert "CONVOLUTION_TRANSPOSE" in commands(loaded)
    # Saved back: ConvTranspose again, which onnxruntime and nnc run to the same values.
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32)}
    want = nnc_run(loaded, feeds)
    saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs,
                          input_names=loaded.input_names, output_names=loaded.output_names)
    assert "ConvTranspose" in {n.op_type for n in saved.graph.node}
    for got, w in zip(ort_run(saved, feeds), want):
        close(got, w)
    for got, w in zip(nnc_run(nnc.onnx.load(saved), feeds), want):
        close(got, w)


def test_conv_transpose_refusals():
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    node = h.make_node("ConvTranspose", ["x", "w"], ["y"])
    m = model([node], {"x": [1, 2, 4, 4], "w": [2, 3, 3, 3]}, {"y": None})
    with pytest.raises(nnc.onnx.UnsupportedError, match="constant weights"):
        nnc.onnx.load(m)
    node = h.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[2, 2])
    m = model([node], {"x": [1, 2, 4, 4]}, {"y": None}, {"w": w})
    with pytest.raises(nnc.onnx.OnnxError, match="kernel_shape"):
        nnc.onnx.load(m)
