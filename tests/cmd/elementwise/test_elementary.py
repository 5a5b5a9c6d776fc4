"""nnc/cmd/elementwise/elementary.py and cpu_opt_elementary.pyx: EWFLOOR, EWCEIL, EWROUND,
EWSIGN and the trigonometric and hyperbolic functions and their inverses. CPU_REF against Python's
math module (float64), CPU_OPT against CPU_REF at every ISA level within elementary_kernel.h's
stated tolerance (the rounding ones exactly), special values (inf, NaN, -0, halves, domain errors
giving NaN, poles), in place across parallel parts, and bad tensors raising CommandError."""

import math

import numpy as np
import pytest

import nnc

RNG = np.random.default_rng(38)


def _sign(x):
    return math.nan if math.isnan(x) else 1.0 if x > 0 else -1.0 if x < 0 else 0.0


def _c(f):
    """A math function with C's answers where Python raises: NaN outside the domain, +-inf at a
    pole or on overflow."""
    def g(x):
        try:
            return f(x)
        except ValueError:
            if f is math.atanh and abs(x) == 1:
                return math.copysign(math.inf, x)
            return math.nan
        except OverflowError:
            return math.copysign(math.inf, x) if f is math.sinh else math.inf
    return g


def _round(x):
    # Python's round() rounds halves to even, as ONNX's Round; it has no answer for inf / NaN.
    return x if math.isinf(x) or math.isnan(x) else math.copysign(float(round(x)), x)


DEFS = {"EWFLOOR": _c(math.floor), "EWCEIL": _c(math.ceil), "EWROUND": _round, "EWSIGN": _sign,
        "EWSIN": _c(math.sin), "EWCOS": _c(math.cos), "EWTAN": _c(math.tan),
        "EWASIN": _c(math.asin), "EWACOS": _c(math.acos), "EWATAN": _c(math.atan),
        "EWSINH": _c(math.sinh), "EWCOSH": _c(math.cosh), "EWASINH": _c(math.asinh),
        "EWACOSH": _c(math.acosh), "EWATANH": _c(math.atanh)}
EXACT = ("EWFLOOR", "EWCEIL", "EWROUND", "EWSIGN")


def run(name, x, backend=None, out=None):
    y = np.full(x.shape, np.nan, x.dtype) if out is None else out
    nnc.cmd_exec(nnc.Cmd(name, backend=backend), [nnc.Tensor(x)], [nnc.Tensor(y)])
    return y


# The limits at +-inf, where Python's math raises (floor, ceil) or has no function; the others
# (trigonometric functions, asin, acos, atanh) are NaN there.
AT_INF = {"EWFLOOR": lambda v: v, "EWCEIL": lambda v: v, "EWROUND": lambda v: v,
          "EWSIGN": _sign, "EWATAN": lambda v: math.copysign(math.pi / 2, v),
          "EWSINH": lambda v: v, "EWCOSH": abs, "EWASINH": lambda v: v,
          "EWACOSH": lambda v: v if v > 0 else math.nan}


def definition(name, x):
    out = []
    for v in map(float, x.reshape(-1)):
        if math.isnan(v):
            out.append(math.nan)
        elif math.isinf(v):
            out.append(AT_INF.get(name, lambda v: math.nan)(v))
        else:
            out.append(float(DEFS[name](v)))
    return np.array(out).reshape(x.shape)


def values(dtype):
    edges = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1.0, -1.0, 1e-30, -1e-30, 0.999, -0.999,
             1.001, -1.001, 2.0, 30.0, -30.0, 100.0, -100.0, 1e4, 1e30, -1e30, math.inf, -math.inf,
             math.nan]
    x = np.concatenate([RNG.standard_normal(1000) * 3, RNG.uniform(-1, 1, 500),
                        np.linspace(-12, 12, 961), edges])
    return x.astype(dtype)


def ulps(got, want, dtype):
    with np.errstate(over="ignore"):    # sinh, cosh beyond float32's range: inf, as in C
        want = want.astype(dtype)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    tiny = np.finfo(dtype).smallest_subnormal
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got.astype(np.float64) - want.astype(np.float64)) / np.maximum(
            np.spacing(np.abs(want)).astype(np.float64), tiny)
    return np.where(same, 0.0, np.nan_to_num(err, nan=np.inf))


def _conditioned(name, x):
    """Where the function amplifies its argument's rounding beyond a few ulp (tan near its poles,
    sin and cos of large arguments): excluded from the ulp comparison of two evaluations."""
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if name == "EWTAN":
            return np.abs(np.cos(x)) > 1e-3
        if name in ("EWSIN", "EWCOS"):
            return np.abs(x) < 1e3
    return np.ones(x.shape, bool)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(DEFS))
def test_cpu_ref_is_the_definition(name, dtype):
    x = values(dtype)
    got = run(name, x, "CPU_REF")
    want = definition(name, x)
    assert np.array_equal(np.isnan(got), np.isnan(want)), x[np.isnan(got) != np.isnan(want)]
    bad = (ulps(got, want, dtype) > (0 if name in EXACT else 2)) & _conditioned(name, x)
    assert not bad.any(), (x[bad][:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(DEFS))
def test_cpu_opt_matches_cpu_ref_at_every_isa(name, dtype, kernel_isa):
    x = values(dtype)
    ref = run(name, x, "CPU_REF")
    got = run(name, x, "CPU_OPT")
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    if name in EXACT:
        np.testing.assert_array_equal(got, ref)
        assert np.array_equal(np.signbit(got), np.signbit(ref))    # floor(-0.5) is -1, rint -0
        return
    bad = (ulps(got, ref, dtype) > (1 if dtype == np.float32 else 2)) & _conditioned(name, x)
    assert not bad.any(), (kernel_isa, x[bad][:5], got[bad][:5], ref[bad][:5])
    for v in (-0.0, math.inf, -math.inf, 1.0, -1.0):
        y = run(name, np.array([v], dtype), "CPU_OPT")[0]
        r = run(name, np.array([v], dtype), "CPU_REF")[0]
        assert (y == r and math.copysign(1, y) == math.copysign(1, r)) or \
            (math.isnan(y) and math.isnan(r)), (v, y, r)


def test_round_is_half_to_even_and_domains_give_nan_and_poles_inf():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5], np.float32)
    np.testing.assert_array_equal(run("EWROUND", x, "CPU_OPT"), [-2, -2, -0, 0, 2, 2, 4])
    for name, v, want in [("EWASIN", 2.0, math.nan), ("EWACOS", -1.5, math.nan),
                          ("EWACOSH", 0.5, math.nan), ("EWATANH", 1.0, math.inf),
                          ("EWATANH", -1.0, -math.inf), ("EWSIN", math.inf, math.nan),
                          ("EWCOSH", 1000.0, math.inf), ("EWSIGN", -0.0, 0.0)]:
        for backend in ("CPU_REF", "CPU_OPT"):
            got = run(name, np.array([v]), backend)[0]
            assert got == want or math.isnan(want) and math.isnan(got), (name, v, backend, got)


@pytest.mark.parametrize("name", list(DEFS))
def test_large_sizes_in_place_and_across_parts(name, kernel_isa):
    x = (RNG.standard_normal(70001) * 2).astype(np.float32)
    ref = run(name, x, "CPU_REF")
    y = x.copy()
    run(name, y, "CPU_OPT", out=y)
    assert np.array_equal(np.isnan(y), np.isnan(ref))
    assert (ulps(y, ref, np.float32) <= (0 if name in EXACT else 1)).all()


def test_command_set_and_backends():
    for name in DEFS:
        assert name in nnc.commands()
        assert nnc.backends(name, device="cpu") == ["CPU_OPT", "CPU_REF"]
        with pytest.raises(nnc.CommandError, match="takes no parameters"):
            nnc.Cmd(name, a=1.0)


@pytest.mark.parametrize("name", list(DEFS))
def test_bad_tensors_raise_command_error(name):
    with pytest.raises(nnc.CommandError, match="shape"):
        run(name, np.ones(3, np.float32), out=np.ones(4, np.float32))
    with pytest.raises(nnc.CommandError, match="floating"):
        run(name, np.ones(3, np.int32), out=np.ones(3, np.int32))
    with pytest.raises(nnc.CommandError, match="mixed dtypes"):
        run(name, np.ones(3, np.float32), out=np.ones(3))
