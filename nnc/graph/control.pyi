from nnc.graph.graph import Graph, GraphExec
from nnc.tensor import Tensor

class WhileNode:
    parent: Graph | None
    body: Graph
    count_tensor: Tensor
    @property
    def while_count(self) -> int: ...
    def run(self) -> None: ...

class CaseOfNode:
    parent: Graph
    index: int
    last_index: int
    def run(self) -> None: ...

def graph_while(parent: Graph, body: Graph, name: str | None = ...) -> GraphExec: ...
def graph_case_of(
    parent: Graph, inputs: object, outputs: object, name: str | None = ...
) -> GraphExec: ...
