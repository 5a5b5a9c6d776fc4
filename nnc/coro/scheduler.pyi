"""Tasks and the scheduler (nnc/coro/scheduler.py): generators run inline until they block,
then on one thread."""

from collections.abc import Generator
from typing import Any, Protocol

from nnc.coro.traps import AwaitAny, AwaitTask, WaitFor

__all__ = ["Inbox", "Scheduler", "Task", "current_scheduler"]

# What a task's generator yields: one of the requests of nnc.coro.traps.
_Request = WaitFor | AwaitTask | AwaitAny
_Gen = Generator[_Request, Any, Any]

class _InboxLike(Protocol):
    # nnc.coro.Inbox, or the C nnc.stream.inbox.Inbox a stream's scheduler uses.
    def post(self, item: object, /) -> None: ...
    def take(self, block: bool = ..., /) -> list[Any]: ...

def current_scheduler() -> Scheduler | None: ...

class Task:
    gen: _Gen
    name: str
    done: bool
    result: Any
    exception: BaseException | None
    def __init__(self, gen: _Gen, name: str | None = None) -> None: ...

class Inbox:
    def __init__(self) -> None: ...
    def post(self, item: object) -> None: ...
    def take(self, block: bool = True) -> list[Any]: ...

class Scheduler:
    name: str
    threads_started: int
    def __init__(self, name: str = "nnc-coro", inbox: _InboxLike | None = None) -> None: ...
    def spawn(self, gen: _Gen, name: str | None = None) -> Task: ...
    def start(self, gen: _Gen, name: str | None = None) -> Task: ...
    @property
    def active(self) -> bool: ...
    @property
    def thread_alive(self) -> bool: ...
    def join(self, timeout: float | None = None) -> bool: ...
