"""Running a graph on a stream (nnc/run/run.pyx); Graph.run(stream=s) is the entry point."""

from collections.abc import Callable

from typing_extensions import disjoint_base

from nnc.graph.graph import Graph
from nnc.schedule.schedule import Schedule
from nnc.stream.stream import Stream

def graph_run_on_stream(g: Graph, stream: Stream, schedule: Schedule | None = None) -> None: ...
def register_flow(flow_run: Callable[..., None]) -> None: ...
@disjoint_base
class RunState: ...
