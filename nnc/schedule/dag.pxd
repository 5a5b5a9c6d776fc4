# The DAG a scheduling policy sees (nnc.static_schedule(g, policy=...)). The rank
# builder (nnc/schedule/builder.pyx) makes it from the graph's run order, with every edge the
# schedule must enforce (graph edges, a loop body's head-to-tail edges, the edges that order a
# control node and the nodes touching the tensors it re-points), and hands it to the policy.
# Nodes are *positions* 0 .. m-1 of the run order, a topological order: every edge u -> v has
# u < v. Owned by the builder, read-only for the policy, valid only during the call.

cdef struct dag_t:
    int m                           # nodes (positions)
    int split                       # a loop body's head is positions < split (they run
    #                                 before the rest, every iteration); m for other graphs
    const int* sstart               # [m + 1] successors of k: sidx[sstart[k] : sstart[k + 1]]
    const int* sidx
    const int* pstart               # [m + 1] predecessors of k: pidx[pstart[k] : pstart[k + 1]]
    const int* pidx                 # (ascending within a row)
    const int* cmd                  # [m] command id of each node (NNC's tie-break key)
    const double* cost              # [m] seconds per node; NULL: every node costs 1
    # [m] writable, or NULL when the caller takes no run order: a policy that wants its own
    # issue order writes a topological order of positions here (reorder[i] = the position run
    # i-th; a loop body's head positions first); reorder[0] < 0 (as given): keep the run order
    int* reorder


# A policy assigns streams: it writes stream[k] for every position k, with streams numbered
# densely from 0 and, when max_streams > 0, stream[k] < max_streams. A stream runs its nodes in
# position order, so any assignment is deadlock-free; the builder then places signals and the
# fewest waits that enforce every edge. A policy that needs more order than the edges give (a
# barrier between RAF's waves or IOS's stages) appends extra edges u -> v (u < v) to `extra`
# as (u, v) tuples; the builder enforces them like graph edges. Streams and extra edges are by
# position of the *given* run order, also when the policy writes `reorder` (the builder checks
# that the new order keeps every edge, extra ones included, and renumbers). Returns the stream
# count.
ctypedef int (*policy_assign_f)(const dag_t* d, int max_streams, int* stream,
                                list extra) except -1


# A dag_t built from Python successor lists (the policies' test wrappers: ios_stages,
# wavefront_streams, asap_streams, nimble_streams). Owns the arrays; d is valid while it lives.
cdef class DagBuffer:
    cdef dag_t d
    cdef int* buf                       # sstart, pstart, cmd, sidx, pidx (one block)
    cdef double* cost                   # [m], or NULL (unit costs)
    cdef int load(self, object succ, object costs=*) except -1


cdef int dag_max_streams(object max_streams) except -1
