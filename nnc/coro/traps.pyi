"""The requests a task may yield to its scheduler (nnc/coro/traps.py)."""

from collections.abc import Callable, Iterable
from typing import Protocol

from nnc.coro.scheduler import Task

__all__ = ["AwaitAny", "AwaitTask", "WaitFor"]

class _Armable(Protocol):
    # False if already complete; else True after arranging one call of wake() on completion.
    def coro_arm(self, wake: Callable[[], object], /) -> bool: ...

class WaitFor:
    source: _Armable
    def __init__(self, source: _Armable) -> None: ...

class AwaitTask:
    task: Task
    def __init__(self, task: Task) -> None: ...

class AwaitAny:
    tasks: tuple[Task, ...]
    def __init__(self, tasks: Iterable[Task]) -> None: ...
