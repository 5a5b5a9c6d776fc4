"""Layer 2 command, the element-wise family: this module (EW*, SCALAR_MUL, RELU, SIGMOID, TANH),
binary.py (ADD, MUL, EWPOW, MIN, MAX with broadcasting), clamp.py (CLAMP), activation.py (SWISH,
GELU, HARD_SWISH, HARD_SIGMOID, ERF, EWABS): definitions and CPU_REF; cpu_opt.pyx,
cpu_opt_unary.pyx, cpu_opt_binary.pyx and cpu_opt_act.pyx: their CPU_OPT C loops. The GPU
backends are registered by nnc.cuda.

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

def register() -> Any: ...
