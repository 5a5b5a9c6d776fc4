"""Static schedules (nnc/graph/schedule.pyx). NNC: ccv_nnc_graph_static_schedule_new."""

from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple, TypedDict

from typing_extensions import disjoint_base

from nnc._core import DEBUG as DEBUG
from nnc.graph.graph import Graph, GraphExec
from nnc.graph.simulate import SimResult, _Costs

POLICIES: tuple[str, ...]

# A stream kind: "cpu", "gpu" or "gpu:N".
_StreamType = str

class _Tables(TypedDict):
    streams: dict[GraphExec, int]
    signals: dict[GraphExec, int]
    waits: dict[GraphExec, list[int]]
    entry_streams: list[int]
    exit_waits: list[int]

class _ScheduleArgs(TypedDict):
    stream_type: _StreamType
    max_streams: int
    policy: Literal["rank"]

class ExecSchedule(NamedTuple):
    streams: tuple[int, ...]
    signals: tuple[int, ...]
    waits: tuple[int, ...]

@disjoint_base
class Schedule:
    @property
    def version(self) -> int:
        """``graph.version`` when it was built; a different one means it is stale."""
    @property
    def stream_type(self) -> _StreamType: ...
    @property
    def max_streams(self) -> int: ...
    @property
    def policy(self) -> Literal["rank"]: ...
    @property
    def stream_count(self) -> int: ...
    @property
    def signal_count(self) -> int: ...
    @property
    def split(self) -> int: ...
    def __init__(self, *args: object, **kwargs: object) -> None: ...  # raises TypeError
    @property
    def graph(self) -> Graph | None: ...
    @property
    def order(self) -> tuple[GraphExec, ...]: ...
    @property
    def entry_streams(self) -> tuple[int, ...]: ...
    @property
    def exit_waits(self) -> tuple[int, ...]: ...
    @property
    def stale(self) -> bool: ...
    def stream_of(self, index: int) -> int: ...
    def __getitem__(self, e: GraphExec, /) -> ExecSchedule: ...
    def rank(self, e: GraphExec) -> int: ...
    def nodes_on(self, stream: int) -> tuple[GraphExec, ...]: ...
    def tables(self) -> _Tables: ...
    @staticmethod
    def from_tables(
        graph: Graph,
        streams: Mapping[GraphExec, int],
        signals: Mapping[GraphExec, int] | None = None,
        waits: Mapping[GraphExec, Sequence[int]] | None = None,
        entry_streams: Sequence[int] = (),
        exit_waits: Sequence[int] = (),
        stream_type: _StreamType = "cpu",
    ) -> Schedule: ...
    def simulate(
        self,
        costs: _Costs,
        *,
        cores: int | None = None,
        streams_overlap: bool = True,
        signal_cost: float = 0.0,
        launch_cost: float = 0.0,
    ) -> SimResult: ...
    def verify(self, hazards: bool = False) -> None: ...

def static_schedule(
    graph: Graph,
    stream_type: _StreamType = "cpu",
    max_streams: int = 0,
    policy: Literal["rank"] = "rank",
) -> Schedule: ...
def graph_schedule(g: Graph) -> Schedule | None: ...
def flow_schedule(g: Graph, args: _ScheduleArgs | None) -> Schedule: ...
@disjoint_base
class ScheduleState: ...
