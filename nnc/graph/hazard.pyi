from typing import NamedTuple

from nnc.graph.graph import Graph, GraphExec
from nnc.tensor import Tensor

class Hazard(NamedTuple):
    kind: str
    first: GraphExec
    second: GraphExec
    tensors: tuple[Tensor, Tensor]

def graph_hazards(g: Graph) -> list[Hazard]: ...
def hazards_message(g: Graph, hazards: list[Hazard]) -> str: ...
