"""REDUCE_NORM2's CPU_OPT (nnc/cmd/reduce/cpu_opt.pyx) against CPU_REF at every kernel level:
rows, middle axes, NaN, inf, -0, empty reductions; and an ONNX ReduceL2 picks it."""

import math

import numpy as np
import pytest

import nnc


def run(backend, x, axes, out_shape):
    out = np.full(out_shape, 7.0, x.dtype)
    nnc.cmd_exec(nnc.Cmd("REDUCE_NORM2", axes=axes, backend=backend), [x], [out])
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", [
    ((1, 6, 5, 7), (2, 3)),        # NCHW spatial: trailing rows
    ((2, 5, 7, 3), (1, 2)),        # NHWC spatial: middle axes
    ((4, 9), (0,)),
    ((3, 1, 4, 5), (0, 2)),
    ((2, 3), (0, 1)),
    ((1, 1), (0,)),                # nothing really reduced: |x|
])
def test_norm2_c_loop_matches_cpu_ref(shape, axes, dtype, kernel_isa):
    x = np.random.default_rng(len(shape)).uniform(-3, 3, shape).astype(dtype)
    x.reshape(-1)[0] = -0.0
    out_shape = tuple(1 if i in axes else n for i, n in enumerate(shape))
    ref = run("CPU_REF", x, axes, out_shape)
    opt = run("CPU_OPT", x, axes, out_shape)
    np.testing.assert_allclose(opt, ref, rtol=2 * np.finfo(dtype).eps, atol=0)
    want = np.sqrt((x.astype(np.float64) ** 2).sum(axis=axes, keepdims=True))
    np.testing.assert_allclose(opt, want, rtol=2 * np.finfo(dtype).eps, atol=0)
    assert nnc.backends("REDUCE_NORM2")[0] == "CPU_OPT"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_norm2_special_values_and_empty(dtype, kernel_isa):
    x = np.array([[1.0, math.nan, 3.0], [-math.inf, 2.0, 0.0], [-0.0, -0.0, -0.0],
                  [3.0, -4.0, 0.0]], dtype)
    for b in ("CPU_REF", "CPU_OPT"):
        out = run(b, x, (1,), (4, 1))
        assert math.isnan(out[0, 0]) and out[1, 0] == math.inf
        assert out[2, 0] == 0 and not np.signbit(out[2, 0])     # sqrt(+0): +0
        assert out[3, 0] == 5.0
        # An empty reduction is 0; nothing kept is a no-op.
        assert (run(b, np.zeros((0, 3), dtype), (0,), (1, 3)) == 0).all()
        run(b, np.zeros((0, 3), dtype), (1,), (0, 1))
    # A single -0 element reduced over a size-1 axis is |x| = +0, as sqrt(x * x) gives.
    one = run("CPU_OPT", np.array([[-0.0, -2.0]], dtype), (0,), (1, 2))
    assert list(one[0]) == [0.0, 2.0] and not np.signbit(one[0, 0])


def test_onnx_reduce_l2_and_nchw_broadcasts_run_cpu_opt():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    import nnc.onnx

    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 8, 3, 3)).astype(np.float32)
    w = (np.abs(rng.standard_normal((1, 8, 1, 1))) + 0.5).astype(np.float32)
    cases = [("ReduceL2", "REDUCE_NORM2", np.sqrt((x.astype(np.float64) ** 2)
                                                   .sum(axis=(2, 3), keepdims=True))),
             ("Sub", "ADD", x - w), ("Div", "EWDIV", x / w), ("Min", "MIN", np.minimum(x, w)),
             ("Max", "MAX", np.maximum(x, w)), ("Mul", "MUL", x * w)]
    for op, name, want in cases:
        inits = [numpy_helper.from_array(w, "w")]
        if op == "ReduceL2":
            inits = [numpy_helper.from_array(np.array([2, 3], np.int64), "w")]
        node = helper.make_node(op, ["x", "w"], ["y"], **({"keepdims": 1} if op == "ReduceL2"
                                                         else {}))
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, want.shape)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        g, ins, outs = nnc.onnx.load(model.SerializeToString())
        ins[0].numpy()[...] = x
        g.run()
        np.testing.assert_allclose(outs[0].numpy().reshape(want.shape), want, rtol=1e-6)
        backends = {e.cmd.name: e.backend for e in g.topsort()}
        assert backends[name] == "CPU_OPT", (op, backends)
