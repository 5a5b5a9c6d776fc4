"""Layer 2 command, the pad family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT). No GPU backend.

PAD widens every axis of a tensor (NNC: cmd/pad, CCV_NNC_PAD_FORWARD, whose ``size.dim`` and
``pad.end`` are ``begin`` and ``end`` here). Parameters ``begin`` and ``end`` (required: one int
>= 0 per axis of the input, elements added before and after), ``mode`` and ``value``:

- ``mode="constant"`` (default): the new elements are ``value`` (default 0.0; NNC's
  CCV_NNC_PAD_ZERO is value 0);
- ``mode="reflect"``: mirrored about the edge element, which is not repeated (NumPy's and ONNX's
  reflect; NNC has none): begin and end must be < the axis' size;
- ``mode="edge"``: the edge element repeated (NNC's CCV_NNC_PAD_REPLICATE, NumPy's and ONNX's
  edge): an axis padded this way must not be empty.

One input of rank len(begin), one output of shape input + begin + end, one dtype (any; CPU_OPT
takes float32 and float64). The output may not overlap the input.
"""

import math
from numbers import Integral, Real

import numpy as np

from nnc.base.core import MAX_DIM, CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

MODES = ("constant", "reflect", "edge")


def _ints(value, key):
    try:
        out = tuple(value)
    except TypeError:
        out = None
    if out is None or not all(isinstance(v, Integral) and not isinstance(v, bool) and v >= 0
                              for v in out):
        raise CommandError(f"PAD: {key} must be ints >= 0, one per axis, not {value!r}")
    return tuple(int(v) for v in out)


def _normalize(params):
    _check.only("PAD", params, ("begin", "end", "mode", "value"))
    if "begin" not in params or "end" not in params:
        raise CommandError("PAD needs begin=(...) and end=(...), the elements added before and "
                           "after each axis")
    begin, end = _ints(params["begin"], "begin"), _ints(params["end"], "end")
    if len(begin) != len(end) or len(begin) > MAX_DIM:
        raise CommandError(f"PAD: begin {begin} and end {end} must have one value per axis "
                           f"(at most {MAX_DIM})")
    mode = params.get("mode", "constant")
    if mode not in MODES:
        raise CommandError(f"PAD: mode must be one of {MODES}, not {mode!r}")
    value = params.get("value", 0.0)
    if not isinstance(value, Real) or isinstance(value, bool):
        raise CommandError(f"PAD: value must be a number, not {value!r}")
    if mode != "constant" and value != 0:
        raise CommandError(f"PAD: value={value!r} needs mode='constant', not {mode!r}")
    return {"begin": begin, "end": end, "mode": mode, "value": float(value)}


def _check_pad(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 1, 1)
    _check.present(cmd, inputs, "input", 0)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    x, p = inputs[0], cmd.params
    if x.ndim != len(p["begin"]):
        raise CommandError(f"PAD: begin and end give {len(p['begin'])} axes, the input "
                           f"{tuple(x.shape)} has {x.ndim}")
    want = tuple(n + b + e for n, b, e in zip(x.shape, p["begin"], p["end"]))
    _check.expect_shape(cmd, outputs[0], want, "output 0 (the input's shape + begin + end)")
    for axis, (n, b, e) in enumerate(zip(x.shape, p["begin"], p["end"])):
        if p["mode"] == "reflect" and max(b, e) >= max(n, 1):
            raise CommandError(f"PAD mode='reflect': axis {axis} of size {n} can reflect at "
                               f"most {max(n - 1, 0)} elements each side, not {max(b, e)}")
        if p["mode"] == "edge" and n == 0 and b + e:
            raise CommandError(f"PAD mode='edge': axis {axis} is empty, it has no edge to "
                               "repeat")
    if p["mode"] == "constant" and np.dtype(str(x.dtype)).kind in "iub" and \
            (not math.isfinite(p["value"]) or p["value"] != int(p["value"])):
        raise CommandError(f"PAD: value {p['value']!r} is not an integer, the tensors are "
                           f"{x.dtype}")


def _pad_ref(cmd, inputs, outputs):
    p = cmd.params
    width = list(zip(p["begin"], p["end"]))
    if p["mode"] == "constant":
        outputs[0][...] = np.pad(inputs[0], width, mode="constant", constant_values=p["value"])
    else:
        outputs[0][...] = np.pad(inputs[0], width, mode=p["mode"])


def register():
    register_command("PAD", inplace="none", check=_check_pad, normalize=_normalize)
    register_backend("PAD", "CPU_REF", _pad_ref)
