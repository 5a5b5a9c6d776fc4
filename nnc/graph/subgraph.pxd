# What while and case..of nodes share (nnc/graph/subgraph.pyx): the base of their runners and the
# checks on sub-graphs. nnc.graph.while_node and nnc.graph.case_of derive from ControlNode;
# nnc.run.flow, the schedule layer and nnc.run.tools call its typed cdef methods.

from nnc.graph.graph cimport Graph


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


# GraphError unless sub (named ``what``) can become a sub-graph of parent.
cdef int check_sub(Graph parent, object sub, str what) except -1
# tensor_list (a Tensor, an ndarray or a list of them), with no absent (None) entries.
cdef list as_tensors(object items, str what)
