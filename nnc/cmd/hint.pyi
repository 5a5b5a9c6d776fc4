"""Output shapes and window hints from a command's parameters (nnc/cmd/hint.py)."""

from collections.abc import Sequence
from typing import SupportsIndex

from nnc.cmd.command import Cmd

_Shape = Sequence[SupportsIndex]

def hint_auto(
    cmd: Cmd, input_shapes: Sequence[_Shape | None], output_shape: _Shape, format: str = "NHWC"
) -> dict[str, tuple[int, ...]]: ...
def hint_tensor_auto(
    cmd: Cmd,
    input_shapes: Sequence[_Shape | None],
    format: str = "NHWC",
    output_format: str | None = None,
) -> tuple[tuple[int, ...], ...]: ...
