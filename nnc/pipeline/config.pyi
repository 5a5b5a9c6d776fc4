"""A pipeline's stages and how they are wired (nnc/pipeline/config.py)."""

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

from nnc.base.core import NNCError
from nnc.graph.graph import Graph
from nnc.tensor.tensor import Tensor

_Shape: TypeAlias = tuple[int | None, ...]
# A declared (dtype, shape); None: unknown (checked at run time).
_Spec: TypeAlias = tuple[np.dtype[Any] | None, _Shape | None]
_SpecArg: TypeAlias = tuple[npt.DTypeLike | None, tuple[int | None, ...] | list[int | None] | None]
_Owner: TypeAlias = Module | PipelineConfig

class PipelineError(NNCError): ...

def spec_str(spec: _Spec) -> str: ...
def spec_mismatch(a: _Spec, b: _Spec) -> str | None: ...
def array_mismatch(spec: _Spec, array: npt.NDArray[Any]) -> str | None: ...

class Module:
    name: str
    graph: Graph | None
    fn: Callable[..., Any] | None
    device: str
    input_tensors: dict[str, Tensor]
    output_tensors: list[Tensor]
    input_specs: dict[str, _Spec]
    output_specs: list[_Spec]
    def __init__(
        self, graph: Graph, inputs: dict[str, Tensor], outputs: list[Tensor],
        name: str | None = None,
    ) -> None: ...
    @classmethod
    def function(
        cls, fn: Callable[..., Any], inputs: dict[str, _SpecArg | None],
        outputs: list[_SpecArg | None], name: str | None = None,
    ) -> Module: ...
    def check_inputs(
        self, arrays: dict[str, npt.NDArray[Any]]
    ) -> dict[str, npt.NDArray[Any]]: ...
    def call(self, arrays: dict[str, npt.NDArray[Any]]) -> list[npt.NDArray[Any]]: ...
    def load(self, arrays: dict[str, npt.NDArray[Any]]) -> None: ...
    def store(self) -> list[npt.NDArray[Any]]: ...
    def run(self, arrays: dict[str, npt.NDArray[Any]]) -> list[npt.NDArray[Any]]: ...
    @property
    def input_names(self) -> tuple[str, ...]: ...
    @property
    def num_outputs(self) -> int: ...

class Source(NamedTuple):
    stage: int
    output: int
    name: str

class Sink(NamedTuple):
    stage: int
    input: str
    output: int

class StagePlan(NamedTuple):
    module: Module
    inputs: tuple[tuple[str, Source], ...]
    consumers: tuple[tuple[Sink, ...], ...]
    producers: tuple[int, ...]

class Plan(NamedTuple):
    stages: tuple[StagePlan, ...]
    inputs: tuple[str, ...]
    outputs: tuple[tuple[int, int], ...]

class _GlobalInputs(MutableMapping[str, list[tuple[Module, str]]]):
    def __init__(self, cfg: PipelineConfig) -> None: ...
    def __setitem__(
        self, name: str, value: tuple[Module, str] | list[tuple[Module, str]]
    ) -> None: ...
    def __getitem__(self, name: str) -> list[tuple[Module, str]]: ...
    def __delitem__(self, name: str) -> None: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...

class _GlobalOutputs:
    def __init__(self, cfg: PipelineConfig) -> None: ...
    def append(self, value: tuple[Module, int]) -> None: ...
    def insert(self, i: int, value: tuple[Module, int]) -> None: ...
    def __setitem__(self, i: int, value: tuple[Module, int]) -> None: ...
    def __getitem__(self, i: int) -> tuple[Module, int]: ...
    def __delitem__(self, i: int) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[tuple[Module, int]]: ...

class PipelineConfig:
    inputs: _GlobalInputs
    outputs: _GlobalOutputs
    def __init__(self) -> None: ...
    @property
    def modules(self) -> list[Module]: ...
    def connect(
        self, src: _Owner, src_port: str | int, dst: _Owner, dst_port: str | int
    ) -> None: ...
    def plan(self) -> Plan: ...
