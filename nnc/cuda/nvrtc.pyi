"""Run-time compilation of nnc's CUDA C kernels with NVRTC (nnc/cuda/nvrtc.py)."""

from collections.abc import Iterable

__all__ = ["KERNELS", "KERNEL_FILES", "compile_cubin", "kernel_source", "nvrtc_version"]

KERNELS: dict[str, tuple[str, ...]]
KERNEL_FILES: tuple[str, ...]
OPTIONS: tuple[str, ...]

def kernel_source(name: str) -> str: ...
def nvrtc_version() -> tuple[int, int]:
    """(major, minor)."""
def compile_cubin(
    source: str, arch: int, name: str = "nnc.cu", options: Iterable[str] = ()
) -> bytes: ...
