# The "nimble" scheduling policy (Nimble, NeurIPS 2020): minimum equivalent graph,
# a maximum matching of its edges into chains, then chains ordered by reachability share
# streams, so the stream count is the width of the chain order. docs/schedule.md, "nimble".

from nnc.schedule.dag cimport dag_t

# A policy_assign_f (nnc/schedule/dag.pxd): writes stream[k] for every position, numbered densely
# from 0 and below max_streams when max_streams > 0; appends no extra edges. Returns the
# stream count. ScheduleError for a malformed DAG (an edge that does not go forward).
cdef int nimble_assign(const dag_t* d, int max_streams, int* stream, list extra) except -1
