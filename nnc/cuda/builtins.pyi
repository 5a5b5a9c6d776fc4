"""The GPU backends of the built-in commands, registered in order (nnc/cuda/builtins.py)."""

__all__ = ["register_gpu_builtins"]

def register_gpu_builtins() -> None: ...
