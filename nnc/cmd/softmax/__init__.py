"""Layer 2 command, the softmax family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT); gpu/ (layer 3, never imported from here): GPU_REF, registered by nnc.cuda.builtins.

SOFTMAX over the last axis (NNC: cmd/softmax/ccv_nnc_softmax_cpu_ref.c).

y[..., i] = exp(x[..., i] - max(x[..., :])) / sum(exp(x[..., :] - max(x[..., :]))). Subtracting the
row maximum keeps exp from overflowing and does not change the result. One input, one output of
the same shape and dtype; the output may be the input (in place). The C loop for contiguous
float32/float64 tensors is in cpu_opt.pyx.
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

_unary_float_check = _check.elementwise(1, floats=True)


def _softmax_check(cmd, inputs, outputs):
    _unary_float_check(cmd, inputs, outputs)
    if inputs[0].ndim < 1:
        raise CommandError("SOFTMAX runs over the last axis, so it needs at least 1 dimension")


def _softmax_ref(cmd, inputs, outputs):
    """The definition, in float64 whatever the dtype (float16 included)."""
    x = inputs[0].astype(np.float64)
    if x.size == 0:
        return
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    # Computed fully before writing, so in-place use (output is the input) is safe.
    outputs[0][...] = e / e.sum(axis=-1, keepdims=True)


def register():
    register_command("SOFTMAX", inplace="allow", check=_softmax_check)
    register_backend("SOFTMAX", "CPU_REF", _softmax_ref)
