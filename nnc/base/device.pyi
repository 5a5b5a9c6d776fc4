"""Devices (nnc/base/device.py): the device-string parser, the array-interface holder, the GPU
table."""

from collections.abc import Callable, Mapping
from typing import Any

from nnc.base.core import TensorError

__all__ = ["ArrayInterface", "DeviceError", "gpu_memory", "parse_device", "register_gpu",
           "require_device"]

GPU_MEMORY_KEYS: tuple[str, ...]

class DeviceError(TensorError): ...

def parse_device(device: object) -> int: ...

class ArrayInterface:
    __array_interface__: dict[str, Any]
    owner: object
    def __init__(self, interface: dict[str, Any], owner: object) -> None: ...

def register_gpu(
    require: Callable[[int, str], None],
    load_memory: Callable[[], Mapping[str, Callable[..., Any]]],
) -> None: ...
def require_device(ordinal: int, what: str = "this") -> None: ...
def gpu_memory(name: str) -> Callable[..., Any]: ...
