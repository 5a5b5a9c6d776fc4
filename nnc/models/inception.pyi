"""Inception-V3's forward graph from nnc commands (nnc/models/inception.py)."""

from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from nnc.graph.graph import Graph
from nnc.tensor.tensor import Tensor

MIN_SIZE: int
NUM_CLASSES: int

@dataclass
class InceptionV3:
    graph: Graph
    input: Tensor
    output: Tensor
    logits: Tensor
    size: int
    batch: int
    dtype: str
    backend: str | None
    params: int = 0
    macs: int = 0
    # block name -> (concat buffer, [(branch name, view of the buffer it writes), ...])
    concats: dict[str, tuple[Tensor, list[tuple[str, Tensor]]]] = ...

def build_inception_v3_model(
    graph: Graph | None = None, size: int = 299, batch: int = 1, seed: int = 0,
    dtype: npt.DTypeLike = "float32", backend: str | None = None, freeze: bool = True,
) -> InceptionV3: ...
def build_inception_v3(
    graph: Graph | None = None, size: int = 299, batch: int = 1, seed: int = 0,
    dtype: npt.DTypeLike = "float32", backend: str | None = None, freeze: bool = True,
) -> tuple[Graph, Tensor, Tensor]: ...
def reference_forward(
    x: npt.ArrayLike | None = None, size: int = 299, batch: int = 1, seed: int = 0,
    dtype: npt.DTypeLike = "float32",
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]: ...
