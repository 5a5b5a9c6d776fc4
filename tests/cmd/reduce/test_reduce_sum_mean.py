"""REDUCE_SUM's and REDUCE_MEAN's CPU_OPT over outer axes (an NHWC image's H and W: a global
average pool, a squeeze-and-excitation block's squeeze), whose float32 rows are added into
double accumulators in vectors at each kernel level (nnc/cmd/reduce/reduce_kernel.h,
nnc_red_colsum_f32): the bits of the scalar loop at every level, and CPU_REF's within float32's
rounding of one double sum."""

import numpy as np
import pytest

import nnc
from nnc.base import isa


def run(name, backend, x, axes, out_shape):
    out = np.full(out_shape, 7.0, x.dtype)
    nnc.cmd_exec(nnc.Cmd(name, axes=axes, backend=backend), [x], [out])
    return out


@pytest.mark.parametrize("name", ["REDUCE_SUM", "REDUCE_MEAN"])
@pytest.mark.parametrize("shape,axes", [
    ((1, 7, 7, 1152), (1, 2)),     # EfficientNet's last squeeze: rows of 1152
    ((2, 5, 6, 17), (1, 2)),       # a vector and a tail at every width
    ((1, 3, 3, 7), (1, 2)),        # a tail alone
    ((4, 33), (0,)),
    ((3, 2, 40), (0, 1)),
])
def test_outer_axes_give_the_scalar_bits_at_every_level(name, shape, axes, kernel_isa):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 10 ** rng.uniform(-3, 3, shape)).astype(np.float32)
    x.flat[::11] = 0.0
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    got = run(name, "CPU_OPT", x, axes, out_shape)
    old = isa.set_cpu_isa("baseline")
    try:
        scalar = run(name, "CPU_OPT", x, axes, out_shape)
    finally:
        isa.set_cpu_isa(old)
    np.testing.assert_array_equal(got.view(np.int32), scalar.view(np.int32))
    ref = run(name, "CPU_REF", x, axes, out_shape)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * np.abs(x).max())


def test_nan_and_infinities_reach_their_outputs(kernel_isa):
    x = np.ones((1, 4, 4, 21), np.float32)
    x[0, 1, 2, 3] = np.nan
    x[0, 0, 0, 17] = np.inf
    x[0, 3, 3, 20] = -np.inf
    x[0, 2, 2, 20] = np.inf
    got = run("REDUCE_MEAN", "CPU_OPT", x, (1, 2), (1, 1, 1, 21)).reshape(-1)
    assert np.isnan(got[3]) and np.isposinf(got[17]) and np.isnan(got[20])
    np.testing.assert_array_equal(np.delete(got, [3, 17, 20]), 1.0)
