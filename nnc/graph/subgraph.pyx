"""What while and case..of nodes share: the ControlNode base of their runners and the rules for
sub-graphs (NNC: ccv_nnc_graph_while.c, ccv_nnc_graph_case_of.c).

A while or case..of node is a node of its parent graph whose command (``WHILE``, ``CASE_OF``)
carries a runner object, a :class:`ControlNode`: nnc.graph.while_node's ``WhileNode`` or
nnc.graph.case_of's ``CaseOfNode``. The node loop calls it like any Python command, so the
parent's C loop needs nothing special. A sub-graph (loop body, branch) belongs to one node of one
parent, never encloses its parent, and does not run on its own while its parent runs it.
"""

from nnc.base.core import GraphError

from nnc.cmd.command cimport tensor_list
from nnc.graph.graph cimport Graph


cdef int check_sub(Graph parent, object sub, str what) except -1:
    """GraphError unless ``sub`` can become a sub-graph (loop body, branch) of ``parent``: a
    Graph, not parent itself nor a graph enclosing it, and no other graph's sub-graph."""
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


cdef list as_tensors(object items, str what):
    """tensor_list (a Tensor, an ndarray or a list of them), with no absent (None) entries."""
    cdef list out = tensor_list(items, what)
    if any(t is None for t in out):
        raise GraphError(f"{what} cannot be None")
    return out


cdef class ControlNode:
    """What every while and case..of runner offers the runner, the scheduler and the tools."""

    cdef int check(self) except -1:
        raise NotImplementedError

    cdef list subgraphs(self):
        raise NotImplementedError

    cdef list tensors(self):
        raise NotImplementedError
