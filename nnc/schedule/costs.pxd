# Node costs for the cost-aware scheduling policies (nnc/schedule/costs.pyx).

from nnc.graph.graph cimport Graph

cdef str shown(object v)
cdef double cost_seconds(object who, object v) except -1
cdef double cost_add(object who, double x, double total) except -1
cdef object normalize_costs(Graph g, object costs)
cdef int fill_costs(Graph g, object costs, const int* order, int m, double* out) except -1
