"""Automatic splitting of a concrete graph into pipeline stages (nnc/pipeline/split.py)."""

from collections.abc import Callable, Sequence
from typing import Literal, SupportsFloat

from nnc.graph.graph import Graph, GraphExec
from nnc.pipeline.config import PipelineConfig
from nnc.tensor.tensor import Tensor

_Costs = (
    None | Literal["profile"] | dict[GraphExec | int, float]
    | dict[GraphExec, float] | dict[int, float] | Callable[[GraphExec], float]
)

def partition(costs: Sequence[SupportsFloat], stages: int) -> list[int]: ...
def split(
    graph: Graph, stages: int = 2, costs: _Costs = None,
    inputs: dict[str, Tensor] | None = None, outputs: Sequence[Tensor] | None = None,
) -> PipelineConfig: ...
