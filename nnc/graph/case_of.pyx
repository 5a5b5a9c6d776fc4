"""case..of nodes (NNC: ccv_nnc_graph_case_of.c): the branch runner and Graph's case..of methods.

A case..of node is a node of its parent graph whose ``CASE_OF`` command carries a
:class:`CaseOfNode` (an nnc.graph.subgraph.ControlNode); the node loop calls it like any Python
command.

**case..of** (:class:`CaseOfNode`): ``index = offset + expr(*arrays)``; index >= 0 runs that
branch graph fully (an index with no branch raises GraphError; NNC has undefined behaviour),
index < 0 runs nothing. Then every PHI multiview among the node's outputs selects its branch
version (1) or its fallback input (0).

The expression is a Python callable or an nnc.Compare (nnc.graph.compare): 1 when it holds, else
0. A branch inside a loop body selects its multiviews by the enclosing loop's count
(nnc.graph.while_node), just before each of its nodes runs.
"""

cimport cython

from nnc.base.core import GraphError, error_repr
from nnc.cmd.command import Cmd
from nnc.graph.graph import register_case_of
from nnc.graph.subgraph import check_sub_idle

from nnc.graph.compare cimport Compare
from nnc.graph.graph cimport Graph, GraphExec
from nnc.graph.subgraph cimport ControlNode, as_tensors, check_sub
from nnc.graph.while_node cimport node_multiviews, select_multiviews
from nnc.tensor.multiview cimport MV_PHI, MultiView
from nnc.tensor.tensor cimport Tensor
from nnc.base.trace_switch cimport trace_host, trace_now, trace_on


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
        check_sub(self.parent, branch, "case..of branch")
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


def graph_case_of(Graph parent, inputs, outputs, name=None):
    """Graph.case_of: add a node choosing a branch graph by an expression."""
    ins = as_tensors(inputs, "case..of inputs")
    outs = as_tensors(outputs, "case..of outputs")
    c = CaseOfNode()
    c._init(parent, ins, outs)
    e = parent._exec_control(Cmd("CASE_OF", fn=c), ins, outs, name)
    c.index = (<GraphExec>e).index
    return e


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


# Graph's branch methods (the graph layer cannot import this module, which builds on it).
register_case_of(case_of=graph_case_of, set_case_of_expr=graph_set_case_of_expr,
                 set_case_of=graph_set_case_of)
