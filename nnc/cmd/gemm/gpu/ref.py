"""GPU_REF of GEMM: the 32x32-tiled kernel of nnc/cuda/kernels/gemm.cu, batched over gridDim.z.

NNC: cmd/blas/gpu/ccv_nnc_gemm_gpu_ref.cu. GPU_OPT (cuBLAS) is cublas.py beside this file. The
runner and shared helpers: nnc.cuda.runner.
"""

import numpy as np

from nnc.cmd.gemm import one_batch
from nnc.cuda.runner import kernel_function, operands, ptr, register_ref, same_gpu, tensors_of

__all__ = ["GEMM_FIELDS", "gemm_geometry", "register"]

_GEMM_TILE, _GEMM_ROWS = 32, 8      # NNC_TILE, NNC_ROWS in gemm.cu
_MAX_GRID_Z = 65535
# nnc_gemm_t in gemm.cu: m, n, k, a_bs, a_ms, a_ks, w_bs, w_ks, w_ns, o_bs, o_ms (all int64).
GEMM_FIELDS = ("m", "n", "k", "a_bs", "a_ms", "a_ks", "w_bs", "w_ks", "w_ns", "o_bs", "o_ms")


def gemm_geometry(cmd, a, w, out):
    """(grid, nnc_gemm_t as int64[11]) for GEMM on these tensors (element strides)."""
    ta, tb = cmd.params["transpose_a"], cmd.params["transpose_b"]
    if a.ndim == 1:
        m, k, a_ms, a_ks, a_bs = 1, a.shape[0], 0, a.strides[0], 0
    else:
        if ta:
            k, m = a.shape[-2:]
            a_ks, a_ms = a.strides[-2:]
        else:
            m, k = a.shape[-2:]
            a_ms, a_ks = a.strides[-2:]
        a_bs = a.strides[0] if a.ndim == 3 else 0
    if tb:
        n = w.shape[-2]
        w_ns, w_ks = w.strides[-2:]
    else:
        n = w.shape[-1]
        w_ks, w_ns = w.strides[-2:]
    w_bs = w.strides[0] if w.ndim == 3 else 0
    batch = a.shape[0] if a.ndim == 3 else (w.shape[0] if w.ndim == 3 else 1)
    # out is [B?, M?, N]: the M axis exists when a is a matrix, the batch axis when B does.
    has_m = a.ndim >= 2
    o_ms = out.strides[-2] if has_m else 0
    o_bs = out.strides[0] if out.ndim == (2 if not has_m else 3) else 0
    g = np.array([m, n, k, a_bs, a_ms, a_ks, w_bs, w_ks, w_ns, o_bs, o_ms], np.int64)
    grid = ((n + _GEMM_TILE - 1) // _GEMM_TILE, (m + _GEMM_TILE - 1) // _GEMM_TILE, batch)
    return grid, g


def _gemm(dev, sink, cmd, inputs, outputs):
    a, w, bias, out = operands(inputs, outputs)
    if out.size == 0:
        return
    grid, g = gemm_geometry(cmd, a, w, out)
    sink.kernel(kernel_function(dev, "gemm", out), grid, (_GEMM_TILE, _GEMM_ROWS),
                [g, ptr(a), ptr(w), ptr(bias), ptr(out)])


def _gemm_accept(cmd, inputs, outputs):
    out = outputs[0]
    if not same_gpu(tensors_of(inputs, outputs)) or out.strides[-1] != 1 and out.shape[-1] > 1:
        return False
    a, w, bias = operands(inputs, outputs)[:3]
    if bias is not None and not bias.is_contiguous:
        return False
    if not one_batch(a.shape, w.shape, None if bias is None else bias.shape):
        return False                # broadcast batches: the kernel has one batch stride
    batch = max(t.shape[0] if t.ndim == 3 else 1 for t in inputs[:2])
    rows = out.shape[-2] if inputs[0].ndim >= 2 else 1
    # gridDim.y and gridDim.z are limited to 65535 blocks.
    return batch <= _MAX_GRID_Z and (rows + _GEMM_TILE - 1) // _GEMM_TILE <= _MAX_GRID_Z


def register():
    """Register GEMM's GPU_REF (once, at import nnc)."""
    register_ref("GEMM", _gemm, accept=_gemm_accept)
