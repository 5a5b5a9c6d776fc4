"""Layer 2 command, the convolution family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT: im2col + OpenBLAS GEMM), winograd.pyx (CPU_OPT_WINOGRAD). The GPU backends are registered
by nnc.cuda.

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

ACTIVATIONS: tuple[Any, ...]

def conv_shape(cmd: Any, x_shape: Any, w_shape: Any) -> Any: ...
def register() -> Any: ...
