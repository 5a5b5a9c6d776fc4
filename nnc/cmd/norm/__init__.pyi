"""Layer 2 command, the normalisation family (LAYER_NORM, GROUP_NORM, RMSNORM): this module
(the definitions and CPU_REF), cpu_opt.pyx (CPU_OPT).

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

def register() -> Any: ...

MAX_RANK: int

def saved_shape(cmd: Any, shape: tuple[int, ...]) -> tuple[int, ...]: ...
