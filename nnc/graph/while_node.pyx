"""while nodes (NNC: ccv_nnc_graph_while.c): the loop runner, its body's loop state, and the
selection of multiviews by loop count that every node inside a loop goes through.

A while node is a node of its parent graph whose ``WHILE`` command carries a :class:`WhileNode`
(an nnc.graph.subgraph.ControlNode); the node loop calls it like any Python command.

**while** (:class:`WhileNode`): for count = 0, 1, ...: set the count; if count > 0, apply
the carry-overs; run the body's nodes up to and including the breakpoints (the breakpoints and
all their ancestors in the run order); call ``expr(count, *arrays)``: falsy ends the loop, else
run the remaining nodes and save the carry-overs. ``while_count`` is the count at which the loop
ended, so a leading NOOP breakpoint and ``count < 5`` run the body 5 times and leave 5.

**Multiviews are selected by the nodes that use them** (NNC: ``_ccv_nnc_graph_exec_unwrap_io``):
just before a node of a loop body (or of a sub-graph inside one) runs, every multiview among
its inputs and outputs that is anchored to an enclosing loop is pointed at the version of that
loop's current count; the expression's inputs likewise just before it is called. So when the
final check ends a loop, a multiview that only the tail uses still aliases the version the last
iteration wrote, as in NNC; selecting every version when an iteration begins would move it on.

**Carry-over** ``body.add_carry_over(src, dst)``: from the second iteration on, ``dst`` aliases
the memory ``src`` held at the end of the previous iteration (data pointers move, nothing is
copied). When the loop ends, every ``dst`` aliases its own memory again; NNC leaves it moved,
which only its symbolic layer, with private loop tensors, hides. The read-only flag moves with
the memory, and a node writing ``dst`` is refused (CommandError) if ``src`` may be read-only.

Multiview selection lives here, not in a module of its own, because an anchor is a loop body: a
multiview selects its version by the count of the loop it is anchored to (``count_ptr``);
nnc.graph.case_of and nnc.run.flow call it for the nodes they run.
"""

cimport cython

from libc.stdlib cimport free, malloc

import numpy as np

from nnc.base.core import GraphError
from nnc.cmd.command import Cmd
from nnc.graph.graph import register_while
from nnc.graph.subgraph import check_sub_idle

from nnc.graph.compare cimport Compare
from nnc.graph.graph cimport Graph, GraphExec
from nnc.graph.subgraph cimport ControlNode, as_tensors, check_sub
from nnc.tensor.multiview cimport MV_K1N, MV_PHI, MultiView
from nnc.tensor.tensor cimport Tensor
from nnc.base.trace_switch cimport trace_host, trace_now, trace_on


# -- multiview selection: by the count of the loop a multiview is anchored to ---------------------

cdef list _loop_anchors(Graph g):
    """The loop bodies whose counts select multiviews used in g: g if it is one, and every
    loop body enclosing it (a while body's or case..of branch's parent graph, and so on up)."""
    cdef list out = []
    cdef object h = g
    while h is not None:
        w = (<Graph>h)._loop
        if w is not None and (<WhileNode>w).parent is not None:
            out.append(h)
        h = (<Graph>h)._control_parent
    return out


cdef list _anchored_in(object tensors, list anchors):
    """The K0N/K1N multiviews among ``tensors`` anchored to one of ``anchors``; None if none."""
    cdef list out = None
    for t in tensors:
        if (isinstance(t, MultiView) and (<MultiView>t).kind != MV_PHI
                and any((<MultiView>t).anchor is a for a in anchors)):
            if out is None:
                out = []
            if t not in out:
                out.append(t)
    return out


cdef list node_multiviews(Graph g):
    """Per node index of g: the multiviews that node selects before it runs, or None.

    Computed per run of the loop or branch (cheap: one pass over the IO lists), because the
    enclosing loops can change without g's version changing."""
    cdef list anchors = _loop_anchors(g)
    cdef list out = [None] * g._size
    cdef int i
    if anchors:
        for i in range(g._size):
            out[i] = _anchored_in(g._inputs[i] + g._outputs[i], anchors)
    return out


cdef int select_multiviews(list mvs) except -1:
    """Point each multiview at the version its anchor loop's current count selects."""
    cdef MultiView mv
    for mv in mvs:
        mv.select_count((<WhileNode>(<Graph>mv.anchor)._loop).count_ptr[0])
    return 0


def select_now(list mvs):
    """select_multiviews for a stream task: queued just before the node that uses them."""
    select_multiviews(mvs)


# -- the loop --------------------------------------------------------------------------------------

cdef tuple carried_leaves(Tensor dst):
    """The tensors a carry-over into ``dst`` re-points: dst, or the versions of a multiview
    that counts >= 1 select (a K1N's version 0 is only used at count 0, never carried into)."""
    if not isinstance(dst, MultiView):
        return (dst,)
    vs = (<MultiView>dst).versions
    return vs[1:] if (<MultiView>dst).kind == MV_K1N else vs


cdef Tensor _header_copy(Tensor v):
    """A tensor with v's header as it is now (memory, shape, strides): what v aliases even
    while a loop has re-pointed v itself."""
    cdef Tensor c = Tensor.__new__(Tensor)
    c.t = v.t
    c._owner = v._owner
    c._lo = v._lo
    c._hi = v._hi
    return c


@cython.final
cdef class WhileNode(ControlNode):
    """The runner of a while node; also the loop state of its body (``body._loop``)."""

    def __cinit__(self):
        self.order = NULL
        self.version = -1

    def __dealloc__(self):
        free(self.order)

    def _init(self, Graph body):
        self.parent = None              # set by graph_while
        self.body = body
        self.expr = None
        self.inputs = []
        self.breakpoints = []
        self.carry = []
        self.carry_home = []
        self.count_tensor = Tensor(np.zeros(1, np.int64))
        self.count_ptr = <long long*>self.count_tensor.t.data

    def __call__(self, inputs, outputs):
        self.run()

    cdef list tensors(self):
        return self.inputs + [t for c in self.carry for t in c[:2]]

    cdef list subgraphs(self):
        return [self.body]

    @property
    def while_count(self):
        return int(self.count_ptr[0])

    def set_expr(self, expr, inputs, breakpoints):
        if not callable(expr) and not isinstance(expr, Compare):
            raise GraphError(f"the while expression must be callable or an nnc.Compare, not "
                             f"{type(expr).__name__}")
        ins = as_tensors(inputs, "while expression inputs")
        if isinstance(expr, Compare):
            expr.check(ins, True, f"the while loop over {self.body!r}")
        bps = []
        for b in breakpoints:
            if not isinstance(b, GraphExec) or (<GraphExec>b).graph is not self.body:
                raise GraphError(f"breakpoint {b!r} is not a node of the loop body")
            bps.append((<GraphExec>b).index)
        if not bps:
            raise GraphError("a while loop needs at least one breakpoint (NNC: the node after "
                             "which the expression is evaluated)")
        self.expr = expr
        self.cond = expr if isinstance(expr, Compare) else None
        self.inputs = ins
        self.breakpoints = bps
        self.version = -1
        self.key += 1

    def add_carry_over(self, src, dst):
        for t, what in ((src, "source"), (dst, "destination")):
            if not isinstance(t, Tensor):
                raise GraphError(f"carry-over {what} must be an nnc.Tensor, not "
                                 f"{type(t).__name__}")
        if src is dst:
            raise GraphError("a carry-over from a tensor to itself does nothing")
        if ((src.shape, src.dtype, src.strides, src.format)
                != (dst.shape, dst.dtype, dst.strides, dst.format)):
            raise GraphError(f"carry-over from {src.shape} {src.dtype} {src.format} to "
                             f"{dst.shape} {dst.dtype} {dst.format}: both must have one shape, "
                             "dtype, format and layout")
        for v in ([dst] if not isinstance(dst, MultiView) else list(dst.versions)):
            (<Tensor>v)._make_movable()
            (<Tensor>v)._may_alias(<Tensor>src)   # so a node writing dst sees src read-only
        for v in carried_leaves(dst):
            self.carry_home.append(_header_copy(v))
        # ``saved`` starts as a copy of src's header (shape, dtype, memory): a whole tensor, so
        # debug.check() finds no half-made header on a live loop; _carry_save re-points it
        # before _carry_in first reads it.
        self.carry.append((src, dst, _header_copy(<Tensor>src)))
        self.version = -1

    cdef int _prepare(self) except -1:
        if self.expr is None:
            raise GraphError(f"the while loop over {self.body!r} has no expression; call "
                             "body.set_while_expr(expr, inputs, breakpoints)")
        if self.parent is None:
            raise GraphError(f"{self.body!r} is not the body of a while node; add it with "
                             "parent.while_(body)")
        self.body._prepare()
        return self._layout()

    cdef int check(self) except -1:
        """Raise GraphError if the loop cannot run (no expression, not a node's body)."""
        return self._prepare()

    cdef long schedule_key(self):
        """What a schedule of the body depends on besides its version (-1: no breakpoints)."""
        return self.key if self.expr is not None else -1

    cdef tuple split_order(self):
        """(body run order with the head first, head length, key) for static_schedule."""
        self.body._prepare()
        self._layout()
        return [self.order[k] for k in range(self.order_size)], self.split, self.key

    cdef int _layout(self) except -1:
        """Split the body's run order: breakpoints and their ancestors first (cached)."""
        cdef Graph body = self.body
        cdef int i, k, n
        cdef char* before
        if self.version == body.version:
            return 0
        n = body._order_size
        order = [body._order[k] for k in range(n)]
        pos = {idx: k for k, idx in enumerate(order)}
        for b in self.breakpoints:
            if b not in pos:
                raise GraphError(f"breakpoint {body._label(b)} is not on a source-to-"
                                 "destination path of the body, so it would never run")
        # The breakpoints and their ancestors run before the expression, in run order.
        before = <char*>malloc(body._size + 1)
        if before == NULL:
            raise MemoryError()
        try:
            for i in range(body._size):
                before[i] = 0
            for b in self.breakpoints:
                before[<int>b] = 1
            for k in range(n - 1, -1, -1):
                i = order[k]
                if before[i]:
                    continue
                for j in GraphExec._new(body, i).outgoings:
                    if before[(<GraphExec>j).index]:
                        before[i] = 1
                        break
            first = [i for i in order if before[i]]
            rest = [i for i in order if not before[i]]
        finally:
            free(before)
        free(self.order)
        self.order = <int*>malloc(sizeof(int) * (n + 1))
        if self.order == NULL:
            raise MemoryError()
        for k, i in enumerate(first + rest):
            self.order[k] = i
        self.order_size = n
        self.split = len(first)
        self.version = body.version
        return 0

    cdef int _find_multiviews(self) except -1:
        """Once per run, not cached: nested sub-graphs can gain multiviews anchored here
        without this body's version changing."""
        self.node_mvs = node_multiviews(self.body)
        self.expr_mvs = _anchored_in(self.inputs, _loop_anchors(self.body))
        return 0

    cdef bint _eval(self, long long count) except -1:
        if self.expr_mvs is not None:
            select_multiviews(self.expr_mvs)
        if self.cond is not None:
            return (<Compare>self.cond).holds(count, self.inputs)
        if self.inputs:
            return bool(self.expr(count, *[(<Tensor>t).numpy() for t in self.inputs]))
        return bool(self.expr(count))

    cdef int _run_body_node(self, int idx, bint traced) except -1:
        cdef list mvs = <list>self.node_mvs[idx]
        if mvs is not None:
            select_multiviews(mvs)
        if traced:
            return self.body._run_node_traced(idx)
        return self.body._run_node(idx)

    cdef int _carry_in(self, long long count) except -1:
        """Point each destination at the memory its source held at the previous iteration.
        A multiview destination's version for this count moves (NNC: the "to" leaf), whether
        or not a node has selected it yet."""
        cdef MultiView mv
        cdef int i
        for _src, dst, saved in self.carry:
            if isinstance(dst, MultiView):
                mv = dst
                i = mv.version_at(count)
                (<Tensor>mv.versions[i])._point_to(saved)
                if mv.current == i:
                    mv.refresh()
            else:
                (<Tensor>dst)._point_to(saved)
        return 0

    cdef int _carry_save(self, long long count) except -1:
        """Remember each source's memory at the end of iteration ``count`` (for a multiview
        source: its version for this count, NNC's "from" leaf)."""
        cdef MultiView mv
        for src, _dst, saved in self.carry:
            if isinstance(src, MultiView):
                mv = src
                (<Tensor>saved)._point_to(<Tensor>mv.versions[mv.version_at(count)])
            else:
                (<Tensor>saved)._point_to(src)
        return 0

    def run(self):
        """Run the loop to its end on the calling thread (NNC: the sequential while path)."""
        cdef long long count = 0
        cdef int k
        cdef bint traced = trace_on     # nnc.trace: body nodes in "iteration N" slices
        cdef double t0 = 0
        check_sub_idle(self.body)
        self._prepare()
        self._find_multiviews()
        originals = self._save_originals()
        try:
            while True:
                if traced:
                    t0 = trace_now()
                self.count_ptr[0] = count
                if count > 0 and self.carry:
                    self._carry_in(count)
                for k in range(self.split):
                    self._run_body_node(self.order[k], traced)
                if not self._eval(count):
                    if traced:
                        trace_host(f"iteration {count}", "loop", t0, trace_now(), {"last": 1})
                    break
                for k in range(self.split, self.order_size):
                    self._run_body_node(self.order[k], traced)
                if self.carry:
                    self._carry_save(count)
                if traced:
                    trace_host(f"iteration {count}", "loop", t0, trace_now(), None)
                count += 1
        finally:
            self._restore_originals(originals)

    # -- the steps of a loop driven by nnc.run.flow: queued on the node's stream ------------

    cdef list start(self):
        """Before the first iteration (host side): prepare; the carry-over tensors' memory.
        Afterwards ``node_mvs`` holds, per body node, the multiviews to select just before it
        runs (or None); an iteration's bookkeeping needs Python only if ``carry`` is set,
        else it is only the count, which a stream stores in C."""
        check_sub_idle(self.body)
        self._prepare()
        self._find_multiviews()
        return self._save_originals()

    def _iter_begin(self, long long count):
        """On the stream, before iteration ``count``'s nodes: count, carry-in."""
        self.count_ptr[0] = count
        if count > 0 and self.carry:
            self._carry_in(count)

    def _iter_end(self, long long count):
        """On the stream, after iteration ``count``'s nodes: remember the carry-over sources."""
        self._carry_save(count)

    def _finish(self, list originals):
        """On the stream, after the last iteration: carry-over tensors get their memory back."""
        self._restore_originals(originals)

    @property
    def has_carry(self):
        return bool(self.carry)

    cdef list _save_originals(self):
        cdef list out = []
        if not self.carry:
            return out
        for _src, dst, _saved in self.carry:
            leaves = (<MultiView>dst).versions if isinstance(dst, MultiView) else (dst,)
            for v in leaves:
                snap = Tensor.__new__(Tensor)
                (<Tensor>snap)._point_to(v)
                out.append((v, snap))
        return out

    cdef int _restore_originals(self, list originals) except -1:
        cdef MultiView mv
        for v, snap in originals:
            (<Tensor>v)._point_to(snap)
        for _src, dst, _saved in self.carry:
            if isinstance(dst, MultiView):
                mv = dst
                mv.refresh()
        return 0


def graph_while(Graph parent, body, name=None):
    """Graph.while_: add a node running ``body`` as a loop."""
    check_sub(parent, body, "while body")
    w = (<Graph>body)._loop
    if w is not None and (<WhileNode>w).parent is not None:
        raise GraphError(f"{body!r} is already the body of a while node")
    if w is None:
        w = WhileNode()
        w._init(body)
    (<WhileNode>w).parent = parent
    e = parent._exec_control(Cmd("WHILE", fn=w), [], [], name)
    (<Graph>body)._loop = w
    (<Graph>body)._control_parent = parent
    return e


cdef WhileNode loop_of(Graph body):
    """The loop state of body, made on first use (set_while_expr may precede while_)."""
    cdef WhileNode w
    if body._loop is None:
        w = WhileNode()
        w._init(body)
        body._loop = w
    return <WhileNode>body._loop


def body_set_while_expr(Graph body, expr, inputs, breakpoints):
    loop_of(body).set_expr(expr, inputs, breakpoints)


def body_add_carry_over(Graph body, src, dst):
    loop_of(body).add_carry_over(src, dst)


def body_while_count(Graph body):
    return loop_of(body).while_count


def body_count_tensor(Graph body):
    return loop_of(body).count_tensor


# Graph's loop methods (the graph layer cannot import this module, which builds on it).
register_while(
    while_=graph_while, set_while_expr=body_set_while_expr, add_carry_over=body_add_carry_over,
    while_count=body_while_count, count_tensor=body_count_tensor)
