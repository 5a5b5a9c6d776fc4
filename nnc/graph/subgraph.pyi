"""What while and case..of nodes share (nnc/graph/subgraph.pyx): the ControlNode base and the
checks on sub-graphs."""

from typing_extensions import disjoint_base

from nnc.graph.compare import Compare
from nnc.graph.graph import Graph

@disjoint_base
class ControlNode:
    """The base of WhileNode and CaseOfNode: typed cdef methods only (subgraph.pxd)."""
    @property
    def cond(self) -> Compare | None: ...

def check_sub_idle(sub: Graph) -> None: ...
