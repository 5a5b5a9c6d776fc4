import os
from typing import Any

from typing_extensions import disjoint_base

from nnc.base.core import NNCError
from nnc.graph.graph import Graph
from nnc.tensor.tensor import Tensor

class OnnxError(NNCError): ...
class OnnxMissingError(OnnxError, ImportError): ...
class OnnxTypeError(OnnxError, TypeError): ...

class UnsupportedError(OnnxError):
    problems: dict[str, tuple[int, list[str], str]]
    def __init__(
        self, problems: dict[str, tuple[int, list[str], str]], what: str = ...
    ) -> None: ...

@disjoint_base
class LoadedModel(tuple[Graph, list[Tensor], list[Tensor]]):
    def __new__(
        cls, graph: Graph, inputs: list[Tensor], outputs: list[Tensor], **info: Any
    ) -> LoadedModel: ...
    @property
    def graph(self) -> Graph: ...
    @property
    def inputs(self) -> list[Tensor]: ...
    @property
    def outputs(self) -> list[Tensor]: ...
    @property
    def input_names(self) -> list[str]: ...
    @property
    def output_names(self) -> list[str]: ...
    @property
    def concats(self) -> dict[str, tuple[Tensor, list[Tensor]]]: ...
    @property
    def folded(self) -> list[str]: ...

def load(
    model: str | bytes | os.PathLike[str] | Any, *,
    input_shapes: dict[str, tuple[int, ...]] | None = ...,
    dtype: str = ...,
    base_dir: str | os.PathLike[str] | None = ...,
    max_bytes: int | None = ...,
    freeze: bool = ...,
) -> LoadedModel: ...
def save(
    graph: Graph, path: str | os.PathLike[str] | None, *, inputs: list[Tensor],
    outputs: list[Tensor], input_names: list[str] | None = ...,
    output_names: list[str] | None = ..., opset: int = ...,
) -> Any: ...

__all__ = [
    "LoadedModel",
    "OnnxError",
    "OnnxMissingError",
    "OnnxTypeError",
    "UnsupportedError",
    "load",
    "save",
]
