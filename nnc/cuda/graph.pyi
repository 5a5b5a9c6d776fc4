"""Running a statically scheduled graph on CUDA streams, and capturing it into a CUDA graph
(nnc/cuda/graph.py)."""

from collections.abc import Callable

from nnc.cuda.driver import CudaEvent, CudaGraph, CudaStream, Device
from nnc.graph.graph import Graph
from nnc.graph.schedule import Schedule
from nnc.tensor import Tensor

__all__ = ["GpuRun", "capture", "run", "to_gpu"]

# One step of a node: (its CUDA stream, the launches to enqueue, the event joining it or None).
_Part = tuple[CudaStream, list[Callable[[CudaStream], object]], CudaEvent | None]

class GpuRun:
    device: Device
    graph: Graph
    schedule: Schedule
    nodes: list[tuple[list[_Part], tuple[int, ...], tuple[int, ...]]]
    streams: list[CudaStream]
    events: list[CudaEvent]
    joins: list[CudaEvent]
    def __init__(self, graph: Graph, schedule: Schedule | None = None) -> None: ...
    def enqueue(self, stream: CudaStream) -> None: ...

def run(graph: Graph, stream: CudaStream | None = None) -> GpuRun: ...
def capture(graph: Graph, stream: CudaStream | None = None, warmup: bool = True) -> CudaGraph: ...
def to_gpu(graph: Graph, device: str = "gpu") -> tuple[Graph, dict[int, Tensor]]: ...
