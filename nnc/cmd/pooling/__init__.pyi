"""Layer 2 command, the pooling family: this module (the definitions, CPU_REF and CPU_NUMPY),
cpu_opt.pyx (CPU_OPT). The GPU backends are registered by nnc.cuda.

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

def pool_shape(cmd: Any, x_shape: Any) -> Any: ...
def register() -> Any: ...
