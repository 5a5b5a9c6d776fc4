"""LRN (nnc/cmd/lrn/): CPU_REF against a NumPy definition written from ONNX's text, CPU_OPT
against CPU_REF at every kernel ISA level, parameters and calls it refuses."""

import numpy as np
import pytest

import nnc


def lrn_numpy(x, size, alpha, beta, bias):
    """ONNX's LRN over the last axis: the square sum of channels c - floor((size - 1) / 2) ..
    c + ceil((size - 1) / 2) that exist."""
    x = x.astype(np.float64)
    c = x.shape[-1]
    sq = np.zeros_like(x)
    for j in range(c):
        for i in range(j - (size - 1) // 2, j + int(np.ceil((size - 1) / 2)) + 1):
            if 0 <= i < c:
                sq[..., j] += x[..., i] ** 2
    return x / (bias + alpha / size * sq) ** beta


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 11])
@pytest.mark.parametrize("shape", [(2, 3, 4, 7), (5, 1), (3, 64), (9,), (2, 0, 3)])
def test_lrn_every_backend_matches_the_definition(kernel_isa, dtype, size, shape):
    rng = np.random.default_rng(size + len(shape))
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    want = lrn_numpy(x, size, 0.3, 0.6, 2.0)
    tol = 1e-6 if dtype == "float32" else 1e-12
    for b in nnc.backends("LRN", device="cpu"):
        out = np.full(shape, np.nan, dtype)
        nnc.cmd_exec(nnc.Cmd("LRN", size=size, alpha=0.3, beta=0.6, bias=2.0, backend=b), [x],
                     [out])
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol, err_msg=b)


def test_lrn_defaults_are_onnx_and_large_values_keep_the_running_sum_exact():
    cmd = nnc.Cmd("LRN", size=5)
    assert cmd.params == {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}
    # A huge channel leaves the window: its square must leave the sum with it.
    x = np.zeros((1, 12), np.float32)
    x[0, 0], x[0, 11] = 1e18, 1.0
    for b in ("CPU_REF", "CPU_OPT"):
        out = np.zeros_like(x)
        nnc.cmd_exec(nnc.Cmd("LRN", size=3, alpha=1.0, beta=1.0, bias=1.0, backend=b), [x],
                     [out])
        np.testing.assert_allclose(out[0, 11], 1 / (1 + 1 / 3), rtol=1e-6)


def test_lrn_cpu_opt_runs_in_parts():
    x = np.random.default_rng(3).standard_normal((64, 33, 96)).astype(np.float32)
    outs = []
    for b in ("CPU_REF", "CPU_OPT"):
        out = np.zeros_like(x)
        nnc.cmd_exec(nnc.Cmd("LRN", size=5, backend=b), [x], [out])
        outs.append(out)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("params, shapes, fragment", [
    ({}, None, "LRN needs size=n"),
    ({"size": 0}, None, "LRN needs size=n"),
    ({"size": 2.5}, None, "LRN needs size=n"),
    ({"size": True}, None, "LRN needs size=n"),
    ({"size": 3, "alpha": float("nan")}, None, "alpha must be a finite number"),
    ({"size": 3, "beta": "x"}, None, "beta must be a finite number"),
    ({"size": 3, "axis": 1}, None, "unknown parameters ['axis']"),
    ({"size": 3}, [(2, 4), (2, 5)], "output 0 should have shape (2, 4)"),
    ({"size": 3}, [(), ()], "rank >= 1"),
])
def test_lrn_bad_calls(params, shapes, fragment):
    with pytest.raises(nnc.CommandError) as info:
        cmd = nnc.Cmd("LRN", **params)
        arrays = [np.zeros(s, np.float32) for s in shapes]
        nnc.cmd_exec(cmd, arrays[:1], arrays[1:])
    assert fragment in str(info.value)
    with pytest.raises(nnc.CommandError, match="floating-point"):
        nnc.cmd_exec(nnc.Cmd("LRN", size=3), [np.zeros((2, 3), np.int32)],
                     [np.zeros((2, 3), np.int32)])
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(nnc.CommandError):
        nnc.cmd_exec(nnc.Cmd("LRN", size=3), [x], [x])      # the output may not be the input
