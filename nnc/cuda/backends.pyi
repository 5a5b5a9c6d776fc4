"""GPU_REF: the GPU backends of the built-in commands (nnc/cuda/backends.py)."""

import numpy as np
import numpy.typing as npt

from nnc.cmd import Cmd
from nnc.tensor import Tensor

__all__ = ["BACKEND", "register"]

BACKEND: str
FLOAT_TYPES: tuple[str, ...]
WINDOW_T: np.dtype[np.void]
GEMM_FIELDS: tuple[str, ...]

def gemm_geometry(
    cmd: Cmd, a: Tensor, w: Tensor, out: Tensor
) -> tuple[tuple[int, int, int], npt.NDArray[np.int64]]: ...
def window_geometry(
    cmd: Cmd, x: Tensor, out: Tensor, groups: int = 1
) -> npt.NDArray[np.void]: ...
def register() -> None: ...
