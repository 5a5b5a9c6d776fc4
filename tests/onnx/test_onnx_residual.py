"""nnc.onnx makes an Add of a Conv's output and another value (a shortcut) that Conv's residual,
written over the shortcut's memory (CONVOLUTION's residual may be its output), where nothing
can tell: ResNet's identity and projection blocks, against onnxruntime, sequential and on
streams, with no two unordered nodes touching common memory; and each case that must keep
the Add (or a separate output) does. Tolerance as in tests/onnx/test_onnx.py."""

import numpy as np
import pytest

import nnc

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import _unordered_conflicts, close, model, nnc_run, ort_run  # noqa: E402

import nnc.onnx  # noqa: E402

h = onnx.helper
RNG = np.random.default_rng(7)
C = 8


def _w(o, c, k=1):
    return (RNG.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)


def _conv(x, w, y, k=1, **attrs):
    return h.make_node("Conv", [x, w], [y], pads=[k // 2] * 4, kernel_shape=[k, k], **attrs)


def _blocks():
    """A stem, a projection block (shortcut: a 1x1 Conv written after the main path, as
    torchvision exports it) and an identity block (shortcut: the block's input, also read by
    its first Conv)."""
    inits = {f"w{i}": _w(C, C if i else 3, 3 if i in (0, 2, 5) else 1) for i in range(7)}
    nodes = [_conv("x", "w0", "s", 3), h.make_node("Relu", ["s"], ["a0"]),
             _conv("a0", "w1", "p1"), h.make_node("Relu", ["p1"], ["p1r"]),
             _conv("p1r", "w2", "p2", 3), _conv("a0", "w3", "ds"),
             h.make_node("Add", ["p2", "ds"], ["sum1"]), h.make_node("Relu", ["sum1"], ["a1"]),
             _conv("a1", "w4", "q1"), h.make_node("Relu", ["q1"], ["q1r"]),
             _conv("q1r", "w5", "q2", 3), h.make_node("Add", ["a1", "q2"], ["sum2"]),
             h.make_node("Relu", ["sum2"], ["a2"]), _conv("a2", "w6", "y")]
    return nodes, inits


def _residual_convs(loaded):
    return [e for e in loaded.graph.execs if e.cmd.name == "CONVOLUTION" and len(e.inputs) > 3]


def _run_all_ways(m, loaded, feeds):
    want = ort_run(m, feeds)
    for got, w in zip(nnc_run(loaded, feeds), want):
        close(got, w)
    assert _unordered_conflicts(loaded.graph) == []
    loaded.graph.simplify()
    assert _unordered_conflicts(loaded.graph) == []
    for got, w in zip(nnc_run(loaded, feeds), want):
        close(got, w)
    for streams in (2, 3):
        nnc.static_schedule(loaded.graph, max_streams=streams)
        s = nnc.Stream("cpu")
        for name, t in zip(loaded.input_names, loaded.inputs):
            t.numpy()[...] = feeds[name]
        loaded.graph.run(stream=s)
        s.wait()
        for got, w in zip(loaded.outputs, want):
            close(got.numpy(), w)


def test_identity_and_projection_shortcuts_are_added_in_place():
    nodes, inits = _blocks()
    m = model(nodes, {"x": [1, 3, 10, 9]}, {"y": None}, inits)
    loaded = nnc.onnx.load(m)
    res = _residual_convs(loaded)
    assert len(res) == 2 and "ADD" not in {e.cmd.name for e in loaded.graph.execs}
    assert all(e.inputs[3].data_ptr == e.outputs[0].data_ptr for e in res)
    feeds = {"x": RNG.standard_normal((1, 3, 10, 9)).astype(np.float32)}
    _run_all_ways(m, loaded, feeds)


def _variant(change):
    """The two blocks with one change that must keep a shortcut's memory as it is."""
    nodes, inits = _blocks()
    outputs = {"y": None}
    inputs = {"x": [1, 3, 10, 9]}
    nodes, inits, inputs, outputs = change(nodes, inits, inputs, outputs)
    return model(nodes, inputs, outputs, inits)


def _read_later(nodes, inits, inputs, outputs):
    # a1 (the identity shortcut) is also read by a node no path orders before the Add's Conv.
    nodes = nodes + [h.make_node("Relu", ["a1"], ["late"])]
    return nodes, inits, inputs, {**outputs, "late": None}


def _shortcut_is_output(nodes, inits, inputs, outputs):
    return nodes, inits, inputs, {**outputs, "ds": None}


def _conv_output_is_output(nodes, inits, inputs, outputs):
    return nodes, inits, inputs, {**outputs, "q2": None}


def _shortcut_is_input(nodes, inits, inputs, outputs):
    nodes = [n for n in nodes if n.output[0] != "ds"]
    return nodes, inits, {**inputs, "ds": [1, C, 10, 9]}, outputs


def _conv_reads_its_shortcut(nodes, inits, inputs, outputs):
    # Add(Conv(a1), a1) where the Conv's input is the shortcut itself.
    nodes = [n for n in nodes if n.output[0] not in ("q1", "q1r", "q2")]
    nodes.insert(8, _conv("a1", "w5", "q2", 3))
    return nodes, inits, inputs, outputs


def _depthwise(nodes, inits, inputs, outputs):
    inits = {**inits, "w5": _w(C, 1, 3)}
    nodes = [_conv("q1r", "w5", "q2", 3, group=C) if n.output[0] == "q2" else n for n in nodes]
    return nodes, inits, inputs, outputs


@pytest.mark.parametrize("change,kept", [
    (_read_later, 1), (_shortcut_is_output, 1), (_conv_output_is_output, 1),
    (_shortcut_is_input, 1), (_conv_reads_its_shortcut, 1), (_depthwise, 1),
], ids=lambda v: v.__name__.strip("_") if callable(v) else str(v))
def test_shortcuts_that_something_else_reads_or_that_cannot_be_overwritten_stay(change, kept):
    """One block's Add keeps its memory plan (the other block is unchanged and still fused)."""
    m = _variant(change)
    loaded = nnc.onnx.load(m)
    assert len(_residual_convs(loaded)) == 2 - kept
    feeds = {name: RNG.standard_normal(t.shape).astype(np.float32)
             for name, t in zip(loaded.input_names, loaded.inputs)}
    _run_all_ways(m, loaded, feeds)


def test_float64_loads_keep_the_add():
    nodes, inits = _blocks()
    m = model(nodes, {"x": [1, 3, 10, 9]}, {"y": None}, inits)
    loaded = nnc.onnx.load(m, dtype="float64")
    assert _residual_convs(loaded) == []
    x = RNG.standard_normal((1, 3, 10, 9))
    got = nnc_run(loaded, {"x": x})[0]
    close(got, ort_run(m, {"x": x.astype(np.float32)})[0])
