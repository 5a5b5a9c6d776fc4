"""Runs with control flow on streams: generator tasks on the caller stream's coroutine scheduler.

NNC: the coroutine half of ccv_nnc_graph_run.c (``_ccv_nnc_graph_topsorted_run_coro``,
``_ccv_nnc_graph_exec_cases_of_coro``, ``_ccv_nnc_graph_while_coro``). ``g.run(stream=s)`` on a
graph with while or case..of nodes spawns one *root* task on ``s.scheduler``. It runs inline in
the caller's thread and enqueues the graph's schedule (the default one, or a private one-stream
schedule) like nnc.run.run does, until it meets a control node. That node's stream waits on
the node's signals; then a *sub-task* starts: a loop enqueues its body's head (the breakpoints
and their ancestors) with the body's own schedule, whose stream 0 is the node's stream, waits
for that stream (``yield WaitFor``), evaluates the expression on the host and enqueues the tail;
a case..of waits for the node's stream, evaluates its index and enqueues the chosen branch.
Per-iteration bookkeeping (count, carry-overs) is queued on the node's stream, so it happens in
stream order without the host waiting for the tail. A body or branch node that uses multiviews
gets a task just before it, on its stream and after its waits, that selects their versions (NNC
re-points a multiview when a node using it runs, not when an iteration begins).

While a sub-task is suspended, nodes behind it (on its stream, or waiting on a signal of a node
behind it) are *deferred*; every other node keeps being enqueued. The task then awaits its
pending sub-tasks one at a time and enqueues what they released; nothing is lost (NNC can lose
suspended sub-tasks). When every task is blocked the caller returns and the scheduler's one
thread finishes the work; ``s.wait()`` joins it.

Flow and the graph layer: a while or case..of node's *meaning* lives in layer 4, one module per
node kind (nnc.graph.while_node, nnc.graph.case_of; their shared base and sub-graph checks in
nnc.graph.subgraph, the ``nnc.Compare`` expression in nnc.graph.compare), with the sequential
runner that ``g.run()`` calls. Flow is the other runner of those same nodes, on streams: it
never re-implements a step, it queues theirs (``WhileNode.start``, ``_iter_begin``,
``_iter_end``, ``_finish``, ``CaseOfNode.choose``, ``_select_phis``, ``select_now``) between
the nodes it enqueues with nnc.run.run.

The caller's stream waits on an *end* signal reserved at call time (``signal_reserve``) and
emitted by the root task after the last node, so work submitted to ``s`` later runs after this
run, and ``s.wait()`` reports the failures of every stream the run used. A failed command stops
loops and branches at their next host check (their data may be garbage); a failed expression
or a missing branch is reported by ``s.wait()`` as a StreamError.

Failures end a run only after everything it enqueued: a loop or branch that fails (or stops)
is reported once, by its sub-task; the nodes that depend on it are *cancelled* (never enqueued)
and every other node is still enqueued; pending sub-tasks are always awaited; and a part that
failed *fences* its streams into its stream 0 (an emit on each, waited on by stream 0) instead
of waiting on its exit signals, some of which belong to cancelled nodes and are never emitted.
So stream 0, and the end signal after it, comes after every task the run enqueued.

**Captured** (``flow_run(g, s, capture)``, called by nnc.cuda.capture.capture while ``s``
captures a CUDA graph): the same enqueueing, but no task ever suspends. A while node becomes a
CUDA conditional WHILE node and a case..of node an IF or SWITCH node, made by ``capture`` (a
recorder from nnc.cuda.capture) on the node's stream; the body or branch is enqueued once, on the
streams of a runtime of its own made before the capture began (``flow_capture_prepare``): a
stream that took part in one capture cannot join another, and a body is captured into its own
graph. Each is fenced by its stream 0, as any part is, so every stream forked inside a body has
joined back before the body's capture ends.
"""

from nnc.cmd.command cimport BOUND_NONE, Cmd
from nnc.graph.case_of cimport CaseOfNode
from nnc.graph.subgraph cimport ControlNode
from nnc.graph.while_node cimport WhileNode, node_multiviews
from nnc.graph.graph cimport EXEC_CONTROL, Graph
from nnc.run.run cimport (
    RunState, _move_errors, _push_node, _push_waits, _Runtime, _runtime_for, _tracing,
    run_state,
)
from nnc.schedule.schedule cimport Schedule, schedule_args
from nnc.stream.stream cimport (
    Signal, Stream, signal_reserve, signal_set, stream_add_error, stream_emit,
    stream_store_count, stream_wait_signal,
)
from nnc.stream.worker cimport TASK_NOW

from nnc.base.core import GraphError, ScheduleError

from nnc.coro import AwaitAny, AwaitTask, WaitFor, current_scheduler
from nnc.graph.subgraph import check_sub_idle
from nnc.graph.while_node import select_now
from nnc.run.run import register_flow
from nnc.schedule.schedule import flow_schedule
from nnc.stream.stream import Signal as PySignal
from nnc.stream.stream import Stream as PyStream


class _Stopped(Exception):
    """A loop or branch stopped because a command before it failed (that failure is reported)."""


cdef class _Run:
    """One run with control flow: what its tasks share."""
    cdef Graph g
    cdef Stream caller
    cdef dict args                      # schedule arguments for sub-graphs; None: one stream
    cdef list runtimes                  # every runtime the run has used, root first
    cdef list streams                   # their streams, each once (to kick, to collect errors)
    # The recorder of a CUDA-graph capture (nnc.cuda.capture), or None for a host-driven run.
    # Captured, no task suspends and a failure goes to the recorder, which makes the capture
    # raise, instead of to the caller's stream.
    cdef object capture

    cdef int add(self, _Runtime rt) except -1:
        cdef Stream st
        if rt in self.runtimes:
            return 0
        self.runtimes.append(rt)
        for st in rt.streams:
            if st not in self.streams:
                self.streams.append(st)
        return 0

    cdef int kick(self, Stream spare=None) except -1:
        """Hand staged tasks to the workers: before every suspension and at the end. ``spare``
        is left staged: WaitFor hands its tasks over together with the wake-up."""
        cdef Stream st
        for st in self.streams:
            if st is not spare:
                st.kick()
        return 0

    cdef bint failed(self):
        """Has a command of this run failed (so loop and branch data may be garbage)?"""
        cdef Stream st
        for st in self.streams:
            if <list>st.s.errors:
                return True
        return False


def flow_run(Graph g not None, Stream caller not None, capture=None, Schedule part=None):
    """Graph.run(stream=caller) for a graph with while or case..of nodes; with ``capture`` (a
    recorder prepared by flow_capture_prepare), the run enqueued while caller captures; with
    ``part`` (a schedule nnc.run.run checked), that schedule's nodes only."""
    cdef _Run run = _Run.__new__(_Run)
    run.g = g
    run.caller = caller
    run.capture = capture
    run.runtimes = []
    run.streams = []
    run.args = schedule_args(g)
    if run.args is None and part is not None:
        # As NNC: sub-graphs without a default schedule get one like the part's.
        run.args = dict(stream_type=part.stream_type, max_streams=part.max_streams,
                        policy=part.policy, costs=None)
    if run.args is None and caller.kind != "cpu":
        raise ScheduleError(f"{g!r} has while or case..of nodes: on {caller!r} it needs a GPU "
                            "schedule; call static_schedule(g, stream_type='gpu') first")
    cdef Schedule sched = flow_schedule(g, run.args) if part is None else part
    _check_tree(g, run.args, sched)
    cdef _Runtime rt = _runtime_for(g, sched)
    run.add(rt)
    begin = PySignal(caller.kind)                   # emitted by the caller
    end = PySignal((<Stream>rt.streams[0]).kind)    # emitted by stream 0
    cdef RunState state = run_state(g)
    prev = state.flow_task
    if prev is not None and prev.done:
        prev = None
    g._inflight += 1
    g._inflight_stream = caller
    try:
        stream_emit(caller, begin, False)
        signal_reserve(end)
        stream_wait_signal(caller, end, False)
        caller.kick()
    except BaseException:
        signal_set(end)
        g._run_finished()
        raise
    if capture is not None and (prev is not None or caller.scheduler.active):
        signal_set(end)
        g._run_finished()
        raise GraphError(f"{g!r}: a capture enqueues the whole run on the capturing thread, but "
                         f"{caller!r}'s scheduler still has work in flight; wait for it first")
    state.flow_task = caller.scheduler.spawn(_root(run, sched, rt, begin, end, prev),
                                             name=f"run of {g!r}")
    if capture is not None and not state.flow_task.done:
        capture.fail(f"the run of {g!r}", GraphError("the captured run suspended (a task "
                                                     "waited on the host)"))


cdef int _check_tree(Graph g, dict args, Schedule sched=None) except -1:
    """Raise now, not on a stream, for a loop or branch that cannot run; build sub-schedules.
    ``sched``: the nodes of g that run (None: its run order)."""
    cdef int k, idx
    cdef ControlNode fn
    for k in range(g._order_size if sched is None else sched.order_size):
        idx = g._order[k] if sched is None else sched.order[k]
        if g._nodes[idx].flags & EXEC_CONTROL:
            fn = <ControlNode>(<Cmd>g._cmds[idx]).fn
            fn.check()
            for t in fn.inputs:
                # A Compare reads its element after the host has waited for the node's stream.
                if t is not None and t.device != "cpu" and fn.cond is None:
                    # Its host copy would not wait for the streams writing it: a wrong answer.
                    raise GraphError(
                        f"node {g._label(idx)}: the expression reads {t!r}, GPU memory; on "
                        "streams, a Python expression's inputs must be host tensors (copy to "
                        "one with a DATA_TRANSFER node before the breakpoint, or use an "
                        "nnc.Compare)")
            for sub in fn.subgraphs():
                check_sub_idle(sub)
                (<Graph>sub)._prepare()
                flow_schedule(sub, args)
                _check_tree(sub, args)
    return 0


def _root(_Run run, Schedule sched, _Runtime rt, Signal begin, Signal end, prev):
    """The root task: the whole graph, then the end of the run (always, even on failure)."""
    cdef Stream s0 = rt.streams[0]
    try:
        if prev is not None:
            # Runs of one graph share its streams: start after the previous run has enqueued
            # everything (its failures are reported by that run).
            try:
                yield AwaitTask(prev)
            except BaseException:
                pass
        stream_wait_signal(s0, begin, False)
        yield from _part(run, run.g, sched, rt, 0, sched.order_size, begin, None)
    except _Stopped:
        pass                            # reported where it happened
    except BaseException as e:
        _report(run, f"control flow of {run.g!r}", e)
    finally:
        try:
            s0._push_call(_finish, (run,), run.g, None, False)
            stream_emit(s0, end, False)
        except BaseException as e:
            # The run cannot end in stream order (no memory; the interpreter exiting): end it
            # now, so that the caller's stream is not held forever, and say why.
            signal_set(end)
            run.g._run_finished()
            stream_add_error(run.caller, f"the end of the run of {run.g!r}", e)
        run.kick()


cdef int _report(_Run run, str where, e) except -1:
    """A failure of the run: on the caller's stream, or, captured, to the recorder."""
    if run.capture is not None:
        run.capture.fail(where, e)
    else:
        stream_add_error(run.caller, where, e)
    return 0


def _finish(_Run run):
    """On stream 0 after every stream of the run is done: failures go to the caller's stream."""
    _move_errors(run.streams, run.caller)
    run.g._run_finished()


cdef int _push_selecting(Graph g, Schedule sched, _Runtime rt, int idx, list sel,
                         bint tracing) except -1:
    """_push_node, with node idx's multiview selection (``sel[idx]``, if any) queued on its
    stream between its waits and the node itself."""
    if sel is None or sel[idx] is None:
        return _push_node(g, sched, rt, idx, tracing)
    return _push_node(g, sched, rt, idx, tracing, (select_now, (sel[idx],)))


def _part(_Run run, Graph g, Schedule sched, _Runtime rt, int lo, int hi, Signal begin,
          list sel):
    """Enqueue sched.order[lo:hi] of g, fenced by stream 0: entry streams wait on ``begin``
    (emitted here when None), and stream 0 ends waiting on the part's exit signals. ``sel``:
    per node, the multiviews it selects before running (None: no node selects any)."""
    cdef Stream p = rt.streams[0]
    cdef int k
    cdef bint control = False
    for k in range(sched.entry_size):
        if lo <= sched.entry_first[k] < hi:
            if begin is None:
                if rt.begin.kind != p.kind:     # replaced by a run from another GPU
                    rt.begin = PySignal(p.kind)
                begin = rt.begin
                stream_emit(p, begin, False)
            stream_wait_signal(<Stream>rt.streams[sched.entry_streams[k]], begin, False)
    for k in range(lo, hi):
        if g._nodes[sched.order[k]].flags & EXEC_CONTROL:
            control = True
            break
    try:
        if control:
            yield from _nodes(run, g, sched, rt, lo, hi, sel)
        else:
            tracing = _tracing()
            for k in range(lo, hi):
                _push_selecting(g, sched, rt, sched.order[k], sel, tracing)
    except BaseException:
        # The exit signals of cancelled nodes are never emitted: fence instead, so p (and what
        # follows on it: the loop's finish, the parent's next node, the run's end) comes after
        # every task this part enqueued.
        _fence(rt.streams, p)
        raise
    if hi == sched.order_size:
        for k in range(sched.exit_size):
            stream_wait_signal(p, <Signal>rt.signals[sched.exit_waits[k]], False)
    elif hi == sched.split:
        for k in range(sched.head_exit_size):
            stream_wait_signal(p, <Signal>rt.signals[sched.head_exit_waits[k]], False)


cdef int _fence(list streams, Stream p) except -1:
    """Make p wait for everything enqueued so far on ``streams``."""
    cdef Stream st
    for st in streams:
        if st is not p:
            sig = PySignal(st.kind)
            stream_emit(st, sig, False)
            stream_wait_signal(p, sig, False)
    return 0


cdef set _descendants(Graph g, int idx):
    """The nodes of g reachable from node idx by edges: what a failure of idx cancels."""
    cdef set out = set()
    cdef list todo = [idx]
    cdef int i, k, j
    while todo:
        i = todo.pop()
        for k in range(g._nodes[i].outgoing_size):
            j = g._nodes[i].outgoings[k]
            if j not in out:
                out.add(j)
                todo.append(j)
    return out


def _nodes(_Run run, Graph g, Schedule sched, _Runtime rt, int lo, int hi, list sel):
    """Enqueue order[lo:hi], deferring what is behind a suspended control node and cancelling
    what depends on a failed one; raise _Stopped at the end if one failed. Every sub-task is
    awaited before this returns or raises, so nothing enqueues after the part is fenced."""
    cdef int k, idx, s, w, sig
    cdef bint tracing = _tracing()
    scheduler = current_scheduler()
    pending = {}                        # suspended sub-task -> its node
    todo = list(range(lo, hi))
    cancelled = set()                   # descendants of failed control nodes: never enqueued
    failed = False
    error = None                        # an enqueue that raised: re-raised after the awaits
    while True:
        blocked = {sched.stream[idx] for idx in pending.values()}
        held = {sched.signal[idx] for idx in pending.values()}
        rest = []
        try:
            for k in todo:
                idx = sched.order[k]
                if idx in cancelled:
                    continue
                s = sched.stream[idx]
                sig = sched.signal[idx]
                behind = s in blocked
                for w in range(sched.wait_start[idx], sched.wait_start[idx + 1]):
                    behind = behind or sched.waits[w] in held
                if behind:
                    # Keep stream order, and keep waiters after the emit they wait for.
                    rest.append(k)
                    blocked.add(s)
                    held.add(sig)
                    continue
                if not g._nodes[idx].flags & EXEC_CONTROL:
                    _push_selecting(g, sched, rt, idx, sel, tracing)
                    continue
                _push_waits(sched, rt, idx)
                if sel is not None and sel[idx] is not None:
                    # A case..of node's own multiview inputs, before its expression reads them.
                    (<Stream>rt.streams[s])._push_call(select_now, (sel[idx],), g, None, False,
                                                       None, TASK_NOW)
                run.kick()
                task = scheduler.start(_control(run, g, sched, rt, idx), name=g._label(idx))
                if not task.done:
                    pending[task] = idx
                    blocked.add(s)
                    held.add(sig)
                elif task.exception is not None:
                    failed = True
                    cancelled |= _descendants(g, idx)
        except BaseException as e:
            error = e
            rest = []
        todo = rest
        if not pending:
            break
        run.kick()
        done = yield AwaitAny(list(pending))
        idx = pending.pop(done)
        if done.exception is not None:
            failed = True
            cancelled |= _descendants(g, idx)
    if error is not None:
        raise error
    if failed:
        raise _Stopped()


def _control(_Run run, Graph g, Schedule sched, _Runtime rt, int idx):
    """The sub-task of one while or case..of node of g; emits the node's signal at its end."""
    cdef Stream p = rt.streams[sched.stream[idx]]
    fn = (<Cmd>g._cmds[idx]).fn
    try:
        if run.capture is not None:
            if isinstance(fn, WhileNode):
                yield from _while_captured(run, fn, p)
            else:
                yield from _case_of_captured(run, fn, p)
        elif isinstance(fn, WhileNode):
            yield from _while(run, fn, p)
        else:
            yield from _case_of(run, fn, p)
    except _Stopped:
        raise
    except BaseException as e:
        # Reported here, once: the enclosing parts and loops only see a failed sub-task, and
        # report nothing for it (_nodes cancels its descendants, the root ignores _Stopped).
        # So anything else escaping here, a KeyboardInterrupt or SystemExit from an
        # expression included, would be lost: wait() would return and the cancelled nodes
        # would simply never run.
        _report(run, f"node {g._label(idx)}", e)
        if isinstance(e, GeneratorExit):
            # Leave as close() expects, should the task's generator be closed at a yield.
            raise
        raise _Stopped() from e
    if sched.signal[idx] >= 0:
        stream_emit(p, <Signal>rt.signals[sched.signal[idx]], False)


def _while(_Run run, WhileNode w, Stream p):
    """Iterations of a loop whose node runs on p (stream 0 of the body's schedule)."""
    cdef Graph body = w.body
    cdef Schedule bs = flow_schedule(body, run.args)
    cdef _Runtime brt = _runtime_for(body, bs, p)
    cdef long long count = 0
    run.add(brt)
    originals = w.start()
    on_host = bool(w.carry)             # else the count is all, stored by the stream in C
    sel = w.node_mvs
    try:
        while True:
            if on_host:
                p._push_call(w._iter_begin, (count,), body, None, False, None, TASK_NOW)
            else:
                stream_store_count(p, w.count_tensor, count, False)
            yield from _part(run, body, bs, brt, 0, bs.split, None, sel)
            run.kick(p)
            yield WaitFor(p)
            if run.failed():
                raise _Stopped()
            if not w._eval(count):
                break
            yield from _part(run, body, bs, brt, bs.split, bs.order_size, None, sel)
            if w.carry:
                p._push_call(w._iter_end, (count,), body, None, False, None, TASK_NOW)
            count += 1
    finally:
        p._push_call(w._finish, (originals,), body, None, False, None, TASK_NOW)


def _case_of(_Run run, CaseOfNode c, Stream p):
    """A case..of node on p: wait for its inputs, choose, enqueue the branch, select PHIs."""
    cdef Graph branch
    cdef Schedule bs
    run.kick(p)
    yield WaitFor(p)
    if run.failed():
        raise _Stopped()
    chosen = c.choose()
    if chosen is not None:
        branch = chosen
        bs = flow_schedule(branch, run.args)
        brt = _runtime_for(branch, bs, p)
        run.add(brt)
        yield from _part(run, branch, bs, brt, 0, bs.order_size, None,
                         node_multiviews(branch))
    if c.phis:
        p._push_call(c._select_phis, (c.last_index,), c.parent, None, False, None, TASK_NOW)


# -- capture into CUDA conditional nodes -----------------------------------------------------

# How a captured loop's condition kernel treats the count (nnc/cuda/capture.py's COND_SOURCE):
# a loop whose head (breakpoints and ancestors) launches nothing evaluates before the WHILE
# node and after each tail; one whose tail launches nothing enters once and evaluates after
# each head.
LOOP_HEAD_EMPTY = 0
LOOP_TAIL_EMPTY = 1


cdef bint _launches(Graph g, Schedule sched, int lo, int hi):
    """Does any node of sched.order[lo:hi] launch work (or run a loop or branch)?"""
    cdef int k, idx
    for k in range(lo, hi):
        idx = sched.order[k]
        if g._nodes[idx].flags & EXEC_CONTROL or g._nodes[idx].bound.kind != BOUND_NONE:
            return True
    return False


cdef _Runtime _own_runtime(Schedule sched):
    """Streams and signals of one body's capture, made before the capture begins (making a
    stream or event on a capturing thread may be refused, and a stream that joined one
    capture cannot join another)."""
    cdef _Runtime rt = _Runtime.__new__(_Runtime)
    rt.sched = sched
    rt.first = None
    rt.streams = [PyStream(kind) for kind in sched.stream_kinds]
    rt.signals = [PySignal(kind) for kind in sched.signal_kinds]
    rt.begin = PySignal(sched.stream_kinds[0])
    rt.end = PySignal(sched.stream_kinds[0])
    return rt


cdef int _refuse_moving(Graph g, int idx, ControlNode fn, Graph sub) except -1:
    """GraphError if a run of ``sub`` (a body or branch of ``fn``) re-points tensors: a CUDA
    graph bakes in every address."""
    cdef int i
    why = None
    if isinstance(fn, WhileNode) and (<WhileNode>fn).has_carry:
        why = "it has carry-overs"
    elif isinstance(fn, CaseOfNode) and (<CaseOfNode>fn).has_phis:
        why = "it has PHI outputs"
    else:
        for t in fn.inputs:
            if t.movable:
                why = f"its expression reads {t!r}, which a loop may re-point"
        for i in range(sub._size):
            for t in sub._inputs[i] + sub._outputs[i]:
                if why is None and t is not None and t.movable:
                    why = f"node {sub._label(i)} of {sub!r} uses {t!r}, which a loop may re-point"
    if why is not None:
        raise GraphError(f"node {g._label(idx)} cannot be captured into a CUDA graph: {why}, "
                         "which re-points tensors while it runs, and a CUDA graph bakes in "
                         "every address")
    return 0


def flow_capture_prepare(Graph g not None, capture):
    """Before a capture of g's run: check that every while and case..of node (nested ones
    too) can become a CUDA conditional node (GraphError naming the node and the reason
    otherwise), make each body's and branch's own runtime (``capture.runtimes``, keyed by the
    control node, then the branch index) and let ``capture`` make its device state
    (``capture.prepare_while(w, form, cond, inputs)``, ``capture.prepare_case(c, indexes,
    cond, inputs, branches)``, branches: the graphs of those indexes)."""
    args = schedule_args(g)
    if args is None or args["stream_type"] == "cpu":
        raise ScheduleError(f"{g!r} has while or case..of nodes: a capture needs a GPU "
                            "schedule; call static_schedule(g, stream_type='gpu') first")
    g._prepare()
    _prepare_tree(g, args, capture)


cdef int _prepare_tree(Graph g, dict args, capture) except -1:
    cdef int k, idx
    cdef ControlNode fn
    cdef WhileNode w
    cdef CaseOfNode c
    cdef Schedule bs
    for k in range(g._order_size):
        idx = g._order[k]
        if not g._nodes[idx].flags & EXEC_CONTROL:
            continue
        fn = <ControlNode>(<Cmd>g._cmds[idx]).fn
        fn.check()
        kind = "WHILE" if isinstance(fn, WhileNode) else "CASE_OF"
        if fn.cond is None:
            raise GraphError(
                f"node {g._label(idx)}: its expression is a Python callable, which only the host "
                "can evaluate, so the graph cannot be captured into a CUDA graph; give "
                f"{'set_while_expr' if kind == 'WHILE' else 'set_case_of_expr'} an nnc.Compare "
                "to capture it (or run the graph with run(stream=s), host-driven)")
        for t in fn.inputs:
            if t.device == "cpu":
                raise GraphError(f"node {g._label(idx)}: its expression reads {t!r}, host "
                                 "memory; in a CUDA graph the condition kernel reads device "
                                 "memory (compare a GPU tensor)")
        if isinstance(fn, WhileNode):
            w = fn
            check_sub_idle(w.body)
            w.body._prepare()
            _refuse_moving(g, idx, fn, w.body)
            bs = flow_schedule(w.body, args)
            if not _launches(w.body, bs, 0, bs.split):
                form = LOOP_HEAD_EMPTY
            elif not _launches(w.body, bs, bs.split, bs.order_size):
                form = LOOP_TAIL_EMPTY
            else:
                raise GraphError(
                    f"node {g._label(idx)} cannot be captured into a CUDA graph: both its head "
                    "(the breakpoints and their ancestors) and the rest of its body launch work; "
                    "a captured loop evaluates its expression once per iteration, so put a "
                    "NOOP breakpoint first (count the iterations in the expression) or make "
                    "the breakpoint the body's last node")
            capture.runtimes[w] = _own_runtime(bs)
            capture.prepare_while(w, form, w.cond, list(w.inputs))
            _prepare_tree(w.body, args, capture)
        else:
            c = fn
            indexes = sorted({c.offset + v for v in (0, 1) if c.offset + v >= 0})
            missing = [i for i in indexes if i not in c.branches]
            if missing:
                raise GraphError(f"node {g._label(idx)} cannot be captured into a CUDA graph: "
                                 f"its expression can choose branch {missing[0]}, which was "
                                 f"never set (branches: {sorted(c.branches)})")
            for i in indexes:
                branch = <Graph>c.branches[i]
                check_sub_idle(branch)
                branch._prepare()
                _refuse_moving(g, idx, fn, branch)
                capture.runtimes[(c, i)] = _own_runtime(flow_schedule(branch, args))
            capture.prepare_case(c, indexes, c.cond, list(c.inputs),
                                 [c.branches[i] for i in indexes])
            for i in indexes:
                _prepare_tree(<Graph>c.branches[i], args, capture)
    return 0


def flow_capture_run(Graph g not None, Stream caller not None, capture):
    """g.run(stream=caller) while caller captures, its control nodes recorded by ``capture``
    (after flow_capture_prepare)."""
    g._enter("run it", "enqueueing a captured run", caller)
    try:
        g._prepare()
        flow_run(g, caller, capture)
    finally:
        g._leave()


def _while_captured(_Run run, WhileNode w, Stream p):
    """A loop as a CUDA WHILE node: ``capture.while_begin`` adds the node after p's work and
    starts capturing into its body on the body's own stream 0; the head and the rest of the
    body are enqueued there once; ``capture.while_end`` adds the condition kernel and ends the
    body's capture."""
    cdef Graph body = w.body
    cdef Schedule bs = flow_schedule(body, run.args)
    cdef _Runtime brt = run.capture.runtimes[w]
    run.add(brt)
    originals = w.start()
    try:
        loop = run.capture.while_begin(w, p, brt.streams[0])
        try:
            yield from _part(run, body, bs, brt, 0, bs.split, None, None)
            yield from _part(run, body, bs, brt, bs.split, bs.order_size, None, None)
        except BaseException:
            run.capture.abandon(loop)
            raise
        run.capture.while_end(loop)
    finally:
        w._finish(originals)


def _case_of_captured(_Run run, CaseOfNode c, Stream p):
    """A case..of as a CUDA IF (one reachable branch) or SWITCH node, each reachable branch
    enqueued once into its body graph on the branch's own stream 0."""
    cdef Graph branch
    cdef Schedule bs
    cdef _Runtime brt
    node = run.capture.case_begin(c, p)
    for i in node.indexes:
        branch = c.branches[i]
        bs = flow_schedule(branch, run.args)
        brt = run.capture.runtimes[(c, i)]
        run.add(brt)
        run.capture.branch_begin(node, i, brt.streams[0])
        try:
            yield from _part(run, branch, bs, brt, 0, bs.order_size, None, None)
        except BaseException:
            run.capture.abandon(node)
            raise
        run.capture.branch_end(node)


register_flow(flow_run)                # nnc.run.run hands runs with control flow to us
