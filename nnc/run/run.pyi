"""Running a graph on a stream (nnc/run/run.pyx); Graph.run(stream=s) is the entry point."""

from collections.abc import Callable

from typing_extensions import disjoint_base

from nnc.graph.graph import Graph
from nnc.stream.stream import Stream

def graph_run_on_stream(g: Graph, stream: Stream) -> None: ...
def register_flow(flow_run: Callable[[Graph, Stream], None]) -> None: ...
@disjoint_base
class RunState: ...
