"""INDEX_SELECT, ARGMAX/ARGMIN, DATATYPE_CONVERSION and REDUCE_MIN/PROD/NORM2 (CPU_REF, the
definitions) against NumPy, and calls they refuse."""

import numpy as np
import pytest

import nnc


@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
def test_index_select_gathers_rows(idx_dtype):
    a = np.arange(24, dtype=np.float32).reshape(6, 2, 2)
    idx = np.array([5, 0, 0, 3], idx_dtype)
    out = np.zeros((4, 2, 2), np.float32)
    nnc.cmd_exec(nnc.Cmd("INDEX_SELECT"), [a, idx], [out])
    np.testing.assert_array_equal(out, a[idx])


def test_index_select_refuses():
    a = np.zeros((3, 2), np.float32)
    with pytest.raises(nnc.CommandError, match="index 3 \\(indices\\[1\\]\\) is outside"):
        nnc.cmd_exec(nnc.Cmd("INDEX_SELECT"), [a, np.array([0, 3], np.int32)],
                     [np.zeros((2, 2), np.float32)])
    with pytest.raises(nnc.CommandError, match="1-D int32, int64 or float32"):
        nnc.cmd_exec(nnc.Cmd("INDEX_SELECT"), [a, np.array([0.0], np.float64)],
                     [np.zeros((1, 2), np.float32)])
    with pytest.raises(nnc.CommandError, match="should have shape"):
        nnc.cmd_exec(nnc.Cmd("INDEX_SELECT"), [a, np.array([0], np.int64)],
                     [np.zeros((2, 2), np.float32)])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_index_select_float_indices_interpolate_rows(dtype):
    """NNC's rule per row: j0 = trunc(i), j1 = min(j0 + 1, N - 1), weights 1 - (i - j0) and
    i - j0; an index in [N - 1, N) reads the last row, a whole index its row exactly."""
    a = np.random.default_rng(2).standard_normal((5, 3, 2)).astype(dtype)
    idx = np.float32([0, 0.25, 1.5, 3.999, 4, 4.75, 2])
    want = np.empty((len(idx), 3, 2))
    for j, i in enumerate(idx.tolist()):
        j0 = int(i)
        j1 = min(j0 + 1, 4)
        w1 = i - j0
        want[j] = a[j0].astype(np.float64) * (1 - w1) + a[j1].astype(np.float64) * w1
    out = np.full((len(idx), 3, 2), np.nan, dtype)
    nnc.cmd_exec(nnc.Cmd("INDEX_SELECT"), [a, idx], [out])
    tol = {"float16": 2e-3, "float32": 1e-6, "float64": 1e-6}[dtype]
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    for j in (0, 4, 6):                                 # whole indices: the row itself
        np.testing.assert_array_equal(out[j], a[int(idx[j])])
    np.testing.assert_array_equal(out[5], a[4])


def test_index_select_float_indices_refused():
    a = np.zeros((3, 2), np.float32)
    for bad, shown in ((-0.5, "-0.5"), (3.0, "3.0"), (np.nan, "nan"), (-np.inf, "-inf")):
        with pytest.raises(nnc.CommandError, match=f"index {shown} \\(indices\\[1\\]\\) is "
                                                   "outside the table's 3 rows"):
            nnc.cmd_exec(nnc.Cmd("INDEX_SELECT"), [a, np.float32([0, bad])],
                         [np.zeros((2, 2), np.float32)])
    with pytest.raises(nnc.CommandError, match="must be a float tensor, not int32"):
        nnc.cmd_exec(nnc.Cmd("INDEX_SELECT"), [np.zeros((3, 2), np.int32), np.float32([0.5])],
                     [np.zeros((1, 2), np.int32)])


@pytest.mark.parametrize("name, fn", [("ARGMAX", np.argmax), ("ARGMIN", np.argmin)])
@pytest.mark.parametrize("out_dtype", ["int32", "int64"])
def test_argmax_argmin_first_index_keeps_the_axis(name, fn, out_dtype):
    x = np.random.default_rng(0).integers(0, 3, (4, 5, 6)).astype(np.float32)
    x[1, 2, 3] = np.nan
    for axis in (0, 1, -1):
        want = fn(x, axis=axis, keepdims=True)
        out = np.zeros(want.shape, out_dtype)
        nnc.cmd_exec(nnc.Cmd(name, axis=axis), [x], [out])
        np.testing.assert_array_equal(out, want)
    with pytest.raises(nnc.CommandError, match="must be int32 or int64"):
        nnc.cmd_exec(nnc.Cmd(name, axis=0), [x], [np.zeros((1, 5, 6), np.float32)])
    with pytest.raises(nnc.CommandError, match="axis 3 is out of range"):
        nnc.cmd_exec(nnc.Cmd(name, axis=3), [x], [np.zeros((1, 5, 6), np.int32)])
    with pytest.raises(nnc.CommandError, match="empty axis"):
        nnc.cmd_exec(nnc.Cmd(name, axis=0), [np.zeros((0, 2), np.float32)],
                     [np.zeros((1, 2), np.int32)])
    with pytest.raises(nnc.CommandError, match="needs axis=k"):
        nnc.Cmd(name)


@pytest.mark.parametrize("src, dst", [("float32", "float16"), ("float32", "int32"),
                                      ("float64", "float32"), ("int64", "float64"),
                                      ("float32", "uint8"), ("float16", "float64")])
def test_datatype_conversion_is_astype(src, dst):
    x = (np.random.default_rng(1).standard_normal((3, 4)) * 50).astype(src)
    if dst == "uint8":
        x = np.abs(x)
    out = np.zeros((3, 4), dst)
    nnc.cmd_exec(nnc.Cmd("DATATYPE_CONVERSION"), [x], [out])
    np.testing.assert_array_equal(out, x.astype(dst))
    with pytest.raises(nnc.CommandError, match="should have shape"):
        nnc.cmd_exec(nnc.Cmd("DATATYPE_CONVERSION"), [x], [np.zeros((4, 3), dst)])


@pytest.mark.parametrize("name, fn", [
    ("REDUCE_MIN", lambda x, ax: np.min(x, axis=ax, keepdims=True)),
    ("REDUCE_PROD", lambda x, ax: np.prod(x.astype(np.float64), axis=ax, keepdims=True)),
    ("REDUCE_NORM2", lambda x, ax: np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=ax,
                                                  keepdims=True))),
])
def test_reduce_min_prod_norm2(name, fn):
    x = np.random.default_rng(2).uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    for axes in ((0,), (1, 2), (-1,), (0, 1, 2)):
        want = fn(x, axes)
        out = np.zeros(want.shape, np.float32)
        nnc.cmd_exec(nnc.Cmd(name, axes=axes), [x], [out])
        np.testing.assert_allclose(out, want, rtol=1e-6)
    empty = np.zeros((0, 3), np.float32)
    out = np.zeros((1, 3), np.float32)
    if name == "REDUCE_MIN":
        with pytest.raises(nnc.CommandError, match="of no elements is undefined"):
            nnc.cmd_exec(nnc.Cmd(name, axes=(0,)), [empty], [out])
    else:
        nnc.cmd_exec(nnc.Cmd(name, axes=(0,)), [empty], [out])
        np.testing.assert_array_equal(out, np.full((1, 3), 1.0 if name == "REDUCE_PROD" else 0))
