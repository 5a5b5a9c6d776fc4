from nnc.graph.graph import Graph
from nnc.stream import Stream

def flow_run(g: Graph, caller: Stream) -> None: ...
