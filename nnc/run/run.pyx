"""Asynchronous graph runs: enqueue a graph's nodes onto streams (NNC: ccv_nnc_graph_run.c,
the coroutine path of ``ccv_nnc_graph_run`` with a stream). Graphs with while or case..of
nodes go to nnc.run.flow, which drives them with coroutine tasks.

Without a default schedule every node is enqueued on the caller's stream, in run order. With
one, nodes go to the schedule's streams, which the graph owns (created once, reused by every
run): the caller's stream emits a *begin* signal that stream 0 and the entry streams wait on;
each node waits on its ``waits``, runs, and emits its signal; stream 0 waits on the exit
signals and emits *end*, which the caller's stream waits on. Runs submitted to one stream
therefore complete in submission order. Enqueueing is all C work per node: a task struct that
borrows the node's backend pointer and tensor slots from the graph, which the run keeps alive
until its last task.
"""

from cpython.object cimport PyObject
from libc.string cimport memset

from nnc.base.core import GraphError, ScheduleError

from nnc.cmd.command cimport BOUND_DEVICE, BOUND_NONE, nnc_bound_t
from nnc.graph.graph cimport EXEC_CONTROL, Graph
from nnc.schedule.schedule cimport Schedule, ScheduleState, check_runnable
from nnc.stream.stream cimport Signal, Stream, stream_emit, stream_move_errors, stream_wait_signal
from nnc.stream.worker cimport (
    TASK_LAUNCH, TASK_NOW, stream_enqueue, stream_task_call, stream_task_t, task_release_owned,
)
from nnc.base.trace_switch cimport trace_label, trace_on
from nnc.base.parallel cimport parallel_stream_run_begin

from nnc.graph.graph import register_runner
from nnc.schedule.schedule import graph_schedule
from nnc.stream.stream import Signal as PySignal
from nnc.stream.stream import Stream as PyStream


# nnc.run.flow's flow_run(g, stream): runs with control flow (flow builds on this module).
cdef object _flow_run = None


def register_flow(flow_run):
    """Called once by nnc.run.flow when it is imported."""
    global _flow_run
    _flow_run = flow_run


cdef class RunState:
    """The runner's state of one graph (fields: run.pxd)."""


cdef RunState run_state(Graph g):
    if g._run_state is None:
        g._run_state = RunState.__new__(RunState)
    return <RunState>g._run_state


cdef _Runtime _runtime_for(Graph g, Schedule sched, Stream first=None):
    """g's runtime for sched; with ``first``, stream 0 is that (the parent node's) stream."""
    cdef RunState state = run_state(g)
    cdef _Runtime rt = state.runtime
    if rt is not None and rt.sched is sched and rt.first is first:
        return rt
    rt = _Runtime.__new__(_Runtime)
    rt.sched = sched
    rt.first = first
    kinds = sched.stream_kinds
    # Reuse the streams the graph owns (not a borrowed stream 0) where they suffice and are
    # of the kind (GPU) the schedule gives that index.
    own = []
    if state.runtime is not None:
        old = state.runtime.streams
        own = old[1:] if state.runtime.first is not None else old
    streams = ([] if first is None else [first]) + own
    streams = streams[:sched.stream_count]
    rt.streams = [st if i == 0 and first is not None or (<Stream>st).kind == kinds[i]
                  else PyStream(kinds[i]) for i, st in enumerate(streams)]
    rt.streams += [PyStream(kinds[i]) for i in range(len(streams), sched.stream_count)]
    rt.signals = [PySignal(kind) for kind in sched.signal_kinds]
    # begin is emitted by the caller's stream (_run_scheduled makes one of its kind when it
    # differs), end by stream 0.
    rt.begin = PySignal((<Stream>rt.streams[0]).kind)
    rt.end = PySignal((<Stream>rt.streams[0]).kind)
    state.runtime = rt
    return rt


cdef bint _node_task(Graph g, int idx, stream_task_t* t) noexcept:
    """Fill t with node idx's bound work (nnc.cmd.command.cmd_bind, made when the node was set),
    copied whole (stream_task_t.bound says why a copy); False for a node with nothing to run
    (NOOP)."""
    cdef const nnc_bound_t* b = &g._nodes[idx].bound
    if b.kind == BOUND_NONE:
        return False
    memset(t, 0, sizeof(stream_task_t))
    t.bound = b[0]                      # BOUND_C / BOUND_PY are TASK_C / TASK_PY
    t.node = idx
    t.label = -1
    t.ctx = <PyObject*>g
    if b.flags & BOUND_DEVICE:
        t.bound.flags |= TASK_LAUNCH    # a GPU stream launches it with its CUDA stream
    return True


cdef int _label_tasks(Graph g, stream_task_t* t) except -1:
    t.label = trace_label(g._label(t.node))
    return 0


cdef enum:
    # Tasks a run hands a CPU stream per call (on the C stack): the first call makes the stream
    # ready and wakes a pool thread, so a long run's first nodes start while the rest is queued.
    RUN_CHUNK = 64


cdef int _run_unscheduled(Graph g, Stream s, bint* finished) except -1:
    """Every node on s, in run order, then ``g._run_finished``. On a CPU stream the tasks go
    straight into its queue (nnc.stream.worker.stream_enqueue), RUN_CHUNK per call: there is
    nothing for the Stream object to do between them. A GPU stream launches each as it is
    pushed."""
    cdef stream_task_t tasks[RUN_CHUNK]
    cdef Py_ssize_t n = 0
    cdef int k
    cdef bint tracing = _tracing()
    if s._device is not None:
        for k in range(g._order_size):
            if _node_task(g, g._order[k], &tasks[0]):
                if tracing:
                    _label_tasks(g, &tasks[0])
                s.push(&tasks[0], False)
        s._push_call(g._run_finished, (), g)
        finished[0] = True
        return 0
    for k in range(g._order_size):
        if _node_task(g, g._order[k], &tasks[n]):
            if tracing:
                _label_tasks(g, &tasks[n])
            n += 1
            if n == RUN_CHUNK:
                stream_enqueue(s.s, tasks, n)
                n = 0
    # The run's end, in the last chunk: it owns a reference to g (through the bound method),
    # which keeps everything the node tasks borrow alive until they have run.
    stream_task_call(&tasks[n], g._run_finished, (), g)
    try:
        if tracing:
            tasks[n].label = trace_label("Graph._run_finished")
        stream_enqueue(s.s, tasks, n + 1)
    except BaseException:
        task_release_owned(&tasks[n])
        raise
    finished[0] = True
    return 0


cdef bint _tracing():
    return trace_on


cdef int _push_waits(Schedule sched, _Runtime rt, int idx) except -1:
    """Make node idx's stream wait on the node's waits."""
    cdef Stream st = <Stream>rt.streams[sched.stream[idx]]
    cdef int w
    for w in range(sched.wait_start[idx], sched.wait_start[idx + 1]):
        stream_wait_signal(st, <Signal>rt.signals[sched.waits[w]], False)
    return 0


cdef int _push_node(Graph g, Schedule sched, _Runtime rt, int idx, bint tracing,
                    tuple before=None) except -1:
    """Enqueue node idx on its stream: its waits, ``before`` (a (fn, args) call, e.g. the
    node's multiview selection in a loop, nnc.run.flow: host bookkeeping that only orders
    later launches, TASK_NOW), the node, its signal."""
    cdef Stream st = <Stream>rt.streams[sched.stream[idx]]
    cdef stream_task_t t
    _push_waits(sched, rt, idx)
    if before is not None:
        st._push_call(before[0], before[1], g, None, False, None, TASK_NOW)
    if _node_task(g, idx, &t):
        if tracing:
            _label_tasks(g, &t)
        st.push(&t, False)
    if sched.signal[idx] >= 0:
        stream_emit(st, <Signal>rt.signals[sched.signal[idx]], False)
    return 0


cdef int _run_scheduled(Graph g, Stream s, Schedule sched, bint* finished) except -1:
    cdef _Runtime rt = _runtime_for(g, sched)
    cdef list streams = rt.streams, signals = rt.signals
    cdef Stream s0 = streams[0]
    cdef int k
    cdef bint tracing = _tracing()
    if rt.begin.kind != s.kind:
        # A caller on another GPU than stream 0 (or a schedule on several GPUs): the caller
        # records begin, so it is an event of the caller's device; the others wait across.
        rt.begin = PySignal(s.kind)
    stream_emit(s, rt.begin)
    stream_wait_signal(s0, rt.begin, False)
    for k in range(sched.entry_size):
        stream_wait_signal(<Stream>streams[sched.entry_streams[k]], rt.begin, False)
    for k in range(sched.order_size):
        _push_node(g, sched, rt, sched.order[k], tracing)
    for k in range(sched.exit_size):
        stream_wait_signal(s0, <Signal>signals[sched.exit_waits[k]], False)
    # Before end: once the caller's stream passes end, the graph is idle again and the
    # failures of this run have moved to the caller's stream, whose wait() reports them.
    s0._push_call(_finish_scheduled, (g, rt, s), g)
    finished[0] = True
    stream_emit(s0, rt.end)
    stream_wait_signal(s, rt.end)
    return 0


def _finish_scheduled(Graph g, _Runtime rt, Stream caller):
    """Runs on stream 0 after every stream of the run is done (it waited on the exits)."""
    _move_errors(rt.streams, caller)
    g._run_finished()


cdef int _move_errors(list streams, Stream caller) except -1:
    """Hand the failures recorded on ``streams`` to the caller's stream, whose wait() raises."""
    cdef Stream st
    for st in streams:
        stream_move_errors(st, caller)
    return 0


def graph_run_on_stream(Graph g not None, Stream stream not None, schedule=None):
    """Enqueue one run of g on ``stream`` and return (see the module docstring). Graph.run's
    runner: it calls this with g marked busy and prepared (compiled, its nodes bound). With
    ``schedule`` (a partial schedule, or the default one), the run is that schedule's nodes
    on its streams (NNC: ccv_nnc_graph_run_with_schedule)."""
    cdef int k
    if schedule is not None:
        if not isinstance(schedule, Schedule):
            raise ScheduleError(f"schedule must be an nnc.Schedule, not "
                                f"{type(schedule).__name__}")
        _run_with_schedule(g, stream, <Schedule>schedule)
        return
    # The default schedule's state is read here, not asked of nnc.schedule: an unscheduled run
    # (the common case) then never leaves this module before its tasks are queued.
    cdef ScheduleState state = <ScheduleState>g._sched_state
    cdef bint scheduled = state is not None and state.default is not None
    kind = state.args["stream_type"] if scheduled else None
    if kind is not None and (stream.kind == "cpu") != (kind == "cpu"):
        raise ScheduleError(
            f"{g!r} is scheduled for {kind!r} streams but runs on {stream!r}; "
            f"schedule it again with static_schedule(g, stream_type={stream.kind!r})")
    for k in range(g._order_size):
        if g._nodes[g._order[k]].flags & EXEC_CONTROL:
            if _flow_run is None:
                raise GraphError("a run with while or case..of nodes needs nnc.run.flow, "
                                 "which is not loaded; import nnc")
            _flow_run(g, stream)
            return
    _enqueue(g, stream, graph_schedule(g) if scheduled else None)


cdef int _run_with_schedule(Graph g, Stream stream, Schedule sched) except -1:
    """run(stream=..., schedule=sched): sched's nodes, on its streams."""
    cdef int k
    check_runnable(g, sched)
    if (stream.kind == "cpu") != (sched.stream_type == "cpu"):
        raise ScheduleError(
            f"{sched!r} is for {sched.stream_type!r} streams but the run is on {stream!r}; "
            f"build it with stream_type={stream.kind!r}")
    for k in range(sched.order_size):
        if g._nodes[sched.order[k]].flags & EXEC_CONTROL:
            if _flow_run is None:
                raise GraphError("a run with while or case..of nodes needs nnc.run.flow, "
                                 "which is not loaded; import nnc")
            _flow_run(g, stream, None, sched)
            return 0
    return _enqueue(g, stream, sched)


cdef int _enqueue(Graph g, Stream stream, Schedule sched) except -1:
    """Enqueue a run without control flow: every node on ``stream`` (sched None), or sched's
    nodes on its streams."""
    cdef bint finished = False
    g._inflight += 1
    g._inflight_stream = stream
    # Pool threads spin through a CPU-stream run for its split commands (bounded: see
    # parallel.pxd), as through a synchronous one; the run's _run_finished ends the count.
    if stream.kind == "cpu" and parallel_stream_run_begin():
        g._spin_runs += 1
    cdef Stream st
    try:
        if sched is None:
            _run_unscheduled(g, stream, &finished)
        else:
            _run_scheduled(g, stream, sched, &finished)
    except BaseException:
        # What was enqueued still runs; make sure the graph becomes idle after it.
        if not finished:
            stream.add_callback(g._run_finished)
        raise
    finally:
        # A scheduled run pushed its tasks without waking the workers (see Stream.push): wake
        # them now. An unscheduled one handed its tasks over itself.
        if sched is not None:
            if run_state(g).runtime is not None:
                for st in run_state(g).runtime.streams:
                    st.kick()
            stream.kick()
    return 0


register_runner(graph_run_on_stream)   # Graph.run(stream=...) (graph cannot import this layer)
