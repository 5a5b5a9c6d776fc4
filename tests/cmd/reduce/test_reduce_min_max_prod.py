"""REDUCE_MAX's, REDUCE_MIN's and REDUCE_PROD's CPU_OPT (nnc/cmd/reduce/cpu_opt.pyx and
reduce_kernel.h) against CPU_REF at every kernel level: rows of every length around the vector
widths (tails), outer axes, NaN in the vector part and in the tail, infinities, right-aligned
outputs, empty tensors."""

import math

import numpy as np
import pytest

import nnc

NAMES = ("REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD")


def run(name, backend, x, axes, out_shape):
    out = np.full(out_shape, 7.0, x.dtype)
    nnc.cmd_exec(nnc.Cmd(name, axes=axes, backend=backend), [x], [out])
    return out


def check(name, x, axes, out_shape):
    """CPU_OPT's result is CPU_REF's: bit for bit for MAX and MIN (NaN for NaN); PROD within 1
    ulp of float32 (both multiply in float64 and round once; the order differs), and for
    float64 within the rounding of one product per factor."""
    ref = run(name, "CPU_REF", x, axes, out_shape)
    opt = run(name, "CPU_OPT", x, axes, out_shape)
    if name == "REDUCE_PROD":
        factors = x.size // max(ref.size, 1)
        rtol = np.finfo(np.float32).eps if x.dtype == np.float32 \
            else factors * np.finfo(np.float64).eps
        np.testing.assert_allclose(opt, ref, rtol=rtol, atol=0)
    else:
        np.testing.assert_array_equal(opt, ref)
    return opt


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", [
    ((1, 672, 14, 14), (2, 3)),    # NCHW spatial (the zoo's): rows of 196
    ((2, 7, 7, 24), (1, 2)),       # NHWC spatial: outer axes folded into rows of 24
    ((3, 5, 37), (0,)),            # an outer axis, rows of 185 (tails at every width)
    ((6, 33), (1,)),
    ((4, 2, 3), (0, 2)),
    ((1, 1), (0,)),                # nothing really reduced
])
def test_c_loop_matches_cpu_ref(name, shape, axes, dtype, kernel_isa):
    x = np.random.default_rng(len(shape)).uniform(0.8, 1.25, shape).astype(dtype)
    if name != "REDUCE_PROD":
        x = x * np.where(np.random.default_rng(1).random(shape) < 0.5, -1, 1).astype(dtype)
    out_shape = tuple(1 if i in axes else n for i, n in enumerate(shape))
    check(name, x, axes, out_shape)
    assert nnc.backends(name)[0] == "CPU_OPT"


@pytest.mark.parametrize("name", ["REDUCE_MAX", "REDUCE_MIN"])
@pytest.mark.parametrize("n", [1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 100])
def test_row_lengths_nan_and_inf(name, n, kernel_isa):
    """Every row length around the 4-, 8- and 16-lane vectors; the extreme at every position;
    a NaN at every position wins (with its payload, the first one's); +-inf."""
    rng = np.random.default_rng(n)
    for dtype in (np.float32, np.float64):
        base = rng.uniform(-1, 1, (1, n)).astype(dtype)
        for k in range(n):
            x = base.copy()
            x[0, k] = 5 if name == "REDUCE_MAX" else -5
            assert check(name, x, (1,), (1, 1))[0, 0] == x[0, k]
            x[0, k] = -math.inf if name == "REDUCE_MAX" else math.inf
            check(name, x, (1,), (1, 1))
            x[0, k] = math.nan
            if n > 1:
                x[0, (k + 1) % n] = -math.inf
            assert math.isnan(check(name, x, (1,), (1, 1))[0, 0])
            # The outer-axis fold: column k of a [3, n] reduced over axis 0.
            cols = np.vstack([base, base[:, ::-1], base * 2])
            cols[1, k] = math.nan
            out = check(name, cols, (0,), (1, n))
            assert math.isnan(out[0, k]) and not np.isnan(np.delete(out, k)).any()
        if dtype == np.float32 and n >= 2:
            x = base.copy()
            bits = x.view(np.uint32)
            bits[0, n - 1] = 0x7FC00123                 # two NaNs: the first one's payload
            bits[0, n // 2 - 1] = 0x7FC00456
            got = run(name, "CPU_OPT", x, (1,), (1, 1)).view(np.uint32)
            assert got[0, 0] == 0x7FC00456
            cols = np.vstack([x, x])                    # a NaN already in the output stays
            cols.view(np.uint32)[1, n // 2 - 1] = 0x7FC00789
            got = run(name, "CPU_OPT", cols, (0,), (1, n)).view(np.uint32)
            assert got[0, n // 2 - 1] == 0x7FC00456


@pytest.mark.parametrize("name", NAMES)
def test_right_aligned_output_and_empty(name, kernel_isa):
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    # NNC's rule: a [2, 3] input reduced over axis 0 may write a [3] output.
    got = check(name, x, (0,), (3,))
    want = {"REDUCE_MAX": [4, 5, 6], "REDUCE_MIN": [1, 2, 3], "REDUCE_PROD": [4, 10, 18]}[name]
    assert got.tolist() == want
    # Nothing kept: a no-op.
    run(name, "CPU_OPT", np.zeros((0, 3), np.float32), (1,), (0, 1))
    empty = np.zeros((0, 3), np.float32)
    if name == "REDUCE_PROD":
        assert (run(name, "CPU_OPT", empty, (0,), (1, 3)) == 1).all()
    else:
        with pytest.raises(nnc.CommandError, match="of no elements is undefined"):
            run(name, "CPU_OPT", empty, (0,), (1, 3))


def test_prod_overflow_and_special_values(kernel_isa):
    x = np.full((2, 40), 1e10, np.float32)
    x[1, 3] = 0
    y = np.array([[1.0, math.nan, 2.0], [math.inf, 0.0, 1.0], [-2.0, 3.0, -0.5]], np.float32)
    with np.errstate(over="ignore", invalid="ignore"):     # CPU_REF's np.prod: inf, inf * 0
        out = check("REDUCE_PROD", x, (1,), (2, 1))
        assert out[0, 0] == math.inf and out[1, 0] == 0
        out = check("REDUCE_PROD", y, (1,), (3, 1))
    assert math.isnan(out[0, 0]) and math.isnan(out[1, 0]) and out[2, 0] == 3.0
