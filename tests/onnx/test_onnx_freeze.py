"""nnc.onnx and nnc.models make weights constant by default (frozen memory, docs/onnx.md):
read-only, results unchanged against freeze=False, saved and reloaded the same."""

import gc

import numpy as np
import pytest

import nnc
from nnc.models.inception import build_inception_v3_model
from nnc.tensor import constant

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
import nnc.onnx  # noqa: E402

h = onnx.helper
TP = onnx.TensorProto
RNG = np.random.default_rng(7)


def conv_gemm_model():
    inits = {"w": RNG.standard_normal((4, 3, 3, 3)).astype(np.float32),
             "b": RNG.standard_normal(4).astype(np.float32),
             "fw": RNG.standard_normal((5, 4 * 6 * 6)).astype(np.float32),
             "fb": RNG.standard_normal(5).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("Flatten", ["r"], ["f"]),
             h.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    g = h.make_graph(nodes, "t", [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 6, 6])],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)],
                     [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def run(loaded, x):
    g, (inp,), (out,) = loaded
    inp.numpy()[...] = x
    g.run()
    return out.numpy().copy()


def weights(g):
    return [t for e in g.execs if e.cmd.name in ("CONVOLUTION", "GEMM")
            for t in e.inputs[1:] if t is not None]


def test_load_freezes_initializers_by_default_and_freeze_false_opts_out():
    m = conv_gemm_model()
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    frozen = nnc.onnx.load(m)
    plain = nnc.onnx.load(m, freeze=False)
    assert weights(frozen.graph) and all(t.frozen and t.readonly for t in weights(frozen.graph))
    assert not any(t.frozen for t in weights(plain.graph))
    with pytest.raises(ValueError):
        weights(frozen.graph)[0].numpy()[...] = 0
    np.testing.assert_array_equal(run(frozen, x), run(plain, x))
    mem = frozen.graph.memory()
    assert mem["frozen_bytes"] == sum(t.nbytes for t in weights(frozen.graph))
    assert plain.graph.memory()["frozen_bytes"] == 0
    assert frozen.graph.freeze() == []                  # already constant


def test_save_of_a_frozen_graph_round_trips():
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    loaded = nnc.onnx.load(conv_gemm_model())
    want = run(loaded, x)
    g, (inp,), (out,) = loaded
    again = nnc.onnx.load(nnc.onnx.save(g, None, inputs=[inp], outputs=[out]))
    assert all(t.frozen for t in weights(again.graph))
    np.testing.assert_allclose(run(again, x), want, rtol=1e-6)


def test_loaded_weights_are_freed_with_the_graph():
    gc.collect()
    before = constant.frozen_count()
    loaded = nnc.onnx.load(conv_gemm_model())
    assert constant.frozen_count() > before
    del loaded
    gc.collect()
    assert constant.frozen_count() == before


def test_inception_builder_freezes_its_weights_by_default():
    m = build_inception_v3_model(size=75, seed=3)
    ws = weights(m.graph)
    assert len(ws) > 100 and all(t.frozen for t in ws)
    assert not m.input.frozen and not m.output.frozen
    m2 = build_inception_v3_model(size=75, seed=3, freeze=False)
    assert not any(t.frozen for t in weights(m2.graph))
    m.graph.run()
    m2.graph.run()
    np.testing.assert_array_equal(m.output.numpy(), m2.output.numpy())
