"""Layer 2 command, the GEMM family: this module (the definition, CPU_REF and CPU_NUMPY),
cpu_opt.pyx (CPU_OPT: OpenBLAS GEMM). The GPU backends are registered by nnc.cuda.

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

def gemm_shape(cmd: Any, a_shape: Any, w_shape: Any) -> Any: ...
def register() -> Any: ...
