"""Layer 2 command, the element-wise family: this module (EW*, SCALAR_MUL, RELU, SIGMOID, TANH),
binary.py (ADD, MUL, EWPOW, MIN, MAX with broadcasting), clamp.py (CLAMP), activation.py (SWISH,
GELU, HARD_SWISH, HARD_SIGMOID, ERF, EWABS, LEAKY_RELU, ELU, SELU, CELU, SOFTPLUS, SOFTSIGN, MISH,
THRESHOLDED_RELU), elementary.py (EWFLOOR, EWCEIL, EWROUND, EWSIGN, the trigonometric and
hyperbolic EW* functions): definitions and CPU_REF; cpu_opt.pyx, cpu_opt_unary.pyx,
cpu_opt_binary.pyx, cpu_opt_act.pyx and cpu_opt_elementary.pyx: their CPU_OPT C loops; gpu/
(layer 3, never imported from here): GPU_REF of EW*, RELU and SCALAR_MUL, registered by
nnc.cuda.builtins.

Element-wise commands: EWSUM, EWPROD, EWDIV, EWEXP, EWLOG, EWSQRT, SCALAR_MUL, RELU, SIGMOID,
TANH (NNC: cmd/ew, cmd/scalar_mul, cmd/relu, cmd/sigmoid, cmd/tanh). All inputs and outputs share
one shape and one dtype (no broadcast, as in NNC), but for EWDIV, which broadcasts as ADD does
(binary.py). CPU_REF here is the plain NumPy definition; the C loops are in cpu_opt.pyx,
cpu_opt_binary.pyx (EWDIV) and (exp, log, sqrt, sigmoid, tanh) cpu_opt_unary.pyx.
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command
from nnc.cmd.elementwise import binary


def _ewsum_ref(cmd, inputs, outputs):
    acc = inputs[0].copy()
    for x in inputs[1:]:
        acc += x
    outputs[0][...] = acc


def _ewprod_ref(cmd, inputs, outputs):
    acc = inputs[0].copy()
    for x in inputs[1:]:
        acc *= x
    outputs[0][...] = acc


def _ewdiv_ref(cmd, inputs, outputs):
    a, b = inputs
    # NNC: a missing numerator means 1 / b.
    outputs[0][...] = (1 / b if a is None else a / b).astype(outputs[0].dtype, copy=False)


def _ewexp_ref(cmd, inputs, outputs):
    with np.errstate(over="ignore"):  # exp overflows to inf, as it should
        outputs[0][...] = np.exp(inputs[0])


def _ewlog_ref(cmd, inputs, outputs):
    with np.errstate(divide="ignore", invalid="ignore"):  # log 0 = -inf, log x<0 = NaN
        outputs[0][...] = np.log(inputs[0])


def _ewsqrt_ref(cmd, inputs, outputs):
    # sqrt is correctly rounded in every dtype; a negative input gives NaN, as in NNC.
    with np.errstate(invalid="ignore"):
        outputs[0][...] = np.sqrt(inputs[0])


def _sigmoid_ref(cmd, inputs, outputs):
    # In float64, from exp(-|x|), which never overflows: 1 / (1 + e) for x >= 0, e / (1 + e)
    # below (NNC's 1 / (1 + exp(-x)) overflows to a correct 0 but warns in NumPy).
    x = inputs[0].astype(np.float64)
    e = np.exp(-np.abs(x))
    outputs[0][...] = np.where(x >= 0, 1.0, e) / (1.0 + e)


def _tanh_ref(cmd, inputs, outputs):
    outputs[0][...] = np.tanh(inputs[0].astype(np.float64))


def _scalar_mul_ref(cmd, inputs, outputs):
    x = inputs[0]
    outputs[0][...] = (x * x.dtype.type(cmd.params["a"])).astype(x.dtype, copy=False)


def _relu_ref(cmd, inputs, outputs):
    np.maximum(inputs[0], 0, out=outputs[0])


def _scalar_mul_normalize(params):
    _check.only("SCALAR_MUL", params, ("a",))
    try:
        return {"a": float(params.get("a", 1.0))}
    except (TypeError, ValueError):
        raise CommandError(f"SCALAR_MUL: a must be a number, not {params['a']!r}") from None


def register():
    for name, n_in, fn, floats in (
        ("EWSUM", (1, None), _ewsum_ref, False),
        ("EWPROD", (1, None), _ewprod_ref, False),
        ("EWEXP", 1, _ewexp_ref, True),
        ("EWLOG", 1, _ewlog_ref, True),
        ("EWSQRT", 1, _ewsqrt_ref, True),
        ("SIGMOID", 1, _sigmoid_ref, True),
        ("TANH", 1, _tanh_ref, True),
        ("RELU", 1, _relu_ref, False),
    ):
        register_command(name, inplace="allow", check=_check.elementwise(n_in, floats=floats))
        register_backend(name, "CPU_REF", fn)
    register_command("EWDIV", inplace="allow", check=binary.broadcast_check(optional_first=True))
    register_backend("EWDIV", "CPU_REF", _ewdiv_ref)
    register_command("SCALAR_MUL", inplace="allow", check=_check.elementwise(1, floats=True),
                     normalize=_scalar_mul_normalize)
    register_backend("SCALAR_MUL", "CPU_REF", _scalar_mul_ref)
