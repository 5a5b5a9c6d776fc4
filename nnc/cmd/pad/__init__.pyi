"""Layer 2 command, the pad family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT).

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

MODES: tuple[str, ...]

def register() -> Any: ...
