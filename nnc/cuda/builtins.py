"""The GPU backends of the built-in commands: each command family keeps them in its gpu/ folder
(nnc/cmd/<family>/gpu/: ``ref.py`` for GPU_REF, ``cudnn.py`` / ``cublas.py`` for GPU_OPT), layer 3
like nnc.cuda. ``import nnc`` registers them once, after nnc.cmd.builtins has registered every
command and its CPU backends: GPU_REF of each family, then GPU_OPT (cuBLAS GEMM, cuDNN
convolution). Each command's backend list keeps one order (tests/cmd/test_builtin_backends.py).
Registering imports neither cuda-bindings nor a library: only GPU tensors select these backends.
"""

from nnc.cmd.basic.gpu import ref as basic_ref
from nnc.cmd.convolution.gpu import cudnn
from nnc.cmd.convolution.gpu import ref as convolution_ref
from nnc.cmd.elementwise.gpu import ref as elementwise_ref
from nnc.cmd.gemm.gpu import cublas
from nnc.cmd.gemm.gpu import ref as gemm_ref
from nnc.cmd.pooling.gpu import ref as pooling_ref
from nnc.cmd.softmax.gpu import ref as softmax_ref

__all__ = ["register_gpu_builtins"]

_done = False


def register_gpu_builtins():
    """Register the built-in GPU backends (once; later calls do nothing)."""
    global _done
    if _done:
        return
    _done = True
    for module in (elementwise_ref, basic_ref, softmax_ref, gemm_ref, convolution_ref,
                   pooling_ref, cublas, cudnn):
        module.register()
