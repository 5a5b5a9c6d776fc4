"""Layer 2 command, the upsample family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT).

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

TYPES: tuple[str, ...]

def source_index(n: int, m: int, kind: str, align: bool) -> Any: ...
def register() -> Any: ...
