"""nnc.onnx against onnxruntime on the same ONNX file: one model per operator, the three
torchvision networks with random weights (batch 1), save round trips, unsupported operators and
bad input. Tolerance (docs/onnx.md): max|nnc - ort| <= 1e-4 * max|ort| in float32."""

import itertools
import sys

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
import nnc.onnx  # noqa: E402
from nnc.models import onnx_zoo  # noqa: E402

h = onnx.helper
TP = onnx.TensorProto
RTOL = 1e-4
RNG = np.random.default_rng(0)


def model(nodes, inputs, outputs, inits=None, opset=17):
    """A ModelProto from nodes, {input: shape}, {output: shape or None}, {init: array}."""
    g = h.make_graph(
        nodes, "t", [h.make_tensor_value_info(k, TP.FLOAT, s) for k, s in inputs.items()],
        [h.make_tensor_value_info(k, TP.FLOAT, s) for k, s in outputs.items()],
        [onnx.numpy_helper.from_array(np.array(v, order="C"), k)
         for k, v in (inits or {}).items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def session(m):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def ort_run(m, feeds):
    return session(m).run(None, feeds)


def nnc_run(loaded, feeds, stream=False):
    g, inputs, outputs = loaded
    for name, t in zip(loaded.input_names, inputs):
        t.numpy()[...] = feeds[name]
    if stream:
        nnc.static_schedule(g)
        s = nnc.Stream("cpu")
        g.run(stream=s)
        s.wait()
    else:
        g.run()
    return [t.numpy().copy() for t in outputs]


def close(got, want, rtol=RTOL):
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1e-6)
    err = float(np.abs(got - want).max())
    assert err <= rtol * scale, f"max|diff| {err} > {rtol} * {scale}"


def saved_runs(loaded, feeds):
    """save(load(m)) runs in onnxruntime to nnc's outputs, and loads again to the same."""
    want = nnc_run(loaded, feeds)
    saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs,
                          input_names=loaded.input_names, output_names=loaded.output_names)
    for got, w in zip(ort_run(saved, feeds), want):
        close(got, w)
    for got, w in zip(nnc_run(nnc.onnx.load(saved), feeds), want):
        close(got, w)
    return saved


def check(m, **kw):
    """Load m, run nnc and ORT on the same random inputs, compare; return the LoadedModel."""
    loaded = nnc.onnx.load(m, **kw)
    feeds = {n: RNG.standard_normal(t.shape).astype(np.float32)
             for n, t in zip(loaded.input_names, loaded.inputs)}
    for got, want in zip(nnc_run(loaded, feeds), ort_run(m, feeds)):
        close(got, want)
    return loaded


def commands(loaded):
    return [e.cmd.name for e in loaded.graph.topsort()]


# -- one operator at a time -------------------------------------------------------------------

@pytest.mark.parametrize("c,o,k,group,stride,pads,bias", [
    (3, 8, 3, 1, 1, [1, 1, 1, 1], True),
    (4, 6, 3, 2, 2, [1, 0, 2, 1], False),      # grouped, strided, asymmetric pads
    (8, 8, 3, 8, 1, [1, 1, 1, 1], True),       # depthwise
    (5, 7, (1, 3), 1, 2, [0, 1, 0, 1], True),  # 1x3
])
def test_conv(c, o, k, group, stride, pads, bias):
    kh, kw = (k, k) if isinstance(k, int) else k
    inits = {"w": RNG.standard_normal((o, c // group, kh, kw)).astype(np.float32)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = RNG.standard_normal(o).astype(np.float32)
        ins.append("b")
    node = h.make_node("Conv", ins, ["y"], group=group, strides=[stride, stride], pads=pads,
                       kernel_shape=[kh, kw])
    loaded = check(model([node], {"x": [1, c, 9, 11]}, {"y": None}, inits))
    assert commands(loaded) == ["TRANSPOSE", "CONVOLUTION", "TRANSPOSE"]


def test_conv_auto_pad_same_upper():
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    node = h.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])
    check(model([node], {"x": [2, 3, 8, 7]}, {"y": None}, {"w": w}))


def test_conv_bn_relu_folds_and_runs_in_place():
    c = 6
    inits = {"w": RNG.standard_normal((c, 3, 3, 3)).astype(np.float32),
             "g": RNG.uniform(0.5, 1.5, c).astype(np.float32),
             "b": RNG.normal(0, 0.1, c).astype(np.float32),
             "m": RNG.normal(0, 0.1, c).astype(np.float32),
             "v": RNG.uniform(0.5, 1.5, c).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"], epsilon=1e-3),
             h.make_node("Relu", ["n"], ["y"])]
    loaded = check(model(nodes, {"x": [1, 3, 8, 8]}, {"y": None}, inits))
    assert len(loaded.folded) == 1
    assert commands(loaded) == ["TRANSPOSE", "CONVOLUTION", "RELU", "TRANSPOSE"]
    relu = loaded.graph.topsort()[2]
    assert relu.inputs[0].data_ptr == relu.outputs[0].data_ptr  # in place


def test_bn_not_folded_when_conv_output_is_shared():
    c = 4
    inits = {"w": RNG.standard_normal((c, 3, 1, 1)).astype(np.float32),
             "g": RNG.uniform(0.5, 1.5, c).astype(np.float32),
             "b": RNG.normal(0, 0.1, c).astype(np.float32),
             "m": RNG.normal(0, 0.1, c).astype(np.float32),
             "v": RNG.uniform(0.5, 1.5, c).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"]),
             h.make_node("Add", ["n", "c"], ["y"])]
    loaded = check(model(nodes, {"x": [1, 3, 5, 5]}, {"y": None}, inits))
    assert loaded.folded == []
    # The image's BN is a depthwise 1x1 convolution (weight scale, bias shift): one pass.
    bn = [e for e in loaded.graph.topsort() if e.cmd.name == "CONVOLUTION"
          and e.cmd.params["groups"] == c]
    assert len(bn) == 1 and bn[0].inputs[1].shape == (c, 1, 1, 1)


def test_bn_relu_after_concat_reads_slices_of_the_last_concat():
    """DenseNet's pattern: each layer's Concat is a prefix of the block's last one, read by a
    BN and a ReLU. The Concats are views of one buffer (no copies), the BN a depthwise 1x1
    convolution that reads the view, the ReLU folded into it by Graph.simplify; results as
    onnxruntime's, at every layer."""
    c, grow, layers = 8, 4, 3
    rng = np.random.default_rng(3)
    inits = {"w_stem": rng.standard_normal((c, 3, 1, 1)).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w_stem"], ["x0"])]
    feats, outs = ["x0"], {}
    for i in range(layers):
        cin = c + grow * i
        for name, v in (("g", rng.uniform(0.5, 1.5, cin)), ("b", rng.normal(0, 0.1, cin)),
                        ("m", rng.normal(0, 0.1, cin)), ("v", rng.uniform(0.5, 1.5, cin))):
            inits[f"{name}{i}"] = v.astype(np.float32)
        inits[f"w{i}"] = rng.standard_normal((grow, cin, 3, 3)).astype(np.float32)
        cat = f"cat{i}" if i else "x0"
        if i:
            nodes.append(h.make_node("Concat", list(feats), [cat], axis=1))
        nodes += [h.make_node("BatchNormalization", [cat, f"g{i}", f"b{i}", f"m{i}", f"v{i}"],
                              [f"n{i}"]),
                  h.make_node("Relu", [f"n{i}"], [f"r{i}"]),
                  h.make_node("Conv", [f"r{i}", f"w{i}"], [f"f{i}"], pads=[1, 1, 1, 1])]
        feats.append(f"f{i}")
        outs[f"r{i}"] = None                # every layer's activations are checked too
    nodes.append(h.make_node("Concat", list(feats), ["y"], axis=1))
    outs["y"] = None
    loaded = check(model(nodes, {"x": [1, 3, 6, 6]}, outs, inits))
    assert "DATA_TRANSFER" not in commands(loaded)
    m2 = model(nodes, {"x": [1, 3, 6, 6]}, {"y": None}, inits)
    loaded = check(m2)
    assert "DATA_TRANSFER" not in commands(loaded)
    assert loaded.graph.simplify() == layers  # each ReLU into its BN's convolution
    feeds = {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    for got, want in zip(nnc_run(loaded, feeds), ort_run(m2, feeds)):
        close(got, want)


@pytest.mark.parametrize("opset,attrs,ins", [
    (17, {}, ["x", "lo", "hi"]),                # ReLU6 as torch exports it
    (17, {}, ["x", "", "hi"]),                  # max only
    (6, {"min": -0.5, "max": 0.25}, ["x"]),     # attributes before opset 11
])
def test_clip(opset, attrs, ins):
    node = h.make_node("Clip", ins, ["y"], **attrs)
    inits = {k: np.array(v, np.float32) for k, v in (("lo", 0.0), ("hi", 6.0)) if k in ins}
    m = model([node], {"x": [2, 3, 4, 5]}, {"y": None}, inits, opset=opset)
    loaded = nnc.onnx.load(m)
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32) * 8
    close(nnc_run(loaded, {"x": x})[0], ort_run(m, {"x": x})[0])
    assert commands(loaded) == ["CLAMP"]


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("b_shape,b_const", [
    ((8, 1, 1), True),          # per-channel constant against an NCHW activation
    ((1,), True),               # a scalar
    ((1, 8, 5, 6), False),      # two activations
    ((5, 6), True),             # trailing spatial constant
])
def test_add_mul_broadcast_after_conv(op, b_shape, b_const):
    w = RNG.standard_normal((8, 3, 1, 1)).astype(np.float32)
    inits = {"w": w}
    ins = {"x": [1, 3, 5, 6]}
    if b_const:
        inits["b"] = RNG.standard_normal(b_shape).astype(np.float32)
    else:
        ins["b"] = list(b_shape)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node(op, ["c", "b"], ["y"])]
    check(model(nodes, ins, {"y": None}, inits))


def test_add_plain_2d_broadcast():
    node = h.make_node("Add", ["x", "b"], ["y"])
    check(model([node], {"x": [4, 7], "b": [7]}, {"y": None}))


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                         count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                         count_include_pad=0)),
    ("AveragePool", dict(kernel_shape=[2, 3], strides=[2, 1])),
    ("GlobalAveragePool", {}),
])
def test_pools(op, attrs):
    check(model([h.make_node(op, ["x"], ["y"], **attrs)], {"x": [1, 4, 9, 10]}, {"y": None}))


@pytest.mark.parametrize("op, include_pad", [("MaxPool", 0), ("AveragePool", 0),
                                             ("AveragePool", 1)])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_pools_ceil_mode_match_onnxruntime(op, include_pad, k):
    """ceil_mode=1 for kernels 1-4, strides 1-3, pads 0-2: shapes and values as onnxruntime's
    (a last window starting in the end padding is dropped, though onnx's shape inference keeps
    it; an average's divisor counts a window's taps inside the padded input)."""
    ran = 0
    for s, p, shape in itertools.product((1, 2, 3), (0, 1, 2), ([1, 3, 7, 9], [2, 2, 6, 5])):
        if p >= k:
            continue
        attrs = dict(kernel_shape=[k, max(k - 1, 1)], strides=[s, s], ceil_mode=1,
                     pads=[p, min(p, max(k - 2, 0)), max(p - 1, 0), min(p, max(k - 2, 0))])
        if op == "AveragePool":
            attrs["count_include_pad"] = include_pad
        check(model([h.make_node(op, ["x"], ["y"], **attrs)], {"x": shape}, {"y": None}))
        ran += 1
    assert ran


def test_ceil_mode_pool_feeds_later_shapes():
    """onnx infers one row too many for this pool (its last window would start in the
    padding): the loader corrects it and the shapes after it."""
    w = RNG.standard_normal((2, 3, 1, 1)).astype(np.float32)
    nodes = [h.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[3, 3],
                         pads=[1, 1, 1, 1], ceil_mode=1),
             h.make_node("Conv", ["p", "w"], ["c"]),
             h.make_node("Relu", ["c"], ["y"])]
    loaded = check(model(nodes, {"x": [1, 3, 7, 6]}, {"y": None}, {"w": w}))
    assert loaded.outputs[0].shape == (1, 2, 3, 3)


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "Conv"])
@pytest.mark.parametrize("k, s", [(3, 1), (2, 2), (3, 2), (4, 3), (5, 2)])
def test_auto_pad_matches_onnxruntime(mode, op, k, s):
    attrs = dict(auto_pad=mode, strides=[s, s])
    inits = {}
    if op == "Conv":
        inits["w"] = RNG.standard_normal((2, 3, k, k)).astype(np.float32)
        node = h.make_node(op, ["x", "w"], ["y"], **attrs)
    else:
        node = h.make_node(op, ["x"], ["y"], kernel_shape=[k, k], **attrs)
    for shape in ([1, 3, 7, 8], [1, 3, 5, 5]):
        check(model([node], {"x": shape}, {"y": None}, inits))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3], strides=[2], pads=[1, 1]),
    dict(kernel_shape=[2], strides=[2], ceil_mode=1),
    dict(kernel_shape=[3], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 1, 0, 0, 1, 1]),
    dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1], ceil_mode=1),
])
def test_pools_1d_and_3d(op, attrs):
    shape = [2, 3, 11] if len(attrs["kernel_shape"]) == 1 else [1, 3, 6, 7, 5]
    for include_pad in ((0, 1) if op == "AveragePool" else (None,)):
        extra = {} if include_pad is None else {"count_include_pad": include_pad}
        check(model([h.make_node(op, ["x"], ["y"], **attrs, **extra)], {"x": shape},
                    {"y": None}))


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool"])
@pytest.mark.parametrize("shape", [[2, 3, 5, 4], [2, 3, 7], [1, 2, 3, 4, 5]])
def test_global_pools(op, shape):
    check(model([h.make_node(op, ["x"], ["y"])], {"x": shape}, {"y": None}))


def test_pool_refusals_name_the_attribute():
    node = h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])
    with pytest.raises(nnc.onnx.UnsupportedError, match="attribute 'dilations' = \\[2, 2\\]"):
        nnc.onnx.load(model([node], {"x": [1, 1, 6, 6]}, {"y": None}))
    node = h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], ceil_mode=2)
    with pytest.raises(nnc.onnx.OnnxError, match="'ceil_mode' = 2"):
        nnc.onnx.load(model([node], {"x": [1, 1, 6, 6]}, {"y": None}))
    node = h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[2, 2, 2, 2])
    with pytest.raises(nnc.onnx.UnsupportedError, match="smaller than the window"):
        nnc.onnx.load(model([node], {"x": [1, 1, 6, 6]}, {"y": None}))


@pytest.mark.parametrize("ta,tb,alpha,beta,c_shape", [
    (0, 1, 1.0, 1.0, (10,)),
    (1, 0, 0.5, 2.0, (1, 10)),
    (0, 0, 1.0, 0.5, (3, 10)),    # a full C matrix: GEMM then ADD
    (0, 1, 2.0, 1.0, None),
])
def test_gemm(ta, tb, alpha, beta, c_shape):
    a_shape = (6, 3) if ta else (3, 6)
    inits = {"w": RNG.standard_normal((10, 6) if tb else (6, 10)).astype(np.float32)}
    ins = ["a", "w"]
    if c_shape:
        inits["c"] = RNG.standard_normal(c_shape).astype(np.float32)
        ins.append("c")
    node = h.make_node("Gemm", ins, ["y"], transA=ta, transB=tb, alpha=alpha, beta=beta)
    check(model([node], {"a": list(a_shape)}, {"y": None}, inits))


def test_matmul_and_softmax():
    nodes = [h.make_node("MatMul", ["a", "b"], ["m"]), h.make_node("Softmax", ["m"], ["y"])]
    check(model(nodes, {"a": [2, 4, 5], "b": [2, 5, 3]}, {"y": None}))


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_softmax_on_image_axes(axis):
    w = RNG.standard_normal((5, 3, 1, 1)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node("Softmax", ["c"], ["y"],
                                                                  axis=axis)]
    check(model(nodes, {"x": [1, 3, 4, 6]}, {"y": None}, {"w": w}))


def test_flatten_reshape_transpose_identity_dropout():
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Identity", ["c"], ["i"]),
             h.make_node("Dropout", ["i"], ["d"]),
             # spatial 5x6 > 1: nnc must put NHWC back in NCHW order before flattening
             h.make_node("Flatten", ["d"], ["f"], axis=1),
             h.make_node("Reshape", ["f", "shape"], ["r"]),
             h.make_node("Transpose", ["r"], ["y"], perm=[1, 0, 2]),
             h.make_node("Transpose", ["c"], ["t"], perm=[0, 3, 2, 1])]
    m = model(nodes, {"x": [2, 3, 5, 6]}, {"y": None, "t": None},
              {"w": w, "shape": np.array([2, 4, -1], np.int64)})
    check(m)


def test_concat_is_zero_copy():
    """Every Concat input is written by its producer straight into a slice of one buffer."""
    inits = {f"w{k}": RNG.standard_normal((c, 3, 1, 1)).astype(np.float32)
             for k, c in enumerate((4, 5, 6))}
    nodes = [h.make_node("Conv", ["x", "w0"], ["a"]),
             h.make_node("Relu", ["a"], ["ar"]),
             h.make_node("Conv", ["x", "w1"], ["b"]),
             h.make_node("Conv", ["x", "w2"], ["c"]),
             h.make_node("Concat", ["b", "c"], ["bc"], axis=1),     # nested
             h.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[1, 1]),
             h.make_node("Concat", ["ar", "bc", "p"], ["y"], axis=1)]
    loaded = check(model(nodes, {"x": [1, 3, 7, 8]}, {"y": None}, inits))
    assert "DATA_TRANSFER" not in commands(loaded)
    buf, slices = loaded.concats["y"] if "y" in loaded.concats else next(
        v for v in loaded.concats.values() if v[0].shape[-1] == 18)
    assert buf.shape == (1, 7, 8, 18)
    item = buf.dtype.itemsize
    offsets = [(s.data_ptr - buf.data_ptr) // item for s in slices]
    assert offsets == [0, 4, 15] and all(s.strides == buf.strides for s in slices)


def test_concat_of_graph_input_falls_back_to_a_copy():
    w = RNG.standard_normal((2, 3, 1, 1)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("Concat", ["x", "c", "c"], ["y"], axis=1)]
    loaded = check(model(nodes, {"x": [1, 3, 4, 4]}, {"y": None}, {"w": w}))
    assert commands(loaded).count("DATA_TRANSFER") == 2  # x, and the second use of c


def test_symbolic_batch_defaults_to_one_or_takes_input_shapes():
    node = h.make_node("Relu", ["x"], ["y"])
    m = model([node], {"x": ["N", 3]}, {"y": ["N", 3]})
    assert nnc.onnx.load(m).inputs[0].shape == (1, 3)
    loaded = nnc.onnx.load(m, input_shapes={"x": (5, 3)})
    assert loaded.inputs[0].shape == loaded.outputs[0].shape == (5, 3)
    with pytest.raises(nnc.onnx.OnnxError, match="not graph inputs"):
        nnc.onnx.load(m, input_shapes={"z": (1, 3)})
    with pytest.raises(nnc.onnx.OnnxError, match="disagrees"):
        nnc.onnx.load(model([node], {"x": [2, 3]}, {"y": None}), input_shapes={"x": (5, 3)})


# -- errors ------------------------------------------------------------------------------------

def test_unsupported_operators_are_all_listed():
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    nodes = [h.make_node("Hardmax", ["x"], ["s1"], name="hardmax_a"),
             h.make_node("Hardmax", ["s1"], ["s2"], name="hardmax_b"),
             h.make_node("Shrink", ["s2"], ["c"], name="shrink"),
             h.make_node("Conv", ["c", "w"], ["y"], dilations=[2, 2], name="dilated"),
             h.make_node("MaxPool", ["y"], ["p", "idx"], kernel_shape=[2, 2],
                         name="indices")]
    with pytest.raises(nnc.onnx.UnsupportedError) as info:
        nnc.onnx.load(model(nodes, {"x": [1, 3, 9, 9]}, {"p": None}, {"w": w}))
    e = info.value
    assert isinstance(e, nnc.NNCError)
    assert set(e.problems) == {"Hardmax", "Shrink", "Conv", "MaxPool"}
    assert e.problems["Hardmax"][:2] == (2, ["hardmax_a", "hardmax_b"])
    msg = str(e)
    assert "Hardmax x2" in msg and "dilations" in msg and "Indices" in msg and \
        "'shrink'" in msg


def test_bad_inputs(tmp_path):
    with pytest.raises(nnc.onnx.OnnxError, match="cannot read"):
        nnc.onnx.load(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\x00 not a protobuf")
    with pytest.raises(nnc.onnx.OnnxError):
        nnc.onnx.load(str(bad))
    with pytest.raises(TypeError, match="ModelProto") as info:
        nnc.onnx.load(42)
    assert isinstance(info.value, nnc.NNCError)
    with pytest.raises(nnc.onnx.OnnxError, match="not a serialized"):
        nnc.onnx.load(b"\xff\xff")
    relu = model([h.make_node("Relu", ["x"], ["y"])], {"x": [3]}, {"y": None})
    assert nnc.onnx.load(relu.SerializeToString()).inputs[0].shape == (3,)
    broken = model([h.make_node("Relu", ["nowhere"], ["y"])], {"x": [1]}, {"y": None})
    with pytest.raises(nnc.onnx.OnnxError, match="invalid ONNX model"):
        nnc.onnx.load(broken)
    with pytest.raises(nnc.onnx.OnnxError, match="dtype"):
        nnc.onnx.load(model([h.make_node("Relu", ["x"], ["y"])], {"x": [1]}, {"y": None}),
                      dtype="int8")


def test_missing_onnx_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(nnc.onnx.OnnxMissingError, match=r'pip install "nnc-graph\[onnx\]"'):
        nnc.onnx.load("model.onnx")
    with pytest.raises(ImportError):
        nnc.onnx.save(nnc.Graph(), None, inputs=[], outputs=[])


def test_save_rejects_commands_without_onnx_form():
    g = nnc.Graph()
    x = nnc.Tensor(np.zeros(3, np.float32))
    g.exec(nnc.Cmd.custom(lambda i, o: None), [x], [x], name="mine")
    g.exec(nnc.Cmd.custom(lambda i, o: None), [x], [x], name="other")
    with pytest.raises(nnc.onnx.UnsupportedError, match="CUSTOM x2"):
        nnc.onnx.save(g, None, inputs=[x], outputs=[x])
    with pytest.raises(TypeError, match="nnc.Tensor") as info:
        nnc.onnx.save(nnc.Graph(), None, inputs=[np.zeros(3)], outputs=[])
    assert isinstance(info.value, nnc.NNCError)


def test_save_of_a_hand_built_graph_runs_in_ort():
    g = nnc.Graph()
    x = nnc.Tensor.empty((1, 6, 6, 3), dtype="float32")
    w = nnc.Tensor(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = nnc.Tensor.empty((1, 6, 6, 4), dtype="float32")
    z = nnc.Tensor.empty((1, 6, 6, 4), dtype="float32")
    a = g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y])
    b = g.exec(nnc.Cmd("CLAMP", min=0.0, max=6.0), [y], [y])
    c = g.exec(nnc.Cmd("ADD", p=2.0, q=-1.0), [y, nnc.Tensor(np.ones(4, np.float32))], [z])
    g.concat(a, b)
    g.concat(b, c)
    x.numpy()[...] = RNG.standard_normal(x.shape)
    g.run()
    m = nnc.onnx.save(g, None, inputs=[x], outputs=[z], input_names=["img"])
    close(ort_run(m, {"img": x.numpy()})[0], z.numpy())


def test_save_of_a_simplified_graph_writes_the_fused_relu():
    """Graph.simplify's CONVOLUTION with activation="relu" saves as Conv + Relu (its RELU node,
    now a NOOP, writes nothing)."""
    g = nnc.Graph()
    x = nnc.Tensor(RNG.standard_normal((1, 6, 6, 3)).astype(np.float32))
    w = nnc.Tensor(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = nnc.Tensor.empty((1, 6, 6, 4), dtype="float32")
    g.concat(g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y]),
             g.exec(nnc.Cmd("RELU"), [y], [y]))
    assert g.simplify() == 1
    g.run()
    assert y.numpy().min() == 0
    m = nnc.onnx.save(g, None, inputs=[x], outputs=[y], input_names=["img"])
    assert [n.op_type for n in m.graph.node].count("Relu") == 1
    close(ort_run(m, {"img": x.numpy()})[0], y.numpy())


@pytest.mark.parametrize("act", ["relu", "relu6", "clamp_hi"])
def test_save_of_a_fused_residual_and_clamp_runs_in_ort(act):
    """A convolution with a folded residual ADD and a RELU/CLAMP saves as Conv, Add and the
    activation, and ONNX Runtime computes what nnc did."""
    g = nnc.Graph()
    x = nnc.Tensor(RNG.standard_normal((1, 6, 6, 3)).astype(np.float32))
    w = nnc.Tensor(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    r = nnc.Tensor(RNG.standard_normal((1, 6, 6, 4)).astype(np.float32))
    y = nnc.Tensor.empty((1, 6, 6, 4), dtype="float32")
    conv = g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y])
    add = g.exec(nnc.Cmd("ADD"), [y, r], [y])
    tail = g.exec({"relu": nnc.Cmd("RELU"), "relu6": nnc.Cmd("CLAMP", min=0, max=6),
                   "clamp_hi": nnc.Cmd("CLAMP", max=0.25)}[act], [y], [y])
    g.concat(conv, add)
    g.concat(add, tail)
    assert g.simplify() == 2
    g.run()
    m = nnc.onnx.save(g, None, inputs=[x, r], outputs=[y], input_names=["img", "res"])
    ops = [n.op_type for n in m.graph.node]
    assert ops.count("Add") == 1 and ops.count("Relu" if act == "relu" else "Clip") == 1
    close(ort_run(m, {"img": x.numpy(), "res": r.numpy()})[0], y.numpy())


# -- the three networks ------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["resnet50", "inception_v3", "mobilenet_v2"])
def network(request):
    m = getattr(onnx_zoo, request.param)(seed=1)
    loaded = nnc.onnx.load(m)
    x = np.random.default_rng(2).standard_normal(loaded.inputs[0].shape).astype(np.float32)
    feeds = {loaded.input_names[0]: x}
    want = ort_run(m, feeds)[0]
    got = nnc_run(loaded, feeds)[0]
    return request.param, m, loaded, feeds, got, want


TORCHVISION_PARAMS = {"resnet50": 25_557_032, "inception_v3": 23_834_568,
                      "mobilenet_v2": 3_504_872}


@pytest.mark.slow
def test_network_matches_onnxruntime(network):
    name, m, loaded, feeds, got, want = network
    assert onnx_zoo.trainable_parameters(m) == TORCHVISION_PARAMS[name]
    assert got.shape == (1, 1000)
    assert np.isfinite(want).all() and np.abs(want).max() > 0.1
    close(got, want)
    ops = {n.op_type for n in m.graph.node}
    assert "BatchNormalization" in ops and len(loaded.folded) == sum(
        n.op_type == "BatchNormalization" for n in m.graph.node)
    if name == "inception_v3":
        assert "DATA_TRANSFER" not in commands(loaded) and len(loaded.concats) == 15


def test_simplified_network_matches_onnxruntime(network):
    """Every Add after a Conv becomes that Conv's residual, added in place over the other
    operand by the loader itself (ResNet's and MobileNet-V2's shortcuts), and Graph.simplify
    folds every Relu and Clip after a Conv (the loader runs them in place so they can be
    folded): no element-wise node is left, and the result is still ONNX Runtime's."""
    name, m, _, feeds, _, want = network
    loaded = nnc.onnx.load(m)
    adds = sum(n.op_type == "Add" for n in m.graph.node)
    acts = sum(n.op_type in ("Relu", "Clip") for n in m.graph.node)
    residuals = [e for e in loaded.graph.execs
                 if e.cmd.name == "CONVOLUTION" and len(e.inputs) > 3]
    assert len(residuals) == adds and "ADD" not in commands(loaded)
    assert all(e.inputs[3].data_ptr == e.outputs[0].data_ptr for e in residuals)
    folded = loaded.graph.simplify()
    left = {c for c in commands(loaded)} & {"ADD", "RELU", "CLAMP"}
    assert not left and folded == acts
    close(nnc_run(loaded, feeds)[0], want)


def _unordered_conflicts(g):
    """Pairs of nodes that touch a common element (one of them writing it) with no path
    between them in the graph: what a schedule could run at once."""
    order = g.topsort()
    pos = {e.index: i for i, e in enumerate(order)}
    desc = [0] * len(order)
    for i in range(len(order) - 1, -1, -1):
        for o in order[i].outgoings:
            desc[i] |= desc[pos[o.index]] | (1 << pos[o.index])
    uses = [(i, kind, t) for i, e in enumerate(order)
            for kind, ts in (("r", e.inputs), ("w", e.outputs)) for t in ts if t is not None]
    bad = []
    for a, (i, ka, ta) in enumerate(uses):
        for j, kb, tb in uses[a + 1:]:
            if i == j or ka == kb == "r" or (desc[i] >> j) & 1 or (desc[j] >> i) & 1:
                continue
            if np.shares_memory(ta.numpy(), tb.numpy()):
                bad.append((order[i], order[j]))
    return bad


def test_values_share_memory_only_where_the_edges_order_them(network):
    """The loader lets intermediate values share memory (the working set stays in cache), and
    no two nodes a schedule could run at once touch a common element, before or after
    Graph.simplify adds its edges."""
    name, m, _, feeds, _, want = network
    loaded = nnc.onnx.load(m)
    outs = [t for e in loaded.graph.topsort() for t in e.outputs if t is not None]
    assert len({t.data_ptr for t in outs}) < len(outs)
    assert _unordered_conflicts(loaded.graph) == []
    loaded.graph.simplify()
    assert _unordered_conflicts(loaded.graph) == []
    close(nnc_run(loaded, feeds, stream=True)[0], want)


@pytest.mark.slow
def test_network_scheduled_on_streams_matches_sequential(network):
    name, m, loaded, feeds, got, want = network
    scheduled = nnc_run(loaded, feeds, stream=True)[0]
    assert loaded.graph.schedule.stream_count >= 1
    np.testing.assert_allclose(scheduled, got, rtol=1e-5, atol=1e-5 * np.abs(got).max())


@pytest.mark.slow
def test_network_save_round_trip(tmp_path):
    """save(load(m)) runs in onnxruntime to m's outputs; load(save(load(m))) does in nnc."""
    m = onnx_zoo.inception_v3(seed=4, size=107)   # every Concat kind, in under 2 s
    loaded = nnc.onnx.load(m)
    feeds = {"x": RNG.standard_normal((1, 3, 107, 107)).astype(np.float32)}
    want = ort_run(m, feeds)[0]
    close(nnc_run(loaded, feeds)[0], want)
    path = tmp_path / "saved.onnx"
    nnc.onnx.save(loaded.graph, path, inputs=loaded.inputs, outputs=loaded.outputs,
                  input_names=loaded.input_names, output_names=loaded.output_names)
    close(ort_run(onnx.load(path), feeds)[0], want)
    again = nnc.onnx.load(path)
    close(nnc_run(again, feeds)[0], want)


def test_folded_export_variant_matches():
    m = onnx_zoo.mobilenet_v2(seed=3, fold_bn=True, size=96)
    assert "BatchNormalization" not in {n.op_type for n in m.graph.node}
    check(m)


def test_mobilenet_v3_block_loads_fuses_and_saves_back():
    """A MobileNet-V3-like block (1x1 Conv -> HardSwish, depthwise Conv -> x * Sigmoid(x), 1x1
    Conv): loaded with simplify (the InferenceSession path), nnc matches onnxruntime to 1e-5 and
    the HardSwish folds into its convolution; saved back, the fused convolution is Conv +
    HardSwish again and ONNX Runtime computes what nnc did. A SWISH folded by Graph.simplify
    saves as Mul(x, Sigmoid(x))."""
    c, e = 8, 24
    inits = {"w1": (RNG.standard_normal((e, c, 1, 1)) * 0.5).astype(np.float32),
             "b1": RNG.standard_normal(e).astype(np.float32),
             "w2": (RNG.standard_normal((e, 1, 3, 3)) * 0.3).astype(np.float32),
             "w3": (RNG.standard_normal((c, e, 1, 1)) * 0.3).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             h.make_node("HardSwish", ["c1"], ["a1"]),
             h.make_node("Conv", ["a1", "w2"], ["c2"], group=e, pads=[1, 1, 1, 1]),
             h.make_node("Sigmoid", ["c2"], ["s2"]),
             h.make_node("Mul", ["c2", "s2"], ["a2"]),
             h.make_node("Conv", ["a2", "w3"], ["y"])]
    m = model(nodes, {"x": [1, c, 10, 10]}, {"y": None}, inits)
    loaded = nnc.onnx.load(m)
    assert loaded.graph.simplify() >= 1
    convs = [e_.cmd for e_ in loaded.graph.topsort() if e_.cmd.name == "CONVOLUTION"]
    assert [cmd.params.get("activation") for cmd in convs][0] == "hard_swish"
    feeds = {"x": RNG.standard_normal((1, c, 10, 10)).astype(np.float32)}
    got = nnc_run(loaded, feeds)[0]
    close(got, ort_run(m, feeds)[0], rtol=1e-5)
    saved = nnc.onnx.save(loaded.graph, None, inputs=loaded.inputs, outputs=loaded.outputs,
                          input_names=loaded.input_names, output_names=loaded.output_names)
    assert [n.op_type for n in saved.graph.node].count("HardSwish") == 1
    close(ort_run(saved, feeds)[0], got, rtol=1e-5)

    g = nnc.Graph()
    x = nnc.Tensor(RNG.standard_normal((1, 6, 6, 3)).astype(np.float32))
    w = nnc.Tensor(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = nnc.Tensor.empty((1, 6, 6, 4), dtype="float32")
    g.concat(g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y]),
             g.exec(nnc.Cmd("SWISH"), [y], [y]))
    assert g.simplify() == 1
    g.run()
    m2 = nnc.onnx.save(g, None, inputs=[x], outputs=[y], input_names=["img"])
    ops = [n.op_type for n in m2.graph.node]
    assert ops.count("Sigmoid") == 1 and ops.count("Mul") == 1
    close(ort_run(m2, {"img": x.numpy()})[0], y.numpy(), rtol=1e-5)


@pytest.mark.parametrize("groups,tail", [(2, "split"), (3, "conv"), (2, "output")])
def test_channel_shuffle_of_an_nhwc_image_is_one_transpose(groups, tail):
    """ShuffleNet's Reshape -> Transpose(0, 2, 1, 3, 4) -> Reshape of a convolution's output is
    one TRANSPOSE within each pixel, the image staying NHWC for the convolution or the channel
    halves after it (views the convolution reads); the graph output goes back to ONNX's order
    once."""
    c = 6
    w = RNG.standard_normal((c, 4, 1, 1)).astype(np.float32)
    w2 = RNG.standard_normal((c // 2, c // 2, 1, 1)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["a"]),
             h.make_node("Reshape", ["a", "s5"], ["b"]),
             h.make_node("Transpose", ["b"], ["t"], perm=[0, 2, 1, 3, 4]),
             h.make_node("Reshape", ["t", "s4"], ["y" if tail == "output" else "s"])]
    outs = {"y": [1, c, 5, 7]}
    if tail == "split":
        nodes += [h.make_node("Split", ["s"], ["p", "q"], axis=1),
                  h.make_node("Conv", ["q", "w2"], ["r"]),
                  h.make_node("Concat", ["p", "r"], ["y"], axis=1)]
    elif tail == "conv":
        nodes += [h.make_node("Conv", ["s", "w3"], ["y"])]
        outs = {"y": [1, 2, 5, 7]}
    inits = {"w": w, "s5": np.array([1, groups, c // groups, 5, 7], np.int64),
             "s4": np.array([1, c, 5, 7], np.int64)}
    if tail == "split":
        inits["w2"] = w2
    elif tail == "conv":
        inits["w3"] = RNG.standard_normal((2, c, 1, 1)).astype(np.float32)
    loaded = check(model(nodes, {"x": [1, 4, 5, 7]}, outs, inits))
    names = commands(loaded)
    shuffles = [e for e in loaded.graph.topsort() if e.cmd.name == "TRANSPOSE"
                and e.cmd.params["perm"] == (0, 2, 1)]
    assert len(shuffles) == 1 and shuffles[0].backend == "CPU_OPT"
    # x to NHWC, the shuffle, y back to NCHW: no 5-D TRANSPOSE, no conversion around it.
    assert names.count("TRANSPOSE") == 3
