"""nnc.onnx.load: the element-wise activations with parameters (LeakyRelu, Elu, Selu, Celu,
ThresholdedRelu), the smooth ones (Softplus, Softsign, Mish, Swish) and the elementary functions
(Floor, Ceil, Round, Sign, Reciprocal, the trigonometric and hyperbolic functions and their
inverses): the check and the ``_op_<OpType>`` methods OpEmitter inherits (the other operators are
in _ops). Each is one command of nnc/cmd/elementwise (activation.py, elementary.py) on the value
in its layout, in place where the loader lets it."""

from __future__ import annotations

import math

from nnc.cmd.command import Cmd
from nnc.cmd.elementwise.activation import SELU_ALPHA, SELU_GAMMA

# The operators without attributes and the command each is.
ELEMENTARY = {"Floor": "EWFLOOR", "Ceil": "EWCEIL", "Round": "EWROUND", "Sign": "EWSIGN",
              "Sin": "EWSIN", "Cos": "EWCOS", "Tan": "EWTAN", "Asin": "EWASIN", "Acos": "EWACOS",
              "Atan": "EWATAN", "Sinh": "EWSINH", "Cosh": "EWCOSH", "Asinh": "EWASINH",
              "Acosh": "EWACOSH", "Atanh": "EWATANH", "Softplus": "SOFTPLUS",
              "Softsign": "SOFTSIGN", "Mish": "MISH"}
# The operators with attributes: the command, and each ONNX attribute's parameter and default.
PARAMETERISED = {
    "LeakyRelu": ("LEAKY_RELU", {"alpha": ("negative_slope", 0.01)}),
    "Elu": ("ELU", {"alpha": ("alpha", 1.0)}),
    "Selu": ("SELU", {"alpha": ("alpha", SELU_ALPHA), "gamma": ("gamma", SELU_GAMMA)}),
    "Celu": ("CELU", {"alpha": ("alpha", 1.0)}),
    "ThresholdedRelu": ("THRESHOLDED_RELU", {"alpha": ("alpha", 1.0)}),
}
MATH_OPS = set(ELEMENTARY) | set(PARAMETERISED) | {"Reciprocal", "Swish"}


def check_math(op, attrs, node, consts, ranks):
    """Why nnc cannot run this node of MATH_OPS, or None: every attribute a finite number
    (Celu's alpha nonzero: it divides x; Swish's alpha 1: SWISH is x sigmoid(x))."""
    if op == "Swish":
        alpha = attrs.get("alpha", 1.0)
        if alpha != 1.0:
            return f"attribute 'alpha' = {alpha!r}: SWISH is x * sigmoid(x) (alpha 1 only)"
        return None
    for key in PARAMETERISED.get(op, (None, {}))[1]:
        if key in attrs and not (isinstance(attrs[key], (int, float))
                                 and math.isfinite(attrs[key])):
            return f"attribute {key!r} = {attrs[key]!r}: {PARAMETERISED[op][0]} needs a finite " \
                   f"number"
    if op == "Celu" and attrs.get("alpha", 1.0) == 0:
        return "attribute 'alpha' = 0: CELU divides x by alpha"
    return None


class MathEmitter:
    """The emit methods of MATH_OPS, mixed into _ops.OpEmitter (which supplies ``get``,
    ``_write`` and the plan's ``layout``)."""

    def _op_Floor(self, k, n, a):
        x, deps = self.get(n.input[0], self.layout[n.output[0]])
        if n.op_type in PARAMETERISED:
            name, keys = PARAMETERISED[n.op_type]
            params = {param: float(a.get(key, default)) for key, (param, default) in keys.items()}
            cmd = Cmd(name, **params)
        elif n.op_type == "Reciprocal":
            cmd, x = Cmd("EWDIV"), [None, x]    # NNC's EWDIV without a numerator is 1 / x
        elif n.op_type == "Swish":
            cmd = Cmd("SWISH")
        else:
            cmd = Cmd(ELEMENTARY[n.op_type])
        self._write(n, cmd, x if isinstance(x, list) else [x], deps)


for _op in MATH_OPS - {"Floor"}:
    setattr(MathEmitter, "_op_" + _op, MathEmitter._op_Floor)
del _op
