"""GPU_REF of SOFTMAX: one block per row, a row being one batch entry (nnc/cmd/softmax/); the
kernel is nnc/cuda/kernels/softmax.cu.

NNC: cmd/softmax/gpu/ccv_nnc_softmax_gpu_ref.cu. The runner and shared helpers: nnc.cuda.runner.
"""

import numpy as np

from nnc.cmd.softmax import softmax_rows
from nnc.cuda.runner import kernel_function, ptr, register_ref

__all__ = ["register"]

_SOFTMAX_THREADS = 256              # NNC_SOFTMAX_THREADS in softmax.cu


def _softmax(dev, sink, cmd, inputs, outputs):
    y = outputs[0]
    if y.size == 0:
        return
    rows = softmax_rows(y.shape)
    cols = y.size // rows
    grid = (max(1, min(rows, dev.sm_count * 16)),)
    sink.kernel(kernel_function(dev, "softmax", y), grid, (_SOFTMAX_THREADS,),
                [ptr(inputs[0]), ptr(y), np.int64(rows), np.int64(cols)])


def register():
    """Register SOFTMAX's GPU_REF (once, at import nnc)."""
    register_ref("SOFTMAX", _softmax)
