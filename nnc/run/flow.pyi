from nnc.graph.graph import Graph
from nnc.schedule.schedule import Schedule
from nnc.stream.stream import Stream

LOOP_HEAD_EMPTY: int
LOOP_TAIL_EMPTY: int

def flow_run(
    g: Graph, caller: Stream, capture: object = None, part: Schedule | None = None
) -> None: ...
def flow_capture_prepare(g: Graph, capture: object) -> None: ...
def flow_capture_run(g: Graph, caller: Stream, capture: object) -> None: ...
