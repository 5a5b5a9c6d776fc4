from typing import Any, Protocol

from typing_extensions import CapsuleType

from nnc.base.core import TensorError
from nnc.tensor.tensor import Tensor

class _SupportsDLPack(Protocol):
    def __dlpack__(self, *, stream: Any = ..., max_version: Any = ...) -> Any: ...
    def __dlpack_device__(self) -> tuple[Any, int]: ...

class DLPackError(TensorError, BufferError): ...

def tensor_to_dlpack(
    t: Tensor,
    stream: int | None = None,
    max_version: tuple[int, int] | None = None,
    dl_device: tuple[int, int] | None = None,
    copy: bool | None = None,
) -> CapsuleType: ...
def from_dlpack(
    x: _SupportsDLPack, *, device: str | None = None, copy: bool | None = None
) -> Tensor: ...
