from collections.abc import Callable

import numpy as np

from nnc.cmd.command import Cmd

def transpose_batched(y: np.ndarray, x: np.ndarray, batch: int, rows: int, cols: int) -> None: ...
def register(accept: Callable[[Cmd, list[np.ndarray], list[np.ndarray]], bool]) -> None: ...
