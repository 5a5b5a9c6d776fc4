from nnc.graph.graph cimport Graph
from nnc.schedule.schedule cimport Schedule
from nnc.stream.stream cimport Signal, Stream
from nnc.stream.worker cimport stream_task_t


# The streams and signals a schedule runs on; owned by the graph, reused across runs.
# A sub-graph's runtime borrows its stream 0 from the parent node's stream (its ``first``).
cdef class _Runtime:
    cdef Schedule sched
    cdef list streams                   # Stream per schedule stream index
    cdef list signals                   # Signal per schedule signal index
    cdef Signal begin
    cdef Signal end
    cdef Stream first                   # the borrowed stream 0, or None (the graph owns it)


# The runner's state of one graph (Graph._run_state), made by its first run on a stream and
# kept across runs (dask's "state as data": one plain record, read and written only here and in
# nnc.run.flow). Graph's own in-flight guard (_inflight, _inflight_stream) stays in Graph,
# whose _check_idle reads it.
cdef class RunState:
    cdef _Runtime runtime               # the streams and signals of the last scheduled run (its
    #                                     schedule's stream count), reused by the next; or None
    cdef object flow_task               # nnc.coro.Task of the last run with control flow, or
    #                                     None: the next such run starts after it has enqueued


cdef RunState run_state(Graph g)
cdef _Runtime _runtime_for(Graph g, Schedule sched, Stream first=*)
cdef bint _node_task(Graph g, int idx, stream_task_t* t) noexcept
cdef bint _tracing()
cdef int _label_tasks(Graph g, stream_task_t* t) except -1
cdef int _push_waits(Schedule sched, _Runtime rt, int idx) except -1
cdef int _move_errors(list streams, Stream caller) except -1
cdef int _push_node(Graph g, Schedule sched, _Runtime rt, int idx, bint tracing,
                    tuple before=*) except -1
