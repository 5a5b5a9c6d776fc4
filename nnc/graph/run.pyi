"""Running a graph on a stream (nnc/graph/run.pyx); Graph.run(stream=s) is the entry point."""

from nnc.graph.graph import Graph
from nnc.stream import Stream

def graph_run_on_stream(g: Graph, stream: Stream) -> None: ...
