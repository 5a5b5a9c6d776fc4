# RAF's two graph-only stream assignments (awslabs/raf src/pass/stream_schedule_wavefront.cc and
# stream_schedule_asap.cc) as scheduling policies (nnc/schedule/dag.pxd's policy_assign_f).

from nnc.schedule.dag cimport dag_t

# Rounds of Kahn's algorithm grown into chains; chain j of a wave -> stream j % max_streams;
# appends the edges that put every wave after the one before it (as far as the run order lets).
cdef int wavefront_assign(const dag_t* d, int max_streams, int* stream, list extra) except -1

# Heavy-child chains by depth; a chain head reuses a stream whose last chain end reaches it.
# Appends nothing: the builder's waits on the light edges are RAF's events.
cdef int asap_assign(const dag_t* d, int max_streams, int* stream, list extra) except -1
