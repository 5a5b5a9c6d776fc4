"""nnc.onnx's MatMul on operands of any rank, batch dimensions broadcast (GEMM's broadcast
batches): ConvNeXt's MLP ([N, H, W, C] by a constant [C, 4C]), attention's Q.K^T and P.V (4-D by
4-D, both operands activations), against onnxruntime within 1e-5 of the output's scale; and
ONNX's Softmax axis on values of rank >= 3, which nnc maps onto SOFTMAX's rows (each entry of
the first axis is one: a [rows, C] view), loaded and saved."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")
ort = pytest.importorskip("onnxruntime", reason="the ONNX tests compare with onnxruntime")
from test_onnx import close, commands, model, nnc_run, ort_run  # noqa: E402

import nnc.onnx  # noqa: E402

h = onnx.helper
RNG = np.random.default_rng(33)
RTOL = 1e-5


def check(m):
    loaded = nnc.onnx.load(m)
    feeds = {n: RNG.standard_normal(t.shape).astype(np.float32)
             for n, t in zip(loaded.input_names, loaded.inputs)}
    for got, want in zip(nnc_run(loaded, feeds), ort_run(m, feeds)):
        close(got, want, RTOL)
    for got, want in zip(nnc_run(loaded, feeds, stream=True), ort_run(m, feeds)):
        close(got, want, RTOL)
    return loaded


@pytest.mark.parametrize("a_shape, b_shape", [
    ((1, 7, 7, 96), (96, 384)),         # ConvNeXt's pointwise MLP on [N, H, W, C]
    ((2, 3, 4, 5), (5, 6)),
    ((5,), (2, 3, 5, 6)),               # a vector A against a batched B
    ((4, 5), (2, 3, 5, 6)),             # a matrix A shared by B's batch
])
def test_matmul_by_a_constant_b_of_any_rank(a_shape, b_shape):
    b = RNG.standard_normal(b_shape).astype(np.float32)
    m = model([h.make_node("MatMul", ["a", "b"], ["y"])], {"a": list(a_shape)}, {"y": None},
              {"b": b})
    assert commands(check(m)) == ["GEMM"]


@pytest.mark.parametrize("a_shape, b_shape", [
    ((1, 12, 17, 64), (1, 12, 64, 17)),  # ViT's Q.K^T (K already transposed)
    ((1, 12, 17, 17), (1, 12, 17, 64)),  # and P.V
    ((2, 1, 5, 8), (1, 3, 8, 4)),        # a batch of 1 broadcast on each side
    ((3, 1, 5, 8), (2, 8, 4)),           # B of lower rank
])
def test_matmul_of_two_activations_with_broadcast_batches(a_shape, b_shape):
    m = model([h.make_node("MatMul", ["a", "b"], ["y"])], {"a": list(a_shape),
                                                          "b": list(b_shape)}, {"y": None})
    check(m)


def test_attention_block_transpose_matmul_softmax_matmul():
    """q, k, v [1, 17, 3, 8] (NNC's [batch, seq, heads, head_dim]) through Transpose, MatMul by
    a transposed K, Softmax on the last axis, MatMul by V: attention as exporters write it."""
    shape = [1, 17, 3, 8]
    nodes = [
        h.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
        h.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]),
        h.make_node("Transpose", ["v"], ["vt"], perm=[0, 2, 1, 3]),
        h.make_node("MatMul", ["qt", "kt"], ["s"]),
        h.make_node("Mul", ["s", "scale"], ["ss"]),
        h.make_node("Softmax", ["ss"], ["p"], axis=-1),
        h.make_node("MatMul", ["p", "vt"], ["y"]),
    ]
    m = model(nodes, {"q": shape, "k": shape, "v": shape}, {"y": None},
              {"scale": np.array(8 ** -0.5, np.float32)})
    check(m)


@pytest.mark.parametrize("a_shape, b_shape", [((4,), (4,)), ((2, 3, 4), (4,))])
def test_matmul_by_a_vector_b_is_refused_with_the_reason(a_shape, b_shape):
    m = model([h.make_node("MatMul", ["a", "b"], ["y"], name="mm")], {"a": list(a_shape)},
              {"y": None}, {"b": RNG.standard_normal(b_shape).astype(np.float32)})
    with pytest.raises(nnc.onnx.UnsupportedError, match="mm") as info:
        nnc.onnx.load(m)
    assert "a vector B" in str(info.value)


def test_saved_batched_gemm_runs_in_onnxruntime():
    """save() writes a broadcast-batch GEMM as MatMul (+ Add for a per-batch bias)."""
    a = nnc.Tensor(RNG.standard_normal((2, 3, 4, 5)).astype(np.float32))
    w = nnc.Tensor(RNG.standard_normal((3, 6, 5)).astype(np.float32))
    bias = nnc.Tensor(RNG.standard_normal((3, 1, 6)).astype(np.float32))
    y = nnc.Tensor(np.zeros((2, 3, 4, 6), np.float32))
    g = nnc.Graph()
    g.exec(nnc.Cmd("GEMM", transpose_b=True), [a, w, bias], [y])
    g.run()
    saved = nnc.onnx.save(g, None, inputs=[a, w, bias], outputs=[y])
    got = ort_run(saved, {"input_0": a.numpy(), "input_1": w.numpy(), "input_2": bias.numpy()})
    close(got[0], y.numpy(), RTOL)
    want = np.matmul(a.numpy().astype(np.float64), np.swapaxes(w.numpy(), -1, -2)) + bias.numpy()
    close(y.numpy(), want, RTOL)


@pytest.mark.parametrize("shape, axis", [((2, 5, 7), -1), ((2, 5, 7), 1), ((2, 3, 4, 5), -1),
                                         ((2, 3, 4, 5), 2), ((1, 12, 17, 17), 3)])
def test_softmax_axis_of_plain_values_of_rank_3_and_4(shape, axis):
    nodes = [h.make_node("Softmax", ["x"], ["y"], axis=axis)]
    check(model(nodes, {"x": list(shape)}, {"y": None}))


def test_softmax_into_a_concat_slice_and_from_a_transposed_value():
    """The output a slice of a Concat's buffer (not contiguous as a [rows, C] view) and the
    input a Transpose's result: copies around SOFTMAX keep ONNX's result."""
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
             h.make_node("Softmax", ["t"], ["s"], axis=-1),
             h.make_node("Concat", ["s", "t"], ["y"], axis=2)]
    check(model(nodes, {"x": [2, 4, 3]}, {"y": None}))


def test_saved_softmax_of_rank_3_runs_in_onnxruntime():
    """save() writes SOFTMAX of a [N, ...] tensor as Flatten, Softmax, Reshape."""
    x = nnc.Tensor(RNG.standard_normal((3, 4, 5)).astype(np.float32))
    y = nnc.Tensor(np.zeros((3, 4, 5), np.float32))
    g = nnc.Graph()
    g.exec(nnc.Cmd("SOFTMAX"), [x], [y])
    g.run()
    saved = nnc.onnx.save(g, None, inputs=[x], outputs=[y])
    close(ort_run(saved, {"input_0": x.numpy()})[0], y.numpy(), RTOL)
    np.testing.assert_allclose(y.numpy().reshape(3, -1).sum(-1), 1, rtol=1e-6)
