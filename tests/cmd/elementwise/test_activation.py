"""nnc/cmd/elementwise/activation.py and cpu_opt_act.pyx: SWISH, GELU (erf and tanh forms),
HARD_SWISH, HARD_SIGMOID, ERF and EWABS. CPU_REF against the definitions written here with
Python's math module (float64), CPU_OPT against CPU_REF at every ISA level within act_kernel.h's
stated tolerance, the edge values (inf, NaN, -0, magnitudes where exp and x^3 overflow), in
place, strided views (CPU_REF), and bad shapes and parameters raising CommandError."""

import math

import numpy as np
import pytest

import nnc

RNG = np.random.default_rng(33)
C = math.sqrt(2 / math.pi)


def _sigmoid(v):
    return 1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v))


def _limit(f):
    """f with the limits at +-inf and NaN kept NaN, as the commands define them."""
    def g(x, **kw):
        if math.isnan(x):
            return math.nan
        if x == -math.inf:
            return -0.0
        if x == math.inf:
            return math.inf
        return f(x, **kw)
    return g


# The definitions, element by element in float64 (independent of the NumPy CPU_REF).
DEFS = {
    "SWISH": _limit(lambda x: x * _sigmoid(x)),
    "GELU": _limit(lambda x, tanh=False: 0.5 * x * (
        1 + math.tanh(C * (x + 0.044715 * x ** 3))) if tanh else 0.5 * x * math.erfc(
        -x / math.sqrt(2))),
    "HARD_SWISH": _limit(lambda x: x * min(max(x + 3, 0), 6) / 6),
    "HARD_SIGMOID": lambda x, alpha=0.2, beta=0.5: (
        math.nan if math.isnan(x) else min(max(alpha * x + beta, 0.0), 1.0)),
    "ERF": math.erf,
    "EWABS": abs,
}

CASES = [("SWISH", {}), ("GELU", {}), ("GELU", {"tanh": True}), ("HARD_SWISH", {}),
         ("HARD_SIGMOID", {}), ("HARD_SIGMOID", {"alpha": 1 / 6, "beta": 0.5}),
         ("HARD_SIGMOID", {"alpha": -0.7, "beta": 0.1}), ("ERF", {}), ("EWABS", {})]


def run(name, x, backend=None, out=None, **params):
    y = np.full(x.shape, np.nan, x.dtype) if out is None else out
    nnc.cmd_exec(nnc.Cmd(name, backend=backend, **params), [nnc.Tensor(x)], [nnc.Tensor(y)])
    return y


def definition(name, x, **params):
    f = DEFS[name]
    if name == "GELU" and params.get("tanh"):
        # The tanh form's tail: 1 + tanh(u) loses every digit for u < -19 in float64 too; the
        # command's x sigmoid(2u) is the same function without that cancellation.
        f = _limit(lambda v, tanh: v * _sigmoid(2 * C * (v + 0.044715 * (v * v * v))))
    with np.errstate(over="ignore"):
        return np.array([f(float(v), **params) for v in x.reshape(-1)]).reshape(x.shape)


def values(dtype):
    """Ordinary values, both tails, and the edges: the clamp corners of HARD_*, magnitudes where
    x^3 (GELU's tanh form) or exp overflow, -0, +-inf and NaN."""
    edges = [0.0, -0.0, 1e-30, -1e-30, 3.0, -3.0, 2.5, -2.5, 6.0, -6.0, 30.0, -30.0, 80.0, -80.0,
             1e4, -1e4, 1e15, -1e15, 1e30, -1e30, math.inf, -math.inf, math.nan]
    if dtype == np.float64:
        edges += [700.0, -700.0, 1e200, -1e200]
    x = np.concatenate([RNG.standard_normal(1000) * 4, np.linspace(-12, 12, 961), edges])
    return x.astype(dtype)


def ulps(got, want, dtype):
    """|got - want| in units of the last place of want (NaN where want is NaN and got is not)."""
    want = want.astype(dtype)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    tiny = np.finfo(dtype).smallest_subnormal
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got.astype(np.float64) - want.astype(np.float64)) / np.maximum(
            np.spacing(np.abs(want)).astype(np.float64), tiny)
    return np.where(same, 0.0, np.nan_to_num(err, nan=np.inf))


def allowed_ulps(name, x, params, backend="CPU_OPT"):
    """act_kernel.h's tolerance for each element (CPU_REF rounds from float64: its float32 is
    not the fits')."""
    if name == "GELU" and params.get("tanh"):
        with np.errstate(over="ignore", invalid="ignore"):
            u2 = np.abs(2 * C * (x.astype(np.float64) + 0.044715 * x.astype(np.float64) ** 3))
        return 3 + 4 * np.nan_to_num(u2, nan=0, posinf=np.inf)
    if name == "GELU" and x.dtype == np.float64:
        # erfc(z) amplifies the rounding of its float64 argument z = -x / sqrt 2 by 1 + 2 z^2,
        # and -x * sqrt(1/2) and -x / sqrt(2) differ by up to 2 ulp (math.erfc adds its own).
        with np.errstate(over="ignore"):
            return 3 + 3 * np.nan_to_num(x.astype(np.float64) ** 2, nan=0, posinf=np.inf)
    if backend == "CPU_OPT" and x.dtype == np.float32 and name in F32_FIT_ULPS:
        return F32_FIT_ULPS[name]
    return {"SWISH": 3, "HARD_SWISH": 2, "HARD_SIGMOID": 2}.get(name, 1)


# act_kernel.h's float32 erf and GELU's erf form are float32 fits evaluated in float32 (not
# libm): their documented tolerance against CPU_REF (docs/commands.md), in ulp of the result.
# SOFTPLUS and MISH evaluate their fits in double and round once.
F32_FIT_ULPS = {"ERF": 1, "GELU": 8, "SOFTPLUS": 1, "MISH": 1}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,params", CASES)
def test_cpu_ref_is_the_definition(name, params, dtype):
    x = values(dtype)
    got = run(name, x, "CPU_REF", **params)
    want = definition(name, x, **params)
    # CPU_REF rounds its float64 result once: within 1 ulp of the definition, which computes
    # the same function by other float64 steps.
    bad = ulps(got, want, dtype) > allowed_ulps(name, x, params, "CPU_REF") + 1
    # HARD_SIGMOID near a clamp edge: alpha * x + beta cancels; judge it against beta's ulp.
    if name == "HARD_SIGMOID":
        bad &= np.abs(got - want.astype(dtype)) > 2 * np.spacing(dtype(1))
    assert not bad.any(), (x[bad][:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,params", CASES)
def test_cpu_opt_matches_cpu_ref_at_every_isa(name, params, dtype, kernel_isa):
    x = values(dtype)
    ref = run(name, x, "CPU_REF", **params)
    got = run(name, x, "CPU_OPT", **params)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    bad = ulps(got, ref, dtype) > allowed_ulps(name, x, params)
    if name == "HARD_SIGMOID":
        bad &= np.abs(got - ref) > 2 * np.spacing(dtype(1))
    assert not bad.any(), (kernel_isa, x[bad][:5], got[bad][:5], ref[bad][:5])
    # No overflow to NaN: a NaN comes only from a NaN.
    assert not np.isnan(got[~np.isnan(x)]).any()
    # The signs of zeros: f(-0) is -0 where f is odd or x * (...), and the -inf limit is -0.
    for v in (-0.0, -math.inf):
        y = run(name, np.array([v], dtype), "CPU_OPT", **params)[0]
        r = run(name, np.array([v], dtype), "CPU_REF", **params)[0]
        assert y == r and math.copysign(1, y) == math.copysign(1, r), (v, y, r)


@pytest.mark.parametrize("name,params", CASES)
def test_large_sizes_in_place_and_across_parts(name, params, kernel_isa):
    # Several parallel parts and a tail that is not a whole vector; in place.
    x = (RNG.standard_normal(70001) * 5).astype(np.float32)
    ref = run(name, x, "CPU_REF", **params)
    y = x.copy()
    run(name, y, "CPU_OPT", out=y, **params)
    assert (ulps(y, ref, np.float32) <= allowed_ulps(name, x, params)).all() or \
        name == "HARD_SIGMOID" and np.abs(y - ref).max() <= 2 * np.spacing(np.float32(1))


@pytest.mark.parametrize("name,params", CASES)
def test_default_backend_and_strided_and_float16(name, params):
    x = (RNG.standard_normal((4, 6)) * 3).astype(np.float32)
    y = np.zeros_like(x)
    nnc.cmd_exec(nnc.Cmd(name, **params), [nnc.Tensor(x)], [nnc.Tensor(y)])
    np.testing.assert_allclose(y, run(name, x, "CPU_REF", **params), rtol=1e-5, atol=1e-6)
    # A channel slice (strided): only CPU_REF takes it.
    big = (RNG.standard_normal((4, 12)) * 3).astype(np.float32)
    out = np.zeros((4, 12), np.float32)
    cols = {"offset": 2, "strides": (12, 1)}
    nnc.cmd_exec(nnc.Cmd(name, **params), [nnc.Tensor(big).view((4, 6), **cols)],
                 [nnc.Tensor(out).view((4, 6), **cols)])
    np.testing.assert_allclose(out[:, 2:8], run(name, np.ascontiguousarray(big[:, 2:8]),
                                                "CPU_REF", **params), rtol=1e-6, atol=1e-7)
    assert not out[:, :2].any() and not out[:, 8:].any()
    h = x.astype(np.float16)
    np.testing.assert_allclose(run(name, h, **params).astype(np.float32),
                               definition(name, h, **params), rtol=2e-3, atol=2e-3)


def test_command_set_and_backends():
    for name in ("SWISH", "GELU", "HARD_SWISH", "HARD_SIGMOID", "ERF", "EWABS"):
        assert name in nnc.commands()
        assert nnc.backends(name, device="cpu") == ["CPU_OPT", "CPU_REF"]
    assert nnc.Cmd("GELU").params == {"tanh": False}
    assert nnc.Cmd("HARD_SIGMOID").params == {"alpha": 0.2, "beta": 0.5}


@pytest.mark.parametrize("make,ins,outs,match", [
    (lambda: nnc.Cmd("SWISH"), [np.ones(3, np.float32)], [np.ones(4, np.float32)], "shape"),
    (lambda: nnc.Cmd("GELU"), [np.ones(3, np.float32)], [np.ones(3)], "mixed dtypes"),
    (lambda: nnc.Cmd("ERF"), [np.ones(3, np.int32)], [np.ones(3, np.int32)], "floating"),
    (lambda: nnc.Cmd("EWABS"), [np.ones(3), np.ones(3)], [np.ones(3)], "takes 1 inputs"),
    (lambda: nnc.Cmd("HARD_SWISH"), [None], [np.ones(3)], "required"),
])
def test_bad_tensors_raise_command_error(make, ins, outs, match):
    with pytest.raises(nnc.CommandError, match=match):
        nnc.cmd_exec(make(), [None if x is None else nnc.Tensor(x) for x in ins],
                     [nnc.Tensor(y) for y in outs])


@pytest.mark.parametrize("name,params,match", [
    ("GELU", {"tanh": "yes"}, "tanh must be True or False"),
    ("GELU", {"approximate": True}, "unknown parameters"),
    ("HARD_SIGMOID", {"alpha": math.nan}, "alpha must be finite"),
    ("HARD_SIGMOID", {"beta": "x"}, "beta must be a number"),
    ("HARD_SWISH", {"alpha": 1.0}, "takes no parameters"),
])
def test_bad_parameters_raise_command_error(name, params, match):
    with pytest.raises(nnc.CommandError, match=match):
        nnc.Cmd(name, **params)


@pytest.mark.parametrize("name", ["ERF", "GELU", "SOFTPLUS", "MISH"])
def test_float32_vector_fits_within_tolerance_dense(name, kernel_isa):
    # act_kernel.h's float32 erf, erfc and log1p are fits (not libm): every float of [-16, 16]
    # at a step of 2^-12, random bit patterns over the whole range (subnormals, huge magnitudes)
    # and the edges stay within the documented ulps of CPU_REF, NaN only from NaN.
    bits = RNG.integers(0, 2 ** 32, 200000, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([np.arange(-16, 16, 2.0 ** -12, dtype=np.float32), bits.view(np.float32),
                        np.array([0.0, -0.0, 1e-45, -1e-45, 1.0, -1.0, 10.5, -10.5, 14.2, -14.2,
                                  3.4e38, -3.4e38, math.inf, -math.inf, math.nan], np.float32)])
    with np.errstate(invalid="ignore", over="ignore"):
        ref = run(name, x, "CPU_REF")
    got = run(name, x, "CPU_OPT")
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    bad = ulps(got, ref, np.float32) > F32_FIT_ULPS[name]
    assert not bad.any(), (kernel_isa, x[bad][:5], got[bad][:5], ref[bad][:5])
    zero = (got == 0) & (ref == 0)
    assert np.array_equal(np.signbit(got[zero]), np.signbit(ref[zero]))


@pytest.mark.parametrize("name", ["ERF", "GELU"])
def test_float32_erf_tails_and_special_values(name, kernel_isa):
    # Every length up to three AVX-512 vectors, so each loop's remainder (the lanes past the last
    # whole vector) runs, with NaN, +-inf and +-0 at the start, the middle and the end: erf(+-inf)
    # is +-1, GELU(+inf) = +inf and GELU(-inf) = -0, NaN stays NaN, zeros keep their sign.
    special = np.array([math.nan, math.inf, -math.inf, 0.0, -0.0], np.float32)
    for n in range(1, 49):
        x = (RNG.standard_normal(n) * 3).astype(np.float32)
        for k, pos in enumerate((0, n // 2, n - 1)):
            x[pos] = special[(n + k) % len(special)]
        ref = run(name, x, "CPU_REF")
        got = run(name, x, "CPU_OPT")
        assert np.array_equal(np.isnan(got), np.isnan(ref)), (kernel_isa, n, x, got)
        assert (ulps(got, ref, np.float32) <= F32_FIT_ULPS[name]).all(), (kernel_isa, n, x, got)
        zero = got == 0
        assert np.array_equal(np.signbit(got[zero]), np.signbit(ref[zero])), (kernel_isa, n, x)
    x = special.copy()
    got = run(name, x, "CPU_OPT")
    want = [math.nan, 1.0, -1.0, 0.0, -0.0] if name == "ERF" else \
        [math.nan, math.inf, -0.0, 0.0, -0.0]
    assert math.isnan(got[0]) and got[1:].tolist() == want[1:]
    assert np.signbit(got[1:]).tolist() == [math.copysign(1, w) < 0 for w in want[1:]]
