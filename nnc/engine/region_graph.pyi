"""Recording an engine region as a concrete graph (nnc/engine/region_graph.py)."""

from types import TracebackType
from typing import Any

import numpy as np

from nnc.engine.engine import Engine
from nnc.graph.graph import Graph, GraphExec

class _CCall:
    fn: Any
    arg: Any
    def __init__(self, fn: Any, arg: Any) -> None: ...
    def __call__(
        self, inputs: list[np.ndarray | None], outputs: list[np.ndarray | None]
    ) -> None: ...

class _PyCall:
    fn: Any
    def __init__(self, fn: Any) -> None: ...
    def __call__(
        self, inputs: list[np.ndarray | None], outputs: list[np.ndarray | None]
    ) -> None: ...

def _node(g: Graph, entry: tuple[Any, ...]) -> GraphExec: ...
def direct_deps(entries: list[tuple[Any, ...]]) -> list[set[int]]: ...
def reduce_edges(deps: list[set[int]]) -> list[tuple[int, int]]: ...

class Recording:
    engine: Engine
    graph: Graph
    def __init__(self, engine: Engine) -> None: ...
    def __enter__(self) -> Graph: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
