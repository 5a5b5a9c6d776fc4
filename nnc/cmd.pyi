from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from nnc.tensor import Tensor

TensorLike = Tensor | np.ndarray | None
GIL_RELEASE_ELEMENTS: int

class Backend:
    name: str
    command: str
    priority: int
    seq: int
    py_exec: Callable[..., Any] | None
    datatypes: int
    contiguous_only: bool
    accept: Callable[..., bool] | None
    release_gil: bool
    device: str
    @property
    def is_c(self) -> bool: ...
    @property
    def datatype_names(self) -> list[str]: ...
    def exec(
        self, cmd: Cmd, inputs: Sequence[TensorLike], outputs: Sequence[TensorLike]
    ) -> None: ...

class CommandInfo:
    name: str
    id: int
    inplace: str
    check: Callable[..., None] | None
    normalize: Callable[[dict[str, Any]], dict[str, Any]] | None
    backends: list[Backend]
    builtin: bool

class CmdParams(Mapping[str, Any]):
    """Read-only; every mutator raises CommandError."""
    def __init__(self, items: Mapping[str, Any]) -> None: ...
    def __getitem__(self, key: str) -> Any: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def __or__(self, other: Mapping[str, Any]) -> dict[str, Any]: ...

class Cmd:
    info: CommandInfo
    @property
    def params(self) -> CmdParams: ...
    fn: Callable[[list[np.ndarray | None], list[np.ndarray | None]], None] | None
    pinned: bool
    def __init__(self, name: str, backend: str | None = ..., **params: Any) -> None: ...
    @staticmethod
    def custom(fn: Callable[..., None], name: str = ...) -> Cmd: ...
    @property
    def name(self) -> str: ...
    @property
    def backend(self) -> str | None: ...
    @property
    def backend_object(self) -> Backend | None: ...
    def __getattr__(self, key: str) -> Any: ...
    def __copy__(self) -> Cmd: ...
    def __deepcopy__(self, memo: dict[int, Any] | None) -> Cmd: ...
    def __reduce__(self) -> tuple[Callable[..., Cmd], tuple[Any, ...]]: ...

def register_command(
    name: str,
    *,
    inplace: str = ...,
    check: Callable[..., None] | None = ...,
    normalize: Callable[[dict[str, Any]], dict[str, Any]] | None = ...,
    replace: bool = ...,
) -> CommandInfo: ...
def seal_builtins() -> None: ...
def register_backend(
    command: str,
    backend: str,
    fn: Callable[..., None],
    *,
    datatypes: Iterable[Any] | None = ...,
    contiguous: bool = ...,
    accept: Callable[..., bool] | None = ...,
    priority: int | None = ...,
    device: str = ...,
    replace: bool = ...,
) -> Backend: ...
def commands() -> list[str]: ...
def backends(command: str, device: str | None = ...) -> list[str]: ...
def command_info(command: str) -> CommandInfo: ...
def cmd_exec(
    cmd: Cmd, inputs: Sequence[TensorLike] | TensorLike = ...,
    outputs: Sequence[TensorLike] | TensorLike = ..., stream: None = ...,
) -> None: ...
def cmd_backends_for(
    cmd: Cmd, inputs: Sequence[TensorLike], outputs: Sequence[TensorLike]
) -> list[Backend]: ...
def cmd_autotune(
    cmd: Cmd, inputs: Sequence[TensorLike], outputs: Sequence[TensorLike], trials: int = ...
) -> Backend | None: ...
