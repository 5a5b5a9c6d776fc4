"""Where nnc follows NNC's definitions exactly (NNC's test/unit/nnc reduce.tests.c and
graph.tests.c, ccv_nnc_softmax_cpu_ref.c): REDUCE_* outputs that line up with the input from
the right, and SOFTMAX of rank >= 3 tensors (each entry of the first axis is one row), on every
CPU backend at every kernel level; nnc.onnx maps ONNX's Softmax axis onto it."""

import numpy as np
import pytest

import nnc

X = np.array([[1, 2, 3], [4, 5, 6]], np.float32)


def cpu_backends(name):
    return [b for b in nnc.backends(name, device="cpu")]


@pytest.mark.parametrize("name, axis, out_shape, want", [
    ("REDUCE_SUM", 1, (2, 1), [[6], [15]]),          # reduce.tests.c, as NNC writes them
    ("REDUCE_SUM", 0, (3,), [5, 7, 9]),
    ("REDUCE_MEAN", 1, (2, 1), [[2], [5]]),
    ("REDUCE_MEAN", 0, (3,), [2.5, 3.5, 4.5]),
    ("REDUCE_MAX", 1, (2, 1), [[3], [6]]),
    ("REDUCE_MAX", 0, (3,), [4, 5, 6]),
    ("REDUCE_SUM", 0, (1, 1, 3), [[[5, 7, 9]]]),     # leading axes of size 1 added
    ("REDUCE_SUM", (0, 1), (), 21),                 # every axis: a scalar
])
def test_nnc_reduce_outputs_line_up_from_the_right(kernel_isa, name, axis, out_shape, want):
    for backend in cpu_backends(name):
        out = np.full(out_shape, np.nan, np.float32)
        nnc.cmd_exec(nnc.Cmd(name, axes=axis, backend=backend), [X], [out])
        np.testing.assert_array_equal(out, np.array(want, np.float32))


def test_reduce_over_a_4d_image_into_fewer_axes():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 6, 7)).astype(np.float32)
    for backend in cpu_backends("REDUCE_MEAN"):
        out = np.zeros((6, 7), np.float32)
        nnc.cmd_exec(nnc.Cmd("REDUCE_MEAN", axes=(0, 1), backend=backend), [x], [out])
        np.testing.assert_allclose(out, x.mean(axis=(0, 1)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axis, out_shape", [(1, (2,)), (1, (1, 2)), (0, (3, 1)), (0, (2, 3))])
def test_reduce_outputs_that_do_not_line_up_are_command_errors(axis, out_shape):
    for backend in cpu_backends("REDUCE_SUM"):
        with pytest.raises(nnc.CommandError, match="should have shape"):
            nnc.cmd_exec(nnc.Cmd("REDUCE_SUM", axes=axis, backend=backend), [X],
                         [np.zeros(out_shape, np.float32)])


def softmax_rows(x):
    """NNC's definition in float64: row i is x[i] whole (all later axes); a vector is one row."""
    x = x.astype(np.float64)
    flat = x.reshape(x.shape[0] if x.ndim >= 2 else 1, -1)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (31, 21, 4), (2, 3, 4, 5), (2, 1, 1, 3, 2)])
def test_softmax_normalises_each_entry_of_the_first_axis(kernel_isa, shape):
    rng = np.random.default_rng(2)
    for dtype in ("float32", "float64"):
        x = rng.uniform(-3, 3, shape).astype(dtype)
        want = softmax_rows(x)
        for backend in cpu_backends("SOFTMAX"):
            out = np.full(shape, np.nan, dtype)
            nnc.cmd_exec(nnc.Cmd("SOFTMAX", backend=backend), [x], [out])
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(out.reshape(shape[0] if len(shape) > 1 else 1, -1)
                                       .sum(axis=1), 1, rtol=1e-6)


def test_softmax_of_a_flat_view_is_the_last_axis_softmax():
    """What nnc.onnx does for ONNX's axis=-1 on a [N, H, W, C] value: SOFTMAX of its
    [N * H * W, C] view."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = nnc.Tensor.empty(x.shape)
    nnc.cmd_exec(nnc.Cmd("SOFTMAX"), [nnc.Tensor(x).view((24, 5))], [y.view((24, 5))])
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-6)
