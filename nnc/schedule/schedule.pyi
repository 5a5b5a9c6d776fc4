"""Static schedules (nnc/schedule/schedule.pyx). NNC: ccv_nnc_graph_static_schedule_new."""

from collections.abc import Callable, Mapping, Sequence
from typing import Literal, NamedTuple, TypedDict, final

from typing_extensions import disjoint_base

from nnc.base.core import DEBUG as DEBUG
from nnc.graph.graph import Graph, GraphExec
from nnc.schedule.simulate import SimResult
from nnc.schedule.simulate import _Costs as _SimCosts

@final
class Policy:
    """A registered scheduling policy (made by its module's register_policy)."""
    @property
    def name(self) -> str: ...
    def __init__(self, *args: object, **kwargs: object) -> None: ...  # raises TypeError

# The registry: policy name -> Policy, None for "rank" (the builder's own).
POLICIES: dict[str, Policy | None]

# Node costs in seconds, as static_schedule takes them.
_Costs = (
    Mapping[GraphExec, float]
    | Mapping[int, float]
    | Mapping[GraphExec | int, float]
    | Callable[[GraphExec], float]
    | Literal["profile"]
)

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
    policy: str
    costs: dict[GraphExec, float] | Callable[[GraphExec], float] | None

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
    def policy(self) -> str: ...
    @property
    def stream_count(self) -> int: ...
    @property
    def signal_count(self) -> int: ...
    @property
    def stream_kinds(self) -> tuple[str, ...]:
        """Per stream index, the kind it becomes: "cpu", or "gpu:N", the GPU of its nodes."""
    @property
    def signal_kinds(self) -> tuple[str, ...]:
        """Per signal, the kind of the stream that emits it."""
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
    def partial(self) -> bool: ...
    @property
    def sources(self) -> tuple[GraphExec, ...] | None: ...
    @property
    def destinations(self) -> tuple[GraphExec, ...] | None: ...
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
        costs: _SimCosts,
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
    policy: str = "rank",
    costs: _Costs | None = None,
    sources: GraphExec | Sequence[GraphExec] | None = None,
    destinations: GraphExec | Sequence[GraphExec] | None = None,
) -> Schedule: ...
def graph_schedule(g: Graph) -> Schedule | None: ...
def flow_schedule(g: Graph, args: _ScheduleArgs | None) -> Schedule: ...
@disjoint_base
class ScheduleState: ...
def _register_python_policy(
    name: str,
    fn: Callable[[list[list[int]], int], tuple[Sequence[int], Sequence[tuple[int, int]]]],
) -> None: ...
def _unregister_policy(name: str) -> None: ...
