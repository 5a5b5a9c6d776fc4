"""Commands and their backends (nnc/cmd/command.pyx). NNC: ccv_nnc_cmd.c."""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, overload

import numpy.typing as npt
from typing_extensions import disjoint_base

from nnc.base.core import DATATYPE_NAMES as DATATYPE_NAMES
from nnc.base.core import DATATYPES as DATATYPES
from nnc.base.core import STATUS_NAMES as STATUS_NAMES
from nnc.cmd.params import CmdParams as CmdParams
from nnc.stream.stream import Stream
from nnc.tensor.tensor import Tensor

# What a command takes as one input or output: a Tensor, an ndarray (wrapped zero-copy) or None.
_TensorLike = Tensor | npt.NDArray[Any] | None
# A tensor argument: one of the above, or a sequence of them.
_Tensors = Sequence[_TensorLike] | _TensorLike
_Arrays = list[npt.NDArray[Any] | None]
_TensorList = list[Tensor | None]
_Inplace = Literal["none", "allow", "enforce", "any"]
# check(cmd, inputs, outputs) raises CommandError; accept(...) -> bool, on Tensors.
_Check = Callable[[Cmd, _TensorList, _TensorList], object]
_Accept = Callable[[Cmd, _TensorList, _TensorList], bool]
_Normalize = Callable[[dict[str, Any]], dict[str, Any]]
# A "cpu" backend runs on ndarrays; a "gpu" or "any" backend on the Tensors, with a stream.
_CpuFn = Callable[[Cmd, _Arrays, _Arrays], object]
_DeviceFn = Callable[..., object]

GIL_RELEASE_ELEMENTS: int

@disjoint_base
class Backend:
    @property
    def name(self) -> str: ...
    @property
    def command(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def py_exec(self) -> Callable[..., object] | None: ...
    @property
    def datatypes(self) -> int: ...
    @property
    def contiguous_only(self) -> bool: ...
    @property
    def accept(self) -> _Accept | None: ...
    @property
    def release_gil(self) -> bool: ...
    @property
    def device(self) -> Literal["cpu", "gpu", "any"]: ...
    def __init__(self, *args: object, **kwargs: object) -> None: ...  # raises TypeError
    @property
    def is_c(self) -> bool: ...
    @property
    def datatype_names(self) -> list[str]: ...
    def exec(self, cmd: Cmd, inputs: _Tensors, outputs: _Tensors) -> None: ...

@disjoint_base
class CommandInfo:
    @property
    def name(self) -> str: ...
    @property
    def image(self) -> bool: ...
    @property
    def id(self) -> int: ...
    @property
    def inplace(self) -> _Inplace: ...
    @property
    def alias_inputs(self) -> tuple[int, ...]: ...
    @property
    def check(self) -> _Check | None: ...
    @property
    def normalize(self) -> _Normalize | None: ...
    @property
    def backends(self) -> list[Backend]: ...
    @property
    def builtin(self) -> bool: ...
    @property
    def control(self) -> bool: ...
    def __init__(self, *args: object, **kwargs: object) -> None: ...  # raises TypeError

@disjoint_base
class Cmd:
    @property
    def info(self) -> CommandInfo: ...
    @property
    def params(self) -> CmdParams: ...
    @property
    def fn(self) -> Callable[[_Arrays, _Arrays], object] | None: ...
    @property
    def pinned(self) -> bool: ...
    def __init__(self, name: str, backend: str | None = None, **params: Any) -> None: ...
    @staticmethod
    def custom(fn: Callable[[_Arrays, _Arrays], object], name: str = "CUSTOM") -> Cmd: ...
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
    inplace: _Inplace = "none",
    check: _Check | None = None,
    normalize: _Normalize | None = None,
    replace: bool = False,
    image: bool = False,
    alias_inputs: tuple[int, ...] = (),
) -> CommandInfo: ...
def register_control_command(name: str, normalize: _Normalize | None) -> CommandInfo: ...
def seal_builtins() -> None: ...
@overload
def register_backend(
    command: str,
    backend: str,
    fn: _CpuFn,
    *,
    datatypes: Iterable[npt.DTypeLike] | None = None,
    contiguous: bool = False,
    accept: _Accept | None = None,
    priority: int | None = None,
    device: Literal["cpu"] = "cpu",
    replace: bool = False,
) -> Backend: ...
@overload
def register_backend(
    command: str,
    backend: str,
    fn: _DeviceFn,
    *,
    datatypes: Iterable[npt.DTypeLike] | None = None,
    contiguous: bool = False,
    accept: _Accept | None = None,
    priority: int | None = None,
    device: Literal["gpu", "any"],
    replace: bool = False,
) -> Backend: ...
def commands() -> list[str]: ...
def backends(command: str, device: Literal["cpu", "gpu"] | None = None) -> list[str]: ...
def command_info(command: str) -> CommandInfo: ...
def cmd_register_stream(stream_type: type, enqueue: Callable[..., None]) -> None: ...
def cmd_exec(
    cmd: Cmd,
    inputs: _Tensors = (),
    outputs: _Tensors = (),
    stream: Stream | None = None,
) -> None: ...
def cmd_backends_for(cmd: Cmd, inputs: _Tensors, outputs: _Tensors) -> list[Backend]: ...
def cmd_autotune(
    cmd: Cmd, inputs: _Tensors, outputs: _Tensors, trials: int = 3, cold: bool = False
) -> Backend | None: ...
