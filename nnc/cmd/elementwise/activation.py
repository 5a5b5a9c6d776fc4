"""The element-wise activations and EWABS: definitions and CPU_REF (NNC: cmd/swish, cmd/gelu,
cmd/ew; HARD_SWISH, HARD_SIGMOID and ERF are nnc's, named as NNC would name them).

- SWISH: x * sigmoid(x) (SiLU).
- GELU: x / 2 * (1 + erf(x / sqrt 2)); with ``tanh=True`` (NNC's ``gelu.tanh``) the
  approximation x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
- HARD_SIGMOID: min(max(alpha * x + beta, 0), 1), ONNX's HardSigmoid (``alpha=0.2, beta=0.5``).
- HARD_SWISH: x * min(max(x + 3, 0), 6) / 6 (ONNX's HardSwish, PyTorch's hardswish).
- ERF: erf(x).
- EWABS: |x|.

One input, one output of the same shape and float dtype; the output may be the input (in place).
NaN stays NaN. At -inf, SWISH, GELU and HARD_SWISH give their limit -0 (the formulas read
-inf * 0). CPU_REF computes each in float64 and rounds once to the output's dtype, by the forms
act_kernel.h uses (x * sigmoid(2u) for GELU's tanh form, x / 2 * erfc(-x / sqrt 2) for its erf
form: no cancellation for negative x). CPU_OPT (cpu_opt_act.pyx) takes contiguous float32 and
float64 tensors; act_kernel.h states its accuracy against CPU_REF.
"""

import math

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

_GELU_C = math.sqrt(2 / math.pi)
# Python's math.erf and math.erfc (NumPy has neither), element by element in float64.
_erf64 = np.vectorize(math.erf, otypes=[np.float64])
_erfc64 = np.vectorize(math.erfc, otypes=[np.float64])


def _sigmoid64(x):
    # exp(-|x|) never overflows: 1 / (1 + e) for x >= 0, e / (1 + e) below.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


def _at_neg_inf(x, y):
    """y with the limit -0 where x is -inf (the formulas give NaN there)."""
    return np.where(np.isneginf(x), -0.0, y)


def swish64(x):
    """SWISH of a float64 array, the definition (CONVOLUTION's fused activation uses it too)."""
    with np.errstate(invalid="ignore"):
        return _at_neg_inf(x, x * _sigmoid64(x))


def hard_swish64(x):
    """HARD_SWISH of a float64 array, the definition (likewise)."""
    with np.errstate(invalid="ignore"):
        y = x * np.minimum(np.maximum(x + 3.0, 0.0), 6.0) / 6.0
    return np.where(x <= -3.0, -0.0, y)


def _swish_ref(cmd, inputs, outputs):
    outputs[0][...] = swish64(inputs[0].astype(np.float64))


def _gelu_ref(cmd, inputs, outputs):
    x = inputs[0].astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if cmd.params["tanh"]:
            y = x * _sigmoid64(2 * _GELU_C * (x + 0.044715 * (x * x * x)))
        else:
            y = 0.5 * x * _erfc64(-x * math.sqrt(0.5))
    outputs[0][...] = _at_neg_inf(x, y)


def _hard_sigmoid_ref(cmd, inputs, outputs):
    x = inputs[0].astype(np.float64)
    with np.errstate(invalid="ignore"):
        v = cmd.params["alpha"] * x + cmd.params["beta"]
    outputs[0][...] = np.minimum(np.maximum(v, 0.0), 1.0)


def _hard_swish_ref(cmd, inputs, outputs):
    outputs[0][...] = hard_swish64(inputs[0].astype(np.float64))


def _erf_ref(cmd, inputs, outputs):
    outputs[0][...] = _erf64(inputs[0].astype(np.float64))


def _ewabs_ref(cmd, inputs, outputs):
    np.abs(inputs[0], out=outputs[0])


def _gelu_normalize(params):
    _check.only("GELU", params, ("tanh",))
    value = params.get("tanh", False)
    if not isinstance(value, (bool, np.bool_)) and value not in (0, 1):
        raise CommandError(f"GELU: tanh must be True or False, not {value!r}")
    return {"tanh": bool(value)}


def _hard_sigmoid_normalize(params):
    _check.only("HARD_SIGMOID", params, ("alpha", "beta"))
    return {"alpha": _check.finite("HARD_SIGMOID", params, "alpha", 0.2),
            "beta": _check.finite("HARD_SIGMOID", params, "beta", 0.5)}


def register():
    for name, fn, normalize in (
        ("SWISH", _swish_ref, None),
        ("GELU", _gelu_ref, _gelu_normalize),
        ("HARD_SWISH", _hard_swish_ref, None),
        ("HARD_SIGMOID", _hard_sigmoid_ref, _hard_sigmoid_normalize),
        ("ERF", _erf_ref, None),
        ("EWABS", _ewabs_ref, None),
    ):
        register_command(name, inplace="allow", check=_check.elementwise(1, floats=True),
                         normalize=normalize)
        register_backend(name, "CPU_REF", fn)
