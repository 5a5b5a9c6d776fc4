# while nodes (nnc/graph/while_node.pyx): the runner a WHILE node's command carries, which is
# also its body's loop state (``body._loop``), and multiview selection by loop count. Other
# modules (nnc.graph.case_of, nnc.run.flow, the schedule layer, nnc.run.tools) cimport these and
# call the typed cdef methods; ``_iter_begin``, ``_iter_end`` and ``_finish`` are queued on
# streams as Python callables, reached through a typed reference.

cimport cython

from nnc.graph.graph cimport Graph
from nnc.graph.subgraph cimport ControlNode
from nnc.tensor.tensor cimport Tensor


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


# Per node index of g: the multiviews that node selects before it runs, or None.
cdef list node_multiviews(Graph g)
# Point each multiview at the version its anchor loop's current count selects.
cdef int select_multiviews(list mvs) except -1
# The loop state of body, made on first use (set_while_expr may precede while_).
cdef WhileNode loop_of(Graph body)
# The tensors a carry-over into dst re-points: dst, or the versions counts >= 1 select.
cdef tuple carried_leaves(Tensor dst)
