"""Layer 2 command, the softmax family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT). The GPU backends are registered by nnc.cuda.

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

def register() -> Any: ...
def softmax_rows(shape: Any) -> Any: ...
