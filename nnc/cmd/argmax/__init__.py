"""Layer 2 command, the argmax family: this module (the definitions and CPU_REF). No C or GPU
backend (a model's last node, on its small output).

ARGMAX and ARGMIN (NNC: cmd/argmax and cmd/argmin, CCV_NNC_ARGMAX_FORWARD and
CCV_NNC_ARGMIN_FORWARD, whose ``reduce.axis`` is ``axis`` here): the index of the largest
(smallest) element along one axis. One input of any rank >= 1, floating or integer; one output
with that axis of size 1 (NNC keeps the reduced dimension), int32 (NNC's) or int64 (ONNX's
ArgMax). As with the REDUCE_* commands (and NNC's kernels), the output's shape lines up with the
input's from the right, so leading axes of size 1 may be left out or added: a [2, 3] input's
ARGMAX over axis 0 writes a [1, 3] or a [3] output. The first such index wins a tie; a NaN
counts as the largest (ARGMAX) and the smallest (ARGMIN) element, so its first index is the
answer (np.argmax/np.argmin). An empty axis has no answer: refused.
"""

from numbers import Integral

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

NAMES = ("ARGMAX", "ARGMIN")
INDEX_DTYPES = ("int32", "int64")


def _normalize(name):
    def normalize(params):
        _check.only(name, params, ("axis",))
        axis = params.get("axis")
        if not isinstance(axis, Integral) or isinstance(axis, bool):
            raise CommandError(f"{name} needs axis=k, the axis to reduce (an int), not "
                               f"{axis!r}")
        return {"axis": int(axis)}

    return normalize


def axis_of(cmd, ndim):
    """``cmd``'s axis, non-negative, for an input of ``ndim`` dimensions."""
    axis = cmd.params["axis"]
    if not -ndim <= axis < ndim:
        raise CommandError(f"{cmd.name}: axis {axis} is out of range for an input of {ndim} "
                           "dimensions")
    return axis % ndim


def _strip(shape):
    """shape without its leading axes of size 1 (NNC's alignment from the right)."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _check_arg(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 1, 1)
    _check.present(cmd, inputs, "input", 0)
    _check.present(cmd, outputs, "output", 0)
    x, y = inputs[0], outputs[0]
    if str(y.dtype) not in INDEX_DTYPES:
        raise CommandError(f"{cmd.name}: the output must be int32 or int64, not {y.dtype}")
    axis = axis_of(cmd, x.ndim)
    want = tuple(1 if i == axis else n for i, n in enumerate(x.shape))
    if _strip(y.shape) != _strip(want):
        raise CommandError(
            f"{cmd.name}: output 0 (the input's shape, the axis 1) should have shape {want}, got "
            f"{tuple(y.shape)} (leading axes of size 1 may be left out or added)")
    if x.shape[axis] == 0:
        raise CommandError(f"{cmd.name} of input shape {tuple(x.shape)} over axis {axis}: an "
                           "empty axis has no index")


def _arg_ref(fn):
    def ref(cmd, inputs, outputs):
        x = inputs[0]
        out = outputs[0]
        out[...] = fn(x, axis=axis_of(cmd, x.ndim), keepdims=True).reshape(out.shape)

    return ref


def register():
    for name, fn in zip(NAMES, (np.argmax, np.argmin)):
        register_command(name, inplace="none", check=_check_arg, normalize=_normalize(name))
        register_backend(name, "CPU_REF", _arg_ref(fn))
