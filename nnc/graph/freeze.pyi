"""Constant weights of a graph (nnc/graph/freeze.pyx): Graph.freeze and Graph.memory are the
public entry points."""

from collections.abc import Sequence

from nnc.graph.graph import Graph
from nnc.tensor.tensor import Tensor

def graph_freeze(
    g: Graph, tensors: Tensor | Sequence[Tensor] | None = None
) -> list[Tensor]: ...
def graph_memory(g: Graph) -> dict[str, int]: ...
