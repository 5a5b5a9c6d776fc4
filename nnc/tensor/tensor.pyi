"""Tensors (nnc/tensor/tensor.pyx): N-d arrays whose memory C backends use directly."""

from collections.abc import Callable, Sequence
from typing import Any, SupportsIndex

import numpy as np
import numpy.typing as npt
from typing_extensions import CapsuleType, disjoint_base

from nnc.base.core import DATATYPE_NAMES as DATATYPE_NAMES
from nnc.base.core import DATATYPES as DATATYPES

# A shape or strides: one int, or a sequence of ints (NumPy integers too).
_Shape = SupportsIndex | Sequence[SupportsIndex]
# NNC's tensor formats (any case).
_Format = str

TENSOR_FORMATS: dict[str, int]
FORMAT_NAMES: dict[int, str]

def tensor_resize(t: Tensor, shape: _Shape) -> Tensor: ...

@disjoint_base
class Tensor:
    @property
    def readonly(self) -> bool:
        """The memory it points at now is read-only (moves with re-pointing)."""
    @property
    def movable(self) -> bool: ...
    @property
    def frozen(self) -> bool:
        """Its memory is frozen: its contents can never change."""
    def freeze(self) -> Tensor: ...
    def __init__(self, array: npt.NDArray[Any], format: _Format = "NHWC") -> None: ...
    @staticmethod
    def empty(
        shape: _Shape, dtype: npt.DTypeLike = "float32", device: str = "cpu",
        format: _Format = "NHWC",
    ) -> Tensor: ...
    @staticmethod
    def zeros(
        shape: _Shape, dtype: npt.DTypeLike = "float32", device: str = "cpu",
        format: _Format = "NHWC",
    ) -> Tensor: ...
    @property
    def format(self) -> str:
        """NNC's tensor format: "NHWC" (the default), "NCHW" or "CHWN"."""
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def device(self) -> str: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def is_contiguous(self) -> bool: ...
    @property
    def data_ptr(self) -> int: ...
    def numpy(self) -> npt.NDArray[Any]: ...
    def __array__(
        self, dtype: npt.DTypeLike | None = None, copy: bool | None = None
    ) -> npt.NDArray[Any]: ...
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def __copy__(self) -> Tensor: ...
    def __deepcopy__(self, memo: dict[int, Any] | None) -> Tensor: ...
    def __reduce__(
        self,
    ) -> tuple[
        Callable[[npt.NDArray[Any], bool, str], Tensor],
        tuple[npt.NDArray[Any]] | tuple[npt.NDArray[Any], bool, str],
    ]: ...
    def view(
        self, shape: _Shape, offset: int = 0, strides: _Shape | None = None
    ) -> Tensor: ...
