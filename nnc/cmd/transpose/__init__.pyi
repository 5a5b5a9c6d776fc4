"""Layer 2 command, the transpose family: this module (the definition, CPU_REF and CPU_OPT's Python
entry), cpu_opt.pyx (the C tile loops). The GPU backends are registered by nnc.cuda.

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

def permutation(cmd: Any, ndim: Any) -> Any: ...
def batched_2d(shape: Any, perm: Any) -> Any: ...
def register() -> Any: ...
