"""Schedule verification (RAF's verifier idea, research/peers.md §1): does a schedule enforce
every edge of its graph's run? Split from schedule.pyx, which builds schedules; see
Schedule.verify for the contract."""

from libc.stdlib cimport free
from libc.string cimport memcpy

from nnc._core import ScheduleError

from nnc.graph.graph cimport Graph
from nnc.graph.schedule cimport Schedule, _ints, _Scratch


def schedule_verify(Schedule sc not None):
    """Schedule.verify(): raise ScheduleError for the first unenforced edge or bad entry."""
    _verify(sc)


cdef int _verify(Schedule sc) except -1:
    """Schedule.verify(): O((N + E + W) * S) time; a clock of S ints per stream and per
    emitter whose waiters are still ahead."""
    cdef Graph g = sc.graph
    cdef _Scratch mem = _Scratch.__new__(_Scratch)
    cdef int m = sc.order_size, S = sc.stream_count, NS = sc.signal_count
    cdef int k, i, j, s, e, u, x
    cdef int* c
    if g.version != sc.version:
        raise ScheduleError("the graph changed since this schedule was built (it is stale)")
    if g._dirty:
        g._compile()
    if m != g._order_size:
        raise ScheduleError(f"the schedule runs {m} nodes, the graph {g._order_size}")
    cdef int* pos = mem.ints(sc.node_count, -1)
    cdef int* emitter = mem.ints(NS, -1)
    cdef int* lastpos = mem.ints(S, -1)
    cdef int* cons = mem.ints(m, 0)
    cdef int* pstart = mem.ints(m + 1, 0)
    cdef char* flags = <char*>mem.raw(m)    # per position: ordered after the run's begin
    cdef char* sflags = <char*>mem.raw(S)   # per stream: 1 entry, 2 previous node after begin
    cdef int** run = <int**>mem.raw(sizeof(int*) * S)
    cdef int** snapv = <int**>mem.raw(sizeof(int*) * m)
    errors = []
    for k in range(m):
        i = sc.order[k]
        if i < 0 or i >= sc.node_count or pos[i] >= 0:
            raise ScheduleError(f"order position {k} holds a bad node index {i}")
        pos[i] = k
    for k in range(m):
        if pos[g._order[k]] < 0:
            raise ScheduleError(f"{g._label(g._order[k])} runs but is not in the order")
    # Indices: streams, signals (one emitter each), waits, entry and exit.
    for k in range(m):
        i = sc.order[k]
        s = sc.stream[i]
        e = sc.signal[i]
        if s < 0 or s >= S:
            errors.append(f"{g._label(i)} has no stream (stream {s})")
        else:
            lastpos[s] = k
        if e >= NS or e < -1 or (e >= 0 and emitter[e] >= 0):
            errors.append(f"{g._label(i)} emits signal {e}, out of range or emitted twice")
        elif e >= 0:
            emitter[e] = k
        for j in range(sc.wait_start[i], sc.wait_start[i + 1]):
            if sc.waits[j] < 0 or sc.waits[j] >= NS:
                errors.append(f"{g._label(i)} waits on signal {sc.waits[j]}, out of range")
    for k in range(sc.entry_size):
        if not 0 < sc.entry_streams[k] < S:
            errors.append(f"entry stream {sc.entry_streams[k]} is out of range")
        else:
            sflags[sc.entry_streams[k]] = 1
    for k in range(sc.exit_size):
        if not 0 <= sc.exit_waits[k] < NS:
            errors.append(f"exit wait on signal {sc.exit_waits[k]} is out of range")
    if errors:
        raise ScheduleError("bad schedule: " + "; ".join(errors[:10]))
    # Predecessors by position; the readers of each emitter's clock (later waiters, exit).
    for k in range(m):
        for j in range(g._nodes[sc.order[k]].outgoing_size):
            u = pos[g._nodes[sc.order[k]].outgoings[j]]
            if u >= 0:
                pstart[u + 1] += 1
        for j in range(sc.wait_start[sc.order[k]], sc.wait_start[sc.order[k] + 1]):
            e = emitter[sc.waits[j]]
            if 0 <= e < k:
                cons[e] += 1
    for k in range(sc.exit_size):
        if emitter[sc.exit_waits[k]] >= 0:
            cons[emitter[sc.exit_waits[k]]] += 1
    for k in range(m):
        pstart[k + 1] += pstart[k]
    cdef int* pidx = mem.ints(pstart[m], 0)
    cdef int* fill = mem.ints(m, 0)
    for k in range(m):
        for j in range(g._nodes[sc.order[k]].outgoing_size):
            u = pos[g._nodes[sc.order[k]].outgoings[j]]
            if u >= 0:
                pidx[pstart[u] + fill[u]] = k
                fill[u] += 1
    try:
        # One pass in order. c = the node's clock: per stream, the highest position known to
        # have finished (stream order, then each signal whose emitter came earlier).
        for k in range(m):
            i = sc.order[k]
            s = sc.stream[i]
            c = run[s]
            if c == NULL:
                c = run[s] = _ints(S, -1)
                flags[k] = s == 0 or sflags[s] & 1
            else:
                flags[k] = sflags[s] >> 1
            for j in range(sc.wait_start[i], sc.wait_start[i + 1]):
                e = emitter[sc.waits[j]]
                if 0 <= e < k:          # a wait on a later (or no) emitter enforces nothing
                    for x in range(S):
                        c[x] = max(c[x], snapv[e][x])
                    flags[k] |= flags[e]
                    cons[e] -= 1
                    if cons[e] == 0:
                        free(snapv[e])
                        snapv[e] = NULL
            c[s] = k
            sflags[s] = (sflags[s] & 1) | (flags[k] << 1)
            if not flags[k]:
                errors.append(f"{g._label(i)} may start before the run begins (stream {s} "
                              "is not an entry stream and it waits on nothing that is)")
            # Each edge u -> v is enforced iff v's clock covers u's position on u's stream.
            for j in range(pstart[k], pstart[k + 1]):
                u = pidx[j]
                if c[sc.stream[sc.order[u]]] < u:
                    errors.append(f"{g._label(sc.order[u])} -> {g._label(i)} (streams "
                                  f"{sc.stream[sc.order[u]]} -> {s})")
            if cons[k] > 0:
                snapv[k] = _ints(S, -1)
                memcpy(snapv[k], c, sizeof(int) * S)
            if s != 0 and k == lastpos[s]:
                free(run[s])
                run[s] = NULL
        # The end: stream 0's clock after its exit waits must cover every stream's last node.
        if m:
            c = run[0]
            for k in range(sc.exit_size):
                e = emitter[sc.exit_waits[k]]
                if e >= 0:
                    for x in range(S):
                        c[x] = max(c[x], snapv[e][x])
            for s in range(1, S):
                if lastpos[s] >= 0 and c[s] < lastpos[s]:
                    errors.append(f"stream {s} ends with {g._label(sc.order[lastpos[s]])}, "
                                  "which stream 0 does not wait for at the end")
    finally:
        for k in range(m):
            free(snapv[k])
        for s in range(S):
            free(run[s])
    if errors:
        more = f"; and {len(errors) - 10} more" if len(errors) > 10 else ""
        raise ScheduleError("schedule does not enforce: " + "; ".join(errors[:10]) + more)
    return 0
