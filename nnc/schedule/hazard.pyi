from typing import Literal, NamedTuple

from nnc.graph.graph import Graph, GraphExec
from nnc.tensor.tensor import Tensor

class Hazard(NamedTuple):
    kind: Literal["read-after-write", "write-after-read", "write-after-write"]
    first: GraphExec
    second: GraphExec
    tensors: tuple[Tensor, Tensor]

def graph_hazards(g: Graph) -> list[Hazard]: ...
def hazards_message(g: Graph, hazards: list[Hazard]) -> str: ...
