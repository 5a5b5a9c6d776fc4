"""nnc/cmd/reduce: REDUCE_LOGSUMEXP (NNC's CMD_REDUCE_LOGSUMEXP_FORWARD). CPU_REF against the
definition in Python's math module, no overflow for large inputs, the infinities and NaN, an
empty reduction (-inf), NNC's output shapes aligned from the right, and bad axes refused."""

import math

import numpy as np
import pytest

import nnc

RNG = np.random.default_rng(39)


def lse(x, axes, out_shape, dtype=np.float32):
    y = np.zeros(out_shape, dtype)
    nnc.cmd_exec(nnc.Cmd("REDUCE_LOGSUMEXP", axes=axes), [nnc.Tensor(x)], [nnc.Tensor(y)])
    return y


def _definition(row):
    m = max(row)
    if math.isinf(m):
        return m
    return m + math.log(math.fsum(math.exp(v - m) for v in row))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1), (-1,)])
def test_matches_the_definition_and_does_not_overflow(axes, dtype):
    x = (RNG.standard_normal((5, 7)) * 4).astype(dtype)
    x[2, 3] = 1000.0 if dtype == np.float64 else 100.0    # exp(x) alone would overflow
    red = [a % 2 for a in axes]
    kept = tuple(1 if i in red else d for i, d in enumerate(x.shape))
    got = lse(x, axes, kept, dtype)
    rows = np.moveaxis(x.astype(np.float64), red, list(range(len(red))))
    rows = rows.reshape(int(np.prod([x.shape[i] for i in red])), -1).T
    want = np.array([_definition(list(r)) for r in rows]).reshape(kept)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-14)


def test_infinities_nan_empty_and_shapes_aligned_from_the_right():
    x = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 0.0], [0.0, 0.0]], np.float32)
    got = lse(x, (1,), (4, 1))
    assert got[0, 0] == -np.inf and got[1, 0] == np.inf and np.isnan(got[2, 0])
    assert got[3, 0] == np.float32(math.log(2))
    assert (lse(np.zeros((0, 3), np.float32), (0,), (1, 3)) == -np.inf).all()
    # As NNC's REDUCE_*: a [2, 3] input reduced over axis 0 may write a [3] output.
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(lse(x, (0,), (3,)), np.log(np.exp(x).sum(0)), rtol=1e-6)


def test_bad_axes_and_shapes_raise_command_error():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(nnc.CommandError):
        lse(x, (2,), (2, 1))
    with pytest.raises(nnc.CommandError):
        lse(x, (1,), (2, 3))
