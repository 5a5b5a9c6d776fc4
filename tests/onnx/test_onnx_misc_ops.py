"""nnc.onnx for Resize/Upsample (UPSAMPLE), Pad (PAD), Gather of a runtime value, Cast,
ArgMax/ArgMin, ReduceMin/ReduceProd/ReduceL2: against onnxruntime on small models, and the
refusals naming the attribute. Tolerance as in tests/onnx/test_onnx.py."""

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import check, close, commands, model, nnc_run, ort_run  # noqa: E402

import nnc.onnx  # noqa: E402

h = onnx.helper
TP = onnx.TensorProto
RNG = np.random.default_rng(34)


def resize_model(x_shape, attrs, scales=None, sizes=None, opset=13):
    inits, ins = {}, ["x", "", ""]
    if scales is not None:
        inits["scales"] = np.asarray(scales, np.float32)
        ins[2] = "scales"
    if sizes is not None:
        inits["sizes"] = np.asarray(sizes, np.int64)
        ins.append("sizes")
    node = h.make_node("Resize", ins, ["y"], **attrs)
    return model([node], {"x": x_shape}, {"y": None}, inits, opset=opset)


@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "align_corners",
                                   "asymmetric"])
@pytest.mark.parametrize("nearest_mode", ["floor", "round_prefer_ceil", "round_prefer_floor",
                                          "ceil"])
@pytest.mark.parametrize("scale", [2.0, 3.0])
def test_resize_nearest_loads_exactly_or_is_refused(coord, nearest_mode, scale):
    m = resize_model([1, 2, 4, 5], {"mode": "nearest", "coordinate_transformation_mode": coord,
                                    "nearest_mode": nearest_mode},
                     scales=[1, 1, scale, scale])
    try:
        loaded = check(m)
    except nnc.onnx.UnsupportedError as e:
        assert "nearest_mode" in str(e) and "coordinate_transformation_mode" in str(e)
        return
    assert "UPSAMPLE" in commands(loaded)


def test_resize_nearest_as_pytorch_exports_it_loads():
    # torch's F.interpolate(mode="nearest"): asymmetric + floor, an integer scale.
    m = resize_model([1, 3, 5, 4], {"mode": "nearest", "coordinate_transformation_mode":
                                    "asymmetric", "nearest_mode": "floor"},
                     scales=[1, 1, 2, 2])
    assert "UPSAMPLE" in commands(check(m))


@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "align_corners"])
@pytest.mark.parametrize("sizes", [[1, 2, 8, 10], [1, 2, 7, 3], [1, 2, 2, 2], [1, 2, 9, 1]])
def test_resize_linear(coord, sizes):
    m = resize_model([1, 2, 4, 5], {"mode": "linear", "coordinate_transformation_mode": coord},
                     sizes=sizes)
    if coord == "pytorch_half_pixel" and 1 in sizes[2:]:
        with pytest.raises(nnc.onnx.UnsupportedError, match="pytorch_half_pixel"):
            nnc.onnx.load(m)
        return
    assert "UPSAMPLE" in commands(check(m))


def test_resize_linear_after_conv_stays_nhwc_and_scales_input():
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Resize", ["c", "", "scales"], ["y"], mode="linear")]
    m = model(nodes, {"x": [2, 3, 6, 5]}, {"y": None},
              {"w": w, "scales": np.array([1, 1, 2, 2], np.float32)})
    cmds = commands(check(m))
    assert "UPSAMPLE" in cmds and cmds.count("TRANSPOSE") <= 2


@pytest.mark.parametrize("attrs, fragment", [
    ({"mode": "cubic"}, "attribute 'mode' = 'cubic'"),
    ({"mode": "linear", "antialias": 1}, "attribute 'antialias'"),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"},
     "tf_crop_and_resize"),
    ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
     "attribute 'coordinate_transformation_mode' = 'asymmetric'"),
    ({"mode": "nearest", "keep_aspect_ratio_policy": "not_larger"}, "keep_aspect_ratio_policy"),
])
def test_resize_refusals_name_the_attribute(attrs, fragment):
    m = resize_model([1, 2, 4, 5], attrs, sizes=[1, 2, 8, 10], opset=19)
    with pytest.raises(nnc.onnx.UnsupportedError, match=fragment.replace("(", "\\(")):
        nnc.onnx.load(m)
    m = resize_model([1, 2, 4, 5], {"mode": "linear"}, scales=[1, 2, 2, 2])
    with pytest.raises(nnc.onnx.UnsupportedError, match="H and W"):
        nnc.onnx.load(m)


def test_upsample_deprecated_op():
    node = h.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")
    m = model([node], {"x": [1, 2, 3, 4]}, {"y": None},
              {"s": np.array([1, 1, 2, 3], np.float32)}, opset=9)
    assert "UPSAMPLE" in commands(check(m))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("rank, pads, axes", [
    (4, [0, 0, 1, 2, 0, 0, 2, 1], None),
    (3, [1, 0, 2, 0, 1, 1], None),
    (4, [1, 2, 0, 1], [2, -1]),
])
def test_pad(mode, rank, pads, axes):
    shape = [2, 3, 4, 5][:rank]
    inits = {"pads": np.array(pads, np.int64), "v": np.array(1.5, np.float32)}
    ins = ["x", "pads", "v" if mode == "constant" else ""]
    if axes is not None:
        inits["axes"] = np.array(axes, np.int64)
        ins.append("axes")
    node = h.make_node("Pad", ins, ["y"], mode=mode)
    loaded = check(model([node], {"x": shape}, {"y": None}, inits, opset=18))
    assert "PAD" in commands(loaded)


def test_pad_refusals():
    node = h.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")
    m = model([node], {"x": [2, 3]}, {"y": None}, {"pads": np.array([1, 1, 1, 1], np.int64)},
              opset=19)
    with pytest.raises(nnc.onnx.UnsupportedError, match="attribute 'mode' = 'wrap'"):
        nnc.onnx.load(m)
    node = h.make_node("Pad", ["x", "pads"], ["y"])
    m = model([node], {"x": [2, 3]}, {"y": None}, {"pads": np.array([0, -1, 0, 0], np.int64)})
    with pytest.raises(nnc.onnx.UnsupportedError, match="negative pads"):
        nnc.onnx.load(m)


@pytest.mark.parametrize("axis, indices", [(0, [2, 0, -1]), (1, [[1, 0], [2, 2]]), (2, 1),
                                           (-1, [3]), (0, 1)])
def test_gather_of_a_runtime_value(axis, indices):
    node0 = h.make_node("Relu", ["x"], ["r"])
    node = h.make_node("Gather", ["r", "i"], ["y"], axis=axis)
    check(model([node0, node], {"x": [3, 4, 5]}, {"y": None},
                {"i": np.array(indices, np.int64)}))


def test_gather_with_runtime_indices_is_refused():
    node = h.make_node("Gather", ["x", "i"], ["y"])
    g = h.make_graph([node], "t", [h.make_tensor_value_info("x", TP.FLOAT, [3, 4]),
                                   h.make_tensor_value_info("i", TP.INT64, [2])],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(nnc.onnx.UnsupportedError):
        nnc.onnx.load(m)


@pytest.mark.parametrize("to", [TP.FLOAT, TP.FLOAT16, TP.INT32, TP.INT64])
def test_cast_at_runtime_rounds_as_onnx_runtime(to):
    nodes = [h.make_node("Mul", ["x", "k"], ["s"]), h.make_node("Cast", ["s"], ["c"], to=to),
             h.make_node("Cast", ["c"], ["y"], to=TP.FLOAT)]
    check(model(nodes, {"x": [3, 4]}, {"y": None}, {"k": np.array(7.3, np.float32)}))


def test_cast_refusal_names_the_attribute():
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Cast", ["r"], ["b"], to=TP.BOOL),
             h.make_node("Cast", ["b"], ["y"], to=TP.FLOAT)]
    with pytest.raises(nnc.onnx.UnsupportedError, match="attribute 'to'"):
        nnc.onnx.load(model(nodes, {"x": [3, 4]}, {"y": None}))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims", [(1, 1), (-1, 0), (0, 1)])
def test_argmax_argmin(op, axis, keepdims):
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node(op, ["r"], ["i"], axis=axis, keepdims=keepdims),
             h.make_node("Cast", ["i"], ["y"], to=TP.FLOAT)]
    loaded = check(model(nodes, {"x": [3, 4, 5]}, {"y": None}))
    assert op.upper() in commands(loaded)
    nodes = [h.make_node(op, ["x"], ["i"], select_last_index=1),
             h.make_node("Cast", ["i"], ["y"], to=TP.FLOAT)]
    with pytest.raises(nnc.onnx.UnsupportedError, match="select_last_index"):
        nnc.onnx.load(model(nodes, {"x": [3, 4]}, {"y": None}))


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceProd", "ReduceL2"])
@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([0, 2], 0), (None, 1)])
def test_reduce_min_prod_l2(op, axes, keepdims):
    attrs = {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    node = h.make_node(op, ["x"], ["y"], **attrs)
    loaded = check(model([node], {"x": [2, 3, 4]}, {"y": None}, opset=13))
    assert any(c.startswith("REDUCE_") for c in commands(loaded))


# -- save: each command back to ONNX, run by onnxruntime on fresh inputs ------------------------

def saved_round_trip(m, opset=17):
    """save(load(m)) computes what m does in onnxruntime, on inputs other than those memory held
    at save time; returns the saved model's operators."""
    loaded = nnc.onnx.load(m)
    saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs,
                          input_names=loaded.input_names, output_names=loaded.output_names,
                          opset=opset)
    for _ in range(2):
        feeds = {n: RNG.standard_normal(t.shape).astype(np.float32)
                 for n, t in zip(loaded.input_names, loaded.inputs)}
        got, want = ort_run(saved, feeds), ort_run(m, feeds)
        for g_, w_, nn in zip(got, want, nnc_run(loaded, feeds)):
            assert g_.dtype == w_.dtype
            close(g_, w_)
            close(nn, w_)
    return [n.op_type for n in saved.graph.node]


@pytest.mark.parametrize("coord, nearest_mode", [("asymmetric", "floor"),
                                                 ("half_pixel", "round_prefer_ceil"),
                                                 ("align_corners", "round_prefer_ceil")])
@pytest.mark.parametrize("sizes", [[1, 2, 8, 10], [1, 2, 7, 3], [1, 2, 2, 2], [1, 2, 9, 1]])
def test_save_resize_nearest(coord, nearest_mode, sizes):
    m = resize_model([1, 2, 4, 5], {"mode": "nearest", "coordinate_transformation_mode": coord,
                                    "nearest_mode": nearest_mode}, sizes=sizes)
    try:
        nnc.onnx.load(m)
    except nnc.onnx.UnsupportedError:
        return      # these sizes pick pixels UPSAMPLE cannot (the loader's refusal)
    ops = saved_round_trip(m)
    assert "Resize" in ops or ops.count("Gather") == 2


@pytest.mark.parametrize("coord", ["half_pixel", "align_corners"])
@pytest.mark.parametrize("sizes", [[1, 2, 8, 10], [1, 2, 7, 3], [1, 2, 2, 2], [1, 2, 9, 1]])
def test_save_resize_linear(coord, sizes):
    m = resize_model([1, 2, 4, 5], {"mode": "linear", "coordinate_transformation_mode": coord},
                     sizes=sizes)
    assert "Resize" in saved_round_trip(m)


@pytest.mark.parametrize("kind", ["nearest", "bilinear"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("x_shape, y_hw", [((1, 4, 5, 3), (8, 10)), ((2, 5, 3, 2), (7, 4)),
                                           ((5, 7, 3), (3, 11)), ((1, 4, 7, 2), (49, 29))])
def test_save_upsample_of_a_hand_built_graph(kind, align, x_shape, y_hw):
    """Every UPSAMPLE, at any sizes: a Resize where one picks its pixels, two Gathers else
    (nearest from 4 to 49, or with align_corners from 7 to 29: ONNX Runtime's float32
    coordinates round some pixel the other way in every mode)."""
    x = nnc.Tensor(RNG.standard_normal(x_shape).astype(np.float32))
    y = nnc.Tensor.empty(x_shape[:-3] + y_hw + x_shape[-1:], dtype="float32")
    g = nnc.Graph()
    g.exec(nnc.Cmd("UPSAMPLE", type=kind, align_corners=align), [x], [y])
    m = nnc.onnx.save(g, None, inputs=[x], outputs=[y])
    ops = [n.op_type for n in m.graph.node]
    gathers = kind == "nearest" and y_hw == (49, 29)
    assert ops.count("Gather") == (2 if gathers else 0) and ("Resize" in ops) != gathers
    for _ in range(2):
        x.numpy()[...] = RNG.standard_normal(x_shape)
        g.run()
        close(ort_run(m, {"input_0": x.numpy()})[0], y.numpy(), rtol=1e-6)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("opset", [17, 9])
def test_save_pad(mode, opset):
    x = nnc.Tensor(RNG.standard_normal((2, 3, 4)).astype(np.float32))
    y = nnc.Tensor.empty((3, 6, 5), dtype="float32")
    g = nnc.Graph()
    g.exec(nnc.Cmd("PAD", begin=(1, 2, 0), end=(0, 1, 1), mode=mode,
                   value=1.5 if mode == "constant" else 0.0), [x], [y])
    m = nnc.onnx.save(g, None, inputs=[x], outputs=[y], opset=opset)
    for _ in range(2):
        x.numpy()[...] = RNG.standard_normal(x.shape)
        g.run()
        close(ort_run(m, {"input_0": x.numpy()})[0], y.numpy(), rtol=0)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_save_pad_of_a_loaded_image(mode):
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("Pad", ["c", "pads"], ["y"], mode=mode)]
    m = model(nodes, {"x": [1, 2, 5, 6]}, {"y": None},
              {"w": RNG.standard_normal((3, 2, 1, 1)).astype(np.float32),
               "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)})
    assert "Pad" in saved_round_trip(m)


def test_save_gather_and_cast():
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("Gather", ["r", "i"], ["gt"], axis=0),
             h.make_node("Cast", ["gt"], ["c"], to=TP.FLOAT16),
             h.make_node("Cast", ["c"], ["y"], to=TP.FLOAT)]
    ops = saved_round_trip(model(nodes, {"x": [4, 3, 5]}, {"y": None},
                                 {"i": np.array([3, 0, 3], np.int64)}))
    assert "Gather" in ops and ops.count("Cast") == 2


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_save_argmax_argmin(op):
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node(op, ["r"], ["i"], axis=1, keepdims=1),
             h.make_node("Cast", ["i"], ["y"], to=TP.FLOAT)]
    ops = saved_round_trip(model(nodes, {"x": [3, 4, 5]}, {"y": None}))
    assert op in ops and "Cast" in ops


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceProd", "ReduceL2"])
@pytest.mark.parametrize("axes, keepdims, opset", [([1], 1, 13), ([0, 2], 0, 13),
                                                   ([-1], 1, 18)])
def test_save_reduce_min_prod_l2(op, axes, keepdims, opset):
    if opset >= 18:
        node = h.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
        inits = {"axes": np.array(axes, np.int64)}
    else:
        node, inits = h.make_node(op, ["x"], ["y"], axes=axes, keepdims=keepdims), {}
    m = model([node], {"x": [2, 3, 4]}, {"y": None}, inits, opset=opset)
    assert op in saved_round_trip(m, opset=opset)


def test_save_reduce_output_of_another_rank():
    """REDUCE_* may write an output lined up from the right ([2, 3] over axis 0 -> [3])."""
    x = nnc.Tensor(RNG.standard_normal((2, 3)).astype(np.float32))
    y = nnc.Tensor.empty((3,), dtype="float32")
    g = nnc.Graph()
    g.exec(nnc.Cmd("REDUCE_MIN", axes=0), [x], [y])
    g.run()
    m = nnc.onnx.save(g, None, inputs=[x], outputs=[y])
    close(ort_run(m, {"input_0": x.numpy()})[0], y.numpy(), rtol=0)


@pytest.mark.parametrize("q_shape, k_shape, causal, mask", [
    ((2, 5, 4, 8), (2, 6, 2, 8), False, (4, 5, 6)),        # grouped-query, mask [H, Sq, Sk]
    ((1, 3, 2, 4), (1, 3, 2, 4), True, None),
    ((1, 6, 2, 4), (1, 4, 1, 4), True, (6, 4)),             # Sq > Sk: rows with no key -> 0
    ((2, 4, 8), (2, 7, 8), False, (2, 1, 4, 7)),           # rank 3: one head
])
def test_save_scaled_dot_product_attention(q_shape, k_shape, causal, mask):
    v_shape = k_shape[:-1] + (3,)
    ts = [nnc.Tensor(RNG.standard_normal(s).astype(np.float32))
          for s in (q_shape, k_shape, v_shape) + ((mask,) if mask else ())]
    y = nnc.Tensor.empty(q_shape[:-1] + (3,), dtype="float32")
    g = nnc.Graph()
    g.exec(nnc.Cmd("SCALED_DOT_PRODUCT_ATTENTION", scale=0.4, is_causal=causal), ts, [y])
    m = nnc.onnx.save(g, None, inputs=ts, outputs=[y])
    assert "Softmax" in [n.op_type for n in m.graph.node]
    for _ in range(2):
        for t in ts:
            t.numpy()[...] = RNG.standard_normal(t.shape)
        g.run()
        got = ort_run(m, {f"input_{k}": t.numpy() for k, t in enumerate(ts)})[0]
        close(got, y.numpy())


def int_output_model(nodes, x_shape, out_type, inits=None):
    g = h.make_graph(nodes, "t", [h.make_tensor_value_info("x", TP.FLOAT, x_shape)],
                     [h.make_tensor_value_info("y", out_type, None)],
                     [onnx.numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims", [(1, 1), (-1, 0)])
def test_argmax_graph_output_is_int64(op, axis, keepdims):
    """An ArgMax read as a graph output comes back as ONNX Runtime's: int64, same values; saved
    back it is int64 again."""
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node(op, ["r"], ["y"], axis=axis, keepdims=keepdims)]
    m = int_output_model(nodes, [3, 4, 5], TP.INT64)
    loaded = nnc.onnx.load(m)
    assert loaded.outputs[0].dtype == np.int64
    assert commands(loaded)[-1] == "DATATYPE_CONVERSION"
    for _ in range(2):
        feeds = {"x": RNG.standard_normal((3, 4, 5)).astype(np.float32)}
        got, want = nnc_run(loaded, feeds)[0], ort_run(m, feeds)[0]
        assert got.dtype == want.dtype == np.int64
        np.testing.assert_array_equal(got, want)
    saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs)
    assert saved.graph.output[0].type.tensor_type.elem_type == TP.INT64
    feeds = {"input_0": RNG.standard_normal((3, 4, 5)).astype(np.float32)}
    np.testing.assert_array_equal(ort_run(saved, feeds)[0], ort_run(m, {"x": feeds["input_0"]})[0])


@pytest.mark.parametrize("to, dtype", [(TP.INT32, np.int32), (TP.INT64, np.int64),
                                       (TP.UINT8, np.uint8)])
def test_cast_to_an_integer_graph_output_keeps_its_type(to, dtype):
    nodes = [h.make_node("Mul", ["x", "k"], ["s"]),
             h.make_node("Abs", ["s"], ["a"]),
             h.make_node("Cast", ["a"], ["y"], to=to)]
    m = int_output_model(nodes, [3, 4], to, {"k": np.array(7.3, np.float32)})
    loaded = nnc.onnx.load(m)
    feeds = {"x": RNG.standard_normal((3, 4)).astype(np.float32)}
    got, want = nnc_run(loaded, feeds)[0], ort_run(m, feeds)[0]
    assert got.dtype == want.dtype == dtype
    np.testing.assert_array_equal(got, want)


# -- x * Sigmoid(x) as SWISH, x * HardSigmoid(x) as HARD_SWISH ----------------------------------

def conv_times_gate(gate, swap, **gate_attrs):
    c, o = 3, 8
    inits = {"w": (RNG.standard_normal((o, c, 3, 3)) * 0.4).astype(np.float32),
             "b": RNG.standard_normal(o).astype(np.float32)}
    mul = ["s", "c"] if swap else ["c", "s"]
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node(gate, ["c"], ["s"], **gate_attrs),
             h.make_node("Mul", mul, ["y"])]
    return model(nodes, {"x": [1, c, 7, 6]}, {"y": None}, inits)


@pytest.mark.parametrize("gate, attrs, cmd, act", [
    ("Sigmoid", {}, "SWISH", "swish"),
    ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, "HARD_SWISH", "hard_swish"),
])
@pytest.mark.parametrize("swap", [False, True])
def test_conv_gate_mul_loads_as_one_activation_and_fuses(gate, attrs, cmd, act, swap):
    m = conv_times_gate(gate, swap, **attrs)
    loaded = nnc.onnx.load(m)
    cmds = commands(loaded)
    assert cmds == ["TRANSPOSE", "CONVOLUTION", cmd, "TRANSPOSE"]
    assert loaded.graph.simplify() == 1
    convs = [e.cmd for e in loaded.graph.topsort() if e.cmd.name == "CONVOLUTION"]
    assert [c_.params.get("activation") for c_ in convs] == [act]
    assert cmd not in commands(loaded)
    for _ in range(2):
        feeds = {"x": RNG.standard_normal((1, 3, 7, 6)).astype(np.float32)}
        close(nnc_run(loaded, feeds)[0], ort_run(m, feeds)[0], rtol=1e-5)


def test_a_gate_read_twice_is_not_rewritten():
    """The Sigmoid's output is read by the Mul and another node (or is a graph output): it
    stays a SIGMOID and a MUL."""
    m = conv_times_gate("Sigmoid", False)
    m.graph.node.append(h.make_node("Relu", ["s"], ["r"]))
    m.graph.output.append(h.make_tensor_value_info("r", TP.FLOAT, None))
    cmds = commands(check(m))
    assert "SIGMOID" in cmds and "MUL" in cmds and "SWISH" not in cmds
    m = conv_times_gate("Sigmoid", False)
    m.graph.output.append(h.make_tensor_value_info("s", TP.FLOAT, None))
    cmds = commands(check(m))
    assert "SIGMOID" in cmds and "SWISH" not in cmds


@pytest.mark.parametrize("alpha, beta", [(0.2, 0.5), (1 / 6, 0.4)])
def test_other_hard_sigmoids_are_not_hard_swish(alpha, beta):
    cmds = commands(check(conv_times_gate("HardSigmoid", False, alpha=alpha, beta=beta)))
    assert "HARD_SIGMOID" in cmds and "HARD_SWISH" not in cmds


def test_sigmoid_of_another_value_is_not_swish():
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Sigmoid", ["x"], ["s"]),
             h.make_node("Mul", ["r", "s"], ["y"])]
    cmds = commands(check(model(nodes, {"x": [2, 5]}, {"y": None})))
    assert "SWISH" not in cmds and "SIGMOID" in cmds


@pytest.mark.parametrize("kind", ["nearest", "bilinear"])
def test_save_upsample_opset_11_and_refusal_before(kind):
    x = nnc.Tensor(RNG.standard_normal((1, 4, 5, 3)).astype(np.float32))
    y = nnc.Tensor.empty((1, 8, 9, 3), dtype="float32")
    g = nnc.Graph()
    g.exec(nnc.Cmd("UPSAMPLE", type=kind), [x], [y])
    g.run()
    m = nnc.onnx.save(g, None, inputs=[x], outputs=[y], opset=11)
    close(ort_run(m, {"input_0": x.numpy()})[0], y.numpy(), rtol=1e-6)
    with pytest.raises(nnc.onnx.UnsupportedError, match="UPSAMPLE.*opset >= 11"):
        nnc.onnx.save(g, None, inputs=[x], outputs=[y], opset=10)


def test_save_refuses_what_its_writers_would_read_wrong():
    """NCHW tensors of an image command (the writers read NHWC) and INDEX_SELECT's float
    indices (Gather does not interpolate) are refused, naming why."""
    x = nnc.Tensor.zeros((1, 3, 2, 2), format="NCHW")
    y = nnc.Tensor.zeros((1, 3, 4, 4), format="NCHW")
    g = nnc.Graph()
    g.exec(nnc.Cmd("UPSAMPLE", type="nearest"), [x], [y])
    with pytest.raises(nnc.onnx.UnsupportedError, match="UPSAMPLE.*only NHWC tensors"):
        nnc.onnx.save(g, None, inputs=[x], outputs=[y])
    a = nnc.Tensor(np.float32([[1, 2], [2, 3], [3, 4]]))
    i = nnc.Tensor(np.float32([1.5, 0.5]))
    b = nnc.Tensor.zeros((2, 2))
    g = nnc.Graph()
    g.exec(nnc.Cmd("INDEX_SELECT"), [a, i], [b])
    with pytest.raises(nnc.onnx.UnsupportedError, match="INDEX_SELECT.*only integer indices"):
        nnc.onnx.save(g, None, inputs=[a, i], outputs=[b])
