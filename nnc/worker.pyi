"""Stream worker threads (nnc/worker.pyx): one daemon thread per CPU stream."""

import threading

from typing_extensions import disjoint_base

from nnc.stream import Stream

@disjoint_base
class Worker:
    @property
    def index(self) -> int:
        """The stream's creation number."""
    @property
    def thread(self) -> threading.Thread: ...
    def drain(self) -> None: ...
    def pending(self) -> int: ...
    def close(self) -> None: ...

def worker_start(st: Stream) -> None: ...
def drain_all() -> None: ...
