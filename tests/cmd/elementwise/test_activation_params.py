"""nnc/cmd/elementwise/activation.py and cpu_opt_act.pyx: LEAKY_RELU, ELU, SELU, CELU,
THRESHOLDED_RELU, SOFTPLUS, SOFTSIGN and MISH. CPU_REF against the definitions written here with
Python's math module (float64), CPU_OPT against CPU_REF at every ISA level within act_kernel.h's
stated tolerance, the edge values (inf, NaN, -0, magnitudes where exp overflows), in place across
parallel parts, and bad parameters and shapes raising CommandError."""

import math

import numpy as np
import pytest

import nnc

RNG = np.random.default_rng(37)
SELU_A, SELU_G = 1.67326319217681884765625, 1.05070102214813232421875


def _nan_kept(f):
    def g(x, **kw):
        return math.nan if math.isnan(x) else f(x, **kw)
    return g


def _softplus(x):
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


# The definitions, element by element in float64 (independent of the NumPy CPU_REF).
DEFS = {
    "LEAKY_RELU": _nan_kept(lambda x, negative_slope=0.01: negative_slope * x if x < 0 else x),
    "ELU": _nan_kept(lambda x, alpha=1.0: alpha * math.expm1(x) if x < 0 else x),
    "SELU": _nan_kept(lambda x, alpha=SELU_A, gamma=SELU_G:
                      gamma * (alpha * math.expm1(x) if x < 0 else x)),
    "CELU": _nan_kept(lambda x, alpha=1.0: alpha * math.expm1(x / alpha) if x < 0 else x),
    "THRESHOLDED_RELU": _nan_kept(lambda x, alpha=1.0: x if x > alpha else 0.0),
    "SOFTPLUS": _nan_kept(lambda x: math.inf if x == math.inf else _softplus(x)),
    "SOFTSIGN": _nan_kept(lambda x: math.copysign(1.0, x) if math.isinf(x) else x / (1 + abs(x))),
    "MISH": _nan_kept(lambda x: -0.0 if x == -math.inf else
                      x if x == math.inf else x * math.tanh(_softplus(x))),
}

CASES = [("LEAKY_RELU", {}), ("LEAKY_RELU", {"negative_slope": 0.3}),
         ("LEAKY_RELU", {"negative_slope": -2.0}), ("ELU", {}), ("ELU", {"alpha": 0.5}),
         ("SELU", {}), ("SELU", {"alpha": 2.0, "gamma": 3.0}), ("CELU", {}),
         ("CELU", {"alpha": 2.0}), ("THRESHOLDED_RELU", {}),
         ("THRESHOLDED_RELU", {"alpha": -1.5}), ("SOFTPLUS", {}), ("SOFTSIGN", {}), ("MISH", {})]


def run(name, x, backend=None, out=None, **params):
    y = np.full(x.shape, np.nan, x.dtype) if out is None else out
    nnc.cmd_exec(nnc.Cmd(name, backend=backend, **params), [nnc.Tensor(x)], [nnc.Tensor(y)])
    return y


def definition(name, x, **params):
    with np.errstate(over="ignore"):
        return np.array([DEFS[name](float(v), **params) for v in x.reshape(-1)]).reshape(x.shape)


def values(dtype):
    edges = [0.0, -0.0, 1e-30, -1e-30, 1.0, -1.0, 1.5, -1.5, 30.0, -30.0, 80.0, -80.0, 1e4, -1e4,
             1e30, -1e30, math.inf, -math.inf, math.nan]
    if dtype == np.float64:
        edges += [700.0, -700.0, 1e200, -1e200]
    x = np.concatenate([RNG.standard_normal(1000) * 4, np.linspace(-12, 12, 961), edges])
    return x.astype(dtype)


def ulps(got, want, dtype):
    want = want.astype(dtype)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    tiny = np.finfo(dtype).smallest_subnormal
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got.astype(np.float64) - want.astype(np.float64)) / np.maximum(
            np.spacing(np.abs(want)).astype(np.float64), tiny)
    return np.where(same, 0.0, np.nan_to_num(err, nan=np.inf))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,params", CASES)
def test_cpu_ref_is_the_definition(name, params, dtype):
    x = values(dtype)
    got = run(name, x, "CPU_REF", **params)
    want = definition(name, x, **params)
    # One rounding of float64 steps (NumPy's SIMD exp, log1p, tanh) that differ from the
    # definition's (Python's math) by a few ulp.
    bad = ulps(got, want, dtype) > 4
    assert not bad.any(), (x[bad][:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,params", CASES)
def test_cpu_opt_matches_cpu_ref_at_every_isa(name, params, dtype, kernel_isa):
    x = values(dtype)
    ref = run(name, x, "CPU_REF", **params)
    got = run(name, x, "CPU_OPT", **params)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    # act_kernel.h: float32 correctly rounded from double (1 ulp for double-rounding ties),
    # float64 within 4 ulp (libm against NumPy's SIMD exp, log1p and tanh).
    bad = ulps(got, ref, dtype) > (1 if dtype == np.float32 else 4)
    assert not bad.any(), (kernel_isa, x[bad][:5], got[bad][:5], ref[bad][:5])
    assert not np.isnan(got[~np.isnan(x)]).any()      # a NaN comes only from a NaN
    for v in (-0.0, -math.inf, math.inf):
        y = run(name, np.array([v], dtype), "CPU_OPT", **params)[0]
        r = run(name, np.array([v], dtype), "CPU_REF", **params)[0]
        assert y == r and math.copysign(1, y) == math.copysign(1, r), (v, y, r)


@pytest.mark.parametrize("name,params", CASES)
def test_large_sizes_in_place_and_across_parts(name, params, kernel_isa):
    x = (RNG.standard_normal(70001) * 5).astype(np.float32)
    ref = run(name, x, "CPU_REF", **params)
    y = x.copy()
    run(name, y, "CPU_OPT", out=y, **params)
    assert (ulps(y, ref, np.float32) <= 1).all()


def test_command_set_defaults_and_backends():
    for name in DEFS:
        assert name in nnc.commands()
        assert nnc.backends(name, device="cpu") == ["CPU_OPT", "CPU_REF"]
    assert nnc.Cmd("LEAKY_RELU").params == {"negative_slope": 0.01}
    assert nnc.Cmd("SELU").params == {"alpha": SELU_A, "gamma": SELU_G}
    assert nnc.Cmd("THRESHOLDED_RELU").params == {"alpha": 1.0}


@pytest.mark.parametrize("name,params,match", [
    ("LEAKY_RELU", {"alpha": 0.1}, "unknown parameters"),
    ("ELU", {"alpha": math.inf}, "alpha must be finite"),
    ("SELU", {"gamma": "x"}, "gamma must be a number"),
    ("CELU", {"alpha": 0.0}, "alpha must be nonzero"),
    ("SOFTPLUS", {"beta": 1.0}, "takes no parameters"),
])
def test_bad_parameters_raise_command_error(name, params, match):
    with pytest.raises(nnc.CommandError, match=match):
        nnc.Cmd(name, **params)


@pytest.mark.parametrize("name", list(DEFS))
def test_bad_tensors_raise_command_error(name):
    with pytest.raises(nnc.CommandError, match="shape"):
        run(name, np.ones(3, np.float32), out=np.ones(4, np.float32))
    with pytest.raises(nnc.CommandError, match="floating"):
        run(name, np.ones(3, np.int32), out=np.ones(3, np.int32))
