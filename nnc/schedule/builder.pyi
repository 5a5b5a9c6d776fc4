from collections.abc import Callable

from nnc.graph.graph import Graph, GraphExec
from nnc.schedule.schedule import Schedule

def build_schedule(
    g: Graph,
    stream_type: str,
    max_streams: int,
    policy: str,
    costs: dict[GraphExec, float] | Callable[[GraphExec], float] | None = None,
    part: list[int] | None = None,
) -> Schedule: ...
def _set_clock_slots(slots: int | None = ...) -> int: ...
