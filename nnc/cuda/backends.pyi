"""GPU_REF: the GPU backends of the built-in commands (nnc/cuda/backends.py)."""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from nnc.cmd.command import Cmd
from nnc.tensor.tensor import Tensor

__all__ = ["ACC_DTYPE", "BACKEND", "GPU_TYPES", "PREPARE", "ByPrecision", "Launch", "bias_act",
           "conv_body", "operands", "pixel_stride", "register", "row_stride", "runner",
           "same_gpu", "tensors_of"]

BACKEND: str
FLOAT_TYPES: tuple[str, ...]
GPU_TYPES: tuple[str, ...]
ACC_DTYPE: dict[np.dtype[Any], np.dtype[Any]]
WINDOW_T: np.dtype[np.void]
GEMM_FIELDS: tuple[str, ...]
PREPARE: dict[Callable[..., None], Callable[..., list[Callable[[Any], None]]]]

class ByPrecision:
    record: Callable[[str], list[Callable[[Any], None]]]
    ops: dict[str, list[Callable[[Any], None]]]
    def __init__(self, record: Callable[[str], list[Callable[[Any], None]]]) -> None: ...
    def __call__(self, stream: Any) -> None: ...

class Launch:
    f: Any
    dims: tuple[int, int, int, int, int, int]
    params: np.ndarray[Any, Any]
    keep: list[np.ndarray[Any, Any]]
    ptr: int
    def __init__(self, f: Any, grid: Sequence[int], block: Sequence[int],
                 args: Sequence[Any]) -> None: ...
    def __call__(self, stream: Any) -> None: ...

def tensors_of(
    inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None]
) -> list[Tensor]: ...
def same_gpu(ts: Sequence[Tensor]) -> bool: ...
def pixel_stride(t: Tensor) -> int | None: ...
def row_stride(t: Tensor) -> int | None: ...
def operands(
    inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None]
) -> tuple[Tensor, Tensor, Tensor | None, Tensor]: ...
def bias_act(dev: Any, sink: Any, bias: Tensor | None, relu: bool, out: Tensor) -> None: ...
def conv_body(
    dev: Any, sink: Any, cmd: Cmd, inputs: Sequence[Tensor | None],
    outputs: Sequence[Tensor | None],
) -> None: ...
def runner(
    body: Callable[..., None], name: str = ..., peers: bool = ..., precise: bool = ...
) -> Callable[..., None]: ...

def gemm_geometry(
    cmd: Cmd, a: Tensor, w: Tensor, out: Tensor
) -> tuple[tuple[int, int, int], npt.NDArray[np.int64]]: ...
def window_geometry(
    cmd: Cmd, x: Tensor, out: Tensor, groups: int = 1
) -> npt.NDArray[np.void]: ...
def register() -> None: ...
