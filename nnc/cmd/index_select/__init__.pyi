"""Layer 2 command, the index_select family: this module (the definitions and CPU_REF).

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

INDEX_DTYPES: tuple[str, ...]
FLOAT_INDEX_DTYPES: tuple[str, ...]
FLOAT_TABLE_DTYPES: tuple[str, ...]

def register() -> Any: ...
