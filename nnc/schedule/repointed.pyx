"""What a while or case..of node re-points while it runs, and the pairs of nodes a static schedule
must therefore order although no path joins them (:func:`moved_tensor_pairs`, called by the
builder, nnc/schedule/builder.pyx).

A loop's carry-overs and multiview selection, and a branch's PHI outputs, move tensor headers
(nnc.graph.while_node, nnc.graph.case_of); the sequential run never overlaps them with another
node, a run on several streams would unless the schedule orders them.
"""

from nnc.graph.case_of cimport CaseOfNode
from nnc.graph.graph cimport Graph
from nnc.graph.subgraph cimport ControlNode
from nnc.graph.while_node cimport WhileNode, carried_leaves
from nnc.tensor.multiview cimport MultiView
from nnc.tensor.tensor cimport Tensor, tensor_overlap


cdef list _node_tensors(Graph g, int idx):
    """Every tensor node idx of g reads or writes, with those of its sub-graphs' nodes."""
    cdef Graph sub
    cdef int i
    cdef list out = [t for t in g._inputs[idx] + g._outputs[idx] if t is not None]
    fn = g._cmds[idx].fn
    if isinstance(fn, ControlNode):
        out.extend((<ControlNode>fn).tensors())
        for sub in (<ControlNode>fn).subgraphs():
            for i in range(sub._size):
                out.extend(_node_tensors(sub, i))
    return out


cdef int _add_moved(Tensor t, dict moved) except -1:
    moved[id(t)] = t
    if isinstance(t, MultiView):
        for s in (<MultiView>t)._synced:
            moved[id(s)] = s
    return 0


cdef int _moved_by(ControlNode fn, dict moved, list homes) except -1:
    """The tensors whose headers a run of control node ``fn`` re-points (``moved``, by id):
    carry-over destinations (a multiview's carried versions too), the multiviews anchored to a loop
    body inside it and PHI outputs, with the tensors synchronised to them. ``homes``: copies
    of the carry-over destinations' own headers (their memory)."""
    cdef WhileNode w
    cdef Graph sub
    cdef int i
    if isinstance(fn, WhileNode):
        w = fn
        for _src, dst, _saved in w.carry:
            _add_moved(dst, moved)
            for v in carried_leaves(dst):
                _add_moved(v, moved)
        homes.extend(w.carry_home)
        inside = list(w.inputs)
        for i in range(w.body._size):
            inside.extend(_node_tensors(w.body, i))
        for t in inside:
            if isinstance(t, MultiView) and (<MultiView>t).anchor is w.body:
                _add_moved(t, moved)
    else:
        for mv in (<CaseOfNode>fn).phis:
            _add_moved(mv, moved)
    for sub in fn.subgraphs():
        for i in range(sub._size):
            inner = sub._cmds[i].fn
            if isinstance(inner, ControlNode):
                _moved_by(inner, moved, homes)
    return 0


cdef object _touches(list tensors, dict moved, list homes):
    """The first of ``tensors`` that is in ``moved`` or shares memory with a home, or None."""
    cdef Tensor h
    for t in tensors:
        if id(t) in moved:
            return t
        leaves = (<MultiView>t).versions if isinstance(t, MultiView) else (t,)
        for v in leaves:
            for h in homes:
                if tensor_overlap(&(<Tensor>v).t, &h.t):
                    return t
    return None


def moved_tensor_pairs(Graph g, list order):
    """Pairs of g's nodes a static schedule must order although no path joins them.

    A while or case..of node re-points tensor headers while it runs (carry-overs, multiview
    selection, PHI outputs). A node on another stream that reads or writes such a tensor (or
    the memory of a carry-over destination) at the same time would see whichever memory the
    header holds at that instant. For each such unordered pair (control node, node) this
    returns (earlier, later, tensor) by position in ``order``: ordering them the way the
    sequential run (which also follows ``order``) does keeps every result the same.
    """
    cdef int n = g._size, m = len(order), k, i, j, x
    pos = [-1] * n
    for k in range(m):
        pos[order[k]] = k
    preds = [[] for _ in range(n)]
    for i in order:
        for j in range(g._nodes[<int>i].outgoing_size):
            x = g._nodes[<int>i].outgoings[j]
            if pos[x] >= 0:
                preds[x].append(i)
    pairs = []
    touched = None
    for ctl in order:
        fn = g._cmds[<int>ctl].fn
        if not isinstance(fn, ControlNode):
            continue
        moved, homes = {}, []
        _moved_by(fn, moved, homes)
        if not moved and not homes:
            continue
        if touched is None:
            touched = {i: _node_tensors(g, <int>i) for i in order}
        # Nodes joined to ctl by a path either way are ordered already.
        joined = {ctl}
        todo = [ctl]
        while todo:
            i = todo.pop()
            for j in range(g._nodes[<int>i].outgoing_size):
                x = g._nodes[<int>i].outgoings[j]
                if pos[x] >= 0 and x not in joined:
                    joined.add(x)
                    todo.append(x)
        back = {ctl}
        todo = [ctl]
        while todo:
            i = todo.pop()
            for x in preds[<int>i]:
                if x not in back:
                    back.add(x)
                    todo.append(x)
        for other in order:
            if other in joined or other in back:
                continue
            t = _touches(touched[other], moved, homes)
            if t is not None:
                a, b = (ctl, other) if pos[ctl] < pos[other] else (other, ctl)
                pairs.append((a, b, t))
    return pairs
