"""``python -m nnc demo`` (nnc/demo.py): Inception-V3 as one concrete graph, run and profiled."""

import argparse
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from nnc.graph.graph import Graph, GraphExec
from nnc.tensor.tensor import Tensor

PEERS: tuple[str, ...]
PEER_NAMES: dict[str, str]
INSTALL_PEERS: str

def add_arguments(parser: argparse.ArgumentParser) -> None: ...
def isa_info() -> dict[str, Any]: ...
def blas_info() -> dict[str, Any]: ...
def critical_path(
    graph: Graph, seconds: Mapping[GraphExec, float]
) -> tuple[float, list[GraphExec]]: ...
def run_streams(
    g: Graph, x: Tensor, output: Tensor, logits: Tensor, repeat: int, max_streams: int,
    trace_path: str, say: Callable[[str], None], ort: bool = True, ov: bool = True,
    limits: dict[str, Any] | None = None, seed: int | None = None,
) -> dict[str, Any]: ...
def run_demo(
    size: int = 299, batch: int = 1, repeat: int = 5, seed: int = 0, autotune: bool = False,
    dot: str | None = None, out: TextIO | None = None, streams: bool = False,
    max_streams: int = 0, trace: str = "run.json", ort: bool = True, ov: bool = True,
    limits: bool | dict[str, Any] = True,
) -> dict[str, Any]: ...
def main(args: argparse.Namespace) -> int: ...
