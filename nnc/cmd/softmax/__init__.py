"""Layer 2 command, the softmax family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT); gpu/ (layer 3, never imported from here): GPU_REF, registered by nnc.cuda.builtins.

SOFTMAX per batch entry (NNC: cmd/softmax/ccv_nnc_softmax_cpu_ref.c, and cuDNN's
CUDNN_SOFTMAX_MODE_INSTANCE of its GPU backend): a tensor of rank >= 2 is [batch, ...] and each
batch entry's elements, all its trailing axes together, are one row; a vector is one row. For
a [N, C] tensor that is the softmax over the last axis; a [N, H, W, C] one is normalised over
H, W and C together (not over C alone: view it as [N * H * W, C] for that, as nnc.onnx does for
ONNX's axis).

y = exp(x - max(row)) / sum(exp(x - max(row))) over each row. Subtracting the row maximum keeps
exp from overflowing and does not change the result. One input, one output of the same shape
and dtype; the output may be the input (in place). The C loop for contiguous float32/float64
tensors is in cpu_opt.pyx.
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

_unary_float_check = _check.elementwise(1, floats=True)


def softmax_rows(shape):
    """How many rows SOFTMAX normalises in a tensor of this shape: its first axis's size from
    rank 2 on (NNC's batch), 1 for a vector."""
    return shape[0] if len(shape) >= 2 else 1


def _softmax_check(cmd, inputs, outputs):
    _unary_float_check(cmd, inputs, outputs)
    if inputs[0].ndim < 1:
        raise CommandError("SOFTMAX normalises rows of a tensor, so it needs at least 1 "
                           "dimension")


def _softmax_ref(cmd, inputs, outputs):
    """The definition, in float64 whatever the dtype (float16 included)."""
    x = inputs[0].astype(np.float64)
    if x.size == 0:
        return
    rows = softmax_rows(x.shape)
    x = x.reshape(rows, x.size // rows)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    # Computed fully before writing, so in-place use (output is the input) is safe.
    outputs[0][...] = (e / e.sum(axis=-1, keepdims=True)).reshape(outputs[0].shape)


def register():
    register_command("SOFTMAX", inplace="allow", check=_softmax_check)
    register_backend("SOFTMAX", "CPU_REF", _softmax_ref)
