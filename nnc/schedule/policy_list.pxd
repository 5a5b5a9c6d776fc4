# The "list" scheduling policy (nnc/schedule/policy_list.pyx), a policy_assign_f of dag.pxd.

from nnc.schedule.dag cimport dag_t

cdef int list_assign(const dag_t* d, int max_streams, int* stream, list extra) except -1
