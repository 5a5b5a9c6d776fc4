"""Static schedules, policy "rank": every node of a graph's run order gets one stream, nodes
that another stream depends on get a signal, and each node lists the signals it waits on.

NNC: ccv_nnc_graph.c (_ccv_nnc_graph_static_schedule_new, _ccv_nnc_graph_schedule_assign_signals).
We port the algorithm NNC's doc/nnc-schd.rst describes (longest-chain ranks, command tie-break,
no redundant waits), not the upstream code's degenerate ranks; docs/schedule.md has the rules,
a worked example, the deadlock argument, the costs and the differences from upstream.

State: a Schedule owns C arrays indexed by node (schedule.pxd). A build runs in a _Builder,
whose scratch arrays (indexed by run-order position) and vector clocks it frees when collected.
Reachability questions ("is u known to have finished at this point of stream t?") are answered
by vector clocks over *slots*: a stream holds a slot from its creation until it can never be
asked about again (retirement), and at most CLOCK_SLOTS slots exist. Clocks are shared
copy-on-write between a stream and the nodes that ran on it, and a node's clock is freed once all
its successors have been visited. Streams without a slot are answered conservatively (correct,
but a wait may be redundant), which happens only with more than CLOCK_SLOTS live streams.
"""

from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

import operator
from collections import namedtuple

from nnc._core import GraphError, ScheduleError

from nnc.cmd cimport Cmd
from nnc.graph.graph cimport Graph, GraphExec

ExecSchedule = namedtuple("ExecSchedule", ["streams", "signals", "waits"])
ExecSchedule.__doc__ = """One node's part of a schedule: the streams it runs on (empty: it does
not run), the signals it emits after running and the signals it waits on before."""

POLICIES = ("rank",)
cdef int _clock_slots = 256             # CLOCK_SLOTS: most streams with exact clocks at once


def _set_clock_slots(slots=None):
    """Testing hook: set CLOCK_SLOTS (None: leave it); returns the value it had."""
    global _clock_slots
    old = _clock_slots
    if slots is not None:
        if slots < 1:
            raise ValueError("need at least one clock slot")
        _clock_slots = slots
    return old


cdef struct ivec:
    int* v
    int n
    int cap


cdef int ipush(ivec* a, int x) except -1:
    cdef int* p
    if a.n == a.cap:
        p = <int*>realloc(a.v, sizeof(int) * (2 * a.cap + 8))
        if p == NULL:
            raise MemoryError()
        a.v = p
        a.cap = 2 * a.cap + 8
    a.v[a.n] = x
    a.n += 1
    return 0


cdef int* _ints(Py_ssize_t count, int fill) except NULL:
    cdef int* p = <int*>malloc(sizeof(int) * (count + 1))
    cdef Py_ssize_t i
    if p == NULL:
        raise MemoryError()
    for i in range(count + 1):
        p[i] = fill
    return p


# A clock: c[0] references, c[1] length, c[2 + slot] = the highest run-order position known to
# have finished on the stream holding that slot (-1: nothing; missing entries read -1).
cdef inline int cget(const int* c, int i) noexcept nogil:
    if c == NULL or i < 0 or i >= c[1]:
        return -1
    return c[2 + i]


cdef inline void crelease(int* c) noexcept nogil:
    if c != NULL:
        c[0] -= 1
        if c[0] == 0:
            free(c)


cdef inline int* cref(int* c) noexcept nogil:
    if c != NULL:
        c[0] += 1
    return c


cdef class _Scratch:
    """Owns the malloc'd blocks of one build or verification; frees them when collected."""

    def __cinit__(self):
        self.owned = []

    def __dealloc__(self):
        for p in self.owned:
            free(<void*><size_t>p)

    cdef void* raw(self, size_t size) except NULL:
        cdef void* p = malloc(size + 1)
        if p == NULL:
            raise MemoryError()
        memset(p, 0, size + 1)
        self.owned.append(<size_t>p)
        return p

    cdef int* ints(self, Py_ssize_t count, int fill) except NULL:
        cdef int* p = <int*>self.raw(sizeof(int) * (count + 1))
        cdef Py_ssize_t i
        if fill:
            for i in range(count + 1):
                p[i] = fill
        return p


cdef class _Builder(_Scratch):
    """State of one build. Arrays are by run-order position, or by stream (at most m)."""
    cdef int m, max_streams
    cdef int* pos                       # [node_count] node index -> position, -1 off the run
    cdef int* sstart                    # successors (positions, edge order): CSR
    cdef int* sidx
    cdef int* pstart                    # predecessors (positions, ascending): CSR
    cdef int* pidx
    cdef int* rank
    cdef int* cmd                       # command id
    cdef int* minsucc                   # first / last successor position, -1 for none
    cdef int* maxsucc
    cdef int* st                        # stream, -1 until assigned
    cdef int* sig                       # signal, -1 none
    cdef int* wstart                    # CSR row starts into wemit, by waiting position
    cdef ivec wemit                     # waits chosen, as emitter positions, ascending per row
    cdef int** snap                     # clock after the node (shared), while successors remain
    cdef int* remaining                 # successors not visited yet
    cdef int S, nsig                    # streams and signals so far
    cdef int L, slot_cap                # clock slots: high-water mark, most allowed
    cdef int* owner                     # per slot: the stream holding it, -1 none
    cdef int* tail                      # per stream: position of its last node
    cdef int* first                     # per stream: position of its first node
    cdef int* slot                      # per stream: clock slot, -1 none
    cdef int* need                      # per stream: last successor position of its nodes
    cdef int* rel_idx                   # per stream: index in rel, -1 if not there
    cdef char* retired                  # per stream: can never be asked about again
    cdef int** K                        # per stream: its clock (what it knows so far)
    cdef ivec* cmds                     # per stream: commands it has run (or will, in a chain)
    cdef ivec rel                       # streams whose last node has finished for someone
    cdef ivec free_slots
    cdef int* rel_head                  # per position: items (it_*) releasing a stream there
    cdef int* ret_head                  # per position: items retiring a stream there
    cdef ivec it_s, it_tail, it_next

    def __dealloc__(self):
        cdef int k
        if self.snap != NULL:
            for k in range(self.m):
                if self.remaining[k] > 0:
                    crelease(self.snap[k])
        for k in range(self.S):
            crelease(self.K[k])
            free(self.cmds[k].v)
        free(self.wemit.v)
        free(self.rel.v)
        free(self.free_slots.v)
        free(self.it_s.v)
        free(self.it_tail.v)
        free(self.it_next.v)

    cdef int setup(self, Graph g) except -1:
        cdef int n = g._size, m = g._order_size, k, j, v, e = 0, r
        self.m = m
        self.pos = self.ints(n, -1)
        for k in range(m):
            self.pos[g._order[k]] = k
        self.sstart = self.ints(m, 0)
        self.pstart = self.ints(m, 0)
        for k in range(m):
            for j in range(g._nodes[g._order[k]].outgoing_size):
                v = self.pos[g._nodes[g._order[k]].outgoings[j]]
                if v >= 0:
                    e += 1
                    self.pstart[v + 1] += 1
            self.sstart[k + 1] = e
        for k in range(m):
            self.pstart[k + 1] += self.pstart[k]
        self.sidx = self.ints(e, 0)
        self.pidx = self.ints(e, 0)
        self.remaining = self.ints(m, 0)        # a fill cursor first, then successors left
        e = 0
        for k in range(m):
            for j in range(g._nodes[g._order[k]].outgoing_size):
                v = self.pos[g._nodes[g._order[k]].outgoings[j]]
                if v >= 0:
                    self.sidx[e] = v
                    e += 1
                    self.pidx[self.pstart[v] + self.remaining[v]] = k
                    self.remaining[v] += 1
        # 1. rank(k) = length of the longest chain after k: one reverse pass.
        self.rank = self.ints(m, 0)
        self.minsucc = self.ints(m, -1)
        self.maxsucc = self.ints(m, -1)
        for k in range(m - 1, -1, -1):
            r = 0
            for j in range(self.sstart[k], self.sstart[k + 1]):
                v = self.sidx[j]
                r = max(r, self.rank[v] + 1)
                self.maxsucc[k] = max(self.maxsucc[k], v)
                if self.minsucc[k] < 0 or v < self.minsucc[k]:
                    self.minsucc[k] = v
            self.rank[k] = r
            self.remaining[k] = self.sstart[k + 1] - self.sstart[k]
        self.cmd = self.ints(m, 0)
        for k in range(m):
            self.cmd[k] = (<Cmd>g._cmds[g._order[k]]).info.id
        self.st = self.ints(m, -1)
        self.sig = self.ints(m, -1)
        self.wstart = self.ints(m, 0)
        self.rel_head = self.ints(m, -1)
        self.ret_head = self.ints(m, -1)
        self.snap = <int**>self.raw(sizeof(int*) * m)
        self.slot_cap = _clock_slots
        self.owner = self.ints(self.slot_cap, -1)
        # Per stream: each stream has a node of its own, so there are at most m.
        self.tail = self.ints(m, -1)
        self.first = self.ints(m, -1)
        self.slot = self.ints(m, -1)
        self.need = self.ints(m, -1)
        self.rel_idx = self.ints(m, -1)
        self.retired = <char*>self.raw(m)
        self.K = <int**>self.raw(sizeof(int*) * m)
        self.cmds = <ivec*>self.raw(sizeof(ivec) * m)
        return 0

    # -- streams -------------------------------------------------------------------------------

    cdef int has_cmd(self, int s, int c) noexcept:
        cdef int i
        for i in range(self.cmds[s].n):
            if self.cmds[s].v[i] == c:
                return 1
        return 0

    cdef int new_slot(self, int s) noexcept:
        cdef int sl = -1
        if self.free_slots.n:
            self.free_slots.n -= 1
            sl = self.free_slots.v[self.free_slots.n]
        elif self.L < self.slot_cap:
            self.L += 1
            sl = self.L - 1
        if sl >= 0:
            self.owner[sl] = s
        return sl

    cdef int new_stream(self, int k) noexcept:
        cdef int s = self.S
        self.S += 1
        self.first[s] = k
        self.slot[s] = self.new_slot(s)
        return s

    cdef int item(self, int* heads, int at, int s) except -1:
        """Queue stream s (with its current last node) in bucket heads[at]."""
        ipush(&self.it_s, s)
        ipush(&self.it_tail, self.tail[s])
        ipush(&self.it_next, heads[at])
        heads[at] = self.it_s.n - 1
        return 0

    cdef int unrelease(self, int s) noexcept:
        cdef int i = self.rel_idx[s], last
        if i >= 0:
            last = self.rel.v[self.rel.n - 1]
            self.rel.v[i] = last
            self.rel_idx[last] = i
            self.rel.n -= 1
            self.rel_idx[s] = -1
        return 0

    cdef bint finished_before(self, int s, int k) noexcept:
        """Is the last node of stream s known to finish before position k starts?"""
        cdef int x = self.tail[s], j, p, sl = self.slot[s]
        for j in range(self.pstart[k], self.pstart[k + 1]):
            p = self.pidx[j]
            if p == x:
                return True
            if self.st[p] != s and sl >= 0 and cget(self.snap[p], sl) >= x:
                return True
        return False

    cdef int consider(self, int s, int k, int* best, int* best_has) noexcept:
        cdef int has
        if self.finished_before(s, k):
            has = self.has_cmd(s, self.cmd[k])
            if best[0] < 0 or has > best_has[0] or (has == best_has[0] and s < best[0]):
                best[0], best_has[0] = s, has
        return 0

    cdef int choose(self, int k) except -1:
        """2. The stream for an unassigned node k (a chain head)."""
        cdef int i, s, best = -1, has, best_has = 0, c = self.cmd[k]
        if self.rel.n <= self.L:
            for i in range(self.rel.n):
                self.consider(self.rel.v[i], k, &best, &best_has)
        else:                   # many free streams: only those in a clock slot can qualify
            for i in range(self.L):
                s = self.owner[i]
                if s >= 0 and self.rel_idx[s] >= 0:
                    self.consider(s, k, &best, &best_has)
            for i in range(self.pstart[k], self.pstart[k + 1]):
                s = self.st[self.pidx[i]]
                if self.slot[s] < 0 and self.rel_idx[s] >= 0:
                    self.consider(s, k, &best, &best_has)
        if best >= 0:
            self.unrelease(best)
            return best
        if self.max_streams == 0 or self.S < self.max_streams:
            return self.new_stream(k)
        # Cap reached and nothing free: share a stream. Any choice is deadlock-free (see
        # docs/schedule.md); prefer one whose last node comes before k (a plain append), then
        # one that ran this command, then the earliest last node, then the lowest index.
        for s in range(self.S):
            has = 2 * (self.tail[s] < k) + self.has_cmd(s, c)
            if best < 0 or has > best_has or (
                    has == best_has and self.tail[s] < self.tail[best]):
                best, best_has = s, has
        self.unrelease(best)
        if self.retired[best]:
            self.retired[best] = 0
            self.slot[best] = self.new_slot(best)
        return best

    cdef int chain(self, int k, int s) except -1:
        """3. Give s to k, then repeatedly to the best unassigned successor."""
        cdef int x = k, j, v, best, has, best_has = 0
        while x >= 0:
            self.st[x] = s
            if not self.has_cmd(s, self.cmd[x]):
                ipush(&self.cmds[s], self.cmd[x])
            self.need[s] = max(self.need[s], self.maxsucc[x])
            if self.max_streams == 1:   # one stream: chains change nothing
                break
            best = -1
            for j in range(self.sstart[x], self.sstart[x + 1]):
                v = self.sidx[j]
                if self.st[v] >= 0:
                    continue
                has = self.has_cmd(s, self.cmd[v])
                if best < 0 or self.rank[v] > self.rank[best] or (
                        self.rank[v] == self.rank[best] and has and not best_has):
                    best, best_has = v, has
            if best < 0:
                break
            x = best
        if x > self.tail[s]:
            self.tail[s] = x
            if self.minsucc[x] >= 0:        # free for others once a successor has run
                self.item(self.rel_head, self.minsucc[x], s)
            else:                           # a sink: never free again; retire when done
                self.item(self.ret_head, max(x, self.need[s]), s)
        return 0

    # -- waits ---------------------------------------------------------------------------------

    cdef int merge(self, int t, int* c, int sl, int p) except -1:
        """Stream t waits on the node at position p (clock c, stream slot sl)."""
        cdef int* kt = self.K[t]
        cdef int* cv = NULL if c == NULL else c + 2
        cdef int* kv
        cdef int i, n = 0 if c == NULL else c[1], klen = 0 if kt == NULL else kt[1], a, b
        cdef bint change = sl >= 0 and cget(kt, sl) < p
        if not change:                      # branch-free, so that it vectorises
            for i in range(min(n, klen)):
                change |= cv[i] > kt[2 + i]
            for i in range(klen, n):
                change |= cv[i] >= 0
            if not change:
                return 0
        if kt == NULL or kt[0] > 1 or klen < self.L:    # copy on write
            kt = <int*>malloc(sizeof(int) * (self.L + 2))
            if kt == NULL:
                raise MemoryError()
            kt[0] = 1
            kt[1] = self.L
            if klen:
                memcpy(kt + 2, self.K[t] + 2, sizeof(int) * klen)
            for i in range(klen, self.L):
                kt[2 + i] = -1
            crelease(self.K[t])
            self.K[t] = kt
        kv = kt + 2
        for i in range(n):
            a = cv[i]
            b = kv[i]
            kv[i] = a if a > b else b
        if sl >= 0 and kv[sl] < p:
            kv[sl] = p
        return 0

    cdef int waits(self, int k) except -1:
        """4. Wait on each predecessor on another stream that t does not already know of.
        Later predecessors first: an earlier one can be implied by a later one, never the
        reverse, so each wait chosen is the only enforcement of its edge."""
        cdef int t = self.st[k], j, p, s, base = self.wemit.n, a, b
        for j in range(self.pstart[k + 1] - 1, self.pstart[k] - 1, -1):
            p = self.pidx[j]
            s = self.st[p]
            if s == t or (self.slot[s] >= 0 and cget(self.K[t], self.slot[s]) >= p):
                continue
            ipush(&self.wemit, p)
            self.merge(t, self.snap[p], self.slot[s], p)
        a, b = base, self.wemit.n - 1
        while a < b:
            self.wemit.v[a], self.wemit.v[b] = self.wemit.v[b], self.wemit.v[a]
            a += 1
            b -= 1
        for j in range(base, self.wemit.n):
            if self.sig[self.wemit.v[j]] < 0:
                self.sig[self.wemit.v[j]] = self.nsig
                self.nsig += 1
        self.wstart[k + 1] = self.wemit.n
        return 0

    cdef int visited(self, int q) except -1:
        """Position q is done: free finished clocks, release and retire streams."""
        cdef int j, i, s
        for j in range(self.pstart[q], self.pstart[q + 1]):
            i = self.pidx[j]
            self.remaining[i] -= 1
            if self.remaining[i] == 0:
                crelease(self.snap[i])
                self.snap[i] = NULL
        i = self.rel_head[q]
        while i >= 0:
            s = self.it_s.v[i]
            if self.tail[s] == self.it_tail.v[i] and self.rel_idx[s] < 0:
                self.rel_idx[s] = self.rel.n
                ipush(&self.rel, s)
            i = self.it_next.v[i]
        i = self.ret_head[q]
        while i >= 0:
            s = self.it_s.v[i]
            if self.tail[s] == self.it_tail.v[i] and not self.retired[s]:
                if self.need[s] > q:
                    self.item(self.ret_head, self.need[s], s)
                else:
                    self.retired[s] = 1
                    if self.slot[s] >= 0:
                        ipush(&self.free_slots, self.slot[s])
                        self.owner[self.slot[s]] = -1
                        self.slot[s] = -1
                    if self.max_streams == 0:   # never reused: its clock is garbage
                        crelease(self.K[s])
                        self.K[s] = NULL
            i = self.it_next.v[i]
        return 0

    cdef int run(self) except -1:
        cdef int k, t
        for k in range(self.m):
            if self.st[k] < 0:
                # 6. while / case..of nodes (not yet in nnc) get exactly one stream here, like
                # any chain head, and their sub-graphs are scheduled recursively with that
                # stream as their stream 0; a cross-device node would take one per device.
                self.chain(k, self.choose(k))
            t = self.st[k]
            self.waits(k)
            if self.remaining[k] > 0:
                self.snap[k] = cref(self.K[t])
            self.visited(k)
        return 0


cdef int _mark(_Builder b, int* prev, char* mark, int* stack, int x) noexcept:
    """Mark x and everything that happens before it (stream order and waits)."""
    cdef int n = 0, j, y
    if mark[x]:
        return 0
    mark[x] = 1
    stack[n] = x
    n += 1
    while n:
        n -= 1
        x = stack[n]
        if prev[x] >= 0 and not mark[prev[x]]:
            mark[prev[x]] = 1
            stack[n] = prev[x]
            n += 1
        for j in range(b.wstart[x], b.wstart[x + 1]):
            y = b.wemit.v[j]
            if not mark[y]:
                mark[y] = 1
                stack[n] = y
                n += 1
    return 0


cdef Schedule _build(Graph g, str stream_type, int max_streams, str policy):
    cdef _Builder b = _Builder.__new__(_Builder)
    cdef Schedule sched = Schedule.__new__(Schedule)
    cdef int m, k, s, i, j, w
    cdef list entry = [], exits = []
    if g._dirty:
        g._compile()
    m = g._order_size
    b.max_streams = max_streams
    b.setup(g)
    b.run()
    # 5. Entry: streams != 0 whose first node has no predecessor wait on the begin signal.
    # Exit: stream 0 waits on the last node of each other stream it does not already know to
    # have finished; later ones first, so that each exit wait is needed.
    cdef int* prev = b.ints(m, -1)
    cdef int* last = b.ints(b.S, -1)
    cdef int* stack = b.ints(m, 0)
    cdef char* mark = <char*>b.raw(m)
    for k in range(m):
        s = b.st[k]
        prev[k] = last[s]
        last[s] = k
    for s in range(1, b.S):
        if b.pstart[b.first[s]] == b.pstart[b.first[s] + 1]:
            entry.append(s)
    if m:
        _mark(b, prev, mark, stack, last[0])
    for k in sorted([last[s] for s in range(1, b.S)], reverse=True):
        if not mark[k]:
            exits.append(k)
            _mark(b, prev, mark, stack, k)
    exits.sort()
    for k in exits:
        if b.sig[k] < 0:
            b.sig[k] = b.nsig
            b.nsig += 1
    sched.graph = g
    sched.version = g.version
    sched.stream_type = stream_type
    sched.max_streams = max_streams
    sched.policy = policy
    sched._alloc(g._size, m, b.wemit.n, entry, [b.sig[k] for k in exits])
    sched.stream_count = max(b.S, 1)
    sched.signal_count = b.nsig
    memcpy(sched.order, g._order, sizeof(int) * m)
    w = 0
    for i in range(g._size):
        k = b.pos[i]
        sched.wait_start[i] = w
        if k >= 0:
            sched.stream[i] = b.st[k]
            sched.signal[i] = b.sig[k]
            sched.rank_[i] = b.rank[k]
            for j in range(b.wstart[k], b.wstart[k + 1]):
                sched.waits[w] = b.sig[b.wemit.v[j]]
                w += 1
    sched.wait_start[g._size] = w
    return sched


def _check_args(graph, stream_type, max_streams, policy):
    if not isinstance(graph, Graph):
        raise ScheduleError(f"static_schedule needs an nnc.Graph, not {type(graph).__name__}")
    if policy not in POLICIES:
        raise ScheduleError(f"unknown scheduling policy {policy!r}; expected one of {POLICIES}")
    ok = stream_type in ("cpu", "gpu") or (
        isinstance(stream_type, str) and stream_type.startswith("gpu:")
        and stream_type[4:].isdigit())
    if not ok:
        raise ScheduleError(f"unknown stream type {stream_type!r}; expected 'cpu', 'gpu' or "
                            "'gpu:N'")
    try:
        cap = -1 if isinstance(max_streams, bool) else operator.index(max_streams)
    except TypeError:
        cap = -1
    if cap < 0:
        raise ScheduleError(f"max_streams must be an int >= 0 (0: no limit), not {max_streams!r}")
    return 0 if cap > 2**31 - 1 else cap


def static_schedule(graph, stream_type="cpu", max_streams=0, policy="rank"):
    """Build the graph's static schedule and make it the graph's default (``graph.schedule``).

    Every node of the run order gets one stream, signals go to nodes that another stream
    waits on, and no wait is redundant (docs/schedule.md). ``max_streams=0`` means no limit.
    ``stream_type`` ("cpu", "gpu" or "gpu:N") says what kind of stream each index becomes when
    the graph runs. Raises ScheduleError for bad arguments and GraphError for a cyclic graph.
    NNC: ccv_nnc_graph_set_default_static_schedule.
    """
    max_streams = _check_args(graph, stream_type, max_streams, policy)
    cdef Graph g = graph
    g._check_idle("schedule it")
    sched = _build(g, stream_type, max_streams, policy)
    g._schedule = sched
    g._schedule_args = dict(stream_type=stream_type, max_streams=max_streams, policy=policy)
    return sched


def graph_schedule(Graph g not None):
    """The graph's default schedule, rebuilt with the same arguments if the graph changed."""
    cdef Schedule sched = g._schedule
    if sched is None or sched.version == g.version:
        return sched
    args = g._schedule_args
    sched = _build(g, args["stream_type"], args["max_streams"], args["policy"])
    g._schedule = sched
    return sched


cdef class Schedule:
    """A static schedule of a graph (NNC: ccv_nnc_graph_static_schedule_t).

    ``sched[e]`` is node e's ExecSchedule; ``order`` the nodes in the order they are enqueued;
    ``entry_streams`` the streams (besides 0) that wait on the run's begin signal;
    ``exit_waits`` the signals stream 0 waits on at the end. ``verify()`` checks it enforces
    every edge of the graph. Made by :func:`static_schedule` or :meth:`from_tables`.
    """

    def __cinit__(self):
        self.stream_count = 1
        self.policy = "rank"
        self.stream_type = "cpu"

    def __init__(self):
        raise TypeError("schedules are made by nnc.static_schedule or Schedule.from_tables")

    cdef int _alloc(self, int node_count, int order_size, int wait_size, list entry,
                    list exits) except -1:
        cdef _Scratch mem = _Scratch.__new__(_Scratch)
        cdef int k
        self._mem = mem
        self.node_count = node_count
        self.order_size = order_size
        self.order = mem.ints(order_size, -1)
        self.stream = mem.ints(node_count, -1)
        self.signal = mem.ints(node_count, -1)
        self.rank_ = mem.ints(node_count, -1)
        self.wait_start = mem.ints(node_count + 1, 0)
        self.waits = mem.ints(wait_size, -1)
        self.entry_size = len(entry)
        self.exit_size = len(exits)
        self.entry_streams = mem.ints(self.entry_size, -1)
        self.exit_waits = mem.ints(self.exit_size, -1)
        for k in range(self.entry_size):
            self.entry_streams[k] = entry[k]
        for k in range(self.exit_size):
            self.exit_waits[k] = exits[k]
        return 0

    cdef int _index(self, e) except -1:
        if not isinstance(e, GraphExec) or (<GraphExec>e).graph is not self.graph:
            raise GraphError(f"expected a GraphExec of the scheduled graph, not {e!r}")
        return (<GraphExec>e).index

    # -- introspection -------------------------------------------------------------------------

    @property
    def order(self):
        """The nodes that run, in the order they are enqueued (a topological order)."""
        return tuple(GraphExec._new(self.graph, self.order[k]) for k in range(self.order_size))

    cdef list _entries(self):
        return [self.entry_streams[k] for k in range(self.entry_size)]

    cdef list _exits(self):
        return [self.exit_waits[k] for k in range(self.exit_size)]

    @property
    def entry_streams(self):
        """Streams other than 0 that wait on the run's begin signal (their first node has no
        predecessor)."""
        return tuple(self._entries())

    @property
    def exit_waits(self):
        """Signals stream 0 waits on after its last node, so that the run ends with every
        stream done."""
        return tuple(self._exits())

    @property
    def stale(self):
        """True once the graph has changed since this schedule was built."""
        return (<Graph>self.graph).version != self.version

    def stream_of(self, int index):
        """The stream of the node with this index (-1: it does not run)."""
        if index < 0 or index >= self.node_count:
            return -1
        return self.stream[index]

    def __getitem__(self, e):
        cdef int i = self._index(e), w
        if i >= self.node_count or self.stream[i] < 0:
            return ExecSchedule((), (), ())
        return ExecSchedule(
            (self.stream[i],), () if self.signal[i] < 0 else (self.signal[i],),
            tuple(self.waits[w] for w in range(self.wait_start[i], self.wait_start[i + 1])))

    def rank(self, e):
        """Length of the longest chain of nodes after e (-1: e does not run)."""
        cdef int i = self._index(e)
        return self.rank_[i] if i < self.node_count else -1

    def nodes_on(self, int stream):
        """The nodes of one stream, in the order that stream runs them."""
        return tuple(GraphExec._new(self.graph, self.order[k]) for k in range(self.order_size)
                     if self.stream[self.order[k]] == stream)

    def __repr__(self):
        stale = ", stale" if self.stale else ""
        return (f"<nnc.Schedule {self.order_size} nodes, {self.stream_count} streams, "
                f"{self.signal_count} signals, {self.stream_type}{stale}>")

    # -- by hand: tables in and out ------------------------------------------------------------

    def tables(self):
        """This schedule as plain tables, which :meth:`from_tables` turns back into one."""
        cdef int k, i, w
        streams, signals, waits = {}, {}, {}
        for k in range(self.order_size):
            i = self.order[k]
            e = GraphExec._new(self.graph, i)
            streams[e] = self.stream[i]
            if self.signal[i] >= 0:
                signals[e] = self.signal[i]
            if self.wait_start[i + 1] > self.wait_start[i]:
                waits[e] = [self.waits[w]
                            for w in range(self.wait_start[i], self.wait_start[i + 1])]
        return dict(streams=streams, signals=signals, waits=waits,
                    entry_streams=self._entries(), exit_waits=self._exits())

    @staticmethod
    def from_tables(graph, streams, signals=None, waits=None, entry_streams=(),
                    exit_waits=(), stream_type="cpu"):
        """A schedule from explicit tables (to test verify() with): ``streams`` / ``signals``
        map a GraphExec to an int, ``waits`` to a sequence of ints; nodes left out get no
        stream, signal or wait. The order is the graph's run order. Nothing is checked."""
        _check_args(graph, stream_type, 0, "rank")
        cdef Graph g = graph
        cdef Schedule c = Schedule.__new__(Schedule)
        cdef int i, k, w = 0
        signals = signals or {}
        waits = waits or {}
        if g._dirty:
            g._compile()
        c.graph, c.version, c.stream_type = g, g.version, stream_type
        c._alloc(g._size, g._order_size, sum(len(v) for v in waits.values()),
                 list(entry_streams), list(exit_waits))
        memcpy(c.order, g._order, sizeof(int) * g._order_size)
        used_streams = [0, *streams.values()]
        used_signals = [-1, *signals.values(), *exit_waits]
        for e in g.execs:
            i = e.index
            c.wait_start[i] = w
            c.stream[i] = streams.get(e, -1)
            c.signal[i] = signals.get(e, -1)
            for k in waits.get(e, ()):
                c.waits[w] = k
                used_signals.append(k)
                w += 1
        c.wait_start[g._size] = w
        c.stream_count = max(used_streams) + 1
        c.signal_count = max(used_signals) + 1
        return c

    # -- verification --------------------------------------------------------------------------

    def verify(self):
        """Raise ScheduleError unless the schedule enforces every edge of the graph's run.

        Schedule-independent (RAF's verifier): an edge u -> v is enforced when u comes before
        v on one stream, or a path leads from u to v through stream order (consecutive nodes of
        a stream) and signals (emitter -> each later waiter). Also checked: every node has a
        stream, indices are in range, each signal has one emitter, every node is ordered after
        the run's begin (stream 0 or an entry stream), and stream 0 ends after every stream.
        """
        from nnc.graph.verify import schedule_verify

        schedule_verify(self)
