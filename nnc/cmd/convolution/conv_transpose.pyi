"""Layer 2 command, the convolution family: CONVOLUTION_TRANSPOSE's definition and CPU_REF.

Private to nnc: the stub lists what other modules use, so mypy need not follow the
untyped definitions."""

from typing import Any

NAME: str

def conv_transpose_shape(cmd: Any, x_shape: Any, w_shape: Any) -> Any: ...
def register() -> Any: ...
