"""GPU_OPT of CONVOLUTION through cuDNN's frontend (nnc/cmd/convolution/gpu/cudnn.py)."""

import threading
from collections.abc import Sequence
from typing import Any

from nnc.cmd.command import Cmd
from nnc.cuda.driver import Device
from nnc.tensor.tensor import Tensor

__all__ = ["ALIGN", "BACKEND", "CACHE_FILE", "HINT", "LIBRARY", "PRIORITY", "TUNE", "available",
           "cache_path", "describe", "geometry", "implementation", "plan", "register",
           "unavailable_reason"]

BACKEND: str
PRIORITY: int
HINT: str
ALIGN: int
LIBRARY: str
TUNE: bool | None
CACHE_FILE: str

# (dtype, N, H, W, C, x pixel stride, O, kh, kw, C/groups, Ho, Wo, out pixel stride,
#  (sh, sw), (top, left, bottom, right), bias?, relu?)
_Key = tuple[Any, ...]

class _Choice:
    how: str
    name: str | None
    us: float | None
    candidates: int
    note: str | None
    engine: int | None
    knobs: str | None
    timings: tuple[tuple[int, str, float], ...]
    def __init__(
        self, how: str, name: str | None, us: float | None = None, candidates: int = 0,
        note: str | None = None, engine: int | None = None, knobs: str | None = None,
        timings: Sequence[tuple[int, str, float]] = (),
    ) -> None: ...

class _Plan:
    graph: Any
    x: Any
    w: Any
    bias: Any
    y: Any
    workspace: int
    lock: threading.Lock
    epilogue: bool
    choice: _Choice | None
    def __init__(
        self, graph: Any, x: Any, w: Any, bias: Any, y: Any, workspace: int,
        epilogue: bool = False, choice: _Choice | None = None,
    ) -> None: ...

def available() -> bool: ...
def unavailable_reason() -> str | None: ...
def geometry(
    cmd: Cmd, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None],
    precision: str | None = None,
) -> _Key: ...
def describe(cu: Any, key: _Key, handle: Any = None) -> tuple[Any, Any, Any, Any, Any]: ...
def plan(
    dev: Device, cmd: Cmd, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None],
    precision: str | None = None,
) -> _Plan | None: ...
def implementation(
    cmd: Cmd, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor | None]
) -> dict[str, Any]: ...
def cache_path() -> str | None: ...
def register() -> None: ...
