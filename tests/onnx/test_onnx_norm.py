"""nnc.onnx for LayerNormalization, GroupNormalization and InstanceNormalization: against
onnxruntime on small models (an image after a Conv stays NHWC and takes GROUP_NORM's C path),
save round trips (LayerNormalization as itself, the others as their definition), the
refusals, and LAYER_NORM / GROUP_NORM / RMSNORM graphs built in nnc saved and run by
onnxruntime. Tolerance as in tests/onnx/test_onnx.py."""

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
RNG = np.random.default_rng(17)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def backends(loaded):
    return {e.cmd.name: e.cmd.backend for e in loaded.graph.topsort()}


@pytest.mark.parametrize("shape, axis, bias, scale_shape", [
    ([2, 5, 8], -1, True, None), ([2, 5, 8], 1, True, None), ([3, 16], -1, False, None),
    ([2, 3, 4, 6], 2, True, [6]), ([4, 7], 0, True, None)])
def test_layer_normalization(shape, axis, bias, scale_shape):
    inner = shape[axis:] if scale_shape is None else scale_shape
    inits = {"s": f32(*inner)}
    ins = ["x", "s"]
    if bias:
        inits["b"] = f32(*inner)
        ins.append("b")
    node = h.make_node("LayerNormalization", ins, ["y"], axis=axis, epsilon=1e-4)
    loaded = check(model([node], {"x": shape}, {"y": None}, inits))
    assert commands(loaded) == ["LAYER_NORM"]
    assert backends(loaded)["LAYER_NORM"] == "CPU_OPT"
    saved = saved_runs(loaded, {"x": f32(*shape)})
    assert "LayerNormalization" in {n.op_type for n in saved.graph.node}


def test_layer_normalization_large_offset_matches_onnxruntime():
    node = h.make_node("LayerNormalization", ["x", "s", "b"], ["y"])
    m = model([node], {"x": [4, 32]}, {"y": None}, {"s": f32(32), "b": f32(32)})
    loaded = nnc.onnx.load(m)
    feeds = {"x": (f32(4, 32) + 300).astype(np.float32)}
    for got, want in zip(nnc_run(loaded, feeds), ort_run(m, feeds)):
        close(got, want, rtol=1e-4)     # onnxruntime's float32 statistics lose digits here


@pytest.mark.parametrize("op, attrs, c", [("GroupNormalization", {"num_groups": 4}, 8),
                                          ("GroupNormalization", {"num_groups": 1}, 6),
                                          ("GroupNormalization", {"num_groups": 6}, 6),
                                          ("InstanceNormalization", {}, 8)])
def test_group_and_instance_norm_after_conv_stay_nhwc(op, attrs, c):
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node(op, ["c", "s", "b"], ["y"], epsilon=1e-3, **attrs)]
    m = model(nodes, {"x": [2, 3, 6, 5]}, {"y": [2, c, 6, 5]},
              {"w": f32(c, 3, 3, 3), "s": f32(c), "b": f32(c)}, opset=21)
    loaded = check(m)
    assert commands(loaded).count("TRANSPOSE") == 2     # in once, out once
    assert backends(loaded)["GROUP_NORM"] == "CPU_OPT"
    saved_runs(loaded, {"x": f32(2, 3, 6, 5)})


@pytest.mark.parametrize("shape", [[2, 4, 7], [1, 6, 2, 3, 2]])
def test_instance_norm_of_other_ranks_is_plain(shape):
    c = shape[1]
    node = h.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])
    loaded = check(model([node], {"x": shape}, {"y": None}, {"s": f32(c), "b": f32(c)}))
    assert commands(loaded) == ["GROUP_NORM"]
    saved_runs(loaded, {"x": f32(*shape)})


@pytest.mark.parametrize("outputs", [["y", "mean", "inv"], ["y", "mean"], ["y", "", "inv"]])
@pytest.mark.parametrize("axis", [1, -1])
def test_layer_norm_mean_and_inv_std_dev_outputs(outputs, axis):
    """ONNX's Mean and InvStdDev are LAYER_NORM's saved_mean and saved_inv_std (an InvStdDev
    alone still gets a mean tensor, which nothing reads)."""
    ln = h.make_node("LayerNormalization", ["x", "s", "b"], outputs, axis=axis)
    outs = {o: None for o in outputs if o}
    loaded = check(model([ln], {"x": [2, 3, 5]}, outs, {"s": f32(5) if axis == -1 else f32(3, 5),
                                                         "b": f32(5)}))
    assert commands(loaded) == ["LAYER_NORM"]


def test_refusals():
    ln = h.make_node("LayerNormalization", ["x", "s"], ["y"])
    m = model([ln], {"x": [2, 3], "s": [3]}, {"y": None})
    with pytest.raises(nnc.onnx.UnsupportedError, match="must be constants"):
        nnc.onnx.load(m)
    inn = h.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])
    m = model([inn], {"x": [2, 3]}, {"y": None}, {"s": f32(3), "b": f32(3)})
    with pytest.raises(nnc.onnx.UnsupportedError, match="at least one spatial axis"):
        nnc.onnx.load(m)
    gn = h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=4)
    m = model([gn], {"x": [1, 6, 2, 2]}, {"y": [1, 6, 2, 2]}, {"s": f32(6), "b": f32(6)},
              opset=21)
    with pytest.raises(nnc.onnx.OnnxError, match="num_groups"):
        nnc.onnx.load(m)


@pytest.mark.parametrize("name, params, affine, saved", [
    ("LAYER_NORM", {"axis": (1,)}, 2, 2),                                 # not trailing
    ("LAYER_NORM", {"axis": (-1,), "elementwise_affine": False}, 0, 2),
    ("GROUP_NORM", {"groups": 2, "reduce_axis": (1,)}, 2, 2),
    ("RMSNORM", {"axis": (-2, -1)}, 1, 1)])
def test_nnc_graphs_save_to_onnx(name, params, affine, saved):
    x = nnc.Tensor(f32(2, 3, 4))
    cmd = nnc.Cmd(name, **params)
    shape = (2, 3, 4)
    from nnc.cmd.norm import saved_shape

    aff_shape = (1, 3, 1) if name == "LAYER_NORM" and params["axis"] == (1,) else (4,)
    ins = [x] + [nnc.Tensor(f32(*aff_shape)) for _ in range(affine)]
    outs = [nnc.Tensor.empty(shape)] + [nnc.Tensor.empty(saved_shape(cmd, shape))
                                         for _ in range(saved)]
    g = nnc.Graph()
    g.exec(cmd, ins, outs)
    g.run()
    want = [o.numpy().copy() for o in outs]
    m = nnc.onnx.save(g, None, inputs=[x], outputs=outs)
    got = ort_run(m, {"input_0": x.numpy()})
    for a, b in zip(got, want):
        close(a, b)
