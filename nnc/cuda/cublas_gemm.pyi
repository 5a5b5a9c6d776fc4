"""The documented path of nnc/cmd/gemm/gpu/cublas.py (the same module object)."""

from nnc.cmd.gemm.gpu.cublas import *  # noqa: F403
from nnc.cmd.gemm.gpu.cublas import __all__ as __all__
