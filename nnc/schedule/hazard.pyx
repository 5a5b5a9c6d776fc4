"""Data hazards: pairs of nodes with no path between them that touch overlapping memory, at
least one writing (read-after-write, write-after-read, write-after-write). The graph's edges are
the only order a schedule keeps, so such a pair races once its nodes land on two streams, and
``g.run()`` gives it an arbitrary order. No NNC counterpart (NNC trusts the edges); the idea is
MXNet's engine, which orders work by the variables it reads and mutates.

Memory is compared as byte ranges [lo, hi) of each tensor's elements (tensor.pyx's extent: views,
strides and separate Tensors over one NumPy buffer included) per device, so it is conservative
for interleaved strided views. A while or case..of node touches the tensors of its sub-graphs
too, and a MultiView every version it may select.

Cost: accesses are sorted by range and swept, so only overlapping pairs are looked at; accesses
with the same range are checked in run order against the last writer and the readers since
(every pair of them is then ordered by transitivity), and all their pairs are listed only when
that finds a hazard. Each remaining question "is u before v?" is a backward search of the graph
from v that never goes below u's position, one per v for all its questions.
"""

from collections import namedtuple

from nnc.cmd.command cimport Cmd
from nnc.graph.subgraph cimport ControlNode
from nnc.graph.graph cimport EXEC_CONTROL, Graph, GraphExec
from nnc.tensor.multiview cimport MultiView
from nnc.tensor.tensor cimport Tensor

Hazard = namedtuple("Hazard", ["kind", "first", "second", "tensors"])
Hazard.__doc__ = """Two unordered nodes touching overlapping memory. ``kind``: "read-after-write",
"write-after-read" or "write-after-write", reading ``first`` (earlier in the run order) before
``second``; ``tensors``: the overlapping (first's tensor, second's tensor)."""

_KINDS = {(1, 0): "read-after-write", (0, 1): "write-after-read", (1, 1): "write-after-write"}


cdef tuple _extent(Tensor t):
    """(device, lo, hi): the bytes t's elements occupy (strides may be negative)."""
    cdef Py_ssize_t lo = <Py_ssize_t>t.t.data, hi = lo, i
    if t.t.count == 0:
        return None
    for i in range(t.t.ndim):
        if t.t.stride[i] < 0:
            lo += (t.t.dim[i] - 1) * t.t.stride[i] * t.t.itemsize
        else:
            hi += (t.t.dim[i] - 1) * t.t.stride[i] * t.t.itemsize
    return (t.t.device, lo, hi + t.t.itemsize)


cdef int _touch(list out, object t, int pos, int write) except -1:
    if t is None or not isinstance(t, Tensor):
        return 0
    ext = _extent(<Tensor>t)
    if ext is not None:
        out.append((ext, pos, write, t))
    if isinstance(t, MultiView):
        for v in (<MultiView>t).versions:
            _touch(out, v, pos, write)
    return 0


cdef int _touch_graph(list out, Graph g, int pos, set seen) except -1:
    """Every tensor of g's nodes, recursively through sub-graphs, as accesses of ``pos``."""
    cdef int i
    if g in seen:
        return 0
    seen.add(g)
    for i in range(g._size):
        for t in g._inputs[i]:
            _touch(out, t, pos, 0)
        for t in g._outputs[i]:
            _touch(out, t, pos, 1)
        if g._nodes[i].flags & EXEC_CONTROL:
            for sub in (<ControlNode>(<Cmd>g._cmds[i]).fn).subgraphs():
                _touch_graph(out, sub, pos, seen)
    return 0


cdef class _Order:
    """Reachability over the run order: predecessors by position, backward searches."""
    cdef Graph g
    cdef list pred                      # per position: predecessor positions
    cdef list mark                      # per position: the search that reached it
    cdef int stamp

    def __init__(self, Graph g, dict pos):
        cdef int k, j, v
        self.g = g
        self.pred = [[] for _ in range(g._order_size)]
        self.mark = [-1] * g._order_size
        for k in range(g._order_size):
            x = g._order[k]
            for j in range(g._nodes[x].outgoing_size):
                v = pos.get(g._nodes[x].outgoings[j], -1)
                if v >= 0:
                    self.pred[v].append(k)

    cdef int ancestors(self, int v, int lo) except -1:
        """Mark (with a new stamp) every position >= lo with a path to v; returns the stamp."""
        self.stamp += 1
        stack = [v]
        mark = self.mark
        while stack:
            x = stack.pop()
            for p in self.pred[x]:
                if p >= lo and mark[p] != self.stamp:
                    mark[p] = self.stamp
                    stack.append(p)
        return self.stamp


def graph_hazards(Graph g not None):
    """Every data hazard of g's run: a list of :class:`Hazard`, in run order; [] when every
    pair of nodes touching overlapping memory, one of them writing, is ordered by a path."""
    cdef int k, i
    if g._dirty:
        g._compile()
    pos = {g._order[k]: k for k in range(g._order_size)}
    acc = []
    for k in range(g._order_size):
        i = g._order[k]
        for t in g._inputs[i]:
            _touch(acc, t, k, 0)
        for t in g._outputs[i]:
            _touch(acc, t, k, 1)
        if g._nodes[i].flags & EXEC_CONTROL:
            seen = {g}
            for sub in (<ControlNode>(<Cmd>g._cmds[i]).fn).subgraphs():
                _touch_graph(acc, sub, k, seen)
    # Runs of accesses with one range, each in run order; runs sorted by (device, lo).
    acc.sort(key=lambda a: (a[0], a[1]))
    runs = []
    last = None
    for a in acc:
        if last is not None and last[0] == a[0]:
            last[1].append(a)
        else:
            last = (a[0], [a])
            runs.append(last)
    # Questions "is there a path u -> v?" (u before v), by v. Every access of one run, or of
    # two runs whose ranges overlap, overlaps every other: check each such clique.
    asks = {}
    opened = []
    for r in runs:
        dev, lo = r[0][0], r[0][1]
        _clique(r[1], asks)
        opened = [o for o in opened if o[0][0] == dev and o[0][2] > lo]
        for o in opened:
            _clique(sorted(o[1] + r[1], key=lambda a: a[1]), asks)
        opened.append(r)
    order = _Order(g, pos)
    found = {}
    for v in sorted(asks):
        qs = asks[v]
        stamp = order.ancestors(v, min(q[0][1] for q in qs))
        for a, b in qs:
            if order.mark[a[1]] != stamp:
                found.setdefault((a[1], b[1], a[2], b[2]), (a[3], b[3]))
    out = []
    for (u, v, wu, wv), tensors in sorted(found.items()):
        out.append(Hazard(_KINDS[(wu, wv)], GraphExec._new(g, g._order[u]),
                          GraphExec._new(g, g._order[v]), tensors))
    return out


def hazards_message(Graph g not None, list hazards):
    """One line naming each hazard's nodes and tensors (the first 10)."""
    parts = [f"{h.kind} between {g._label(h.first.index)} and {g._label(h.second.index)} "
             f"on {h.tensors[0]!r} / {h.tensors[1]!r}" for h in hazards[:10]]
    more = f"; and {len(hazards) - 10} more" if len(hazards) > 10 else ""
    return ("data hazards (nodes with no path between them touching overlapping memory, one "
            "writing; add an edge with concat): " + "; ".join(parts) + more)


cdef int _ask(tuple a, tuple b, dict asks) except -1:
    """Queue the question for accesses a and b if they are a hazard unless ordered."""
    if a[1] == b[1] or not (a[2] or b[2]):
        return 0
    if a[1] > b[1]:
        a, b = b, a
    asks.setdefault(b[1], []).append((a, b))
    return 0


cdef int _clique(list accs, dict asks) except -1:
    """Accesses that all overlap, in run order. Up to 64 of them: every pair (so every hazard
    is listed). More: each against the last writer and the readers since, which
    orders every pair by transitivity when all hold, so a hazard is found if there is one."""
    cdef int x, y, n = len(accs)
    if n <= 64:
        for x in range(n):
            for y in range(x + 1, n):
                _ask(accs[x], accs[y], asks)
        return 0
    writer = None
    readers = []
    for a in accs:
        if writer is not None:
            _ask(writer, a, asks)
        if a[2]:
            for r in readers:
                _ask(r, a, asks)
            writer, readers = a, []
        else:
            readers.append(a)
    return 0
