"""Tensor persistence in SQLite and NNC's tensor helpers (nnc/tensor/io.py)."""

import os
import sqlite3
import struct
from collections.abc import Mapping, Sequence
from typing import SupportsIndex

import numpy.typing as npt

from nnc.base.core import NNCError
from nnc.tensor.tensor import Tensor

_Db = str | bytes | os.PathLike[str] | sqlite3.Connection
_Shape = SupportsIndex | Sequence[SupportsIndex]

TENSOR_CPU_MEMORY: int
TENSOR_GPU_MEMORY: int
TENSOR_FORMATS: dict[str, int]
BUSY_TIMEOUT: float
_DIM: struct.Struct

class TensorIOError(NNCError, OSError): ...
class TensorNotFoundError(TensorIOError, LookupError): ...

def tensor_write(t: Tensor, db: _Db, name: str) -> None: ...
def tensor_read(db: _Db, name: str, t: Tensor | None = None) -> Tensor: ...
def tensors_write(tensors: Mapping[str, Tensor], db: _Db) -> None: ...
def tensors_read(tensors: Mapping[str, Tensor], db: _Db) -> None: ...
def tensor_zero(t: Tensor) -> Tensor: ...
def tensor_eq(
    a: Tensor | npt.ArrayLike, b: Tensor | npt.ArrayLike, ulps: int = 128
) -> bool: ...
def tensor_new_from_file(
    path: str | bytes | os.PathLike[str], shape: _Shape, dtype: npt.DTypeLike = "float32",
    offset: int = 0,
) -> Tensor: ...
