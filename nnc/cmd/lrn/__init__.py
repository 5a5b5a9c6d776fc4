"""Layer 2 command, the LRN family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT). No GPU backend.

LRN, local response normalisation across channels (AlexNet's, ONNX's LRN; NNC has none). One
input x of any rank >= 1 whose last axis is the channels (NHWC, as nnc's convolutions store an
image), one output of its shape:

    y[..., c] = x[..., c] / (bias + alpha / size * sum(x[..., j] ** 2)) ** beta

the sum over the channels j from c - (size - 1) // 2 to c + size // 2 that exist (ONNX's
window: floor((size - 1) / 2) before c, ceil((size - 1) / 2) after). Parameters ``size``
(required, >= 1, channels in a window), ``alpha=1e-4``, ``beta=0.75``, ``bias=1.0`` (ONNX's
defaults). Floats only, one dtype; the output may not overlap the input (each channel reads its
neighbours).
"""

import math
from numbers import Integral, Real

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command


def _lrn_normalize(params):
    _check.only("LRN", params, ("size", "alpha", "beta", "bias"))
    size = params.get("size")
    if not isinstance(size, Integral) or isinstance(size, bool) or size < 1:
        raise CommandError(f"LRN needs size=n, the channels in a window (an int >= 1), not "
                           f"{size!r}")
    out = {"size": int(size)}
    for key, default in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)):
        value = params.get(key, default)
        if not isinstance(value, Real) or isinstance(value, bool) or not math.isfinite(value):
            raise CommandError(f"LRN: {key} must be a finite number, not {value!r}")
        out[key] = float(value)
    return out


def _lrn_check(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 1, 1)
    _check.present(cmd, inputs, "input", 0)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    if inputs[0].ndim < 1:
        raise CommandError("LRN needs an input with a channel axis (rank >= 1), not a scalar")
    _check.expect_shape(cmd, outputs[0], tuple(inputs[0].shape), "output 0")


def _lrn_ref(cmd, inputs, outputs):
    """The definition, in float64: each channel's window of squares, summed directly."""
    p = cmd.params
    x = inputs[0].astype(np.float64)
    c = x.shape[-1]
    sq = x * x
    total = np.zeros_like(x)
    before, after = (p["size"] - 1) // 2, p["size"] // 2
    for j in range(c):
        lo, hi = max(0, j - before), min(c, j + after + 1)
        total[..., j] = sq[..., lo:hi].sum(axis=-1)
    outputs[0][...] = x / (p["bias"] + p["alpha"] / p["size"] * total) ** p["beta"]


def register():
    register_command("LRN", inplace="none", check=_lrn_check, normalize=_lrn_normalize)
    register_backend("LRN", "CPU_REF", _lrn_ref)
