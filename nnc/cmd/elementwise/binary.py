"""ADD, MUL, EWPOW, MIN, MAX and PRELU with broadcasting, and EWDIV's broadcast check (NNC:
cmd/blas/ccv_nnc_add_cpu_ref.c, ccv_nnc_mul_cpu_ref.c, cmd/compare, cmd/ew).

- ADD: out = p * a + q * b (parameters ``p=1.0``, ``q=1.0``); b may be None, then out = p * a.
  Subtraction is ADD with ``q=-1`` (NNC has no EWSUB): a + (-1 * b) rounds as a - b does.
- MUL: out = p * a * b (parameter ``p=1.0``); b may be None, then out = p * a.
- EWDIV (registered with the family in __init__.py): out = a / b, or 1 / b when a is None.
- EWPOW: out = a ** b, C's pow (pow(x, 0) = 1 and pow(1, y) = 1 even for NaN; a negative base
  with a non-integer exponent gives NaN).
- MIN, MAX: out = a < b ? a : b and a > b ? a : b, NNC's ccv_min/ccv_max (a tie gives b), except
  that a NaN in either input gives NaN (NumPy's and ONNX's rule; NNC's returns b for a NaN a).
- PRELU (nnc's, named in NNC's style; ONNX's PRelu): (x, slope) -> x < 0 ? slope * x : x, in
  float64 rounded once; the slope broadcasts to x (ONNX's unidirectional broadcast: the output
  has x's shape). NaN stays NaN.

Broadcasting is NNC's rule, which is NumPy's: shapes are aligned at their last axis, a missing
leading axis counts as 1, and on every axis each input has either the output's size or 1. The
output must have exactly the broadcast shape (it is never broadcast itself). ONNX's
multidirectional broadcasting is the same rule, so an ONNX Add maps to one ADD node.
NNC's EWDIV, MIN and MAX take one shape for all; nnc's broadcast, which a same-shape call
meets unchanged. Floats only, one dtype; the output may be exactly an input (in place).

CPU_OPT is a C backend (cpu_opt_binary.pyx, no GIL): contiguous float32/float64 tensors where
one input has the output's shape and the other has it too, or is one trailing row of it (a
per-channel vector [C] of an NHWC tensor), one block of neighbouring axes of it (a per-channel
[1, C, 1, 1] of an NCHW tensor; not EWPOW) or a single element, leading 1s of any shape aside
(either input may be the whole one, also for EWDIV and EWPOW); every other case (strided views,
broadcasts over two blocks, float16) runs CPU_REF. EWPOW's CPU_OPT is within 1 ulp of CPU_REF
(float32: powf); an exponent of one element equal to 1, 2, -1 or 0.5 (float32: also 3) takes an
exact form of C's pow (x, x * x, 1 / x, sqrt(x + 0) with +inf for -inf, float32 x^3 as a double
product), CPU_REF's bits in float32.
"""


import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command


def _add_normalize(params):
    _check.only("ADD", params, ("p", "q"))
    return {"p": _check.finite("ADD", params, "p", 1.0),
            "q": _check.finite("ADD", params, "q", 1.0)}


def _mul_normalize(params):
    _check.only("MUL", params, ("p",))
    return {"p": _check.finite("MUL", params, "p", 1.0)}


def broadcast_shape(cmd_name, a_shape, b_shape):
    """NNC's broadcast of two shapes (trailing alignment, size-1 axes stretch), or CommandError."""
    nd = max(len(a_shape), len(b_shape))
    a = (1,) * (nd - len(a_shape)) + tuple(a_shape)
    b = (1,) * (nd - len(b_shape)) + tuple(b_shape)
    out = []
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise CommandError(
                f"{cmd_name}: shapes {tuple(a_shape)} and {tuple(b_shape)} do not broadcast "
                f"(axis {k - nd} has {x} and {y}; each must be equal or 1)"
            )
        out.append(max(x, y) if x and y else 0)
    return tuple(out)


def _binary_check(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, (1, 2), 1)
    _check.present(cmd, inputs, "input", 0)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    a = inputs[0]
    b = inputs[1] if len(inputs) > 1 else None
    if b is None:
        if cmd.name == "ADD" and cmd.params["q"] != 0:
            # NNC asserts q == 0 without b: a q that scales nothing is a mistake.
            raise CommandError("ADD without b needs q=0 (out = p * a)")
        shape = tuple(a.shape)
    else:
        shape = broadcast_shape(cmd.name, a.shape, b.shape)
    _check.expect_shape(cmd, outputs[0], shape, "output 0 (the broadcast shape)")


def broadcast_check(*, optional_first=False):
    """The check of EWDIV, EWPOW, MIN and MAX: two inputs (the first may be None with
    ``optional_first``: EWDIV's 1 / b) and one output of their broadcast shape, one float
    dtype."""

    def check(cmd, inputs, outputs):
        _check.arity(cmd, inputs, outputs, 2, 1)
        _check.present(cmd, inputs, "input", *((1,) if optional_first else (0, 1)))
        _check.present(cmd, outputs, "output", 0)
        _check.same_dtype(cmd, inputs + outputs)
        _check.floating(cmd, inputs + outputs)
        a, b = inputs
        shape = tuple(b.shape) if a is None else broadcast_shape(cmd.name, a.shape, b.shape)
        _check.expect_shape(cmd, outputs[0], shape, "output 0 (the broadcast shape)")

    return check


def _prelu_check(cmd, inputs, outputs):
    broadcast_check()(cmd, inputs, outputs)
    if tuple(outputs[0].shape) != tuple(inputs[0].shape):
        raise CommandError(f"PRELU: the slope of shape {tuple(inputs[1].shape)} must broadcast "
                           f"to x's shape {tuple(inputs[0].shape)} (the output is x's shape)")


def _prelu_ref(cmd, inputs, outputs):
    x, slope = (np.asarray(v, dtype=np.float64) for v in inputs)
    outputs[0][...] = np.where(x < 0, slope * x, x)


def _ewpow_ref(cmd, inputs, outputs):
    # Both operands whole: NumPy takes a broadcast exponent of 0.5 as sqrt, which departs from
    # C's pow at -0 and -inf (pow(-inf, 0.5) = inf, sqrt(-inf) = NaN).
    a, b = (np.array(v, dtype=np.float64) for v in np.broadcast_arrays(*inputs))
    with np.errstate(all="ignore"):  # overflow to inf, NaN for a negative base: as C's pow
        outputs[0][...] = np.power(a, b)


def _min_ref(cmd, inputs, outputs):
    a, b = inputs
    outputs[0][...] = np.where((a < b) | np.isnan(a), a, b)


def _max_ref(cmd, inputs, outputs):
    a, b = inputs
    outputs[0][...] = np.where((a > b) | np.isnan(a), a, b)


def _add_ref(cmd, inputs, outputs):
    """The definition, in float64 whatever the dtype, rounded once to the output's."""
    p, q = cmd.params["p"], cmd.params["q"]
    acc = p * inputs[0].astype(np.float64)
    if len(inputs) > 1 and inputs[1] is not None:
        acc = acc + q * inputs[1].astype(np.float64)
    outputs[0][...] = acc


def _mul_ref(cmd, inputs, outputs):
    acc = cmd.params["p"] * inputs[0].astype(np.float64)
    if len(inputs) > 1 and inputs[1] is not None:
        acc = acc * inputs[1].astype(np.float64)
    outputs[0][...] = acc


def register():
    register_command("ADD", inplace="allow", check=_binary_check, normalize=_add_normalize)
    register_backend("ADD", "CPU_REF", _add_ref)
    register_command("MUL", inplace="allow", check=_binary_check, normalize=_mul_normalize)
    register_backend("MUL", "CPU_REF", _mul_ref)
    for name, fn in (("EWPOW", _ewpow_ref), ("MIN", _min_ref), ("MAX", _max_ref)):
        register_command(name, inplace="allow", check=broadcast_check())
        register_backend(name, "CPU_REF", fn)
    register_command("PRELU", inplace="allow", check=_prelu_check)
    register_backend("PRELU", "CPU_REF", _prelu_ref)
