"""Layer 2 command, the attention family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT).

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

NAME: str

def attention_shape(q_shape: Any, k_shape: Any, v_shape: Any, mask_shape: Any = None) -> Any: ...
def heads_first(x: Any) -> Any: ...
def register() -> Any: ...
