"""The former home of the built-in commands: ``nnc.ops.cpu_blas`` is nnc.base.openblas."""

from nnc.base import openblas as cpu_blas

__all__ = ["cpu_blas"]
