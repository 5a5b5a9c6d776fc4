"""Constant weights of a graph: :meth:`Graph.freeze` and :meth:`Graph.memory`.

A graph's weights become constant when they move into frozen memory (nnc.tensor.constant): then
a kernel may keep the packed copy it reads them in, run after run, and it can never be stale,
because nothing can write frozen memory (a command writing it is refused, NumPy arrays over it
are read-only). ``Graph.freeze`` chooses what is safe to freeze: tensors no node of the graph or
of its sub-graphs writes, that overlap no tensor written, and that no loop may re-point or
point another tensor at. It re-binds every node reading them, so none keeps reading the memory
they left (a Python backend was bound to its ndarrays). Implemented here and registered with
nnc.graph.graph because it walks while / case..of sub-graphs, which graph.pyx cannot cimport.
"""

from nnc.base.core import GraphError
from nnc.graph.graph import register_freeze
from nnc.graph.subgraph import check_sub_idle
from nnc.tensor.constant import frozen_block

from nnc.cmd.command cimport Cmd
from nnc.graph.graph cimport Graph
from nnc.graph.subgraph cimport ControlNode
from nnc.tensor.constant cimport constant_contains
from nnc.tensor.tensor cimport Tensor, tensor_overlap, tensors_freeze

# Commands whose inputs after the first are weights (and a bias) kernels pack.
_WEIGHTED = ("CONVOLUTION", "GEMM")


cdef list _tree(Graph g):
    """g and every sub-graph of its while / case..of nodes, recursively, parents first."""
    cdef Graph sub
    cdef int i
    out = [g]
    for i in range(g._size):
        fn = (<Cmd>g._cmds[i]).fn
        if isinstance(fn, ControlNode):
            for sub in (<ControlNode>fn).subgraphs():
                out.extend(_tree(sub))
    return out


cdef int _collect(list graphs, list read, list written) except -1:
    """Every tensor the graphs' nodes read (control nodes' expression inputs and carry-overs
    too) and write."""
    cdef Graph sub
    cdef int i
    for sub in graphs:
        for i in range(sub._size):
            read.extend(t for t in sub._inputs[i] if t is not None)
            written.extend(t for t in sub._outputs[i] if t is not None)
            fn = (<Cmd>sub._cmds[i]).fn
            if isinstance(fn, ControlNode):
                read.extend((<ControlNode>fn).tensors())
    return 0


cdef str _why_not(Tensor t, list written, set targets):
    """Why t cannot be frozen in this graph, or None."""
    cdef Tensor w
    if t.t.device >= 0:
        return f"it is a {t.device} tensor (frozen memory is host memory)"
    if t.movable or t._aliases is not None:
        return "a loop may re-point it (a MultiView, a tensor synchronised to one or a " \
               "carry-over's destination): its contents change between iterations"
    if id(t) in targets:
        return "a loop may point another tensor at it (a MultiView version or a carry-over " \
               "source), which the graph may write"
    for w in written:
        if w.t.device < 0 and tensor_overlap(&t.t, &w.t):
            return "a node of the graph writes it (or memory it shares)"
    return None


def graph_freeze(Graph g, tensors=None):
    cdef Graph sub
    cdef Tensor t
    cdef int i, k
    g._enter("freeze it", "being frozen")
    try:
        graphs = _tree(g)
        for sub in graphs[1:]:
            check_sub_idle(sub)
        read, written = [], []
        _collect(graphs, read, written)
        # Every tensor a loop may point some tensor of the graph at (transitively).
        targets = set()
        todo = [x for x in read + written if (<Tensor>x)._aliases is not None]
        seen = set()
        while todo:
            t = todo.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            if t._aliases is not None:
                for x in t._aliases:
                    targets.add(id(x))
                    todo.append(x)
        chosen = {}
        if tensors is None:
            for sub in graphs:
                for i in range(sub._size):
                    if (<Cmd>sub._cmds[i]).info.name not in _WEIGHTED:
                        continue
                    ins = sub._inputs[i]
                    for k in range(1, len(ins)):
                        t = ins[k]
                        if (t is not None and id(t) not in chosen
                                and not (t.t.device < 0 and constant_contains(t.t.data))
                                and _why_not(t, written, targets) is None):
                            chosen[id(t)] = t
        else:
            if isinstance(tensors, Tensor):
                tensors = [tensors]
            for x in tensors:
                if not isinstance(x, Tensor):
                    raise GraphError(f"Graph.freeze takes nnc.Tensors, not {type(x).__name__}")
                t = x
                why = _why_not(t, written, targets)
                if why is not None:
                    raise GraphError(f"cannot freeze {t!r}: {why}")
                if not constant_contains(t.t.data):
                    chosen[id(t)] = t
        frozen = list(chosen.values())
        if not frozen:
            return []
        tensors_freeze(frozen)
        # Re-bind the nodes reading them: C backends follow the tensor header, but a Python
        # backend holds ndarrays of the memory the tensors left.
        for sub in graphs:
            for i in range(sub._size):
                cmd = <Cmd>sub._cmds[i]
                if cmd.info.control:
                    continue            # expressions take their arrays at call time
                if any(t is not None and id(t) in chosen for t in sub._inputs[i]):
                    sub._set_node(i, cmd, list(sub._inputs[i]), list(sub._outputs[i]))
        return frozen
    finally:
        g._leave()


def graph_memory(Graph g):
    read, written = [], []
    _collect(_tree(g), read, written)
    blocks = {}
    for t in read + written:
        b = frozen_block(t)
        if b is not None:
            blocks[b[0]] = b
    return {"frozen_bytes": sum(b[1] for b in blocks.values()),
            "packed_bytes": sum(b[2] for b in blocks.values()),
            "frozen_blocks": len(blocks)}


register_freeze(freeze=graph_freeze, memory=graph_memory)
