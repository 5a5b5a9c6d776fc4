# case..of nodes (nnc/graph/case_of.pyx): the runner a CASE_OF node's command carries. Other
# modules (nnc.run.flow, the schedule layer, nnc.run.tools) cimport it and call its typed cdef
# methods; ``_select_phis`` is queued on streams as a Python callable.

cimport cython

from nnc.graph.graph cimport Graph
from nnc.graph.subgraph cimport ControlNode


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


# The case..of node e of g (GraphError if e is not one).
cdef CaseOfNode case_of_node(Graph g, e)
