"""Layer 2 command, the argmax family: this module (the definitions and CPU_REF). No C or GPU
backend (a model's last node, on its small output).

ARGMAX and ARGMIN (NNC: cmd/argmax and cmd/argmin, CCV_NNC_ARGMAX_FORWARD and
CCV_NNC_ARGMIN_FORWARD, whose ``reduce.axis`` is ``axis`` here): the index of the largest
(smallest) element along one axis. One input of any rank >= 1, floating or integer; one output
of the same rank with that axis of size 1 (NNC keeps the reduced dimension), int32 (NNC's) or
int64 (ONNX's ArgMax). The first such index wins a tie; a NaN counts as the largest (ARGMAX) and
the smallest (ARGMIN) element, so its first index is the answer (np.argmax/np.argmin). An empty
axis has no answer: refused.
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


def _check_arg(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 1, 1)
    _check.present(cmd, inputs, "input", 0)
    _check.present(cmd, outputs, "output", 0)
    x, y = inputs[0], outputs[0]
    if str(y.dtype) not in INDEX_DTYPES:
        raise CommandError(f"{cmd.name}: the output must be int32 or int64, not {y.dtype}")
    axis = axis_of(cmd, x.ndim)
    want = tuple(1 if i == axis else n for i, n in enumerate(x.shape))
    _check.expect_shape(cmd, y, want, "output 0 (the input's shape, the axis 1)")
    if x.shape[axis] == 0:
        raise CommandError(f"{cmd.name} of input shape {tuple(x.shape)} over axis {axis}: an "
                           "empty axis has no index")


def _arg_ref(fn):
    def ref(cmd, inputs, outputs):
        x = inputs[0]
        outputs[0][...] = fn(x, axis=axis_of(cmd, x.ndim), keepdims=True)

    return ref


def register():
    for name, fn in zip(NAMES, (np.argmax, np.argmin)):
        register_command(name, inplace="none", check=_check_arg, normalize=_normalize(name))
        register_backend(name, "CPU_REF", _arg_ref(fn))
