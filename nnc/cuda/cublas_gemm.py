"""``nnc.cuda.cublas_gemm``, the documented path of GEMM's GPU_OPT through cuBLAS (docs/gpu.md), is
the module nnc/cmd/gemm/gpu/cublas.py itself: the backend lives with its family, and this path
names the same module object, so setting or patching an attribute here reaches the backend.
"""

import sys

from nnc.cmd.gemm.gpu import cublas

sys.modules[__name__] = cublas
