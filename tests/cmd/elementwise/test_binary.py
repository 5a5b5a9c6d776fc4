"""nnc/cmd/elementwise/binary.py and cpu_opt_binary.pyx for EWDIV (now broadcasting), EWPOW, MIN
and MAX: CPU_REF against NumPy's definitions, CPU_OPT against CPU_REF on every broadcast form it
takes (either operand whole, the other whole, a trailing row, one block of middle axes (an NCHW
per-channel vector) or one element; EWDIV's absent numerator), NaN and signed-zero rules, in
place, and bad shapes raising CommandError."""

import math

import numpy as np
import pytest

import nnc

RNG = np.random.default_rng(34)
OPS = ["EWDIV", "EWPOW", "MIN", "MAX"]


def numpy_def(name, a, b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):  # x / 0, pow's overflow and NaN, as the commands give
        if name == "EWDIV":
            return a64 / b64
        if name == "EWPOW":
            # C's pow: whole operands, or NumPy takes a broadcast 0.5 as sqrt (-0, -inf differ).
            a64, b64 = (np.array(v) for v in np.broadcast_arrays(a64, b64))
            return np.power(a64, b64)
        f = np.less if name == "MIN" else np.greater
        return np.where(f(a64, b64) | np.isnan(a64), a64, b64)


def same(name, got, want):
    """got is want, NaN for NaN and the sign of zeros too; EWPOW within 1 ulp (libm's pow and
    NumPy's float64 power may round apart)."""
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))
    if name == "EWPOW":
        with np.errstate(invalid="ignore"):
            ok = (got == want) | (np.abs(got - want) <= np.spacing(np.abs(want)))
        assert ok[~nan].all(), (got[~nan][~ok[~nan]], want[~nan][~ok[~nan]])
    else:
        assert np.array_equal(got, want, equal_nan=True)


def run(name, backend, a, b, shape, dtype):
    out = np.full(shape, 7.0, dtype)
    nnc.cmd_exec(nnc.Cmd(name, backend=backend),
                 [None if a is None else nnc.Tensor(a), nnc.Tensor(b)], [nnc.Tensor(out)])
    return out


def operands(name, a_shape, b_shape, dtype):
    a = np.asarray(RNG.standard_normal(a_shape), dtype)
    b = np.asarray(RNG.standard_normal(b_shape), dtype)
    if name == "EWPOW":
        a = np.asarray(np.abs(a) + 0.5, dtype)      # a real power of a positive base
    if name == "MIN" or name == "MAX":
        b.reshape(-1)[::3] = np.broadcast_to(a, np.broadcast_shapes(a_shape, b_shape)) \
            .reshape(-1)[:b.size:3] if b.size <= a.size else b.reshape(-1)[::3]
    return a, b


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("a_shape,b_shape,c_loop", [
    ((2, 3, 4, 5), (2, 3, 4, 5), True),     # same shape
    ((2, 3, 4, 5), (5,), True),             # a trailing row
    ((5,), (2, 3, 4, 5), True),             # the whole operand second
    ((2, 3, 4, 5), (1, 1, 1, 5), True),
    ((1, 1, 5), (2, 3, 4, 5), True),
    ((2, 3), (), True),                     # one element
    ((), (2, 3), True),
    ((2, 3, 4, 5), (3, 1, 1), "mid"),        # a middle axis (NCHW per-channel)
    ((1, 3, 1, 1), (2, 3, 4, 5), "mid"),     # ... as the first operand
    ((2, 3, 4, 5), (1, 3, 4, 1), "mid"),     # a block of middle axes
    ((2, 3, 4, 5), (2, 1, 1, 1), "mid"),     # a leading axis
    ((2, 3, 1, 5), (3, 1, 1), "mid"),        # a size-1 axis of both beside the block
    ((2, 3, 4, 5), (3, 1, 5), False),       # two blocks: CPU_REF only
    ((2, 1, 4, 1), (1, 3, 1, 5), False),    # both stretch
])
@pytest.mark.parametrize("name", OPS)
def test_broadcast_matches_numpy_and_c_loop_matches_cpu_ref(name, a_shape, b_shape, c_loop,
                                                            dtype, kernel_isa):
    a, b = operands(name, a_shape, b_shape, dtype)
    shape = np.broadcast_shapes(a_shape, b_shape)
    got = {}
    for backend in nnc.backends(name, device="cpu"):
        try:
            got[backend] = run(name, backend, a, b, shape, dtype)
        except nnc.CommandError as e:
            assert "does not accept" in str(e) and backend != "CPU_REF"
    if c_loop == "mid":     # a block of middle axes: EWPOW's libm loop leaves it to CPU_REF
        c_loop = name != "EWPOW"
    assert set(got) == ({"CPU_OPT", "CPU_REF"} if c_loop and dtype != np.float16 else
                        {"CPU_REF"})
    want = numpy_def(name, a, b).astype(dtype)
    for y in got.values():
        # Rounded once from float64: the same bits (division is correctly rounded, MIN and MAX
        # pick an operand), but for float16's NumPy arithmetic and pow's last bit.
        if dtype == np.float16:
            np.testing.assert_allclose(y, want, rtol=1e-3, atol=0)
        else:
            same(name, y, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ewdiv_without_numerator_is_the_reciprocal(dtype):
    b = RNG.standard_normal((3, 70000)).astype(dtype)     # several parallel parts
    for backend in nnc.backends("EWDIV", device="cpu"):
        y = run("EWDIV", backend, None, b, b.shape, dtype)
        np.testing.assert_array_equal(y, (1 / b.astype(np.float64)).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", OPS)
def test_special_values_and_signed_zeros(name, dtype, kernel_isa):
    s = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, -2.5, math.inf, -math.inf, math.nan, 1e30, 3.0]
    a = np.array([x for x in s for _ in s], dtype)
    b = np.array([y for _ in s for y in s], dtype)
    ref = run(name, "CPU_REF", a, b, a.shape, dtype)
    opt = run(name, "CPU_OPT", a, b, a.shape, dtype)
    want = numpy_def(name, a, b).astype(dtype)
    same(name, ref, want)
    same(name, opt, want)
    # A scalar operand, either side, through the C loop's scalar paths.
    for k in range(len(s)):
        one = np.array([s[k]], dtype)
        for x, y in ((a, one), (one, b)):
            shape = np.broadcast_shapes(x.shape, y.shape)
            same(name, run(name, "CPU_OPT", x, y, shape, dtype),
                 numpy_def(name, x, y).astype(dtype))


def test_min_max_nan_and_ties():
    a = np.array([1.0, np.nan, 2.0, 0.0, -0.0], np.float32)
    b = np.array([np.nan, 1.0, 2.0, -0.0, 0.0], np.float32)
    for backend in ("CPU_REF", "CPU_OPT"):
        mn = run("MIN", backend, a, b, a.shape, np.float32)
        mx = run("MAX", backend, a, b, a.shape, np.float32)
        assert np.isnan(mn[:2]).all() and np.isnan(mx[:2]).all()
        # NNC's ccv_min / ccv_max: a tie gives b.
        assert list(np.signbit(mn[3:])) == [True, False]
        assert list(np.signbit(mx[3:])) == [True, False]


def test_pow_square_and_in_place():
    x = RNG.standard_normal(1000).astype(np.float32)
    two = np.array(2.0, np.float32)
    y = run("EWPOW", "CPU_OPT", x, two, x.shape, np.float32)
    np.testing.assert_array_equal(y, x * x)
    z = x.copy()
    nnc.cmd_exec(nnc.Cmd("EWDIV"), [nnc.Tensor(z), nnc.Tensor(two)], [nnc.Tensor(z)])
    np.testing.assert_array_equal(z, x / two)


def _pow_bases(dtype):
    """Bases for EWPOW's exact forms: signs, zeros of both signs, infinities, NaN, subnormals,
    values whose cube or square overflows or underflows, odd lengths (vector tails)."""
    info = np.finfo(dtype)
    special = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, info.tiny, info.tiny / 8,
               -info.tiny / 8, info.max, -info.max, 3e12, -3e12, 1e-15, 0.5, -2.5, 7.0]
    rand = RNG.standard_normal(37) * np.exp(RNG.uniform(-20, 20, 37))
    return np.asarray(np.concatenate([special, rand]), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("e", [1.0, 2.0, 3.0, -1.0, 0.5, -0.5, 1.5, 0.0])
def test_pow_exact_forms_match_cpu_ref(dtype, e, kernel_isa):
    """EWPOW by one exponent: 1, 2, -1, 0.5 (and float32's 3) take exact forms. In float32 they
    must give CPU_REF's bits (C's pow in float64, rounded once: -0 ** 0.5 is +0, -inf ** 0.5 is
    +inf, a negative base's root NaN); in float64 they are correctly rounded and CPU_REF's
    NumPy power is not always, so within 1 ulp, as other exponents (pow)."""
    a = _pow_bases(dtype)
    b = np.array(e, dtype)
    ref = run("EWPOW", "CPU_REF", a, b, a.shape, dtype)
    got = run("EWPOW", "CPU_OPT", a, b, a.shape, dtype)
    exact = dtype == np.float32 and e in (1.0, 2.0, 3.0, -1.0, 0.5)
    with np.errstate(over="ignore"):                   # np.spacing of an infinite result
        if exact:
            np.testing.assert_array_equal(got, ref)
            assert np.array_equal(np.signbit(got), np.signbit(ref))
        else:
            same("EWPOW", got, ref)
        if e == 0.5:
            assert got[1] == 0 and not np.signbit(got[1]) and got[5] == math.inf
            assert math.isnan(got[16])                 # -2.5 ** 0.5
        # The exponent given first (the base is the scalar) is not a form: pow, within 1 ulp.
        same("EWPOW", run("EWPOW", "CPU_OPT", b, a, a.shape, dtype),
             run("EWPOW", "CPU_REF", b, a, a.shape, dtype))


@pytest.mark.parametrize("name,ins,out,match", [
    ("MIN", [(2, 3), (4,)], (2, 3), "do not broadcast"),
    ("MAX", [(2, 3), (3,)], (3,), "should have shape"),
    ("EWPOW", [(2, 3), None], (2, 3), "input 1 is required"),
    ("EWPOW", [None, (2, 3)], (2, 3), "input 0 is required"),
    ("MIN", [(3,)], (3,), "takes 2 inputs"),
    ("EWDIV", [(2, 3), (2, 1)], (2, 1), "should have shape"),
])
def test_bad_shapes_raise_command_error(name, ins, out, match):
    tensors = [None if s is None else nnc.Tensor(np.ones(s, np.float32)) for s in ins]
    with pytest.raises(nnc.CommandError, match=match):
        nnc.cmd_exec(nnc.Cmd(name), tensors, [nnc.Tensor(np.ones(out, np.float32))])
    with pytest.raises(nnc.CommandError, match="mixed dtypes"):
        nnc.cmd_exec(nnc.Cmd("MAX"), [nnc.Tensor(np.ones(3)), nnc.Tensor(np.ones(3, np.float32))],
                     [nnc.Tensor(np.ones(3))])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["EWDIV", "MIN", "MAX"])
def test_special_values_per_channel_of_nchw(name, dtype, kernel_isa):
    """The middle-block loop (an NCHW per-channel operand), either side, on NaN, inf and -0."""
    s = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 3.0]
    chan = np.array(s, dtype).reshape(1, len(s), 1, 1)
    img = np.array([s] * len(s), dtype).reshape(1, len(s), 1, len(s)).repeat(2, axis=2)
    for x, y in ((img, chan), (chan, img)):
        for backend in ("CPU_REF", "CPU_OPT"):
            same(name, run(name, backend, x, y, img.shape, dtype),
                 numpy_def(name, x, y).astype(dtype))
