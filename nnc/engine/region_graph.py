"""Recording an engine region as a concrete graph (``with engine.record() as g``).

The bridge neither MXNet nor NNC has: ops pushed to the dynamic engine become nodes of a
``Graph`` whose edges are the read/mutate conflicts between them, reduced to the minimal set
(no edge another path implies), so ``nnc.static_schedule(g)`` and ``g.run(stream=s)`` replay
the region without the engine. docs/engine.md, "Record".

Named for what it makes, the graph of a region: ``engine.record()`` keeps MXNet's public name,
while in nnc's modules a "record" is a signal record (nnc.stream.record).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnc.base.core import EngineError
from nnc.cmd.command import Cmd
from nnc.engine.call import call_tensor
from nnc.engine.engine import Engine
from nnc.graph.graph import Graph, GraphExec

if TYPE_CHECKING:
    from types import TracebackType

    import numpy as np


class _PyCall:
    """A recorded Python fn op (or delete_var's on_delete): ``fn()``."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, inputs: list[np.ndarray | None], outputs: list[np.ndarray | None]) -> None:
        self.fn()


def _node(g: Graph, entry: tuple[Any, ...]) -> GraphExec:
    kind, what, extra, name = entry[0], entry[1], entry[2], entry[5]
    if kind == "cmd":
        ins, outs = extra
        return g.exec(what, ins, outs, name=name)
    if kind == "c":                     # a C node: called without the GIL on replay
        call = call_tensor(entry[6], entry[7], keep=(what, extra))
        return g.exec(Cmd("ENGINE_CALL"), [call], [], name=name)
    if what is None:                    # delete_var without on_delete
        return g.exec(Cmd("NOOP"), [], [], name=name)
    return g.exec(Cmd.custom(_PyCall(what)), [], [], name=name)


def direct_deps(entries: list[tuple[Any, ...]]) -> list[set[int]]:
    """For each entry (…, reads, mutates), the earlier entries it conflicts with, by the
    engine's own rule: the last writer of what it reads (RAW), the last writer and the
    readers since of what it mutates (WAW, WAR)."""
    writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    deps: list[set[int]] = []
    for i, entry in enumerate(entries):
        reads, muts = entry[3], entry[4]
        d: set[int] = set()
        for v in reads:
            if id(v) in writer:
                d.add(writer[id(v)])
        for v in muts:
            if id(v) in writer:
                d.add(writer[id(v)])
            d.update(readers.get(id(v), ()))
        for v in reads:
            readers.setdefault(id(v), []).append(i)
        for v in muts:
            writer[id(v)] = i
            readers[id(v)] = []
        deps.append(d)
    return deps


def reduce_edges(deps: list[set[int]]) -> list[tuple[int, int]]:
    """The transitive reduction of a DAG given in topological order: keep j -> i only if no
    other predecessor of i has j as an ancestor (ancestor sets as integer bitsets)."""
    ancestors: list[int] = []
    edges: list[tuple[int, int]] = []
    for i, d in enumerate(deps):
        covered = 0
        mine = 0
        for j in d:
            covered |= ancestors[j]
            mine |= ancestors[j] | (1 << j)
        edges.extend((j, i) for j in sorted(d) if not (covered >> j) & 1)
        ancestors.append(mine)
    return edges


class Recording:
    """The context manager ``Engine.record()`` returns; ``__enter__`` gives the Graph, which
    receives the region's ops and edges when the region ends."""

    def __init__(self, engine: Engine) -> None:
        if not isinstance(engine, Engine):
            raise EngineError(f"a Recording records an nnc.Engine, not {type(engine).__name__}")
        self.engine = engine
        self.graph = Graph()

    def __enter__(self) -> Graph:
        if "engine" not in vars(self):
            raise EngineError("this Recording was not made by Engine.record() (its __init__ "
                              "never ran)")
        self.engine._record_start()
        return self.graph

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        entries = self.engine._record_stop()
        if exc_type is not None:
            return
        nodes = [_node(self.graph, entry) for entry in entries]
        for j, i in reduce_edges(direct_deps(entries)):
            self.graph.concat(nodes[j], nodes[i])
