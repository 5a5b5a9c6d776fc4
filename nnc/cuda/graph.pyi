"""CUDA-graph capture of a graph's run on a GPU stream, and copying a CPU graph to a GPU
(nnc/cuda/graph.py)."""

from nnc.cuda.driver import CudaGraph
from nnc.graph.graph import Graph
from nnc.stream import Stream
from nnc.tensor import Tensor

__all__ = ["capture", "to_gpu"]

def capture(graph: Graph, stream: Stream | None = None, warmup: bool = True) -> CudaGraph: ...
def to_gpu(
    graph: Graph, device: str = "gpu", dtype: str | None = None
) -> tuple[Graph, dict[int, Tensor]]: ...
