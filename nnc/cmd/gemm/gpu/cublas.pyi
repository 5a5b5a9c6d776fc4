"""GPU_OPT of GEMM through cuBLAS (nvmath-python) (nnc/cmd/gemm/gpu/cublas.py)."""

import threading
from collections.abc import Sequence
from typing import Any

from nnc.cmd.command import Cmd
from nnc.cuda.driver import CudaStream, Device
from nnc.tensor.tensor import Tensor

__all__ = ["BACKEND", "PRIORITY", "CublasHandle", "available", "handle", "register",
           "unavailable_reason", "workspace_size"]

BACKEND: str
PRIORITY: int
INSTALL: str
DATATYPES: tuple[str, ...]

def available() -> bool: ...
def unavailable_reason() -> str | None: ...
def workspace_size(dev: Device) -> int: ...

class CublasHandle:
    lib: Any
    device: Device
    lock: threading.Lock
    workspace: int | None
    handle: int | None
    def __init__(self, lib: Any, dev: Device, cu_stream: int) -> None: ...
    def run(self, stream: CudaStream, calls: Sequence[tuple[str, tuple[int, ...]]]) -> None: ...
    def close(self) -> None: ...

def handle(stream: CudaStream) -> CublasHandle: ...

class _Plan:
    batch: int
    m: int
    n: int
    k: int
    wop: tuple[int, int] | None
    aop: tuple[int, int] | None
    ldc: int
    w_bs: int
    a_bs: int
    o_bs: int
    bias: tuple[int, int] | None

def plan(cmd: Cmd, a: Tensor, w: Tensor, bias: Tensor | None, out: Tensor) -> _Plan | None: ...
def register() -> None: ...
