# Node costs for the cost-aware scheduling policies (nnc/graph/costs.pyx).

from nnc.graph.graph cimport Graph

cdef object normalize_costs(Graph g, object costs)
cdef int fill_costs(Graph g, object costs, const int* order, int m, double* out) except -1
