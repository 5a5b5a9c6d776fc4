"""A simulator of static schedules: the makespan and per-stream timeline of a schedule, given
per-node costs, without running anything (compare policies without hardware).

Not an NNC port (NNC has no simulator). The model (docs/schedule.md, "Simulator"):

- The host enqueues the nodes in ``sched.order``. Its clock starts at ``signal_cost`` x the
  entry streams (their waits on the run's begin signal) and advances by ``launch_cost`` per node
  plus ``signal_cost`` per wait the node has; a node cannot start before it is enqueued.
- A stream runs its nodes in enqueue order, one at a time.
- A node starts when its stream is free, every signal it waits on has been emitted (its emitter
  finished; CUDA-event semantics: a wait on a signal that no earlier-enqueued node emits is a
  no-op) and, with ``cores=N``, one of N cores is free: a node holds one core for its cost, and
  a freed core goes to the node that became ready first (then the earlier in enqueue order), as
  nnc's worker pool does. ``cores=None``: no limit.
- ``streams_overlap=False``: every node on one queue in enqueue order (a sequential run).
- Loop bodies (``sched.split`` < nodes): the host enqueues the tail ``order[split:]`` only once
  the head has finished and stream 0's ``signal_cost`` per head exit wait is paid (the host
  evaluates the loop expression there, at no cost): one iteration is simulated.
- A while or case..of node costs what ``costs`` says (its whole loop or branch); its sub-graphs
  are not simulated.
- The makespan is when the last node finishes, or the host's clock after the exit waits if
  later.

Hot path: costs are read once into a C array; the event loop is C over two binary heaps
(ready nodes by (ready time, position); core free times).
"""

from libc.math cimport isfinite

import json
import math
import os
from collections.abc import Mapping, Sequence

import numpy as np

from nnc.base.core import ScheduleError

from nnc.schedule.costs cimport cost_add, cost_seconds, shown
from nnc.graph.graph cimport Graph, GraphExec
from nnc.schedule.schedule cimport Schedule, _Scratch, enter_unless_in_use


# A binary min-heap of (key, position) pairs; ties go to the lower position. Arrays owned by
# the caller's _Scratch, capacity fixed at creation (every position is pushed at most once).
cdef struct heap_t:
    double* key
    int* val
    int size


cdef inline bint _less(heap_t* h, int a, int b) noexcept nogil:
    return h.key[a] < h.key[b] or (h.key[a] == h.key[b] and h.val[a] < h.val[b])


cdef inline void _swap(heap_t* h, int a, int b) noexcept nogil:
    cdef double k = h.key[a]
    cdef int v = h.val[a]
    h.key[a], h.val[a] = h.key[b], h.val[b]
    h.key[b], h.val[b] = k, v


cdef void _push(heap_t* h, double key, int val) noexcept nogil:
    cdef int i = h.size, parent
    h.key[i], h.val[i] = key, val
    h.size += 1
    while i > 0:
        parent = (i - 1) >> 1
        if not _less(h, i, parent):
            break
        _swap(h, i, parent)
        i = parent


cdef int _pop(heap_t* h, double* key) noexcept nogil:
    """Remove the smallest pair; returns its value and stores its key. The heap is not empty."""
    cdef int top = h.val[0], i = 0, c
    key[0] = h.key[0]
    h.size -= 1
    h.key[0], h.val[0] = h.key[h.size], h.val[h.size]
    while True:
        c = 2 * i + 1
        if c >= h.size:
            break
        if c + 1 < h.size and _less(h, c + 1, c):
            c += 1
        if not _less(h, c, i):
            break
        _swap(h, i, c)
        i = c
    return top


# One simulation's arrays, all by *position* p in sched.order (0 .. m-1).
cdef struct sim_t:
    int m
    const double* cost          # [m] seconds
    const int* next_on          # [m] next position on the same stream, or -1
    const int* prev_on          # [m] previous position on the same stream, or -1
    const int* dstart           # [m + 1] waiters of p (positions waiting on p's signal)
    const int* didx             # didx[dstart[p] : dstart[p + 1]], all > p
    const int* wstart           # [m + 1] emitters p waits on: widx[wstart[p] : wstart[p + 1]]
    const int* widx             # all < p (waits that are no-ops are left out)
    const int* nwaits           # [m] waits of p as the schedule lists them (host cost)
    int cores                   # 0: no limit
    double launch_cost
    double signal_cost
    double* ready               # [m] work: enqueue time, then max with dependencies' finish
    int* remaining              # [m] work: dependencies not yet started in this phase
    double* start               # [m] out
    double* finish              # [m] out
    heap_t cand                 # [m] nodes whose dependencies have all started
    heap_t core                 # [cores] free times of the cores


cdef double _phase(sim_t* s, int lo, int hi, double host) noexcept nogil:
    """Simulate positions [lo, hi) (those before lo already simulated) with the host's clock at
    ``host``; returns the host's clock after enqueueing them."""
    cdef int p, d, k, q
    cdef double t, c
    for p in range(lo, hi):
        host += s.launch_cost + s.signal_cost * s.nwaits[p]
        s.ready[p] = host
        s.remaining[p] = 0
        q = s.prev_on[p]
        if q >= lo:
            s.remaining[p] += 1
        elif q >= 0 and s.finish[q] > s.ready[p]:
            s.ready[p] = s.finish[q]
        for k in range(s.wstart[p], s.wstart[p + 1]):
            q = s.widx[k]
            if q >= lo:
                s.remaining[p] += 1
            elif s.finish[q] > s.ready[p]:
                s.ready[p] = s.finish[q]
        if s.remaining[p] == 0:
            _push(&s.cand, s.ready[p], p)
    # Popped ready times never decrease (a node pushed later is ready after a popped one
    # finished), and the earliest free core never gets earlier: starts are in time order.
    while s.cand.size:
        p = _pop(&s.cand, &t)
        if s.cores:
            _pop(&s.core, &c)
            if c > t:
                t = c
            _push(&s.core, t + s.cost[p], 0)
        s.start[p] = t
        s.finish[p] = t + s.cost[p]
        d = s.next_on[p]
        if d >= 0 and d < hi:
            _release(s, d, s.finish[p])
        for k in range(s.dstart[p], s.dstart[p + 1]):
            d = s.didx[k]
            if d < hi:
                _release(s, d, s.finish[p])
    return host


cdef inline void _release(sim_t* s, int d, double at) noexcept nogil:
    if at > s.ready[d]:
        s.ready[d] = at
    s.remaining[d] -= 1
    if s.remaining[d] == 0:
        _push(&s.cand, s.ready[d], d)


cdef int _key_index(Schedule sched, Graph g, object key) except -2:
    """The node index a ``costs`` mapping key names (a GraphExec of g or an int index)."""
    if isinstance(key, GraphExec):
        if (<GraphExec>key).graph is not g:
            raise ScheduleError(f"costs: {key!r} is a node of another graph")
        return (<GraphExec>key).index
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        if 0 <= key < sched.node_count:
            return int(key)
        raise ScheduleError(f"costs: node index {key} is out of range (the scheduled graph "
                            f"has {sched.node_count} nodes)")
    raise ScheduleError(f"costs: a key must be a GraphExec or a node index, not {key!r}")


cdef double _read_costs(Schedule sched, Graph g, object costs, double* out) except -1:
    """Fill out[p] (by position) with each node's cost, checked (costs.pyx: cost_seconds);
    returns their sum, checked to be finite (cost_add)."""
    cdef int p, i, m = sched.order_size
    cdef double total = 0
    cdef dict table
    if isinstance(costs, str):
        raise ScheduleError(f'costs: expected "profile", a mapping, a callable or a '
                            f'sequence, not the string {shown(costs)}')
    elif isinstance(costs, Mapping):
        table = {}
        for key, v in costs.items():
            i = _key_index(sched, g, key)
            if i in table:
                raise ScheduleError(f"costs: node {GraphExec._new(g, i)!r} is given twice "
                                    "(as a GraphExec and as an index)")
            table[i] = v
    elif callable(costs):
        for p in range(m):
            e = GraphExec._new(g, sched.order[p])
            try:
                v = costs(e)
            except Exception as exc:
                raise ScheduleError(f"costs: the cost function failed on node {e!r}: "
                                    f"{shown(exc)}") from exc
            out[p] = cost_seconds(e, v)
            total = cost_add(e, out[p], total)
        return total
    elif isinstance(costs, (Sequence, np.ndarray)):
        if len(costs) != sched.node_count:
            raise ScheduleError(f"costs: a sequence needs one cost per node of the scheduled "
                                f"graph ({sched.node_count}), not {len(costs)}")
        table = {i: costs[i] for i in range(sched.node_count)}
    else:
        raise ScheduleError(f'costs: expected "profile", a mapping {{GraphExec or index: '
                            f's}}, a callable(GraphExec) -> s or a sequence, not {shown(costs)}')
    for p in range(m):
        i = sched.order[p]
        e = GraphExec._new(g, i)
        v = table.get(i, table)     # the table itself: no cost given
        if v is table:
            raise ScheduleError(f"costs: no cost for node {e!r}")
        out[p] = cost_seconds(e, v)
        total = cost_add(e, out[p], total)
    return total


cdef double _option(object v, str name) except? -1:
    if isinstance(v, (bool, str)):
        raise ScheduleError(f"{name} must be a number of seconds >= 0, not {v!r}")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ScheduleError(f"{name} must be a number of seconds >= 0, not {v!r}") from None
    if not isfinite(x) or x < 0:
        raise ScheduleError(f"{name} must be finite and >= 0, not {v!r}")
    return x


def schedule_simulate(Schedule sched not None, costs, *, cores=None, streams_overlap=True,
                      signal_cost=0.0, launch_cost=0.0):
    """Simulate one run of ``sched`` with ``costs`` (seconds per node); returns a SimResult.

    ``costs``: a mapping {GraphExec or node index: s}, a callable(GraphExec) -> s, a sequence
    indexed by node index (one entry per node of the scheduled graph), or ``"profile"`` (the
    best of three ``graph.profile()`` runs; this runs the graph). ``cores``: how many nodes may
    run at once (None: no limit). The model: docs/schedule.md, "Simulator". ScheduleError for
    a stale schedule, bad options, a node whose cost is missing or bad (costs.pyx), costs whose
    sum, or a run whose end, passes the largest double. The graph is busy while the costs are
    read (a costs function that changes it gets GraphError).
    """
    cdef Graph g = sched.graph_ref()
    if sched.stale:
        raise ScheduleError("this schedule is stale (the graph changed since it was built); "
                            "build it again before simulating it")
    cdef int ncores = 0
    if cores is not None:
        if isinstance(cores, bool) or not isinstance(cores, (int, np.integer)) or cores < 1:
            raise ScheduleError(f"cores must be an int >= 1 or None (no limit), not {cores!r}")
        ncores = min(int(cores), sched.order_size + 1)
    if not isinstance(streams_overlap, (bool, np.bool_)):
        raise ScheduleError(f"streams_overlap must be a bool, not {streams_overlap!r}")
    cdef bint overlap = bool(streams_overlap)
    cdef double sig = _option(signal_cost, "signal_cost")
    cdef double launch = _option(launch_cost, "launch_cost")
    cdef int m = sched.order_size, n = sched.node_count, p, i, k, w, q, ns = sched.stream_count
    cdef _Scratch mem = _Scratch.__new__(_Scratch)
    cdef double* cost = <double*>mem.raw(sizeof(double) * (m + 1))
    cdef double work
    cdef bint entered
    if isinstance(costs, str) and costs == "profile":
        # Runs the graph: before the graph is marked busy for the costs below.
        costs = {(<GraphExec>e).index: t for e, t in g.profile(repeat=3)}
    # The costs may be user code (a callable, a mapping's methods, a Real's __float__): the
    # graph is busy meanwhile, so that it cannot change under the schedule being simulated.
    entered = enter_unless_in_use(g, "simulate it", "being simulated")
    try:
        work = _read_costs(sched, g, costs, cost)
    finally:
        if entered:
            g._leave()

    cdef int* pos = mem.ints(n, -1)                     # node index -> position
    cdef int* emit_pos = mem.ints(sched.signal_count, -1)
    cdef int* last_on = mem.ints(ns, -1)
    cdef int* next_on = mem.ints(m, -1)
    cdef int* prev_on = mem.ints(m, -1)
    cdef int* nwaits = mem.ints(m, 0)
    cdef int* wstart = mem.ints(m + 1, 0)
    cdef int* dstart = mem.ints(m + 1, 0)
    cdef int* dfill = mem.ints(m + 1, 0)
    cdef int st, sg, total = 0
    for p in range(m):
        i = sched.order[p]
        pos[i] = p
        sg = sched.signal[i]
        if 0 <= sg < sched.signal_count and emit_pos[sg] < 0:
            emit_pos[sg] = p
        st = sched.stream[i]
        if st < 0 or st >= ns:
            raise ScheduleError(f"node {GraphExec._new(g, i)!r} has stream {st}, outside "
                                f"0 .. {ns - 1}")
        if not overlap:
            st = 0
        if last_on[st] >= 0:
            prev_on[p] = last_on[st]
            next_on[last_on[st]] = p
        last_on[st] = p
        nwaits[p] = sched.wait_start[i + 1] - sched.wait_start[i]
        total += nwaits[p]
    # The waits that order anything: on a signal emitted by a node enqueued earlier.
    cdef int* widx = mem.ints(total, -1)
    cdef int* didx = mem.ints(total, -1)
    k = 0
    for p in range(m):
        i = sched.order[p]
        wstart[p] = k
        for w in range(sched.wait_start[i], sched.wait_start[i + 1]):
            sg = sched.waits[w]
            q = emit_pos[sg] if 0 <= sg < sched.signal_count else -1
            if 0 <= q < p:
                widx[k] = q
                dstart[q + 1] += 1
                k += 1
    wstart[m] = k
    for p in range(m):
        dstart[p + 1] += dstart[p]
        dfill[p] = dstart[p]
    for p in range(m):
        for w in range(wstart[p], wstart[p + 1]):
            q = widx[w]
            didx[dfill[q]] = p
            dfill[q] += 1

    start = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    cdef double[::1] start_v = start, finish_v = finish
    cdef sim_t s
    s.m, s.cost, s.next_on, s.prev_on = m, cost, next_on, prev_on
    s.dstart, s.didx, s.wstart, s.widx, s.nwaits = dstart, didx, wstart, widx, nwaits
    s.cores, s.launch_cost, s.signal_cost = ncores, launch, sig
    s.ready = <double*>mem.raw(sizeof(double) * (m + 1))
    s.remaining = mem.ints(m, 0)
    s.start = <double*>mem.raw(sizeof(double) * (m + 1))
    s.finish = <double*>mem.raw(sizeof(double) * (m + 1))
    s.cand.key = <double*>mem.raw(sizeof(double) * (m + 1))
    s.cand.val = mem.ints(m, 0)
    s.cand.size = 0
    s.core.key = <double*>mem.raw(sizeof(double) * (ncores + 1))
    s.core.val = mem.ints(ncores, 0)
    s.core.size = ncores                # all zero: every core free at time 0
    cdef int split = sched.split if 0 <= sched.split < m else m
    cdef double host, end = 0.0
    with nogil:
        host = _phase(&s, 0, split, sig * sched.entry_size)
        if split < m:
            for p in range(split):
                if s.finish[p] > end:
                    end = s.finish[p]
            host += sig * sched.head_exit_size
            host = _phase(&s, split, m, end if end > host else host)
        host += sig * sched.exit_size
        end = host
        for p in range(m):
            if s.finish[p] > end:
                end = s.finish[p]
            start_v[sched.order[p]] = s.start[p]
            finish_v[sched.order[p]] = s.finish[p]
    if not isfinite(end):
        _overflowed(sched, g, &s, cost)
    busy = [0.0] * ns
    every = [0.0] * m
    for p in range(m):
        busy[sched.stream[sched.order[p]]] += cost[p]
        every[p] = cost[p]
    try:
        work = math.fsum(every)         # exact, where the checked sum may have rounded
    except OverflowError:               # ... past the doubles, by rounding only
        pass
    return SimResult(sched, float(end), start, finish, tuple(busy),
                     _critical_path(g, sched, pos, cost), work, cores, overlap)


cdef int _overflowed(Schedule sched, Graph g, sim_t* s, const double* cost) except -1:
    """The run's end overflowed (the costs sum to a finite double, but the host's launch and
    signal costs take a time past it): ScheduleError naming the first node enqueued that
    starts or finishes too late to time."""
    cdef int p
    for p in range(sched.order_size):
        if not isfinite(s.finish[p]):
            raise ScheduleError(
                f"the simulated run overflows the largest double: node "
                f"{GraphExec._new(g, sched.order[p])!r} (cost {cost[p]!r}) starts at "
                f"{s.start[p]!r} s; its costs, launch_cost and signal_cost must add up to a "
                "finite time")
    raise ScheduleError("the simulated run overflows the largest double at its end: its costs, "
                        "launch_cost and signal_cost must add up to a finite time")


cdef double _critical_path(Graph g, Schedule sched, const int* pos, const double* cost):
    """The longest cost path over the graph's edges between scheduled nodes: no schedule
    that enforces every edge (one that passes verify()) runs faster."""
    cdef int m = sched.order_size, p, i, k, q
    cdef _Scratch mem = _Scratch.__new__(_Scratch)
    cdef double* at = <double*>mem.raw(sizeof(double) * (m + 1))
    cdef double f, best = 0.0
    for p in range(m):
        i = sched.order[p]
        f = at[p] + cost[p]
        if f > best:
            best = f
        if i >= g._size:
            continue
        for k in range(g._nodes[i].outgoing_size):
            q = g._nodes[i].outgoings[k]
            q = pos[q] if q < sched.node_count else -1
            if q > p and f > at[q]:
                at[q] = f
    return best


class SimResult:
    """What :meth:`nnc.Schedule.simulate` found (times in seconds from the run's start).

    ``makespan``: when the run ends. ``start`` / ``finish``: float64 arrays indexed by node
    index (``e.index``), NaN for nodes that do not run. ``stream_busy``: the summed cost of
    each stream's nodes. ``critical_path``: the longest cost path over the graph's edges, a
    lower bound of any schedule's makespan; ``work``: the sum of all costs, what a sequential
    run takes. ``trace(path)`` writes the timeline as a Chrome trace (nnc.trace's format).
    """

    def __init__(self, schedule, makespan, start, finish, stream_busy, critical_path, work,
                 cores, streams_overlap):
        self.schedule = schedule
        self.makespan = makespan
        self.start = start
        self.finish = finish
        self.stream_busy = stream_busy
        self.critical_path = critical_path
        self.work = work
        self.cores = cores
        self.streams_overlap = streams_overlap

    def __repr__(self):
        return (f"<nnc SimResult makespan={self.makespan:.6g} s, critical path "
                f"{self.critical_path:.6g} s, work {self.work:.6g} s, "
                f"{len(self.stream_busy)} streams>")

    def chrome_trace(self):
        """The timeline in Chrome's trace-event JSON format (a dict): one track per stream,
        one slice per node (cat ``cmd``, args ``{"node": index}``), flow arrows from each
        signal's emit to the waits it releases."""
        sched = self.schedule
        g = sched.graph
        tables = sched.tables()
        us = 1e6
        out = [{"ph": "M", "name": "process_name", "pid": 1,
                "args": {"name": "nnc (simulated)"}}]
        for k in range(len(self.stream_busy)):
            out.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": k,
                        "args": {"name": f"stream #{k}"}})
        emitter = {sg: e for e, sg in tables["signals"].items()}
        for e in sched.order:
            i = e.index
            st = tables["streams"][e]
            t0, t1 = float(self.start[i]), float(self.finish[i])
            name = g._label(i) if g is not None else f"#{i}"
            out.append({"ph": "X", "name": name, "cat": "cmd", "pid": 1, "tid": st,
                        "ts": t0 * us, "dur": max((t1 - t0) * us, 0.01), "args": {"node": i}})
            for sg in tables["waits"].get(e, ()):
                src = emitter.get(sg)
                if src is None or not self.finish[src.index] <= t0:
                    continue        # a no-op wait (no earlier emit) draws no arrow
                emitted = float(self.finish[src.index]) * us
                out.append({"ph": "s", "id": sg, "name": "signal", "cat": "signal", "pid": 1,
                            "tid": tables["streams"][src], "ts": emitted})
                out.append({"ph": "f", "bp": "e", "id": sg, "name": "signal", "cat": "signal",
                            "pid": 1, "tid": st, "ts": t0 * us})
        return {"traceEvents": out, "displayTimeUnit": "ms"}

    def trace(self, path):
        """Write :meth:`chrome_trace` as JSON to ``path`` (open it in ui.perfetto.dev)."""
        with open(os.fspath(path), "w") as f:
            json.dump(self.chrome_trace(), f)
