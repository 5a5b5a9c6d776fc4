# A static schedule of one graph (NNC: ccv_nnc_graph_static_schedule_t and the per-node
# ccv_nnc_graph_exec_schedule_t, flattened into C arrays). Built by static_schedule(); the
# runner (nnc/run/run.pyx) walks `order` and, per node, waits on its `waits` on its stream,
# runs it there, then emits its `signal`. The arrays are immutable once built.
# Per-node arrays are indexed by node index (GraphExec.index) and have `node_count` entries:
# nodes added to the graph after the build are not covered (the schedule is then stale).
# Ownership: the graph owns its schedules through ScheduleState (Graph._sched_state) and the
# runtime of streams that runs one (nnc.run.run.RunState); a schedule holds its graph only
# weakly, so a dropped graph frees its schedule and streams at once, without the collector.

from nnc.schedule.dag cimport dag_t, policy_assign_f
from nnc.graph.graph cimport Graph

# Owner of the malloc'd blocks of one build or verification (freed when collected).
cdef class _Scratch:
    cdef list owned
    cdef void* raw(self, size_t size) except NULL
    cdef int* ints(self, Py_ssize_t count, int fill) except NULL


cdef int* _ints(Py_ssize_t count, int fill) except NULL


cdef class Schedule:
    cdef object _graph                  # weakref.ref to the Graph this schedule was built for
    cdef readonly long version          # graph.version at build time; differs => stale
    cdef readonly str stream_type       # "cpu", "gpu" or "gpu:N": the kind of every stream
    cdef readonly int max_streams       # the cap it was built with (0: none)
    cdef readonly str policy            # the name it was built with (a key of POLICIES)
    cdef object _mem                    # owns every array below (freed with the Schedule)
    cdef int node_count                 # graph node count at build time (per-node array size)
    cdef int order_size                 # nodes that run (the graph's run order at build time)
    cdef int* order                     # [order_size] node indices in enqueue order (topological)
    cdef int* stream                    # [node_count] stream, in [0, stream_count); -1: not run
    cdef int* signal                    # [node_count] signal it emits after running; -1: none
    cdef int* wait_start                # [node_count + 1] CSR row starts into waits
    cdef int* waits                     # node i waits on waits[wait_start[i]:wait_start[i + 1]]
    cdef int* rank_                     # [node_count] longest chain after the node; -1: not run
    cdef readonly int stream_count      # streams used (>= 1; the runner always uses stream 0)
    cdef readonly int signal_count      # signals used, numbered 0 .. signal_count - 1
    # [stream_count] the kind each stream index becomes: "cpu" on a CPU schedule; on a GPU
    # schedule "gpu:N", the GPU of the stream's nodes (every node of a stream is on one GPU).
    cdef readonly tuple stream_kinds
    cdef readonly tuple signal_kinds    # [signal_count] the kind of the stream that emits it
    cdef int* entry_streams             # [entry_size] streams != 0 whose first node has no pred.
    cdef int entry_size                 # they wait on the run's begin signal before anything
    cdef int* exit_waits                # [exit_size] signals stream 0 waits on after its last node
    cdef int exit_size                  # after them, every stream has finished
    # Loop bodies (graph._loop set) run in two parts per iteration: order[:split] (up to the
    # breakpoints), then, after the host has evaluated the expression, order[split:].
    cdef readonly int split             # order_size for other graphs
    cdef int* entry_first               # [entry_size] order position of each entry stream's first
    cdef int* head_exit_waits           # [head_exit_size] stream 0 waits on these after the head
    cdef int head_exit_size
    cdef long loop_key                  # WhileNode.key at build time (loop bodies); else -1
    # A partial schedule (static_schedule with sources or destinations; NNC:
    # ccv_nnc_graph_static_schedule_new) covers only the nodes reachable from its sources that
    # reach its destinations, in ``order``; it is never the graph's default and is never
    # rebuilt: once stale, a run refuses it. Both None for a schedule of the graph's run.
    cdef tuple _sources                 # node indices, or None
    cdef tuple _destinations            # node indices, or None

    cdef int _alloc(self, int node_count, int order_size, int wait_size, list entry,
                    list exits, list entry_first=*, list head_exits=*) except -1
    cdef int _bind(self, Graph g) except -1
    cdef Graph graph_ref(self)          # the graph; ScheduleError once it was freed
    cdef int _index(self, e) except -1
    cdef list _entries(self)
    cdef list _exits(self)


# The schedule layer's state of one graph (Graph._sched_state), made on first use. Only this
# layer reads or writes it; Graph holds the reference and nothing else.
cdef class ScheduleState:
    cdef Schedule default               # the default schedule (Graph.schedule), or None; rebuilt
    #                                     from ``args`` when the graph changed since
    cdef dict args                      # its static_schedule arguments; None iff default is None
    cdef Schedule flow                  # the private one-stream schedule of control-flow runs
    #                                     of a graph without a default one, or None


cdef ScheduleState schedule_state(Graph g)
# The nodes of g reachable from ``sources`` that reach ``destinations`` (node indices), in a
# topological order: a partial schedule's run order. GraphError for a cycle; ScheduleError
# when a source reaches no destination or a destination no source.
cdef list part_order(Graph g, list sources, list destinations)
# ScheduleError unless sched may run g now: a schedule of g, not stale.
cdef int check_runnable(Graph g, Schedule sched) except -1
cdef dict schedule_args(Graph g)        # the default schedule's arguments, or None
# Mark g busy while nnc calls user code over arrays sized from it, unless it is in use already;
# returns whether it marked g (then the caller's finally calls g._leave()).
cdef bint enter_unless_in_use(Graph g, str what, str doing) except -1


# One scheduling policy of the registry (POLICIES: name -> Policy, None for "rank", which the
# builder runs itself). ``fn`` is the C entry point; ``py`` a Python function instead (testing
# hook _register_python_policy), called with (successor lists, max_streams) and returning
# (streams, extra edges). Exactly one of the two is set; immutable once registered.
cdef class Policy:
    cdef readonly str name
    cdef policy_assign_f fn
    cdef object py
    cdef int assign(self, const dag_t* d, int max_streams, int* stream, list extra) except -1


# A policy module registers itself at import (nnc/__init__.py imports it): one line.
cdef int register_policy(str name, policy_assign_f fn) except -1
cdef Policy policy_of(str name)         # the registered policy; None for "rank"
