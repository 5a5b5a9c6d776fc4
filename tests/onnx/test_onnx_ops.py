"""nnc.onnx for the element-wise (Sigmoid, Tanh, Sqrt, Exp, Log) and reduce (ReduceSum,
ReduceMean, ReduceMax) operators: each against onnxruntime on small models, on plain values and
on NCHW activations after a Conv (which nnc holds as NHWC, so the axes go through the layout),
save round trips and the attributes the loader refuses. Tolerance as in tests/onnx/test_onnx.py."""

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import check, close, commands, model, nnc_run, ort_run  # noqa: E402

import nnc.onnx  # noqa: E402

h = onnx.helper
RNG = np.random.default_rng(12)
REDUCE = {"ReduceSum": "REDUCE_SUM", "ReduceMean": "REDUCE_MEAN", "ReduceMax": "REDUCE_MAX"}


def conv_w(c_in=3, c_out=5):
    return RNG.standard_normal((c_out, c_in, 1, 1)).astype(np.float32)


def round_trip(loaded, m, tmp_path=None):
    """save(load(m)) runs in onnxruntime to nnc's outputs, and loads again to the same."""
    feeds = {n: RNG.standard_normal(t.shape).astype(np.float32)
             for n, t in zip(loaded.input_names, loaded.inputs)}
    want = nnc_run(loaded, feeds)
    saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs,
                          input_names=loaded.input_names, output_names=loaded.output_names)
    for got, w in zip(ort_run(saved, feeds), want):
        close(got, w)
    again = nnc.onnx.load(saved)
    for got, w in zip(nnc_run(again, feeds), want):
        close(got, w)
    return saved


# -- element-wise ------------------------------------------------------------------------------

@pytest.mark.parametrize("op,cmd", [("Sigmoid", "SIGMOID"), ("Tanh", "TANH"), ("Sqrt", "EWSQRT"),
                                    ("Exp", "EWEXP"), ("Log", "EWLOG")])
def test_unary_after_conv_runs_in_place_in_nhwc(op, cmd):
    # Sqrt and Log read c * c (positive), the others the Conv output itself.
    positive = op in ("Sqrt", "Log")
    nodes = [h.make_node("Conv", ["x", "w"], ["c"])]
    if positive:
        nodes.append(h.make_node("Mul", ["c", "c"], ["c2"]))
    nodes.append(h.make_node(op, ["c2" if positive else "c"], ["y"]))
    m = model(nodes, {"x": [1, 3, 4, 6]}, {"y": None}, {"w": conv_w()})
    loaded = check(m)
    got = commands(loaded)
    assert got == ["TRANSPOSE", "CONVOLUTION"] + (["MUL"] if positive else []) + [cmd, "TRANSPOSE"]
    e = loaded.graph.topsort()[-2]
    assert e.inputs[0].data_ptr == e.outputs[0].data_ptr  # in place: its input's only reader
    round_trip(loaded, m)


@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "Exp"])
def test_unary_on_a_plain_value_shared_is_not_in_place(op):
    nodes = [h.make_node(op, ["x"], ["y"]), h.make_node("Add", ["x", "y"], ["z"])]
    loaded = check(model(nodes, {"x": [3, 7]}, {"z": None}))
    e = loaded.graph.topsort()[0]
    assert e.inputs[0].data_ptr != e.outputs[0].data_ptr


def test_sqrt_and_log_of_constants_and_graph_inputs():
    nodes = [h.make_node("Sqrt", ["x"], ["s"]), h.make_node("Log", ["k"], ["l"]),
             h.make_node("Add", ["s", "l"], ["y"])]
    m = model(nodes, {"x": [2, 5]}, {"y": None}, {"k": np.linspace(0.5, 3, 5, dtype=np.float32)})
    loaded = nnc.onnx.load(m)
    x = RNG.uniform(0.1, 4.0, (2, 5)).astype(np.float32)
    close(nnc_run(loaded, {"x": x})[0], ort_run(m, {"x": x})[0])


# -- reductions --------------------------------------------------------------------------------

def reduce_node(op, axes, keepdims, form, inits, noop=None):
    """A Reduce* node with axes as an attribute (form "attr": ReduceSum opset 12, the others 17)
    or as its second input (form "input": ReduceSum 13, the others 18); returns (node, opset)."""
    extra = {} if keepdims is None else {"keepdims": keepdims}
    if noop is not None:
        extra["noop_with_empty_axes"] = noop
    if form == "attr":
        if axes is not None:
            extra["axes"] = list(axes)
        return h.make_node(op, ["r_in"], ["y"], **extra), 12 if op == "ReduceSum" else 17
    ins = ["r_in"]
    if axes is not None:
        inits["axes"] = np.array(axes, np.int64)
        ins.append("axes")
    return h.make_node(op, ins, ["y"], **extra), 13 if op == "ReduceSum" else 18


AXES = [(2, 3), (1,), (0,), (-1,), (1, 2, 3), (0, 1), (1, 3), None]


@pytest.mark.parametrize("op", list(REDUCE))
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("form", ["attr", "input"])
def test_reduce_after_conv_maps_axes_through_nhwc(op, axes, keepdims, form):
    inits = {"w": conv_w()}
    node, opset = reduce_node(op, axes, keepdims, form, inits)
    nodes = [h.make_node("Conv", ["x", "w"], ["r_in"]), node]
    loaded = check(model(nodes, {"x": [2, 3, 4, 6]}, {"y": None}, inits, opset=opset))
    got = commands(loaded)
    # The reduction reads the Conv's NHWC output directly (no TRANSPOSE before it).
    assert got[:3] == ["TRANSPOSE", "CONVOLUTION", REDUCE[op]]
    if axes in ((2, 3), (1, 2, 3)) or axes is None:
        assert "TRANSPOSE" not in got[2:]  # H = W = 1 after it: both layouts are one memory


@pytest.mark.parametrize("op", list(REDUCE))
@pytest.mark.parametrize("shape,axes", [((4, 7), (1,)), ((4, 7), (0,)), ((2, 3, 5), (0, 2)),
                                        ((2, 3, 5), None), ((3, 2, 4, 5), (1,))])
@pytest.mark.parametrize("keepdims", [1, 0, None])
def test_reduce_on_plain_values(op, shape, axes, keepdims):
    inits = {}
    node, opset = reduce_node(op, axes, keepdims, "input", inits)
    loaded = check(model([h.make_node("Identity", ["x"], ["r_in"]), node], {"x": list(shape)},
                         {"y": None}, inits, opset=opset))
    assert commands(loaded) == [REDUCE[op]]


@pytest.mark.parametrize("keepdims", [1, 0])
def test_reduce_mean_as_global_pool_then_gemm_and_add(keepdims):
    # torch's x.mean((2, 3)) head: ReduceMean -> (Flatten) -> Gemm, and a keepdims=1 result that
    # an NHWC per-channel Add reads in nnc's layout.
    inits = {"w": conv_w(3, 6), "fc": RNG.standard_normal((4, 6)).astype(np.float32),
             "b": RNG.standard_normal((6, 1, 1)).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("ReduceMean", ["c"], ["m"], axes=[2, 3], keepdims=keepdims)]
    if keepdims:
        nodes += [h.make_node("Add", ["m", "b"], ["a"]), h.make_node("Flatten", ["a"], ["f"])]
    nodes.append(h.make_node("Gemm", ["f" if keepdims else "m", "fc"], ["y"], transB=1))
    loaded = check(model(nodes, {"x": [1, 3, 5, 7]}, {"y": None}, inits))
    assert commands(loaded).count("TRANSPOSE") == 1  # the graph input's only
    round_trip(loaded, model(nodes, {"x": [1, 3, 5, 7]}, {"y": None}, inits))


def test_reduce_keepdims_0_that_needs_onnx_order_transposes_the_small_result():
    # Reducing N of an NCHW activation leaves [C, H, W]: nnc's [H, W, C] goes back to ONNX order.
    inits = {"w": conv_w()}
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("ReduceMax", ["c"], ["y"], axes=[0], keepdims=0)]
    loaded = check(model(nodes, {"x": [2, 3, 4, 6]}, {"y": None}, inits))
    e = loaded.graph.topsort()[-1]
    assert e.cmd.name == "TRANSPOSE" and e.inputs[0].shape == (1, 4, 6, 5)


@pytest.mark.parametrize("op", list(REDUCE))
def test_reduce_empty_axes_noop_is_the_input_and_otherwise_all_axes(op):
    x = {"x": [2, 3, 4]}
    node, opset = reduce_node(op, [], 1, "input", {}, noop=1)
    node.input[:] = ["x"]
    loaded = check(model([node], x, {"y": None}, opset=opset))
    assert commands(loaded) == []
    node, opset = reduce_node(op, [], 0, "input", {}, noop=0)
    node.input[:] = ["x"]
    loaded = check(model([node], x, {"y": None}, opset=opset))
    assert loaded.outputs[0].shape == ()


def test_reduce_of_a_constant_and_in_float64():
    k = RNG.standard_normal((3, 4)).astype(np.float32)
    nodes = [h.make_node("ReduceSum", ["k", "ax"], ["s"], keepdims=0),
             h.make_node("Add", ["x", "s"], ["y"])]
    m = model(nodes, {"x": [4]}, {"y": None}, {"k": k, "ax": np.array([0], np.int64)})
    assert commands(check(m)) == ["REDUCE_SUM", "ADD"]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("ReduceMean", ["c"], ["y"], axes=[1, 2], keepdims=0)]
    m = model(nodes, {"x": [2, 3, 4, 6]}, {"y": None}, {"w": conv_w()})
    loaded = nnc.onnx.load(m, dtype="float64")
    x = RNG.standard_normal((2, 3, 4, 6)).astype(np.float32)
    got = nnc_run(loaded, {"x": x})[0]
    assert got.dtype == np.float64
    close(got.astype(np.float32), ort_run(m, {"x": x})[0])


def test_reduce_axes_from_a_constant_node_and_after_relu():
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node("Relu", ["c"], ["r"]),
             h.make_node("Constant", [], ["axes"], value_ints=[1, -1]),
             h.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=1)]
    loaded = check(model(nodes, {"x": [1, 3, 4, 6]}, {"y": None}, {"w": conv_w()}))
    assert loaded.outputs[0].shape == (1, 1, 4, 1)


def test_reduce_save_round_trips():
    inits = {"w": conv_w()}
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("ReduceMax", ["c"], ["m"], axes=[1], keepdims=1),
             h.make_node("Sigmoid", ["m"], ["s"]),
             h.make_node("ReduceSum", ["c", "ax"], ["t"], keepdims=0),
             h.make_node("Tanh", ["t"], ["u"]),
             h.make_node("ReduceMean", ["c"], ["v"], axes=[0, 2], keepdims=0)]
    inits["ax"] = np.array([0, 3], np.int64)
    m = model(nodes, {"x": [2, 3, 4, 6]}, {"s": None, "u": None, "v": None}, inits)
    loaded = check(m)
    saved = round_trip(loaded, m)
    ops = [n.op_type for n in saved.graph.node]
    assert {"ReduceMax", "ReduceSum", "ReduceMean", "Sigmoid", "Tanh"} <= set(ops)
    rmean = next(n for n in saved.graph.node if n.op_type == "ReduceMean")
    assert [a.name for a in rmean.attribute] == ["axes", "keepdims"]  # opset 17: attribute
    rsum = next(n for n in saved.graph.node if n.op_type == "ReduceSum")
    assert len(rsum.input) == 2  # ReduceSum-13: axes as an input


@pytest.mark.parametrize("opset", [12, 17, 18])
def test_save_of_hand_built_reductions_at_each_axes_form(opset):
    g = nnc.Graph()
    x = nnc.Tensor(RNG.standard_normal((2, 3, 4)).astype(np.float32))
    outs = []
    for name, axes in (("REDUCE_SUM", -1), ("REDUCE_MEAN", (0, 2)), ("REDUCE_MAX", (1,))):
        ax = (axes,) if isinstance(axes, int) else axes
        y = nnc.Tensor.empty(tuple(1 if i in [a % 3 for a in ax] else d
                                   for i, d in enumerate(x.shape)), dtype="float32")
        g.exec(nnc.Cmd(name, axes=axes), [x], [y])
        outs.append(y)
    s = nnc.Tensor.empty(outs[0].shape, dtype="float32")
    g.exec(nnc.Cmd("EWSQRT"), [outs[0]], [s])  # NaN where the sum is negative, in both
    g.run()
    m = nnc.onnx.save(g, None, inputs=[x], outputs=outs + [s], opset=opset)
    for got, want in zip(ort_run(m, {"input_0": x.numpy()}), outs + [s]):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)


def test_unsupported_reduce_attributes_are_all_listed():
    inits = {"w": conv_w()}
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("ReduceSum", ["c", "dyn"], ["a"], name="dynamic_axes"),
             h.make_node("ReduceMean", ["c"], ["b"], axes=[1], keepdims=2, name="keep2"),
             h.make_node("ReduceMax", ["c"], ["d"], axes=[1, -3], name="twice")]
    m = model(nodes, {"x": [1, 3, 4, 6]}, {"a": [1, 1, 4, 6], "b": None, "d": None}, inits)
    m.graph.input.append(h.make_tensor_value_info("dyn", onnx.TensorProto.INT64, [1]))
    with pytest.raises(nnc.onnx.UnsupportedError) as info:
        nnc.onnx.load(m)
    problems = info.value.problems
    assert problems["ReduceSum"] == (1, ["dynamic_axes"], "the axes input must be a constant")
    assert problems["ReduceMean"][1:] == (["keep2"], "keepdims other than 0 or 1")
    assert problems["ReduceMax"][1:] == (["twice"], "axes out of range or repeated")
    assert "(graph input)" in problems  # the int64 axes input itself
    assert isinstance(info.value, nnc.NNCError)


def test_reduce_attribute_from_another_opset_is_an_invalid_model():
    # noop_with_empty_axes is an opset-18 ReduceMean attribute; axes as an attribute is gone there.
    for node, opset in ((h.make_node("ReduceMean", ["x"], ["y"], noop_with_empty_axes=1), 17),
                        (h.make_node("ReduceMean", ["x"], ["y"], axes=[1]), 18)):
        with pytest.raises(nnc.onnx.OnnxError, match="invalid ONNX model"):
            nnc.onnx.load(model([node], {"x": [2, 3]}, {"y": None}, opset=opset))


@pytest.mark.parametrize("x_shape,transposes", [((2, 3, 4, 4), 2), ((1, 3, 1, 1), 0)])
def test_layout_change_is_a_view_only_when_just_size_1_axes_move(x_shape, transposes):
    # Conv output [2, 4, 4, 4]: all sizes equal, yet C moves, so the output needs its TRANSPOSE;
    # with H = W = 1 both the input and the output are views: the same memory in either layout.
    m = model([h.make_node("Conv", ["x", "w"], ["y"])], {"x": list(x_shape)}, {"y": None},
              {"w": conv_w(3, 4)})
    loaded = check(m)
    assert commands(loaded).count("TRANSPOSE") == transposes


def test_global_average_pool_is_reduce_mean_and_flattens_as_a_view():
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node("GlobalAveragePool", ["c"], ["p"]),
             h.make_node("Flatten", ["p"], ["y"])]
    m = model(nodes, {"x": [2, 3, 5, 4]}, {"y": None}, {"w": conv_w()})
    loaded = check(m)
    assert commands(loaded) == ["TRANSPOSE", "CONVOLUTION", "REDUCE_MEAN"]
    assert loaded.graph.topsort()[-1].cmd.params["axes"] in ((1, 2), [1, 2])
    round_trip(loaded, m)
