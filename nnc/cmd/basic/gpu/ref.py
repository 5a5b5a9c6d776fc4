"""GPU_REF of the basic family: SET (kernel in nnc/cuda/kernels/ew.cu) and DATA_TRANSFER
(copies through nnc.cuda.memory: host <-> GPU and GPU <-> GPU, peers too).

NNC: cmd/util/gpu/ccv_nnc_util_gpu_ref.cu and the GPU DATA_TRANSFER. The runner and shared helpers:
nnc.cuda.runner.
"""

import numpy as np

from nnc.cuda.runner import (
    THREADS,
    grid_1d,
    kernel_function,
    ptr,
    register_ref,
    row_layout,
    rows_same_gpu,
    scalar_param,
)

__all__ = ["register"]


def _set(dev, sink, cmd, inputs, outputs):
    for y in outputs:
        n, cols, (ys,) = row_layout(y)
        if n:
            sink.kernel(kernel_function(dev, "set", y), grid_1d(dev, n), (THREADS,),
                        [scalar_param(y, cmd.params["value"]), ptr(y), np.int64(ys), np.int64(n),
                         np.int64(cols)])


def _transfer(dev, sink, cmd, inputs, outputs):
    for x, y in zip(inputs, outputs):
        sink.copy(y, x)


def _transfer_accept(cmd, inputs, outputs):
    # Every pair is contiguous and has a GPU side (host <-> GPU, or GPU <-> GPU, peers too).
    for x, y in zip(inputs, outputs):
        if not (x.is_contiguous and y.is_contiguous) or x.device == y.device == "cpu":
            return False
    return True


def register():
    """Register GPU_REF of SET and DATA_TRANSFER (once, at import nnc)."""
    register_ref("SET", _set, accept=rows_same_gpu)
    register_ref("DATA_TRANSFER", _transfer, accept=_transfer_accept, device="any",
                 datatypes=None, peers=True)
