"""The same network in onnxruntime and OpenVINO, for side-by-side timings (nnc/models/peers.py)."""

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from nnc.base.core import NNCError

class PeerUnavailableError(NNCError, RuntimeError): ...

def ort_version() -> str | None: ...

class OrtRun:
    session: Any
    feeds: dict[str, npt.NDArray[Any]]
    output_names: list[str]
    outputs: list[npt.NDArray[Any]]
    binding: Any
    version: str
    intra_op: int
    inter_op: int
    parallel: bool
    optimize: bool
    device: str
    device_inputs: dict[str, Any]
    device_outputs: list[Any]
    def __init__(
        self, model: Any, feeds: Mapping[str, np.ndarray], *, intra_op: int,
        inter_op: int = 1, parallel: bool = False, optimize: bool = True, device: str = "cpu",
    ) -> None: ...
    def __call__(self) -> None: ...
    def fetch_outputs(self) -> list[npt.NDArray[Any]]: ...
    def describe(self) -> str: ...


def ov_version() -> str | None: ...

class OvRun:
    compiled: Any
    request: Any
    feeds: dict[str, npt.NDArray[Any]]
    output_names: list[str]
    outputs: list[npt.NDArray[Any]]
    version: str
    threads: int
    precision: str
    def __init__(self, model: Any, feeds: Mapping[str, np.ndarray], *, threads: int) -> None: ...
    def __call__(self) -> None: ...
    def fetch_outputs(self) -> list[npt.NDArray[Any]]: ...
    def describe(self) -> str: ...
