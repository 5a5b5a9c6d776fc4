"""nnc.onnx's load-time shape arithmetic and views: every folded operator on integer, bool and
float constants (both opset spellings where ONNX moved an attribute to an input), Slice, Split,
Squeeze and Unsqueeze of activations as views (plain and NHWC), ShuffleNet's channel shuffle
with its shapes computed from Shape, and the refusals. Each model runs in onnxruntime too; the
results agree to 1e-6 relative (folded integers exactly)."""

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import close, commands, model, nnc_run, ort_run  # noqa: E402

import nnc.onnx  # noqa: E402

h = onnx.helper
TP = onnx.TensorProto
RTOL = 1e-6
RNG = np.random.default_rng(33)


def check6(m):
    """Load m, run nnc and onnxruntime on the same random inputs, compare to 1e-6 relative."""
    loaded = nnc.onnx.load(m)
    feeds = {n: RNG.standard_normal(t.shape).astype(np.float32)
             for n, t in zip(loaded.input_names, loaded.inputs)}
    for got, want in zip(nnc_run(loaded, feeds), ort_run(m, feeds)):
        close(got, want, rtol=RTOL)
    return loaded


def I(*v):  # noqa: E743 (an int64 vector, as exporters write shapes)
    return np.array(v, np.int64)


def folded(nodes, inits, shape, opset=17, extra=None):
    """A model whose runtime input x (of ``shape``) is added to Cast(f, FLOAT), f the value the
    nodes compute from constants (and from the shape of the input s, [2, 3, 4]): nnc folds f at
    load, so the output compares nnc's fold with onnxruntime's computation of it."""
    nodes = list(nodes) + [h.make_node("Cast", ["f"], ["fc"], to=TP.FLOAT),
                           h.make_node("Add", ["x", "fc"], ["y"])]
    inputs = {"x": list(shape), "s": [2, 3, 4]}
    m = model(nodes, inputs, {"y": None}, inits, opset=opset)
    loaded = check6(m)
    assert commands(loaded) == ["ADD"]      # everything before the Add was computed at load
    return loaded


# Each case: (nodes making "f", initializers, f's shape, opset).
CASES = {
    "shape": ([h.make_node("Shape", ["s"], ["f"])], {}, [3], 17),
    "shape_start_end": ([h.make_node("Shape", ["s"], ["f"], start=-2, end=10)], {}, [2], 17),
    "size": ([h.make_node("Size", ["s"], ["z"]), h.make_node("Unsqueeze", ["z", "a0"], ["f"])],
             {"a0": I(0)}, [1], 17),
    "gather_negative": ([h.make_node("Shape", ["s"], ["sh"]),
                         h.make_node("Gather", ["sh", "i"], ["f"])], {"i": I(-1, 0, 1)}, [3], 17),
    "gather_axis1": ([h.make_node("Gather", ["d", "i"], ["f"], axis=1)],
                     {"d": np.arange(12, dtype=np.int32).reshape(3, 4), "i": I(3, -4)}, [3, 2],
                     17),
    "unsqueeze_attr": ([h.make_node("Unsqueeze", ["d"], ["f"], axes=[0, -1])],
                       {"d": I(1, 2, 3)}, [1, 3, 1], 11),
    "unsqueeze_input": ([h.make_node("Unsqueeze", ["d", "ax"], ["f"])],
                        {"d": I(1, 2, 3), "ax": I(-1, 0)}, [1, 3, 1], 13),
    "squeeze_attr": ([h.make_node("Squeeze", ["d"], ["f"], axes=[0])],
                     {"d": I(4, 5).reshape(1, 2, 1)}, [2, 1], 11),
    "squeeze_input": ([h.make_node("Squeeze", ["d", "ax"], ["f"])],
                      {"d": I(4, 5).reshape(1, 2, 1), "ax": I(-1)}, [1, 2], 13),
    "squeeze_all": ([h.make_node("Squeeze", ["d"], ["f"])], {"d": I(4, 5).reshape(1, 2, 1)},
                    [2], 21),
    "concat": ([h.make_node("Shape", ["s"], ["sh"]),
                h.make_node("Concat", ["sh", "d"], ["f"], axis=-1)], {"d": I(-7)}, [4], 17),
    "cast_truncates": ([h.make_node("Cast", ["d"], ["f"], to=TP.INT64)],
                       {"d": np.array([-2.7, -0.5, 0.5, 2.7], np.float32)}, [4], 17),
    "cast_bool": ([h.make_node("Cast", ["d"], ["b"], to=TP.BOOL),
                   h.make_node("Cast", ["b"], ["f"], to=TP.INT32)],
                  {"d": np.array([0.0, -0.25, 3.0], np.float32)}, [3], 13),
    "div_int_truncates": ([h.make_node("Div", ["d", "e"], ["f"])],
                          {"d": I(7, -7, 7, -7, 6), "e": I(2, 2, -2, -2, 3)}, [5], 17),
    "div_float": ([h.make_node("Div", ["d", "e"], ["f"])],
                  {"d": np.array([1.0, -3.0], np.float32), "e": np.array(3.0, np.float32)}, [2],
                  17),
    "mul_add_sub": ([h.make_node("Shape", ["s"], ["sh"]), h.make_node("Mul", ["sh", "k"], ["m"]),
                     h.make_node("Add", ["m", "k"], ["a"]), h.make_node("Sub", ["a", "sh"], ["f"])],
                    {"k": I(3)}, [3], 17),
    "mod_int": ([h.make_node("Mod", ["d", "e"], ["f"])],
                {"d": I(7, -7, 7, -7), "e": I(3, 3, -3, -3)}, [4], 17),
    "mod_fmod": ([h.make_node("Mod", ["d", "e"], ["f"], fmod=1)],
                 {"d": I(7, -7, 7, -7), "e": I(3, 3, -3, -3)}, [4], 17),
    "constant_of_shape": ([h.make_node("Shape", ["s"], ["sh"]),
                           h.make_node("ConstantOfShape", ["sh"], ["f"],
                                       value=h.make_tensor("v", TP.INT64, [1], [5]))], {},
                          [2, 3, 4], 17),
    "constant_of_shape_default": ([h.make_node("ConstantOfShape", ["d"], ["f"])], {"d": I(2, 2)},
                                  [2, 2], 9),
    "equal_where": ([h.make_node("Equal", ["d", "e"], ["c"]),
                     h.make_node("Where", ["c", "d", "e"], ["w"]),
                     h.make_node("Add", ["w", "d"], ["f"])],
                    {"d": I(1, 5, 3), "e": I(1, 2, 3)}, [3], 17),
    "expand": ([h.make_node("Expand", ["d", "sh"], ["f"])],
               {"d": I(1, 2, 3).reshape(3, 1), "sh": I(2, 1, 4)}, [2, 3, 4], 17),
    "range_int": ([h.make_node("Range", ["a", "b", "c"], ["f"])],
                  {"a": np.array(10, np.int64), "b": np.array(-3, np.int64),
                   "c": np.array(-4, np.int64)}, [4], 17),
    "range_float": ([h.make_node("Range", ["a", "b", "c"], ["f"])],
                    {"a": np.array(0.5, np.float32), "b": np.array(2.0, np.float32),
                     "c": np.array(0.3, np.float32)}, [5], 17),
    "reshape": ([h.make_node("Reshape", ["d", "sh"], ["f"])],
                {"d": np.arange(24, dtype=np.int64).reshape(2, 3, 4), "sh": I(0, -1)}, [2, 12],
                17),
    "slice_clamped_negative_step": ([h.make_node("Slice", ["d", "st", "en", "ax", "sp"], ["f"])],
                                    {"d": np.arange(20, dtype=np.int64).reshape(4, 5),
                                     "st": I(100, -1), "en": I(-100, 0), "ax": I(1, 0),
                                     "sp": I(-2, -1)}, [3, 3], 17),
    "slice_attrs": ([h.make_node("Slice", ["d"], ["f"], starts=[1, -3], ends=[1000, -1],
                                 axes=[0, 1])],
                    {"d": np.arange(20, dtype=np.int64).reshape(4, 5)}, [3, 2], 9),
    "reduce_prod_attr": ([h.make_node("Shape", ["s"], ["sh"]),
                          h.make_node("ReduceProd", ["sh"], ["p"], axes=[0], keepdims=1),
                          h.make_node("Identity", ["p"], ["f"])], {}, [1], 13),
    "reduce_prod_input": ([h.make_node("ReduceProd", ["d", "ax"], ["f"], keepdims=0)],
                          {"d": I(1, 2, 3, 4).reshape(2, 2), "ax": I(-1)}, [2], 18),
    "reduce_sum_int": ([h.make_node("ReduceSum", ["d", "ax"], ["f"])],
                       {"d": I(1, 2, 3, 4).reshape(2, 2), "ax": I(0)}, [1, 2], 13),
    "split_input": ([h.make_node("Split", ["d", "sp"], ["f", "g"])],
                    {"d": I(1, 2, 3, 4, 5), "sp": I(2, 3)}, [2], 13),
    "split_attr": ([h.make_node("Split", ["d"], ["g", "f"], split=[2, 3])],
                   {"d": I(1, 2, 3, 4, 5)}, [3], 11),
    "split_num_outputs": ([h.make_node("Split", ["d"], ["g", "h", "f"], num_outputs=3)],
                          {"d": I(1, 2, 3, 4, 5, 6, 7)}, [1], 18),
    "constant_transpose_flatten": ([h.make_node("Constant", [], ["c"], value_ints=[1, 2, 3, 4]),
                                    h.make_node("Reshape", ["c", "sh"], ["r"]),
                                    h.make_node("Transpose", ["r"], ["t"]),
                                    h.make_node("Flatten", ["t"], ["f"], axis=0)],
                                   {"sh": I(2, 2)}, [1, 4], 17),
    "compare_logic": ([h.make_node("Less", ["d", "e"], ["l"]),
                       h.make_node("Greater", ["d", "e"], ["g"]),
                       h.make_node("Or", ["l", "g"], ["o"]), h.make_node("Not", ["o"], ["f"])],
                      {"d": I(1, 2, 3), "e": I(3, 2, 1)}, [3], 17),
    "neg_abs_min_max": ([h.make_node("Neg", ["d"], ["n"]), h.make_node("Abs", ["n"], ["a"]),
                         h.make_node("Min", ["a", "e"], ["m"]),
                         h.make_node("Max", ["m", "n"], ["f"])],
                        {"d": I(-4, 2, 9), "e": I(3)}, [3], 17),
    # 1 / sqrt(head_dim) from a shape, as attention exporters compute a scale.
    "float_math": ([h.make_node("Shape", ["s"], ["sh"]),
                    h.make_node("Gather", ["sh", "i"], ["d"]),
                    h.make_node("Cast", ["d"], ["df"], to=TP.FLOAT),
                    h.make_node("Sqrt", ["df"], ["q"]), h.make_node("Reciprocal", ["q"], ["r"]),
                    h.make_node("Exp", ["r"], ["e"]), h.make_node("Log", ["e"], ["l"]),
                    h.make_node("Tanh", ["l"], ["t"]), h.make_node("Sigmoid", ["t"], ["g"]),
                    h.make_node("Relu", ["g"], ["u"]), h.make_node("Floor", ["u"], ["fl"]),
                    h.make_node("Ceil", ["u"], ["ce"]), h.make_node("Add", ["fl", "ce"], ["f"])],
                   {"i": np.array(2, np.int64)}, [1], 17),
    # Swin's shifted-window mask: slices of a zeros tensor set to region numbers.
    "scatter_nd": ([h.make_node("ScatterND", ["d", "ix", "u"], ["s1"]),
                    h.make_node("ScatterND", ["s1", "iy", "uy"], ["f"], reduction="add")],
                   {"d": np.zeros((3, 4), np.float32), "ix": I(0, 2).reshape(2, 1),
                    "u": np.arange(8, dtype=np.float32).reshape(2, 4),
                    "iy": np.array([[1, 1], [2, 3], [1, 1]], np.int64),
                    "uy": np.array([5, 6, 7], np.float32)}, [3, 4], 18),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_folded_operator_matches_onnxruntime(case):
    nodes, inits, shape, opset = CASES[case]
    folded(nodes, inits, shape, opset)


@pytest.mark.parametrize("case", ["div_int_truncates", "mod_int", "mod_fmod", "range_int",
                                  "slice_clamped_negative_step", "cast_truncates"])
def test_folded_output_equals_onnxruntime_exactly(case):
    # The folded value itself is the graph's output (a constant tensor of the model's dtype).
    nodes, inits, _, opset = CASES[case]
    m = model(list(nodes) + [h.make_node("Cast", ["f"], ["y"], to=TP.FLOAT)], {}, {"y": None},
              inits, opset=opset)
    loaded = nnc.onnx.load(m)
    assert commands(loaded) == []
    np.testing.assert_array_equal(loaded.outputs[0].numpy(), ort_run(m, {})[0])


# -- views of activations ----------------------------------------------------------------------

def conv_w(c_in, c_out, k=1):
    return RNG.standard_normal((c_out, c_in, k, k)).astype(np.float32)


@pytest.mark.parametrize("after_conv", [False, True])
@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [1], [1]),                  # channels 1..2 (NHWC: a strided view)
    ([0, -1], [5, 0], [1, 3], [2, -2]),    # every other channel, width reversed by 2
    ([-100], [100], [-2], [1]),            # clamped: the whole H axis
    ([4], [1], [2], [-1]),                 # rows 4, 3, 2
])
def test_slice_of_an_activation_is_a_view(after_conv, starts, ends, axes, steps):
    x = "c" if after_conv else "x"
    nodes = ([h.make_node("Conv", ["x", "w"], ["c"])] if after_conv else []) + [
        h.make_node("Slice", [x, "st", "en", "ax", "sp"], ["s"]),
        h.make_node("Relu", ["s"], ["y"]), h.make_node("Add", [x, "one"], ["z"])]
    inits = {"st": I(*starts), "en": I(*ends), "ax": I(*axes), "sp": I(*steps),
             "one": np.float32(1.0)}
    if after_conv:
        inits["w"] = conv_w(3, 5)
    m = model(nodes, {"x": [1, 5 if not after_conv else 3, 6, 7]}, {"y": None, "z": None}, inits)
    loaded = check6(m)
    # The slice is no node: the Relu reads the view, and no node writes the input in place.
    assert "DATA_TRANSFER" not in commands(loaded)


def test_slice_of_a_view_then_conv_and_reshape():
    # A strided view feeding a Conv (NHWC, channel stride) and a Reshape (copied once).
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("Slice", ["c", "st", "en", "ax"], ["s"]),
             h.make_node("Conv", ["s", "w2"], ["y"], pads=[1, 1, 1, 1]),
             h.make_node("Slice", ["c", "st", "en", "ax"], ["s2"]),
             h.make_node("Reshape", ["s2", "sh"], ["r"])]
    inits = {"w": conv_w(3, 8), "w2": conv_w(4, 2, 3), "st": I(2), "en": I(6), "ax": I(1),
             "sh": I(1, -1)}
    check6(model(nodes, {"x": [1, 3, 5, 6]}, {"y": None, "r": None}, inits))


@pytest.mark.parametrize("form,opset", [("input", 13), ("attr", 11), ("num_outputs", 18),
                                        ("equal", 17)])
@pytest.mark.parametrize("after_conv", [False, True])
def test_split_of_an_activation_is_views(form, opset, after_conv):
    x = "c" if after_conv else "x"
    ins, attrs, outs = [x], {"axis": 1}, ["a", "b", "d"]
    inits = {"w": conv_w(3, 7)} if after_conv else {}
    sizes = [2, 2, 3] if form != "num_outputs" else [3, 3, 1]
    if form == "input":
        ins.append("sp")
        inits["sp"] = I(*sizes)
    elif form == "attr":
        attrs["split"] = sizes
    elif form == "num_outputs":
        attrs["num_outputs"] = 3
    else:
        outs = ["a", "b"]
        inits = {"w": conv_w(3, 8)} if after_conv else {}
    nodes = ([h.make_node("Conv", ["x", "w"], ["c"])] if after_conv else []) + [
        h.make_node("Split", ins, outs, **attrs)] + [
        h.make_node("Sigmoid", [o], [o + "_y"]) for o in outs]
    c = 8 if form == "equal" else 7
    m = model(nodes, {"x": [1, 3 if after_conv else c, 4, 5]}, {o + "_y": None for o in outs},
              inits, opset=opset)
    loaded = check6(m)
    assert "DATA_TRANSFER" not in commands(loaded)


@pytest.mark.parametrize("opset", [11, 13, 21])
def test_squeeze_unsqueeze_of_an_activation_are_views(opset):
    def axes_of(op, name, axes):
        if opset >= 13:
            ax = name[0] + "_ax"
            return h.make_node(op, [name[0], ax], [name[1]]), {ax: I(*axes)}
        return h.make_node(op, [name[0]], [name[1]], axes=axes), {}

    n1, i1 = axes_of("Unsqueeze", ("x", "u"), [0, -1])
    n2, i2 = axes_of("Squeeze", ("u", "q"), [-1])
    nodes = [n1, n2, h.make_node("Relu", ["q"], ["y"]),
             h.make_node("Squeeze", ["u"], ["y2"])]
    m = model(nodes, {"x": [3, 1, 4]}, {"y": None, "y2": None}, {**i1, **i2}, opset=opset)
    loaded = check6(m)
    assert commands(loaded) == ["RELU"]


# -- ShuffleNet --------------------------------------------------------------------------------

def shufflenet_unit(split):
    """ShuffleNet-V2's unit as torch.onnx.export writes it: the channel halves (Split, or two
    Slices from the TorchScript exporter), a branch on one half, Concat, then channel_shuffle:
    Reshape to [N, 2, C/2, H, W] -> Transpose -> Reshape to [N, C, H, W], the shapes computed
    from Shape, Gather, Div, Unsqueeze and Concat."""
    nodes = [h.make_node("Conv", ["x", "w"], ["c"])]
    if split:
        nodes.append(h.make_node("Split", ["c", "halves"], ["x1", "x2"], axis=1))
    else:
        nodes += [h.make_node("Slice", ["c", "zero", "four", "one"], ["x1"]),
                  h.make_node("Slice", ["c", "four", "big", "one"], ["x2"])]
    nodes += [h.make_node("Conv", ["x2", "w2"], ["b2"], pads=[1, 1, 1, 1], group=4),
              h.make_node("Relu", ["b2"], ["b2r"]),
              h.make_node("Concat", ["x1", "b2r"], ["cat"], axis=1),
              h.make_node("Shape", ["cat"], ["sh"])]
    for k, v in enumerate(["b", "ch", "hh", "ww"]):
        nodes.append(h.make_node("Gather", ["sh", f"i{k}"], [v]))
    nodes.append(h.make_node("Div", ["ch", "two"], ["cpg"]))
    for v in ["b", "cpg", "hh", "ww"]:
        nodes.append(h.make_node("Unsqueeze", [v, "ax0"], [v + "_u"]))
    nodes += [h.make_node("Concat", ["b_u", "two_u", "cpg_u", "hh_u", "ww_u"], ["s5"], axis=0),
              h.make_node("Reshape", ["cat", "s5"], ["r5"]),
              h.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
              h.make_node("Concat", ["b_u", "minus1", "hh_u", "ww_u"], ["s4"], axis=0),
              h.make_node("Reshape", ["t5", "s4"], ["y"])]
    inits = {"w": conv_w(3, 8), "w2": RNG.standard_normal((4, 1, 3, 3)).astype(np.float32),
             "i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
             "i2": np.array(2, np.int64), "i3": np.array(-1, np.int64),
             "two": np.array(2, np.int64), "ax0": I(0), "two_u": I(2), "minus1": I(-1)}
    if split:
        inits["halves"] = I(4, 4)
    else:
        inits.update(zero=I(0), four=I(4), big=I(2 ** 62), one=I(1))
    return model(nodes, {"x": [1, 3, 5, 6]}, {"y": None}, inits)


@pytest.mark.parametrize("split", [True, False])
def test_shufflenet_unit_matches_onnxruntime(split):
    loaded = check6(shufflenet_unit(split))
    cmds = commands(loaded)
    # The shape arithmetic left no node; the halves are views (x1 is copied into the Concat).
    assert cmds.count("CONVOLUTION") == 2 and "TRANSPOSE" in cmds
    assert not {"SET", "ADD", "MUL"} & set(cmds)


@pytest.mark.parametrize("which", ["shuffle_split", "shuffle_slice", "negative_steps", "split"])
def test_save_of_views_writes_slices(which):
    """save(load(m)) writes a view of an activation as a Slice of it, so the saved model
    computes it from each new input (not a snapshot of the memory at save time)."""
    if which.startswith("shuffle"):
        m = shufflenet_unit(which == "shuffle_split")
    elif which == "split":
        m = model([h.make_node("Conv", ["x", "w"], ["c"]),
                   h.make_node("Split", ["c", "sp"], ["a", "b"], axis=1),
                   h.make_node("Relu", ["a"], ["y"]), h.make_node("Sigmoid", ["b"], ["z"])],
                  {"x": [1, 3, 4, 5]}, {"y": None, "z": None}, {"w": conv_w(3, 5), "sp": I(2, 3)})
    else:
        m = model([h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
                   h.make_node("Relu", ["s"], ["y"]), h.make_node("Add", ["x", "x"], ["z"])],
                  {"x": [1, 5, 6, 7]}, {"y": None, "z": None},
                  {"st": I(0, -1), "en": I(5, -100), "ax": I(1, 3), "sp": I(2, -2)})
    loaded = nnc.onnx.load(m)
    saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs,
                          input_names=loaded.input_names, output_names=loaded.output_names)
    for _ in range(2):      # the second input differs from what memory held at save time
        feeds = {n: RNG.standard_normal(t.shape).astype(np.float32)
                 for n, t in zip(loaded.input_names, loaded.inputs)}
        for got, want in zip(ort_run(saved, feeds), ort_run(m, feeds)):
            close(got, want, rtol=RTOL)


# -- refusals ----------------------------------------------------------------------------------

def refused(m):
    with pytest.raises(nnc.onnx.UnsupportedError) as e:
        nnc.onnx.load(m)
    return e.value


def test_slice_with_runtime_starts_is_refused_naming_the_node_and_input():
    nodes = [h.make_node("Cast", ["x"], ["xi"], to=TP.INT64),
             h.make_node("Slice", ["x", "xi", "en"], ["y"], name="dyn_slice")]
    m = model(nodes, {"x": [1]}, {"y": None}, {"en": I(1)})
    e = refused(m)
    assert "dyn_slice" in str(e) and "'starts'" in str(e)


def test_runtime_shape_arithmetic_is_refused_naming_the_input():
    nodes = [h.make_node("Equal", ["x", "k"], ["y"], name="runtime_equal")]
    m = model(nodes, {"x": [3]}, {}, {"k": np.float32(0)})
    m.graph.output.append(h.make_tensor_value_info("y", TP.BOOL, None))
    e = refused(m)
    assert "runtime_equal" in str(e) and "'x'" in str(e)
    assert "Equal" in e.problems


def test_cast_to_an_unsupported_type_is_refused_naming_the_attribute():
    nodes = [h.make_node("Cast", ["d"], ["f"], to=TP.STRING, name="to_string"),
             h.make_node("Shape", ["f"], ["g"]), h.make_node("Cast", ["g"], ["fc"], to=TP.FLOAT),
             h.make_node("Add", ["x", "fc"], ["y"])]
    e = refused(model(nodes, {"x": [1]}, {"y": None}, {"d": I(1)}))
    assert "to_string" in str(e) and "'to'" in str(e)


@pytest.mark.parametrize("node,inits,why", [
    (h.make_node("Div", ["d", "e"], ["f"], name="div0"), {"d": I(1), "e": I(0)}, "by zero"),
    (h.make_node("Gather", ["d", "e"], ["f"], name="gather_far"), {"d": I(1, 2), "e": I(2)},
     "outside"),
    # A shape shape inference cannot see (computed by a Mul): refused before it is allocated.
    (h.make_node("ConstantOfShape", ["de"], ["f"], name="huge"),
     {"d": I(1 << 20, 1 << 20), "e": I(1)}, "max_bytes"),
])
def test_invalid_constant_arithmetic_is_an_onnx_error_naming_the_node(node, inits, why):
    nodes = [h.make_node("Mul", ["d", "e"], ["de"]), node,
             h.make_node("Cast", ["f"], ["fc"], to=TP.FLOAT),
             h.make_node("ReduceSum", ["fc"], ["r"], keepdims=0),
             h.make_node("Add", ["x", "r"], ["y"])]
    m = model(nodes, {"x": [1]}, {"y": None}, inits)
    with pytest.raises(nnc.onnx.OnnxError) as e:
        nnc.onnx.load(m, max_bytes=1 << 30)
    assert node.name in str(e.value) and why in str(e.value)


# -- save: views of a different rank, views across Concat slices, refusals ---------------------

def saved_matches_original(m):
    """save(load(m)) computes what m does on inputs other than the ones memory held at save
    time (each value from the inputs, no snapshot of an activation), and holds no initializer
    an activation's view could have become."""
    loaded = nnc.onnx.load(m)
    nnc_run(loaded, {n: RNG.standard_normal(t.shape).astype(np.float32)
                     for n, t in zip(loaded.input_names, loaded.inputs)})
    saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs,
                          input_names=loaded.input_names, output_names=loaded.output_names)
    for _ in range(2):
        feeds = {n: RNG.standard_normal(t.shape).astype(np.float32)
                 for n, t in zip(loaded.input_names, loaded.inputs)}
        for got, want in zip(ort_run(saved, feeds), ort_run(m, feeds)):
            close(got, want, rtol=RTOL)
    return [n.op_type for n in saved.graph.node]


def squeezed_views(x_shape, conv, op, opset):
    """x (or a Conv of it: NHWC in nnc) -> Split/Slice -> Squeeze/Unsqueeze -> Relu, each
    intermediate also an output, so every view is read as it is."""
    x = "c" if conv else "x"
    nodes = [h.make_node("Conv", ["x", "w"], ["c"])] if conv else []
    inits = {"w": conv_w(x_shape[1], 4)} if conv else {}
    if op == "split_squeeze":
        # The first channel (axis 1) and the last column, each with its size-1 axis dropped.
        nodes += [h.make_node("Split", [x, "sp"], ["a", "b"], axis=1),
                  h.make_node("Squeeze", ["a", "ax1"], ["q"]),
                  h.make_node("Split", [x, "sp3"], ["d", "e"], axis=-1),
                  h.make_node("Squeeze", ["e", "ax3"], ["q2"]),
                  h.make_node("Relu", ["q"], ["y"])]
        inits.update(sp=I(1, 3), sp3=I(x_shape[3] - 1, 1), ax1=I(1), ax3=I(-1))
        outs = ["y", "q2", "b"]
    else:
        # Every other channel from 1, reversed width, then a new axis in front and one in the
        # middle.
        nodes += [h.make_node("Slice", [x, "st", "en", "ax", "stp"], ["s"]),
                  h.make_node("Unsqueeze", ["s", "ax0"], ["u"]),
                  h.make_node("Unsqueeze", ["s", "ax2"], ["u2"]),
                  h.make_node("Relu", ["u"], ["y"])]
        inits.update(st=I(1, -1), en=I(100, -100), ax=I(1, 3), stp=I(2, -1), ax0=I(0),
                     ax2=I(2))
        outs = ["y", "u2"]
    if opset < 13:
        for n in nodes:
            if n.op_type in ("Squeeze", "Unsqueeze"):
                n.attribute.append(h.make_attribute("axes", [int(v) for v in inits[n.input[1]]]))
                del n.input[1]
            elif n.op_type == "Split":
                n.attribute.append(h.make_attribute("split", [int(v) for v in inits[n.input[1]]]))
                del n.input[1]
    return model(nodes, {"x": list(x_shape)}, {o: None for o in outs}, inits, opset=opset)


@pytest.mark.parametrize("opset", [11, 17])
@pytest.mark.parametrize("conv", [False, True])
@pytest.mark.parametrize("op,x_shape", [("split_squeeze", [1, 4, 5, 6]),
                                        ("split_squeeze", [1, 4, 1, 1]),
                                        ("slice_unsqueeze", [2, 5, 3, 4])])
def test_save_of_squeezed_and_unsqueezed_views_computes_them(op, x_shape, conv, opset):
    m = squeezed_views(x_shape, conv, op, opset)
    check6(m)
    ops = saved_matches_original(m)
    assert "Slice" in ops


@pytest.mark.parametrize("tail", ["unsqueeze", "split_squeeze", "straddle"])
@pytest.mark.parametrize("conv", [False, True])
def test_save_of_views_of_a_concat_buffer_writes_the_concat(tail, conv):
    """A view of the loader's zero-copy Concat buffer (another rank, or a part across two of
    its slices) is a view of the Concat of those slices."""
    if conv:
        nodes = [h.make_node("Conv", ["x", "w"], ["p"]), h.make_node("Conv", ["x", "w2"], ["r"])]
        inits, axis, shape = {"w": conv_w(3, 4), "w2": conv_w(3, 2)}, 1, [1, 3, 4, 5]
    else:
        nodes = [h.make_node("Relu", ["x"], ["p"]), h.make_node("Sigmoid", ["x"], ["r"])]
        inits, axis, shape = {}, 1, [2, 3, 4]
    nodes.append(h.make_node("Concat", ["p", "r"], ["c"], axis=axis))
    if tail == "unsqueeze":
        nodes.append(h.make_node("Unsqueeze", ["c", "ax0"], ["y"]))
        inits["ax0"] = I(0)
    elif tail == "split_squeeze":
        nodes += [h.make_node("Split", ["c", "sp"], ["a", "b"], axis=-1),
                  h.make_node("Squeeze", ["a", "axl"], ["y"])]
        inits.update(sp=I(1, shape[-1] - 1), axl=I(-1))
    else:
        # The last 3 (4 + 2 channels) or 4 (3 + 3 rows) of axis 1: a part of p and all of r.
        nodes.append(h.make_node("Split", ["c", "sp"], ["a", "y"], axis=1))
        inits["sp"] = I(3, 3) if conv else I(2, 4)
    m = model(nodes + [h.make_node("Relu", ["y"], ["z"])], {"x": shape}, {"y": None, "z": None},
              inits)
    check6(m)
    assert "Concat" in saved_matches_original(m)


def graph_reading(view_of):
    """x -> RELU -> y, then a RELU named "reader" of view_of(y); returns (graph, x, output)."""
    g = nnc.Graph()
    x = nnc.Tensor.empty((4, 4), dtype="float32")
    y = nnc.Tensor.empty((4, 4), dtype="float32")
    v = view_of(y)
    z = nnc.Tensor.empty(v.shape, dtype="float32")
    g.concat(g.exec(nnc.Cmd("RELU"), [x], [y]), g.exec(nnc.Cmd("RELU"), [v], [z], name="reader"))
    return g, x, z


def test_save_of_a_view_no_slice_expresses_is_refused_naming_the_reader():
    # The diagonal: no Slice, Reshape or Transpose of y gives it, and an initializer holding
    # what the memory held at save time would be wrong for any other input.
    g, x, z = graph_reading(lambda y: y.view((4,), strides=(5,)))
    with pytest.raises(nnc.onnx.UnsupportedError) as e:
        nnc.onnx.save(g, None, inputs=[x], outputs=[z])
    assert "'reader'" in str(e.value) and "(4,)" in str(e.value) and "(5,)" in str(e.value)


def test_save_of_a_transposed_view_writes_a_transpose():
    g, x, z = graph_reading(lambda y: y.view((2, 4), offset=1, strides=(2, 4)))
    m = nnc.onnx.save(g, None, inputs=[x], outputs=[z])
    assert not m.graph.initializer or all(i.name.split("_")[0] != "w"
                                          for i in m.graph.initializer)
    for _ in range(2):
        a = RNG.standard_normal((4, 4)).astype(np.float32)
        want = np.maximum(a, 0)[:, 1::2].T
        np.testing.assert_array_equal(ort_run(m, {"input_0": a})[0], want)


def test_save_of_a_computed_convolution_weight_reads_it():
    """A CONVOLUTION whose weight a node computes (here a RELU of a graph input, through a
    reshaping view) is written from that value, not as a snapshot initializer."""
    g = nnc.Graph()
    x = nnc.Tensor.empty((1, 5, 5, 3), dtype="float32")
    k = nnc.Tensor.empty((4, 27), dtype="float32")
    kr = nnc.Tensor.empty((4, 27), dtype="float32")
    y = nnc.Tensor.empty((1, 5, 5, 4), dtype="float32")
    g.concat(g.exec(nnc.Cmd("RELU"), [k], [kr]),
             g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, kr.view((4, 3, 3, 3))], [y]))
    m = nnc.onnx.save(g, None, inputs=[x, k], outputs=[y])
    for _ in range(2):
        a = RNG.standard_normal((1, 5, 5, 3)).astype(np.float32)
        b = RNG.standard_normal((4, 27)).astype(np.float32)
        x.numpy()[...], k.numpy()[...] = a, b
        g.run()
        close(ort_run(m, {"input_0": a, "input_1": b})[0], y.numpy(), rtol=1e-5)


def test_a_folded_scalar_keeps_its_rank_when_shapes_are_inferred_again():
    """A Reshape to a computed shape makes the loader run shape inference again with the folded
    values as initializers; a folded scalar (here the scale a runtime Add reads) must go in as
    a scalar, or what follows it gains an axis (a Concat of ranks 1 and 2 then fails)."""
    nodes = [h.make_node("Shape", ["x"], ["sh"]),
             h.make_node("Gather", ["sh", "i0"], ["d0"]),
             h.make_node("Gather", ["sh", "i1"], ["d1"]),
             h.make_node("Mul", ["d0", "d1"], ["n"]),
             h.make_node("Unsqueeze", ["n", "a0"], ["nn"]),
             h.make_node("Reshape", ["x", "nn"], ["flat"]),            # [6]: a computed shape
             h.make_node("Cast", ["d0"], ["s"], to=TP.FLOAT),          # a scalar, folded
             h.make_node("ReduceSum", ["x"], ["r"], keepdims=0),       # a runtime scalar
             h.make_node("Add", ["r", "s"], ["z"]),
             h.make_node("Unsqueeze", ["z", "a0"], ["zu"]),            # [1]
             h.make_node("Concat", ["zu", "flat"], ["y"], axis=0)]
    m = model(nodes, {"x": [2, 3]}, {"y": None},
              {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "a0": I(0)})
    check6(m)
