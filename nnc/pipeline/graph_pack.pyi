"""A concrete graph as plain picklable data (nnc/pipeline/graph_pack.py)."""

import numpy as np
import numpy.typing as npt

from nnc.cmd.command import Cmd
from nnc.graph.graph import Graph
from nnc.tensor.tensor import Tensor

_TensorRecord = tuple[int, int, tuple[int, ...], str, tuple[int, ...]]
_NodeRecord = tuple[Cmd, tuple[int | None, ...], tuple[int | None, ...], str | None, str | None]

class GraphPack:
    buffers: list[npt.NDArray[np.uint8]]
    groups_lo: list[int]
    tensors: list[_TensorRecord]
    nodes: list[_NodeRecord]
    edges: list[tuple[int, int]]
    sources: list[int]
    destinations: list[int]
    inputs: list[tuple[str, int]]
    outputs: list[int]
    def __init__(
        self, buffers: list[npt.NDArray[np.uint8]], groups_lo: list[int],
        tensors: list[_TensorRecord], nodes: list[_NodeRecord], edges: list[tuple[int, int]],
        sources: list[int], destinations: list[int], inputs: list[tuple[str, int]],
        outputs: list[int],
    ) -> None: ...

def tensor_extent(t: Tensor, where: str) -> tuple[int, int, int]: ...
def graph_pack(
    graph: Graph, inputs: dict[str, Tensor], outputs: list[Tensor], what: str = "graph"
) -> GraphPack: ...
def graph_unpack(pack: GraphPack) -> tuple[Graph, dict[str, Tensor], list[Tensor]]: ...
