"""Record runs as a Chrome-trace / Perfetto timeline (nnc/trace.py, docs/trace.md)."""

import os
from types import TracebackType
from typing import Any, Literal

# One recorded task: (start s, end s, kind, node index or -1, label index or -1, signal record).
_Event = tuple[float, float, int, int, int, int]

HOST_TID: int

class trace:
    path: str
    labels: list[str]
    events: list[tuple[int, list[_Event]]] | None
    host: list[tuple[int, str, str, float, float, dict[str, Any] | None]]
    threads: dict[int, str]
    def __init__(self, path: str | os.PathLike[str]) -> None: ...
    def label(self, text: str) -> int: ...
    def __enter__(self) -> trace: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...
    def chrome_trace(self) -> dict[str, Any]: ...
