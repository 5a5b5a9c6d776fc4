import concurrent.futures
import os
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
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

class SessionError(OnnxError): ...
class FeedError(SessionError, ValueError): ...

class NodeArg:
    name: str
    shape: list[int]
    type: str
    dtype: np.dtype[Any]
    def __init__(self, name: str, shape: Iterable[int], dtype: npt.DTypeLike) -> None: ...

class InferenceSession:
    def __init__(
        self, model: str | bytes | os.PathLike[str] | Any, *,
        schedule: str | None = ...,
        simplify: bool = ...,
        autotune: bool | int = ...,
        intra_op_threads: int | None = ...,
        progress: Callable[[str, int, int], object] | None = ...,
        input_shapes: dict[str, tuple[int, ...]] | None = ...,
        dtype: str = ...,
        base_dir: str | os.PathLike[str] | None = ...,
        max_bytes: int | None = ...,
    ) -> None: ...
    @property
    def graph(self) -> Graph: ...
    def get_inputs(self) -> list[NodeArg]: ...
    def get_outputs(self) -> list[NodeArg]: ...
    def run(
        self, output_names: Iterable[str] | None, input_feed: Mapping[str, npt.NDArray[Any]]
    ) -> list[npt.NDArray[Any]]: ...
    def run_async(
        self, output_names: Iterable[str] | None, input_feed: Mapping[str, npt.NDArray[Any]]
    ) -> concurrent.futures.Future[list[npt.NDArray[Any]]]: ...
    def close(self) -> None: ...
    def __enter__(self) -> InferenceSession: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...

__all__ = [
    "FeedError",
    "InferenceSession",
    "LoadedModel",
    "NodeArg",
    "OnnxError",
    "OnnxMissingError",
    "OnnxTypeError",
    "SessionError",
    "UnsupportedError",
    "load",
    "save",
]
