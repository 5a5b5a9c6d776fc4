"""GPU_REF of MAX_POOL and AVG_POOL: the window kernels of nnc/cuda/kernels/conv.cu.

NNC: cmd/pool/gpu/ccv_nnc_max_pool_gpu_ref.cu, _avg_pool_gpu_ref.cu. The runner and shared
helpers: nnc.cuda.runner.
"""

from nnc.cuda.runner import (
    THREADS,
    grid_1d,
    kernel_function,
    ptr,
    register_ref,
    window_accept,
    window_geometry,
)

__all__ = ["pool_body", "register"]


def pool_body(kernel):
    """The body of pooling kernel ``kernel`` ("max_pool" or "avg_pool")."""

    def body(dev, sink, cmd, inputs, outputs):
        out = outputs[0]
        if out.size:
            sink.kernel(kernel_function(dev, kernel, out), grid_1d(dev, out.size), (THREADS,),
                        [window_geometry(cmd, inputs[0], out), ptr(inputs[0]), ptr(out)])

    return body


def register():
    """Register GPU_REF of MAX_POOL and AVG_POOL (once, at import nnc)."""
    register_ref("MAX_POOL", pool_body("max_pool"), accept=window_accept)
    register_ref("AVG_POOL", pool_body("avg_pool"), accept=window_accept)
