"""What a while or case..of node re-points, for static schedules (nnc/schedule/repointed.pyx)."""

from nnc.graph.graph import Graph
from nnc.tensor.tensor import Tensor

def moved_tensor_pairs(g: Graph, order: list[int]) -> list[tuple[int, int, Tensor]]: ...
