"""MXNet's dependency engine on nnc's worker pool (nnc/engine/engine.pyx, docs/engine.md)."""

import ctypes
from collections.abc import Callable, Iterable
from typing import Any

from typing_extensions import disjoint_base

from nnc.cmd.command import Cmd
from nnc.engine.op import EngineVar
from nnc.engine.region_graph import Recording
from nnc.stream.stream import Stream
from nnc.tensor.tensor import Tensor

CFUNC: type[ctypes._CFunctionType]

@disjoint_base
class Engine:
    @property
    def naive(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def __init__(self, naive: bool = False) -> None: ...
    def new_var(self) -> EngineVar: ...
    def push(
        self,
        fn: Callable[[], object] | ctypes._CFunctionType,
        read: Iterable[EngineVar] = (),
        mutate: Iterable[EngineVar] = (),
        *,
        stream: Stream | None = None,
        name: str | None = None,
        priority: int = 0,
        arg: int | ctypes._Pointer[Any] | ctypes.c_void_p | ctypes.c_char_p | None = None,
    ) -> None: ...
    def var_of(self, tensor: Tensor) -> EngineVar: ...
    def push_cmd(
        self,
        cmd: Cmd,
        inputs: Iterable[object] = (),
        outputs: Iterable[object] = (),
        *,
        stream: Stream | None = None,
        name: str | None = None,
    ) -> None: ...
    def delete_var(self, v: EngineVar, on_delete: Callable[[], object] | None = None) -> None: ...
    def wait_for_var(self, v: EngineVar, timeout: float | None = None) -> bool: ...
    def wait_all(self, timeout: float | None = None) -> bool: ...
    def close(self) -> None: ...
    def record(self) -> Recording: ...
    def _record_start(self) -> None: ...
    def _record_stop(self) -> list[tuple[Any, ...]]: ...

def _forget(buffers: dict[Any, Any], key: object, entry: list[Any]) -> None: ...
