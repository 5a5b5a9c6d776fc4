"""GPU_REF of CONVOLUTION: the direct NHWC kernel of nnc/cuda/kernels/conv.cu (groups, bias and
ReLU fused), and the bias + ReLU epilogue cuDNN's GPU_OPT (cudnn.py beside this file) runs where
the library could not fuse it. GPU_REF of CONVOLUTION_TRANSPOSE: conv.cu's conv_transpose, one
thread per output element gathering the taps that land on it (stride, padding, output padding,
groups, dilation and bias as nnc/cmd/convolution/conv_transpose.py defines them; no atomics, so
every run gives the same bits).

NNC: cmd/convolution/gpu/ccv_nnc_conv_gpu_ref.cu (NNC has no GPU reference of the transposed
convolution; its GPU backend is cuDNN's). The runner and shared helpers: nnc.cuda.runner.
"""

import numpy as np

from nnc.cuda.runner import (
    THREADS,
    convt_accept,
    convt_geometry,
    grid_1d,
    kernel_function,
    operands,
    pixel_stride,
    ptr,
    register_ref,
    window_accept,
    window_geometry,
)

__all__ = ["bias_act", "conv_body", "conv_transpose_body", "register"]


def bias_act(dev, sink, bias, relu, out):
    """Enqueue ``out += bias`` (per channel; bias may be None) then ReLU if ``relu``, in place:
    the epilogue of a library convolution that could not fuse it (cudnn.py).
    out: NHWC, pixels evenly spaced with unit channel stride (a concat slice too)."""
    if out.size == 0 or (bias is None and not relu):
        return
    cols = out.shape[-1]
    sink.kernel(kernel_function(dev, "bias_act", out), grid_1d(dev, out.size), (THREADS,),
                [ptr(bias), np.int32(bool(relu)), ptr(out), np.int64(pixel_stride(out)),
                 np.int64(out.size), np.int64(cols)])


def conv_body(dev, sink, cmd, inputs, outputs):
    """GPU_REF's CONVOLUTION: the direct kernel (GPU_OPT runs it where cuDNN has no plan)."""
    x, w, bias, out = operands(inputs, outputs)
    if out.size == 0:
        return
    g = window_geometry(cmd, x, out, cmd.params["groups"])
    g["kh"], g["kw"] = w.shape[1], w.shape[2]
    sink.kernel(kernel_function(dev, "conv", out), grid_1d(dev, out.size), (THREADS,),
                [g, ptr(x), ptr(w), ptr(bias), ptr(out)])


def conv_transpose_body(dev, sink, cmd, inputs, outputs):
    """GPU_REF's CONVOLUTION_TRANSPOSE: the gathering kernel."""
    x, w, bias, out = operands(inputs, outputs)
    if out.size == 0:
        return
    sink.kernel(kernel_function(dev, "conv_transpose", out), grid_1d(dev, out.size), (THREADS,),
                [convt_geometry(cmd, x, w, out), ptr(x), ptr(w), ptr(bias), ptr(out)])


def register():
    """Register CONVOLUTION's and CONVOLUTION_TRANSPOSE's GPU_REF (once, at import nnc)."""
    register_ref("CONVOLUTION", conv_body, accept=window_accept)
    register_ref("CONVOLUTION_TRANSPOSE", conv_transpose_body, accept=convt_accept)
