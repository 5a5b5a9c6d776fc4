"""CUDA-graph capture of a graph's run on a GPU stream (while and case..of as CUDA conditional
nodes), and copying a CPU graph to a GPU (nnc/cuda/capture.py)."""

from nnc.cuda.driver import CudaGraph, CudaStream, Device
from nnc.graph.case_of import CaseOfNode
from nnc.graph.compare import Compare
from nnc.graph.graph import Graph
from nnc.graph.while_node import WhileNode
from nnc.stream.stream import Stream
from nnc.tensor.tensor import Tensor

__all__ = ["COND_SOURCE", "CapturedGraph", "capture", "to_gpu"]

EVAL: int
COUNT_RESET_EVAL: int
COUNT_STEP_EVAL: int
COUNT_RESET_ENTER: int
EVAL_COUNT_STEP: int
COND_KERNEL: str
COND_SOURCE: str

class _Node:
    kind: str
    cond: Compare
    inputs: list[Tensor]
    counter: Tensor | None
    form: int | None
    handle: object
    params: object
    bodies: dict[int, object]
    indexes: list[int]
    side: CudaStream | None
    def __init__(
        self, kind: str, cond: Compare, inputs: list[Tensor], counter: Tensor | None = None,
        form: int | None = None,
    ) -> None: ...

class _Conditionals:
    device: Device
    cu: object
    runtimes: dict[object, object]
    loops: dict[WhileNode, _Node]
    cases: dict[CaseOfNode, _Node]
    failure: tuple[str, BaseException] | None
    def __init__(self, dev: Device) -> None: ...
    def prepare_while(
        self, w: WhileNode, form: int, cond: Compare, inputs: list[Tensor]
    ) -> None: ...
    def prepare_case(
        self,
        c: CaseOfNode,
        indexes: list[int],
        cond: Compare,
        inputs: list[Tensor],
        branches: list[Graph],
    ) -> None: ...
    def fail(self, where: str, e: BaseException) -> None: ...
    def abandon(self, node: _Node) -> None: ...
    def while_begin(self, w: WhileNode, p: Stream, side: Stream) -> _Node: ...
    def while_end(self, node: _Node) -> None: ...
    def case_begin(self, c: CaseOfNode, p: Stream) -> _Node: ...
    def branch_begin(self, node: _Node, i: int, side: Stream) -> None: ...
    def branch_end(self, node: _Node) -> None: ...

class CapturedGraph(CudaGraph):
    loops: _Conditionals | None
    def while_count(self, body: Graph) -> int: ...

def capture(graph: Graph, stream: Stream | None = None, warmup: bool = True) -> CapturedGraph: ...
def to_gpu(
    graph: Graph, device: str = "gpu", dtype: str | None = None
) -> tuple[Graph, dict[int, Tensor]]: ...
