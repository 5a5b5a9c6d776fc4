"""The element-wise elementary functions: definitions and CPU_REF (NNC: cmd/ew names its unary
functions EW<FN>, as EWEXP, EWLOG, EWSQRT; these follow that style, with ONNX's definitions).

- EWFLOOR, EWCEIL: floor x, ceil x.
- EWROUND: x rounded to the nearest integer, halves to even (ONNX's Round, NumPy's rint).
- EWSIGN: -1, 0 or 1 by the sign of x (0 for both zeros, as NumPy's sign; NaN stays NaN).
- EWSIN, EWCOS, EWTAN, EWASIN, EWACOS, EWATAN: the trigonometric functions and their inverses.
- EWSINH, EWCOSH, EWASINH, EWACOSH, EWATANH: the hyperbolic ones and their inverses.

One input, one output of the same shape and float dtype; the output may be the input (in place).
Outside a function's domain (asin of 2, acosh of 0, sin of inf) the result is NaN, at a pole
(atanh of +-1) +-inf, and an overflow (cosh of 1000) inf, as C and NumPy give them; NaN stays NaN.
CPU_REF computes each in float64 and rounds once to the output's dtype. CPU_OPT
(cpu_opt_elementary.pyx) takes contiguous float32 and float64 tensors; elementary_kernel.h states
its accuracy against CPU_REF.
"""

import numpy as np

from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command


def _sign(x):
    # np.sign(-0.0) is 0.0: the result is one of -1, 0, 1 (or NaN).
    return np.sign(x)


# Each command's float64 definition (NumPy's ufunc, or the function above).
FUNCTIONS = {
    "EWFLOOR": np.floor, "EWCEIL": np.ceil, "EWROUND": np.rint, "EWSIGN": _sign,
    "EWSIN": np.sin, "EWCOS": np.cos, "EWTAN": np.tan, "EWASIN": np.arcsin,
    "EWACOS": np.arccos, "EWATAN": np.arctan, "EWSINH": np.sinh, "EWCOSH": np.cosh,
    "EWASINH": np.arcsinh, "EWACOSH": np.arccosh, "EWATANH": np.arctanh,
}


def _ref(fn):
    def ref(cmd, inputs, outputs):
        # Domain errors give NaN, poles +-inf and overflows inf, silently, as in C.
        with np.errstate(all="ignore"):
            outputs[0][...] = fn(inputs[0].astype(np.float64))
    return ref


def register():
    for name, fn in FUNCTIONS.items():
        register_command(name, inplace="allow", check=_check.elementwise(1, floats=True))
        register_backend(name, "CPU_REF", _ref(fn))
