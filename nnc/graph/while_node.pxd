# while and case..of nodes (nnc/graph/control.pyx): the runner object a WHILE or CASE_OF node's
# command carries. Other modules (nnc.run.flow, rank, schedule, hazard, tools) cimport these
# classes and call their typed cdef methods; the ``def`` methods ``_iter_begin``, ``_iter_end``,
# ``_finish`` (WhileNode) and ``_select_phis`` (CaseOfNode) are queued on streams as Python
# callables, reached through a typed reference.

cimport cython

from nnc.graph.graph cimport Graph
from nnc.tensor.tensor cimport Tensor


# What every control node offers: the sub-graphs it runs, the tensors it reads besides its
# node's own (expression inputs, carry-overs), and a check that it can run (GraphError).
cdef class ControlNode:
    cdef list inputs                    # Tensors whose arrays the expression receives
    # The expression as an nnc.Compare (declarative: the host evaluates it, and a CUDA-graph
    # capture compiles it into a condition kernel), or None when it is a Python callable.
    cdef readonly object cond
    cdef int check(self) except -1
    cdef list subgraphs(self)
    cdef list tensors(self)


@cython.final
cdef class WhileNode(ControlNode):
    cdef readonly Graph parent
    cdef readonly Graph body
    cdef object expr                    # expr(count, *arrays of inputs)
    cdef list breakpoints               # node indices of the body
    cdef readonly Tensor count_tensor   # int64 [1]; its memory holds the count
    cdef long long* count_ptr
    cdef list carry                     # (src, dst, saved): saved holds src's last memory
    cdef list carry_home                # a copy of each destination leaf's header when added
    # Cached for the body's version: its run order, split at the breakpoints.
    cdef int* order
    cdef int order_size
    cdef int split                      # order[:split] runs before the expression
    cdef long version
    cdef readonly long key              # bumped when the breakpoints change (schedules key on it)
    # Found per run (nested graphs can gain multiviews without this body's version changing):
    cdef list node_mvs                  # per body node: multiviews it selects, or None
    cdef list expr_mvs                  # multiviews among the expression inputs, or None

    cdef int _prepare(self) except -1
    cdef int _layout(self) except -1
    cdef int _find_multiviews(self) except -1
    cdef bint _eval(self, long long count) except -1
    cdef int _run_body_node(self, int idx, bint traced) except -1
    cdef int _carry_in(self, long long count) except -1
    cdef int _carry_save(self, long long count) except -1
    cdef list _save_originals(self)
    cdef int _restore_originals(self, list originals) except -1
    cdef long schedule_key(self)        # what a body schedule depends on besides its version
    cdef tuple split_order(self)        # (order with the head first, head length, key)
    cdef list start(self)               # before a run on streams: the originals to restore


@cython.final
cdef class CaseOfNode(ControlNode):
    cdef readonly Graph parent
    cdef readonly int index             # the node's index in parent
    cdef object expr
    cdef long offset
    cdef dict branches                  # index -> Graph
    cdef list phis                      # PHI MultiViews among the outputs
    cdef readonly long last_index       # the index chosen by the last run

    cdef list branch_items(self)        # (index, branch) pairs in index order
    cdef object choose(self)            # evaluate: the branch Graph to run, or None


cdef list node_multiviews(Graph g)
cdef int select_multiviews(list mvs) except -1
cdef WhileNode loop_of(Graph body)
cdef CaseOfNode case_of_node(Graph g, e)
