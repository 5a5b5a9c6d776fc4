"""while and case..of sub-graphs (NNC: ccv_nnc_graph_while.c, ccv_nnc_graph_case_of.c).

A while or case..of node is a node of its parent graph whose command (``WHILE``, ``CASE_OF``)
carries a runner object from this module; the node loop calls it like any Python command, so
the parent's C loop needs nothing special.

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

**case..of** (:class:`CaseOfNode`): ``index = offset + expr(*arrays)``; index >= 0 runs that
branch graph fully (an index with no branch raises GraphError; NNC has undefined behaviour),
index < 0 runs nothing. Then every PHI multiview among the node's outputs selects its branch
version (1) or its fallback input (0).

**Declarative expressions** (:class:`Compare`): instead of a Python callable, a loop or branch
may take ``Compare(lhs, op, value)``, the loop count or the one element of an expression input
compared with a constant. The host evaluates it exactly as the device does (the same
conversions), so it means the same on a CPU, on a host-driven GPU run and inside a captured
CUDA graph, where nnc.cuda.graph compiles it into a condition kernel.
"""

cimport cython

from libc.stdlib cimport free, malloc

import numpy as np

from nnc.base.core import GraphError, error_repr
from nnc.cmd.command import Cmd
from nnc.graph.graph import register_control

from nnc.cmd.command cimport tensor_list
from nnc.graph.graph cimport Graph, GraphExec
from nnc.tensor.multiview cimport MV_K1N, MV_PHI, MultiView
from nnc.tensor.tensor cimport Tensor, tensor_overlap
from nnc.base.trace_switch cimport trace_host, trace_now, trace_on


# Compare's operators, in the order of their codes in the condition kernel (nnc/cuda/graph.py).
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
# The dtypes a compared input may have, in the order of their codes in the condition kernel.
COMPARE_DTYPES = ("float32", "float64", "int32", "int64")


@cython.final
cdef class Compare:
    """A declarative loop or branch expression: ``lhs op value``.

    ``lhs`` is ``"count"`` (a while loop's count, NNC's ``ccv_nnc_tensor_for_while_count``) or
    ``i``, the index of an expression input, whose one element is compared (NNC's expression
    sees ``inputs[i]->data``); ``op`` one of ``< <= > >= == !=``; ``value`` an int or float
    constant. A while loop goes on while it holds; a case..of takes ``offset + 1`` when it
    holds, else ``offset``. When the element is an integer (the count, an int32 or int64 input)
    and ``value`` an int, they compare exactly; otherwise both are converted to float64 first,
    on the host as on the device. A NaN compares false except with ``!=``.
    """

    cdef readonly object lhs            # "count" or an input index >= 0
    cdef readonly str op                # one of COMPARE_OPS
    cdef readonly object value          # an int or a float

    def __init__(self, lhs, op, value):
        if not (lhs == "count" if isinstance(lhs, str) else
                isinstance(lhs, int) and not isinstance(lhs, bool) and lhs >= 0):
            raise GraphError(f"Compare's left side must be 'count' or the index (>= 0) of an "
                             f"expression input, not {lhs!r}")
        if op not in COMPARE_OPS:
            raise GraphError(f"Compare's operator must be one of {' '.join(COMPARE_OPS)}, not "
                             f"{op!r}")
        numbers = (int, float, np.integer, np.floating)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers):
            raise GraphError(f"Compare's value must be an int or a float, not {value!r}")
        if isinstance(value, (int, np.integer)):
            value = int(value)
            if not -2 ** 63 <= value < 2 ** 63:
                raise GraphError(f"Compare's value {value} does not fit in 64 bits")
        else:
            value = float(value)
        self.lhs, self.op, self.value = lhs, op, value

    def __repr__(self):
        lhs = "count" if self.lhs == "count" else f"inputs[{self.lhs}][0]"
        return f"nnc.Compare({lhs} {self.op} {self.value!r})"

    def __reduce__(self):
        return Compare, (self.lhs, self.op, self.value)

    def check(self, list inputs, bint has_count, str what):
        """GraphError unless this expression can read what it names among ``inputs``."""
        if self.lhs == "count":
            if not has_count:
                raise GraphError(f"{what}: a case..of expression has no loop count; compare an "
                                 "input instead")
            return
        if self.lhs >= len(inputs):
            raise GraphError(f"{what}: {self!r} reads input {self.lhs}, but the expression has "
                             f"{len(inputs)} input(s)")
        t = <Tensor>inputs[self.lhs]
        if t.size != 1 or t.dtype.name not in COMPARE_DTYPES:
            raise GraphError(f"{what}: {self!r} compares one element: input {self.lhs} must "
                             f"have exactly one element of {', '.join(COMPARE_DTYPES)}, not "
                             f"{t!r}")

    def exact(self, list inputs):
        """Whether the comparison is of two integers (else of two float64s)."""
        if not isinstance(self.value, int):
            return False
        return self.lhs == "count" or (<Tensor>inputs[self.lhs]).dtype.kind == "i"

    def holds(self, long long count, list inputs):
        """Evaluate on the host (a GPU input is copied to the host first: wait for the stream
        writing it before). Mirrors the condition kernel's conversions exactly."""
        cdef object x, a, b             # Python ints stay exact (not inferred as C doubles)
        if self.lhs == "count":
            x = count
        else:
            x = (<Tensor>inputs[self.lhs]).numpy().reshape(-1)[0]
        if self.exact(inputs):
            a, b = int(x), self.value
        else:
            a, b = float(x), float(self.value)
        op = self.op
        if op == "<":
            return a < b
        if op == "<=":
            return a <= b
        if op == ">":
            return a > b
        if op == ">=":
            return a >= b
        if op == "==":
            return a == b
        return a != b


cdef int _check_sub(Graph parent, object sub, str what) except -1:
    if not isinstance(sub, Graph):
        raise GraphError(f"{what} must be an nnc.Graph, not {type(sub).__name__}")
    if sub is parent:
        raise GraphError(f"a graph cannot be its own {what}")
    p = parent
    while p is not None:
        if p is sub:
            raise GraphError(f"{what} {sub!r} encloses this graph: nesting would loop forever")
        p = (<Graph>p)._control_parent
    owner = (<Graph>sub)._control_parent
    if owner is not None and owner is not parent:
        raise GraphError(f"{sub!r} already belongs to a node of another graph; a sub-graph "
                         "has one parent node")
    return 0


def check_sub_idle(Graph sub):
    """Before a loop body or branch runs as part of its parent: refuse if it is running on its
    own (a run of its own on a stream, or a call on a thread), whose tasks borrow its arrays.
    (The reverse, a sub-graph started while its parent runs, Graph._check_idle refuses.)"""
    if sub._inflight:
        raise GraphError(f"sub-graph {sub!r} runs on its own on {sub._inflight_stream!r}; wait "
                         "for that stream before running the graph enclosing it")
    if sub._busy is not None:
        raise GraphError(f"sub-graph {sub!r} runs on its own ({sub._busy}) on a thread; wait "
                         "for it before running the graph enclosing it")


cdef list _as_tensors(object items, str what):
    """tensor_list (a Tensor, an ndarray or a list of them), with no absent (None) entries."""
    cdef list out = tensor_list(items, what)
    if any(t is None for t in out):
        raise GraphError(f"{what} cannot be None")
    return out


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


cdef tuple _carried_leaves(Tensor dst):
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


cdef class ControlNode:
    """What every while and case..of runner offers the runner, the scheduler and the tools."""

    cdef int check(self) except -1:
        raise NotImplementedError

    cdef list subgraphs(self):
        raise NotImplementedError

    cdef list tensors(self):
        raise NotImplementedError


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
        ins = _as_tensors(inputs, "while expression inputs")
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
        if (src.shape, src.dtype, src.strides) != (dst.shape, dst.dtype, dst.strides):
            raise GraphError(f"carry-over from {src.shape} {src.dtype} to {dst.shape} "
                             f"{dst.dtype}: both must have one shape, dtype and layout")
        for v in ([dst] if not isinstance(dst, MultiView) else list(dst.versions)):
            (<Tensor>v)._make_movable()
            (<Tensor>v)._may_alias(<Tensor>src)   # so a node writing dst sees src read-only
        for v in _carried_leaves(dst):
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


@cython.final
cdef class CaseOfNode(ControlNode):
    """The runner of a case..of node."""

    def _init(self, Graph parent, list inputs, list outputs):
        self.parent = parent
        self.expr = None
        self.offset = 0
        self.branches = {}
        self.inputs = inputs
        self.phis = [t for t in outputs
                     if isinstance(t, MultiView) and (<MultiView>t).kind == MV_PHI]
        self.last_index = -1

    def __call__(self, inputs, outputs):
        self.run()

    cdef list tensors(self):
        return self.inputs

    cdef list subgraphs(self):
        return list(self.branches.values())

    cdef list branch_items(self):
        """(index, branch graph) pairs in index order (Graph.dot draws them)."""
        return sorted(self.branches.items())

    def set_expr(self, expr, offset):
        if not callable(expr) and not isinstance(expr, Compare):
            raise GraphError(f"the case..of expression must be callable or an nnc.Compare, not "
                             f"{type(expr).__name__}")
        if isinstance(expr, Compare):
            expr.check(self.inputs, False, f"case..of node {self.parent._label(self.index)}")
        self.expr = expr
        self.cond = expr if isinstance(expr, Compare) else None
        self.offset = int(offset)

    def set_branch(self, branch, index):
        i = int(index)
        if i < 0:
            raise GraphError(f"case..of branch index must be >= 0, not {index}")
        _check_sub(self.parent, branch, "case..of branch")
        old = self.branches.get(i)
        if old is not None and old is not branch:
            (<Graph>old)._control_parent = None
        (<Graph>branch)._control_parent = self.parent
        self.branches[i] = branch

    cdef int check(self) except -1:
        if self.expr is None:
            raise GraphError(f"case..of node {self.parent._label(self.index)} has no "
                             "expression; call set_case_of_expr(node, expr, offset)")
        return 0

    def run(self):
        cdef Graph b
        cdef int k, idx
        cdef bint traced = trace_on     # nnc.trace: the branch's nodes in a "branch i" slice
        cdef double t0 = trace_now() if traced else 0
        branch = self.choose()
        if branch is not None:
            b = branch
            # Not b.run(): the parent's run is using the branch (its _check_idle refuses).
            check_sub_idle(b)
            b._prepare()
            sel = node_multiviews(b)
            for k in range(b._order_size):
                idx = b._order[k]
                if sel[idx] is not None:
                    select_multiviews(<list>sel[idx])
                if traced:
                    b._run_node_traced(idx)
                else:
                    b._run_node(idx)
            if traced:
                trace_host(f"branch {self.last_index}", "branch", t0, trace_now(), None)
        self._select_phis(self.last_index)

    cdef object choose(self):
        """Evaluate the expression: the branch graph to run, or None (index < 0)."""
        self.check()
        if self.cond is not None:
            got = int((<Compare>self.cond).holds(0, self.inputs))
        else:
            got = self.expr(*[(<Tensor>t).numpy() for t in self.inputs])
        try:
            i = self.offset + int(got)
        except (TypeError, ValueError, OverflowError):
            raise GraphError(f"the case..of expression returned {error_repr(got)}, not an "
                             "int") from None
        self.last_index = i
        if i >= 0:
            branch = self.branches.get(i)
            if branch is None:
                raise GraphError(
                    f"case..of node {self.parent._label(self.index)} chose branch {i}, which "
                    f"was never set (branches: {sorted(self.branches)})"
                )
            return branch
        return None

    def _select_phis(self, long index):
        """PHI outputs: the branch's version (1) after a branch ran, else the fallback (0)."""
        cdef MultiView mv
        for mv in self.phis:
            mv.select(1 if index >= 0 else 0)

    @property
    def has_phis(self):
        return bool(self.phis)


def graph_while(Graph parent, body, name=None):
    """Graph.while_: add a node running ``body`` as a loop."""
    _check_sub(parent, body, "while body")
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


def graph_case_of(Graph parent, inputs, outputs, name=None):
    """Graph.case_of: add a node choosing a branch graph by an expression."""
    ins = _as_tensors(inputs, "case..of inputs")
    outs = _as_tensors(outputs, "case..of outputs")
    c = CaseOfNode()
    c._init(parent, ins, outs)
    e = parent._exec_control(Cmd("CASE_OF", fn=c), ins, outs, name)
    c.index = (<GraphExec>e).index
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


cdef CaseOfNode case_of_node(Graph g, e):
    if not isinstance(e, GraphExec) or (<GraphExec>e).graph is not g:
        raise GraphError(f"expected a case..of node of this graph, not {e!r}")
    fn = g._cmds[(<GraphExec>e).index].fn
    if not isinstance(fn, CaseOfNode):
        raise GraphError(f"{e!r} is not a case..of node")
    return <CaseOfNode>fn


def graph_set_case_of_expr(Graph g, e, expr, offset=0):
    case_of_node(g, e).set_expr(expr, offset)


def graph_set_case_of(Graph g, e, branch, index):
    case_of_node(g, e).set_branch(branch, index)


# Graph's loop and branch methods (the graph layer cannot import this module, which builds on it).
register_control(
    while_=graph_while, set_while_expr=body_set_while_expr, add_carry_over=body_add_carry_over,
    while_count=body_while_count, count_tensor=body_count_tensor, case_of=graph_case_of,
    set_case_of_expr=graph_set_case_of_expr, set_case_of=graph_set_case_of)


# -- what a control node re-points, for static schedules (nnc/schedule/builder.pyx) ----------------

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
            for v in _carried_leaves(dst):
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
