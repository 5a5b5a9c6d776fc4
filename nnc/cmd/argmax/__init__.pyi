"""Layer 2 command, the argmax family: this module (the definitions and CPU_REF).

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

NAMES: tuple[str, ...]
INDEX_DTYPES: tuple[str, ...]

def axis_of(cmd: Any, ndim: int) -> int: ...
def register() -> Any: ...
