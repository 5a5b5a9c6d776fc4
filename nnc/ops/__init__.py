"""Layer 2 command. The former home of the built-in commands, kept for the one name documented
there: ``nnc.ops.cpu_blas`` is nnc.base.openblas (the OpenBLAS binding: ``config`` names the
build, ``gemm`` calls it from Python). The commands and their backends are in nnc/cmd/<family>/.
"""

import sys

from nnc.base import openblas as cpu_blas

# ``import nnc.ops.cpu_blas`` finds the module here once this package is imported.
sys.modules.setdefault("nnc.ops.cpu_blas", cpu_blas)

__all__ = ["cpu_blas"]
