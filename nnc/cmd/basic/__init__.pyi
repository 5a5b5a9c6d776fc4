"""Layer 2 command, the basic family: this module (the definitions and CPU_REF), cpu_opt.pyx
(CPU_OPT of SET and DATA_TRANSFER). The GPU backends are registered by nnc.cuda.

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

def register() -> Any: ...
