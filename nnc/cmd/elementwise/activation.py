"""The element-wise activations and EWABS: definitions and CPU_REF (NNC: cmd/swish, cmd/gelu,
cmd/leaky_relu, cmd/ew; HARD_SWISH, HARD_SIGMOID, ERF, ELU, SELU, CELU, SOFTPLUS, SOFTSIGN, MISH
and THRESHOLDED_RELU are nnc's, named as NNC would name them, with ONNX's definitions).

- SWISH: x * sigmoid(x) (SiLU).
- GELU: x / 2 * (1 + erf(x / sqrt 2)); with ``tanh=True`` (NNC's ``gelu.tanh``) the
  approximation x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
- HARD_SIGMOID: min(max(alpha * x + beta, 0), 1), ONNX's HardSigmoid (``alpha=0.2, beta=0.5``).
- HARD_SWISH: x * min(max(x + 3, 0), 6) / 6 (ONNX's HardSwish, PyTorch's hardswish).
- ERF: erf(x).
- EWABS: |x|.
- LEAKY_RELU: x < 0 ? negative_slope * x : x (``negative_slope=0.01``, NNC's parameter name).
- ELU: x < 0 ? alpha * (e^x - 1) : x (``alpha=1``).
- SELU: gamma * (x < 0 ? alpha * (e^x - 1) : x) (``alpha=1.6732632..., gamma=1.0507009...``, ONNX's
  float32 constants).
- CELU: x < 0 ? alpha * (e^(x / alpha) - 1) : x (``alpha=1``, nonzero).
- SOFTPLUS: log(1 + e^x). SOFTSIGN: x / (1 + |x|) (+-1 at +-inf). MISH: x * tanh(SOFTPLUS(x)).
- THRESHOLDED_RELU: x > alpha ? x : 0 (``alpha=1``).

One input, one output of the same shape and float dtype; the output may be the input (in place).
NaN stays NaN. At -inf, SWISH, GELU, HARD_SWISH and MISH give their limit -0 (the formulas read
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


def _leaky_relu_ref(cmd, inputs, outputs):
    x = inputs[0].astype(np.float64)
    outputs[0][...] = np.where(x < 0, cmd.params["negative_slope"] * x, x)


def _elu64(x, alpha):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(x < 0, alpha * np.expm1(np.minimum(x, 0.0)), x)


def _elu_ref(cmd, inputs, outputs):
    outputs[0][...] = _elu64(inputs[0].astype(np.float64), cmd.params["alpha"])


def _selu_ref(cmd, inputs, outputs):
    x = inputs[0].astype(np.float64)
    outputs[0][...] = cmd.params["gamma"] * _elu64(x, cmd.params["alpha"])


def _celu_ref(cmd, inputs, outputs):
    x = inputs[0].astype(np.float64)
    alpha = cmd.params["alpha"]
    with np.errstate(over="ignore", invalid="ignore"):
        outputs[0][...] = np.where(x < 0, alpha * np.expm1(np.minimum(x, 0.0) / alpha), x)


def _softplus64(x):
    # max(x, 0) + log1p(e^-|x|) never overflows; NaN stays NaN through both terms.
    return np.where(x > 0, x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _softplus_ref(cmd, inputs, outputs):
    outputs[0][...] = _softplus64(inputs[0].astype(np.float64))


def _softsign_ref(cmd, inputs, outputs):
    x = inputs[0].astype(np.float64)
    with np.errstate(invalid="ignore"):
        outputs[0][...] = np.where(np.isinf(x), np.sign(x), x / (1.0 + np.abs(x)))


def _mish_ref(cmd, inputs, outputs):
    x = inputs[0].astype(np.float64)
    with np.errstate(invalid="ignore"):
        outputs[0][...] = _at_neg_inf(x, x * np.tanh(_softplus64(x)))


def _thresholded_relu_ref(cmd, inputs, outputs):
    x = inputs[0].astype(np.float64)
    # NaN is not <= alpha, so it passes through as NaN.
    outputs[0][...] = np.where(x <= cmd.params["alpha"], 0.0, x)


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


def _scalars(name, defaults):
    """The normalize of a command whose parameters are finite numbers with these defaults."""
    def normalize(params):
        _check.only(name, params, tuple(defaults))
        return {key: _check.finite(name, params, key, value) for key, value in defaults.items()}
    return normalize


def _celu_normalize(params):
    params = _scalars("CELU", {"alpha": 1.0})(params)
    if params["alpha"] == 0:
        raise CommandError("CELU: alpha must be nonzero (x / alpha)")
    return params


# ONNX's Selu defaults, float32 values as its schema writes them.
SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


def register():
    for name, fn, normalize in (
        ("SWISH", _swish_ref, None),
        ("GELU", _gelu_ref, _gelu_normalize),
        ("HARD_SWISH", _hard_swish_ref, None),
        ("HARD_SIGMOID", _hard_sigmoid_ref, _hard_sigmoid_normalize),
        ("ERF", _erf_ref, None),
        ("EWABS", _ewabs_ref, None),
        ("LEAKY_RELU", _leaky_relu_ref, _scalars("LEAKY_RELU", {"negative_slope": 0.01})),
        ("ELU", _elu_ref, _scalars("ELU", {"alpha": 1.0})),
        ("SELU", _selu_ref, _scalars("SELU", {"alpha": SELU_ALPHA, "gamma": SELU_GAMMA})),
        ("CELU", _celu_ref, _celu_normalize),
        ("SOFTPLUS", _softplus_ref, None),
        ("SOFTSIGN", _softsign_ref, None),
        ("MISH", _mish_ref, None),
        ("THRESHOLDED_RELU", _thresholded_relu_ref, _scalars("THRESHOLDED_RELU", {"alpha": 1.0})),
    ):
        register_command(name, inplace="allow", check=_check.elementwise(1, floats=True),
                         normalize=normalize)
        register_backend(name, "CPU_REF", fn)
