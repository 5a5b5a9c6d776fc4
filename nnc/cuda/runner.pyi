"""How a GPU backend's body reaches a CUDA stream: the runner and shared helpers
(nnc/cuda/runner.py)."""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from nnc.cmd.command import Cmd
from nnc.tensor.tensor import Tensor

__all__ = ["ACC_DTYPE", "BACKEND", "CONVT_T", "FLOAT_TYPES", "GPU_TYPES", "PREPARE", "THREADS",
           "WINDOW_T", "ByPrecision", "Launch", "contiguous_same_gpu", "convt_accept",
           "convt_geometry", "grid_1d", "kernel_function", "operands", "pixel_stride", "ptr",
           "register_ref", "row_layout", "row_stride", "rows_same_gpu", "runner", "same_gpu",
           "scalar_param", "tensors_of", "window_accept", "window_geometry"]

BACKEND: str
FLOAT_TYPES: tuple[str, ...]
GPU_TYPES: tuple[str, ...]
ACC_DTYPE: dict[np.dtype[Any], np.dtype[Any]]
THREADS: int
WINDOW_T: np.dtype[np.void]
CONVT_T: np.dtype[np.void]
PREPARE: dict[Callable[..., None], Callable[..., list[Callable[[Any], None]]]]

class ByPrecision:
    record: Callable[[str], list[Callable[[Any], None]]]
    ops: dict[str, list[Callable[[Any], None]]]
    capturable: bool
    def __init__(self, record: Callable[[str], list[Callable[[Any], None]]]) -> None: ...
    def ops_of(self, p: str) -> list[Callable[[Any], None]]: ...
    def __call__(self, stream: Any) -> None: ...

class Launch:
    f: Any
    dims: tuple[int, int, int, int, int, int]
    params: np.ndarray[Any, Any]
    keep: list[np.ndarray[Any, Any]]
    ptr: int
    capturable: bool
    def __init__(self, f: Any, grid: Sequence[int], block: Sequence[int],
                 args: Sequence[Any]) -> None: ...
    def __call__(self, stream: Any) -> None: ...

def ptr(t: Tensor | None) -> np.uint64: ...
def grid_1d(dev: Any, n: int, threads: int = ...) -> tuple[int]: ...
def tensors_of(
    inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None]
) -> list[Tensor]: ...
def same_gpu(ts: Sequence[Tensor]) -> bool: ...
def pixel_stride(t: Tensor) -> int | None: ...
def row_stride(t: Tensor) -> int | None: ...
def row_layout(*ts: Tensor) -> tuple[int, int, list[int | None]]: ...
def kernel_function(dev: Any, kernel: str, t: Tensor) -> Any: ...
def scalar_param(t: Tensor, value: float) -> npt.NDArray[Any]: ...
def operands(
    inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None]
) -> tuple[Tensor, Tensor, Tensor | None, Tensor]: ...
def runner(
    body: Callable[..., None], name: str = ..., peers: bool = ..., precise: bool = ...
) -> Callable[..., None]: ...
def window_geometry(
    cmd: Cmd, x: Tensor, out: Tensor, groups: int = 1
) -> npt.NDArray[np.void]: ...
def window_accept(
    cmd: Cmd, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None]
) -> bool: ...
def convt_geometry(cmd: Cmd, x: Tensor, w: Tensor, out: Tensor) -> npt.NDArray[np.void]: ...
def convt_accept(
    cmd: Cmd, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None]
) -> bool: ...
def contiguous_same_gpu(
    cmd: Cmd, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None]
) -> bool: ...
def rows_same_gpu(
    cmd: Cmd, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None]
) -> bool: ...
def register_ref(
    command: str, body: Callable[..., None], accept: Callable[..., bool] = ...,
    device: str = ..., datatypes: Sequence[str] | None = ..., peers: bool = ...,
) -> None: ...
