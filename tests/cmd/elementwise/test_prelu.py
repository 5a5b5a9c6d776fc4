"""nnc/cmd/elementwise/binary.py and cpu_opt_binary.pyx: PRELU (ONNX's PRelu). CPU_REF against
the definition, CPU_OPT against CPU_REF bit for bit for a slope of one element, of one trailing row
(per channel of an NHWC tensor) and of x's shape, NaN and -0, in place, the middle-axis slope that
only CPU_REF takes, and a slope that would widen x raising CommandError."""

import numpy as np
import pytest

import nnc

RNG = np.random.default_rng(40)


def prelu(x, slope, backend=None, out=None):
    y = np.full(x.shape, np.nan, x.dtype) if out is None else out
    nnc.cmd_exec(nnc.Cmd("PRELU", backend=backend), [nnc.Tensor(x), nnc.Tensor(slope)],
                 [nnc.Tensor(y)])
    return y


def definition(x, slope):
    x64, s64 = x.astype(np.float64), np.broadcast_to(slope, x.shape).astype(np.float64)
    return np.array([s * v if v < 0 else v for v, s in zip(x64.reshape(-1), s64.reshape(-1))],
                    np.float64).reshape(x.shape).astype(x.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("slope_shape", [(1,), (), (6,), (1, 1, 6), (2, 5, 6)])
def test_cpu_opt_and_cpu_ref_are_the_definition(slope_shape, dtype):
    x = (RNG.standard_normal((2, 5, 6)) * 3).astype(dtype)
    x.reshape(-1)[:4] = [np.nan, -0.0, -np.inf, np.inf]
    slope = RNG.uniform(-1, 1, slope_shape).astype(dtype)
    want = definition(x, slope)
    for backend in ("CPU_REF", "CPU_OPT"):
        got = prelu(x, slope, backend)
        np.testing.assert_array_equal(got, want)
        assert np.signbit(got.reshape(-1)[1])     # -0 is not below 0: it stays -0


def test_in_place_middle_axis_slope_and_large_sizes():
    x = (RNG.standard_normal((3, 4, 70001 // 12 * 1, 1)) * 3).astype(np.float32)
    slope = RNG.uniform(0, 1, (4, 1, 1)).astype(np.float32)   # per axis 1: CPU_REF only
    np.testing.assert_array_equal(prelu(x, slope), definition(x, slope))
    x = (RNG.standard_normal(70001) * 3).astype(np.float32)
    s = np.array([0.25], np.float32)
    want = definition(x, s)
    prelu(x, s, "CPU_OPT", out=x)
    np.testing.assert_array_equal(x, want)


def test_a_slope_wider_than_x_raises_command_error():
    with pytest.raises(nnc.CommandError, match="must broadcast to x's shape"):
        prelu(np.ones(3, np.float32), np.ones((2, 3), np.float32), out=np.ones((2, 3), np.float32))
    with pytest.raises(nnc.CommandError):
        prelu(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(nnc.CommandError, match="floating"):
        prelu(np.ones(3, np.int32), np.ones(3, np.int32), out=np.ones(3, np.int32))
