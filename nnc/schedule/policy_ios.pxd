# IOS's dynamic program over stages (MLSys 2021; RAF's stream_schedule_ios) as a scheduling policy
# (nnc/schedule/dag.pxd's policy_assign_f).

from nnc.schedule.dag cimport dag_t

# Blocks cut at cut nodes; per block the DP over masks of nodes left picks each stage's ending;
# stage s's groups -> streams 0..k-1; appends the barrier edges between consecutive stages.
cdef int ios_assign(const dag_t* d, int max_streams, int* stream, list extra) except -1
