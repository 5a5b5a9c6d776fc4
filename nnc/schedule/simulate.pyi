"""A simulator of static schedules (nnc/schedule/simulate.pyx)."""

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from nnc.graph.graph import GraphExec
from nnc.schedule.schedule import Schedule

# Seconds per node: by GraphExec or node index, a function of the node, a sequence indexed by
# node index, or "profile" (measure them with graph.profile()).
_Costs = (
    Mapping[GraphExec | int, float]
    | Mapping[GraphExec, float]
    | Mapping[int, float]
    | Callable[[GraphExec], float]
    | Sequence[float]
    | npt.NDArray[np.floating[Any]]
    | Literal["profile"]
)

class SimResult:
    schedule: Schedule
    makespan: float
    start: npt.NDArray[np.float64]
    finish: npt.NDArray[np.float64]
    stream_busy: tuple[float, ...]
    critical_path: float
    work: float
    cores: int | None
    streams_overlap: bool
    def __init__(
        self,
        schedule: Schedule,
        makespan: float,
        start: npt.NDArray[np.float64],
        finish: npt.NDArray[np.float64],
        stream_busy: tuple[float, ...],
        critical_path: float,
        work: float,
        cores: int | None,
        streams_overlap: bool,
    ) -> None: ...
    def chrome_trace(self) -> dict[str, Any]: ...
    def trace(self, path: str | PathLike[str]) -> None: ...

def schedule_simulate(
    sched: Schedule,
    costs: _Costs,
    *,
    cores: int | None = None,
    streams_overlap: bool = True,
    signal_cost: float = 0.0,
    launch_cost: float = 0.0,
) -> SimResult: ...
