from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from nnc.graph.graph import Graph, GraphExec

POLICIES: tuple[str, ...]

class ExecSchedule(NamedTuple):
    streams: tuple[int, ...]
    signals: tuple[int, ...]
    waits: tuple[int, ...]

class Schedule:
    version: int
    stream_type: str
    max_streams: int
    policy: str
    stream_count: int
    signal_count: int
    split: int
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
    def __getitem__(self, e: GraphExec) -> ExecSchedule: ...
    def rank(self, e: GraphExec) -> int: ...
    def nodes_on(self, stream: int) -> tuple[GraphExec, ...]: ...
    def tables(self) -> dict[str, Any]: ...
    @staticmethod
    def from_tables(
        graph: Graph, streams: Mapping[GraphExec, int],
        signals: Mapping[GraphExec, int] | None = ...,
        waits: Mapping[GraphExec, Sequence[int]] | None = ...,
        entry_streams: Sequence[int] = ..., exit_waits: Sequence[int] = ...,
        stream_type: str = ...,
    ) -> Schedule: ...
    def verify(self, hazards: bool = ...) -> None: ...

def static_schedule(
    graph: Graph, stream_type: str = ..., max_streams: int = ...,
    policy: Literal["rank"] = ...,
) -> Schedule: ...
def graph_schedule(g: Graph) -> Schedule | None: ...
def flow_schedule(g: Graph, args: dict[str, Any] | None) -> Schedule: ...
