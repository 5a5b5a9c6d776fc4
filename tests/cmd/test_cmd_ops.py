"""EWSQRT, SIGMOID, TANH, the vectorised EWEXP/EWLOG and REDUCE_SUM/MEAN/MAX (NNC: cmd/ew,
cmd/sigmoid, cmd/tanh, cmd/reduce).

Every backend is compared with a float64 NumPy reference written here, and CPU_OPT with CPU_REF,
within the tolerances of docs/commands.md. The C exp/log/sigmoid/tanh are also checked in ulps
over their whole range and on special values (inf, NaN, 0, subnormals, overflow, underflow).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnc

UNARY = ["EWEXP", "EWLOG", "EWSQRT", "SIGMOID", "TANH"]
REDUCE = ["REDUCE_SUM", "REDUCE_MEAN", "REDUCE_MAX"]
TOL = {"float64": (1e-12, 1e-12), "float32": (1e-6, 1e-6), "float16": (2e-3, 4e-3)}
# Largest error of the CPU_OPT loops in units in the last place (docs/commands.md).
MAX_ULP = 3.0


def ref64(name, x):
    """The float64 (or longdouble, for float64 inputs) definition of a unary command."""
    with np.errstate(all="ignore"):
        if name == "EWEXP":
            return np.exp(x)
        if name == "EWLOG":
            return np.log(x)
        if name == "EWSQRT":
            return np.sqrt(x)
        if name == "SIGMOID":
            return 1 / (1 + np.exp(-x))
        return np.tanh(x)


def run(name, x, backend=None, out=None, **params):
    out = np.full(x.shape, np.nan, x.dtype) if out is None else out
    cmd = nnc.Cmd(name, **params) if backend is None else nnc.Cmd(name, backend=backend, **params)
    nnc.cmd_exec(cmd, [x], [out])
    return out


def unary_input(name, dtype, rng, shape=(3, 5)):
    lo, hi = (0.1, 3.0) if name in ("EWLOG", "EWSQRT") else (-3.0, 3.0)
    return rng.uniform(lo, hi, shape).astype(dtype)


def close(got, want, dtype):
    rtol, atol = TOL[str(dtype)]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


def ulps(got, want, dtype):
    """Largest |got - want| in ulps of dtype where want is finite and non-zero in dtype."""
    with np.errstate(all="ignore"):
        wd = want.astype(dtype)
        ok = np.isfinite(wd) & (wd != 0)
        err = np.abs(got[ok].astype(np.longdouble) - want[ok].astype(np.longdouble))
        return float((err / np.spacing(np.abs(wd[ok])).astype(np.longdouble)).max())


# ---- element-wise


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_every_backend_matches_numpy(name, dtype):
    rng = np.random.default_rng(UNARY.index(name))
    x = unary_input(name, dtype, rng)
    want = ref64(name, x.astype(np.float64))
    got = {b: run(name, x, b) for b in nnc.backends(name, device="cpu")
           if dtype in nnc.command_info(name).backends[0].datatype_names or b == "CPU_REF"}
    for out in got.values():
        close(out, want, dtype)
    if dtype == "float16":
        assert set(got) == {"CPU_REF"}
    else:
        assert nnc.backends(name)[0] == "CPU_OPT"
        close(got["CPU_OPT"], got["CPU_REF"].astype(np.float64), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["EWEXP", "EWLOG", "SIGMOID", "TANH"])
def test_unary_opt_ulps_over_the_whole_range(name, dtype):
    rng = np.random.default_rng(5)
    big = np.log(np.finfo(dtype).max)
    if name == "EWLOG":
        x = np.concatenate([np.exp(rng.uniform(-big, big, 200_000)), rng.uniform(0.5, 2, 20_000),
                            1 + rng.uniform(-1e-5, 1e-5, 2000),
                            rng.uniform(0, np.finfo(dtype).tiny, 2000)])
    elif name == "EWEXP":
        x = np.concatenate([rng.uniform(-big - 20, big + 1, 200_000), rng.uniform(-1, 1, 20_000),
                            rng.uniform(-1e-6, 1e-6, 2000)])
    else:
        x = np.concatenate([rng.uniform(-40, 40, 200_000), rng.uniform(-1e-3, 1e-3, 2000),
                            rng.uniform(-big, big, 2000)])
    x = x.astype(dtype)
    wide = np.float64 if dtype == "float32" else np.longdouble
    want = ref64(name, x.astype(wide))
    got = run(name, x, "CPU_OPT")
    assert ulps(got, want, dtype) <= MAX_ULP
    # Overflow to inf and underflow to 0 happen exactly where they should.
    with np.errstate(all="ignore"):
        wd = want.astype(dtype)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(wd))
    np.testing.assert_array_equal(got == 0, wd == 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_special_values(name, dtype):
    fi = np.finfo(dtype)
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, fi.tiny / 4, -fi.tiny / 4, fi.tiny, -1.0,
                  1.0, fi.max, -fi.max, 1e-30, -1e-30], dtype)
    want = ref64(name, x.astype(np.float64 if dtype == "float32" else np.longdouble))
    with np.errstate(all="ignore"):
        want = want.astype(dtype)
    for b in nnc.backends(name, device="cpu"):
        got = run(name, x, b)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=b)
        fin = ~np.isnan(want)
        close(got[fin], want[fin].astype(np.float64), dtype)
        # Signs of zeros and infinities: tanh(-0) = -0, log 0 = -inf, exp(-inf) = +0.
        np.testing.assert_array_equal(np.signbit(got[fin]), np.signbit(want[fin]), err_msg=b)
    opt = run(name, x, "CPU_OPT")
    if name == "EWLOG":
        assert np.isnan(opt[[2, 8, 11]]).all() and opt[3] == opt[4] == -np.inf and opt[0] == np.inf
    if name == "EWEXP":
        assert opt[0] == np.inf and opt[1] == 0 and opt[10] == np.inf and opt[11] == 0
    if name in ("SIGMOID", "TANH"):
        assert opt[0] == 1 and opt[1] == (0 if name == "SIGMOID" else -1)


@pytest.mark.parametrize("name", UNARY)
def test_unary_strided_in_place_large_and_empty(name):
    rng = np.random.default_rng(9)
    x = unary_input(name, np.float32, rng, (4, 6))
    want = ref64(name, x.astype(np.float64))
    # A strided view goes to CPU_REF (the C loop takes contiguous tensors only).
    buf = np.full(x.size * 2, -7, np.float32)
    view = nnc.Tensor(buf).view(x.shape, 0, (12, 2))
    view.numpy()[...] = x
    out = run(name, view.numpy().copy(), out=None)
    close(out, want, "float32")
    nnc.cmd_exec(nnc.Cmd(name), [view], [view])          # in place on a view
    close(view.numpy(), want, "float32")
    assert (buf[1::2] == -7).all()
    for b in nnc.backends(name, device="cpu"):
        t = nnc.Tensor(x.copy())
        nnc.cmd_exec(nnc.Cmd(name, backend=b), [t], [t])   # in place: output is the input
        close(t.numpy(), want, "float32")
        big = unary_input(name, np.float64, rng, (300, 100))  # GIL-free path
        close(run(name, big, b), ref64(name, big), "float64")
        run(name, np.zeros((0, 3), np.float32), b)
    with pytest.raises(nnc.CommandError, match="floating-point"):
        nnc.cmd_exec(nnc.Cmd(name), [np.ones(3, np.int32)], [np.ones(3, np.int32)])
    with pytest.raises(nnc.CommandError, match="has shape"):
        nnc.cmd_exec(nnc.Cmd(name), [np.ones(3)], [np.ones(4)])


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 300), name=st.sampled_from(UNARY),
       dtype=st.sampled_from(["float32", "float64"]))
def test_unary_opt_equals_ref_at_every_length(n, name, dtype):
    """Every length, so the vector loops' remainders are covered."""
    x = unary_input(name, dtype, np.random.default_rng(n), (n,))
    close(run(name, x, "CPU_OPT"), run(name, x, "CPU_REF").astype(np.float64), dtype)


# ---- reductions


def reduce_ref(name, x, axes):
    """float64 reference: keeps the reduced axes as size 1."""
    x = x.astype(np.float64)
    if name == "REDUCE_SUM":
        return x.sum(axis=axes, keepdims=True)
    if name == "REDUCE_MEAN":
        with np.errstate(invalid="ignore"):  # the mean of nothing is NaN
            return x.sum(axis=axes, keepdims=True) / np.prod([x.shape[a] for a in axes])
    return x.max(axis=axes, keepdims=True)


def reduce_tol(name, x, axes, dtype):
    """The summation bound of docs/commands.md: K eps max|x| (exact for MAX)."""
    if name == "REDUCE_MAX":
        return 0.0, 0.0
    k = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    eps = float(np.finfo(dtype).eps)
    scale = float(np.abs(x).max()) if x.size else 0.0
    atol = (k * eps * scale if dtype == "float16" else 1e-12 * k * scale) + 1e-30
    if name == "REDUCE_MEAN":
        atol /= max(k, 1)
    return eps, atol


def out_shape(shape, axes):
    axes = [a % len(shape) for a in axes]
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name", REDUCE)
@pytest.mark.parametrize("shape, axes", [
    ((2, 5, 7, 3), (1, 2)),        # NHWC global pool: middle axes
    ((4, 6), (-1,)),               # trailing axis: rows
    ((4, 6), (0,)),                # leading axis
    ((3, 1, 4, 5), (0, 2)),        # alternating kept/reduced blocks, a size-1 axis
    ((2, 3, 4), (0, 1, 2)),        # everything
    ((5,), (0,)),
    ((1, 1), (0,)),                # nothing really reduced
])
def test_reduce_every_backend_matches_numpy(name, dtype, shape, axes):
    rng = np.random.default_rng(len(shape))
    x = rng.uniform(-2, 2, shape).astype(dtype)
    want = reduce_ref(name, x, tuple(a % len(shape) for a in axes))
    got = {}
    for b in nnc.backends(name, device="cpu"):
        if dtype == "float16" and b != "CPU_REF":
            continue
        out = np.full(out_shape(shape, axes), np.nan, dtype)
        nnc.cmd_exec(nnc.Cmd(name, axes=axes, backend=b), [x], [out])
        rtol, atol = reduce_tol(name, x, [a % len(shape) for a in axes], dtype)
        rtol = max(rtol, float(np.finfo(dtype).eps))
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=rtol, atol=atol)
        got[b] = out
    if dtype != "float16":
        assert nnc.backends(name)[0] == "CPU_OPT"
        # Both round the float64 result once (SUM/MEAN may differ in the last bit: the C
        # loop adds in another order).
        np.testing.assert_allclose(got["CPU_OPT"], got["CPU_REF"], rtol=2 * np.finfo(dtype).eps)


@pytest.mark.parametrize("name", REDUCE)
def test_reduce_nan_inf_empty_strided_and_large(name):
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, 2.0]], np.float32)
    for b in nnc.backends(name, device="cpu"):
        out = run(name, x, b, out=np.zeros((2, 1), np.float32), axes=(1,))
        assert np.isnan(out[0, 0])
        if name == "REDUCE_MAX":
            assert out[1, 0] == 2.0
            all_neg_inf = run(name, np.full((2, 2), -np.inf, np.float32), b,
                              out=np.zeros((1, 2), np.float32), axes=0)
            assert (all_neg_inf == -np.inf).all()
        else:
            assert out[1, 0] == -np.inf
        # Empty tensors: nothing kept is a no-op; nothing reduced is 0 (SUM) or NaN (MEAN).
        run(name, np.zeros((0, 3), np.float32), b, out=np.zeros((0, 1), np.float32), axes=1)
        if name != "REDUCE_MAX":
            out = run(name, np.zeros((0, 3), np.float32), b, out=np.ones((1, 3), np.float32),
                      axes=0)
            assert ((out == 0) if name == "REDUCE_SUM" else np.isnan(out)).all()
        big = np.random.default_rng(1).uniform(0, 1, (64, 50, 300))  # GIL-free path
        out = run(name, big, b, out=np.zeros((1, 50, 300)), axes=0)
        np.testing.assert_allclose(out, reduce_ref(name, big, (0,)), rtol=1e-12)
    with pytest.raises(nnc.CommandError, match="maximum of no elements"):
        if name != "REDUCE_MAX":
            raise nnc.CommandError("maximum of no elements (only REDUCE_MAX refuses)")
        run(name, np.zeros((0, 3), np.float32), out=np.zeros((1, 3), np.float32), axes=0)
    # A strided input goes to CPU_REF.
    base = np.arange(24.0, dtype=np.float32).reshape(4, 6)
    view = nnc.Tensor(base).view((4, 3), 0, (6, 2))
    out = np.zeros((4, 1), np.float32)
    nnc.cmd_exec(nnc.Cmd(name, axes=-1), [view], [out])
    np.testing.assert_allclose(out, reduce_ref(name, base[:, ::2], (1,)), rtol=1e-6)


@pytest.mark.parametrize("params, ins, outs, fragment", [
    ({}, [np.ones((2, 3))], [np.ones((2, 1))], "needs axes"),
    ({"axes": ()}, [np.ones((2, 3))], [np.ones((2, 1))], "one or more ints"),
    ({"axes": "1"}, [np.ones((2, 3))], [np.ones((2, 1))], "one or more ints"),
    ({"axes": (1.5,)}, [np.ones((2, 3))], [np.ones((2, 1))], "one or more ints"),
    ({"axes": 1, "keepdims": 0}, [np.ones((2, 3))], [np.ones((2, 1))], "unknown parameters"),
    ({"axes": 2}, [np.ones((2, 3))], [np.ones((2, 1))], "out of range"),
    ({"axes": -3}, [np.ones((2, 3))], [np.ones((2, 1))], "out of range"),
    ({"axes": (1, -1)}, [np.ones((2, 3))], [np.ones((2, 1))], "given twice"),
    ({"axes": 1}, [np.ones((2, 3))], [np.ones(2)], "should have shape (2, 1)"),
    ({"axes": 1}, [np.ones((2, 3))], [np.ones((1, 1))], "should have shape (2, 1)"),
    ({"axes": 1}, [np.ones((2, 3))], [np.ones((2, 1), np.float32)], "mixed dtypes"),
    ({"axes": 1}, [np.ones((2, 3), np.int32)], [np.ones((2, 1), np.int32)], "floating-point"),
    ({"axes": 1}, [np.ones((2, 3)), np.ones((2, 3))], [np.ones((2, 1))], "takes 1 inputs"),
    ({"axes": 1}, [None], [np.ones((2, 1))], "input 0 is required"),
])
@pytest.mark.parametrize("name", REDUCE)
def test_reduce_bad_calls(name, params, ins, outs, fragment):
    with pytest.raises(nnc.CommandError) as info:
        nnc.cmd_exec(nnc.Cmd(name, **params), ins, outs)
    assert fragment in str(info.value)


@pytest.mark.parametrize("name", REDUCE)
def test_reduce_output_may_not_overlap_input(name):
    buf = nnc.Tensor(np.ones(8))
    with pytest.raises(nnc.CommandError):
        nnc.cmd_exec(nnc.Cmd(name, axes=1), [buf.view((2, 4), 0)], [buf.view((2, 1), 0)])
    # The C backend refuses the overlap on its own too.
    b = next(b for b in nnc.command_info(name).backends if b.name == "CPU_OPT")
    with pytest.raises(nnc.CommandError, match="INVALID"):
        b.exec(nnc.Cmd(name, axes=1), [buf.view((2, 4), 0)], [buf.view((2, 1), 0)])
    # ...and outputs that are not the input's shape with some axes of size 1.
    with pytest.raises(nnc.CommandError, match="INVALID"):
        b.exec(nnc.Cmd(name, axes=1), [np.ones((2, 4))], [np.ones((2, 2))])
    with pytest.raises(nnc.CommandError, match="INVALID"):
        b.exec(nnc.Cmd(name, axes=1), [np.ones((2, 4))], [np.ones((2, 1, 1))])


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=5), data=st.data(),
       name=st.sampled_from(REDUCE), dtype=st.sampled_from(["float32", "float64"]))
def test_reduce_random_shapes_and_axes(shape, data, name, dtype):
    ndim = len(shape)
    axes = data.draw(st.lists(st.integers(-ndim, ndim - 1), min_size=1, max_size=ndim,
                              unique_by=lambda a: a % ndim))
    norm = tuple(sorted(a % ndim for a in axes))
    x = np.random.default_rng(ndim).uniform(-3, 3, shape).astype(dtype)
    empty_max = name == "REDUCE_MAX" and any(shape[a] == 0 for a in norm)
    for b in ("CPU_OPT", "CPU_REF"):
        out = np.full(out_shape(shape, axes), 99, dtype)
        cmd = nnc.Cmd(name, axes=tuple(axes), backend=b)
        if empty_max:
            with pytest.raises(nnc.CommandError, match="no elements"):
                nnc.cmd_exec(cmd, [x], [out])
            continue
        with np.errstate(invalid="ignore"):
            nnc.cmd_exec(cmd, [x], [out])
            want = reduce_ref(name, x, norm)
        rtol, atol = reduce_tol(name, x, norm, dtype)
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=max(rtol, 1e-15),
                                   atol=atol + float(np.finfo(dtype).eps) * 4)


def test_reduce_in_a_graph_global_average_pool():
    """REDUCE_MEAN over H, W of NHWC, as ONNX GlobalAveragePool, in a graph."""
    x = np.random.default_rng(0).standard_normal((2, 7, 7, 64)).astype(np.float32)
    y = np.zeros((2, 1, 1, 64), np.float32)
    g = nnc.Graph()
    g.exec(nnc.Cmd("REDUCE_MEAN", axes=(1, 2)), [x], [y])
    g.run()
    np.testing.assert_allclose(y, x.astype(np.float64).mean(axis=(1, 2), keepdims=True),
                               rtol=1e-6, atol=1e-6)
