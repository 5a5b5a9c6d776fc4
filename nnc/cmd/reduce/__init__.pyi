"""Layer 2 command, the reduce family: this module (the definitions and CPU_REF), cpu_opt.pyx
(CPU_OPT). The GPU backends are registered by nnc.cuda.

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

NAMES: Any
def axes_of(cmd: Any, ndim: Any) -> Any: ...
def register() -> Any: ...
