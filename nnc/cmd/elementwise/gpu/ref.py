"""GPU_REF of the element-wise family: EWSUM, EWPROD, EWDIV, EWEXP, EWLOG, RELU, SCALAR_MUL.

NNC: cmd/ew/gpu/ccv_nnc_ew_gpu_ref.cu, cmd/relu/gpu, cmd/scalar_mul/gpu. Kernels:
nnc/cuda/kernels/ew.cu; the runner and shared helpers: nnc.cuda.runner. EWSUM and EWPROD take up to
NNC_EW_MAX_INPUTS inputs per launch and fold further inputs into the output; the unary kernels
and SCALAR_MUL also take evenly spaced rows (a channel slice).
"""

import numpy as np

from nnc.cuda.runner import (
    THREADS,
    contiguous_same_gpu,
    grid_1d,
    kernel_function,
    ptr,
    register_ref,
    row_layout,
    rows_same_gpu,
    scalar_param,
)

__all__ = ["register"]

_MAX_EW_INPUTS = 8                  # NNC_EW_MAX_INPUTS in ew.cu


def _ew_reduce(kernel):
    def body(dev, sink, cmd, inputs, outputs):
        y = outputs[0]
        n = y.size
        if n == 0:
            return
        f = kernel_function(dev, kernel, y)
        pending = list(inputs)
        first = True
        while first or pending:
            # Later chunks fold into y: y = y (+|*) x_k ... (each element read, then written).
            take = pending[:_MAX_EW_INPUTS if first else _MAX_EW_INPUTS - 1]
            del pending[:len(take)]
            ptrs = ([] if first else [y]) + take
            arr = np.zeros(_MAX_EW_INPUTS, np.uint64)
            arr[:len(ptrs)] = [t.data_ptr for t in ptrs]
            sink.kernel(f, grid_1d(dev, n), (THREADS,),
                        [arr, np.int32(len(ptrs)), ptr(y), np.int64(n)])
            first = False

    return body


def _ewdiv(dev, sink, cmd, inputs, outputs):
    y = outputs[0]
    if y.size:
        sink.kernel(kernel_function(dev, "ewdiv", y), grid_1d(dev, y.size), (THREADS,),
                    [ptr(inputs[0]), ptr(inputs[1]), ptr(y), np.int64(y.size)])


def _ewdiv_accept(cmd, inputs, outputs):
    """The ewdiv kernel divides flat buffers of one length: EWDIV's broadcasts run elsewhere."""
    shape = tuple(outputs[0].shape)
    return contiguous_same_gpu(cmd, inputs, outputs) and all(
        tuple(t.shape) == shape for t in inputs if t is not None)


def _unary(kernel):
    def body(dev, sink, cmd, inputs, outputs):
        x, y = inputs[0], outputs[0]
        n, cols, (xs, ys) = row_layout(x, y)
        if n:
            sink.kernel(kernel_function(dev, kernel, y), grid_1d(dev, n), (THREADS,),
                        [ptr(x), np.int64(xs), ptr(y), np.int64(ys), np.int64(n),
                         np.int64(cols)])

    return body


def _scalar_mul(dev, sink, cmd, inputs, outputs):
    x, y = inputs[0], outputs[0]
    n, cols, (xs, ys) = row_layout(x, y)
    if n:
        sink.kernel(kernel_function(dev, "scalar_mul", y), grid_1d(dev, n), (THREADS,),
                    [scalar_param(y, cmd.params["a"]), ptr(x), np.int64(xs), ptr(y), np.int64(ys),
                     np.int64(n), np.int64(cols)])


def register():
    """Register GPU_REF for the family's commands it implements (once, at import nnc)."""
    register_ref("EWSUM", _ew_reduce("ewsum"))
    register_ref("EWPROD", _ew_reduce("ewprod"))
    register_ref("EWDIV", _ewdiv, accept=_ewdiv_accept)
    register_ref("EWEXP", _unary("ewexp"), accept=rows_same_gpu)
    register_ref("EWLOG", _unary("ewlog"), accept=rows_same_gpu)
    register_ref("RELU", _unary("relu"), accept=rows_same_gpu)
    register_ref("SCALAR_MUL", _scalar_mul, accept=rows_same_gpu)
