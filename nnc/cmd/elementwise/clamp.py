"""CLAMP: out = min(max(x, min), max) (NNC: cmd/clamp/ccv_nnc_clamp_cpu_ref.c).

Parameters ``min`` and ``max`` default to NaN, which (as in NNC) means "no bound on that side";
``min=0, max=6`` is ReLU6. When both bounds are given, min <= max. A NaN element stays NaN.
One input, one output of the same shape and dtype; the output may be the input (in place).
CPU_OPT is a C backend (cpu_opt_binary.pyx, no GIL) for contiguous float32/float64 tensors;
CPU_REF takes every float dtype and strided views (a channel slice of a concat buffer).
"""

import math

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command


def _bound(params, key):
    value = params.get(key, math.nan)
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise CommandError(f"CLAMP: {key} must be a number or NaN, not {value!r}") from None


def _clamp_normalize(params):
    _check.only("CLAMP", params, ("min", "max"))
    lo, hi = _bound(params, "min"), _bound(params, "max")
    if lo > hi:  # False when either is NaN
        raise CommandError(f"CLAMP: min {lo} is greater than max {hi}")
    return {"min": lo, "max": hi}


def _clamp_ref(cmd, inputs, outputs):
    lo, hi = cmd.params["min"], cmd.params["max"]
    y = inputs[0].copy()
    if not math.isnan(lo):
        np.maximum(y, y.dtype.type(lo), out=y)
    if not math.isnan(hi):
        np.minimum(y, y.dtype.type(hi), out=y)
    outputs[0][...] = y


def register():
    register_command("CLAMP", inplace="allow", check=_check.elementwise(1, floats=True),
                     normalize=_clamp_normalize)
    register_backend("CLAMP", "CPU_REF", _clamp_ref)
