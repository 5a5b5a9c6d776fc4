"""Schedule verification (the idea of RAF's schedule verifier): does a schedule enforce
every edge of its graph's run? Split from schedule.pyx, which builds schedules; see
Schedule.verify for the contract and docs/schedule.md, "verify()", for the costs.

One pass in run order over the *happens-before* graph H of the schedule: stream order
(consecutive nodes of a stream) and signal edges (an emitter to each later waiter). An edge
u -> v of the graph is enforced iff u reaches v in H. Questions are answered, cheapest first, by
stream order (same stream), a direct wait of v on u's signal, a vector clock over *slots*
(exact: a stream holds a slot from its first node with a successor on another stream until its
last such successor, the only span in which it is asked about), or, past VERIFY_SLOTS streams
holding slots at once, an exact backward search of H from v that never goes below u. The end of
the run (stream 0's last node and its exit waits) is checked by one backward marking pass.
Memory stays O(N + E + W) plus at most VERIFY_SLOTS + 2 ints per clock alive; the former dense
clocks of S ints per stream and per pending emitter needed N * S ints on wide graphs.
"""

from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from nnc.base.core import ScheduleError

from nnc.graph.graph cimport Graph
from nnc.schedule.schedule cimport Schedule, _Scratch, part_order

cdef int _verify_slots = 64             # VERIFY_SLOTS: most streams with a clock slot at once


def _set_verify_slots(slots=None):
    """Testing hook: set VERIFY_SLOTS (None: leave it); returns the value it had."""
    global _verify_slots
    old = _verify_slots
    if slots is not None:
        if slots < 0:
            raise ValueError("VERIFY_SLOTS must be >= 0")
        _verify_slots = slots
    return old


def schedule_verify(Schedule sc not None):
    """Schedule.verify(): raise ScheduleError for the first unenforced edges or bad entries."""
    cdef _Verifier v = _Verifier.__new__(_Verifier)
    v.check(sc)


# A clock: c[0] references, c[1] length, c[2 + slot] = the highest run-order position known to
# have finished on the stream holding that slot (-1: nothing; entries past the length read -1).
# NULL is the empty clock. Shared copy-on-write between a stream and the snapshots of its nodes.
cdef inline int cget(const int* c, int i) noexcept nogil:
    if c == NULL or i < 0 or i >= c[1]:
        return -1
    return c[2 + i]


cdef inline int* cref(int* c) noexcept nogil:
    if c != NULL:
        c[0] += 1
    return c


cdef inline void crelease(int* c) noexcept nogil:
    if c != NULL:
        c[0] -= 1
        if c[0] == 0:
            free(c)


cdef bint _dominates(const int* a, const int* b) noexcept nogil:
    """Does clock a know everything clock b knows?"""
    cdef int i
    if b == NULL:
        return True
    for i in range(b[1]):
        if b[2 + i] > cget(a, i):
            return False
    return True


cdef class _Verifier(_Scratch):
    """State of one verification; arrays by run-order position or by stream."""
    cdef int m, S, L, cap
    cdef int* st                        # [m] stream of each position
    cdef int* prev                      # [m] previous position on the same stream, -1 first
    cdef int* emitter                   # [signal_count] position emitting it, -1 none
    cdef int* cons                      # [m] later waiters whose merge still needs the snapshot
    cdef int** snap                     # [m] the node's clock (its stream's, after it), shared
    cdef int** K                        # [S] each stream's clock so far; freed at its last node
    cdef int* slot                      # [S] clock slot of the stream, -1 none
    cdef int* slot_from                 # [S] position where it took the slot (exact from there)
    cdef int* need                      # [S] last position asking about the stream, -1 never
    cdef char* cross                    # [m] the node has a successor on another stream
    cdef int* free_slots                # [cap] stack of slots given back
    cdef int nfree
    cdef int* mark                      # [m] search stamp per position (the searching position)
    cdef int* stack                     # [m] search stack
    cdef int* best                      # [S] highest position found per stream by a search
    cdef int* best_at                   # [S] the search that set best (stamp)

    def __dealloc__(self):
        cdef int k
        if self.snap != NULL:
            for k in range(self.m):
                crelease(self.snap[k])
        if self.K != NULL:
            for k in range(self.S):
                crelease(self.K[k])

    cdef int cow(self, int t) except -1:
        """Make stream t's clock its own, L entries long, for writing."""
        cdef int* kt = self.K[t]
        cdef int i, klen = 0 if kt == NULL else kt[1]
        if kt != NULL and kt[0] == 1 and klen >= self.L:
            return 0
        cdef int* c = <int*>malloc(sizeof(int) * (self.L + 2))
        if c == NULL:
            raise MemoryError()
        c[0] = 1
        c[1] = self.L
        if klen:
            memcpy(c + 2, kt + 2, sizeof(int) * klen)
        for i in range(klen, self.L):
            c[2 + i] = -1
        crelease(kt)
        self.K[t] = c
        return 0

    cdef int merge(self, int t, int* c, int sl, int p) except -1:
        """Stream t waits on the node at position p (snapshot c, its stream's slot sl)."""
        cdef int* kt = self.K[t]
        cdef int i
        cdef bint news = not _dominates(kt, c)
        cdef bint own = sl >= 0 and cget(kt, sl) < p
        if not news and not own:
            return 0
        if news and (not own or cget(c, sl) >= p) and _dominates(c, kt):
            self.K[t] = cref(c)         # c knows all t knew: share it (wide fan-outs)
            crelease(kt)
            return 0
        self.cow(t)
        kt = self.K[t]
        if c != NULL:
            for i in range(c[1]):
                if c[2 + i] > kt[2 + i]:
                    kt[2 + i] = c[2 + i]
        if sl >= 0 and kt[2 + sl] < p:
            kt[2 + sl] = p
        return 0

    cdef int take_slot(self, int s, int k) noexcept:
        if self.nfree:
            self.nfree -= 1
            self.slot[s] = self.free_slots[self.nfree]
        elif self.L < self.cap:
            self.slot[s] = self.L
            self.L += 1
        else:
            return 0
        self.slot_from[s] = k
        return 0

    cdef int search(self, Schedule sc, int k, int lo) noexcept:
        """Backward search of H from position k over positions >= lo: afterwards best[s] (where
        best_at[s] == k) is the highest position of stream s that happens before k."""
        cdef int n = 0, x, y, j
        self.stack[n] = k
        n += 1
        self.mark[k] = k
        while n:
            n -= 1
            x = self.stack[n]
            if self.best_at[self.st[x]] != k or self.best[self.st[x]] < x:
                self.best_at[self.st[x]] = k
                self.best[self.st[x]] = x
            y = self.prev[x]
            if y >= lo and self.mark[y] != k:
                self.mark[y] = k
                self.stack[n] = y
                n += 1
            for j in range(sc.wait_start[sc.order[x]], sc.wait_start[sc.order[x] + 1]):
                y = self.emitter[sc.waits[j]]
                if lo <= y < x and self.mark[y] != k:
                    self.mark[y] = k
                    self.stack[n] = y
                    n += 1
        return 0

    cdef int check(self, Schedule sc) except -1:
        cdef Graph g = sc.graph_ref()
        cdef int m = sc.order_size, S = sc.stream_count, NS = sc.signal_count
        cdef int k, i, j, s, e, u, t, sl, lo
        if g.version != sc.version:
            raise ScheduleError("the graph changed since this schedule was built (it is stale)")
        if g._dirty:
            g._compile()
        # The nodes it must run: the graph's run order, or a partial schedule's part.
        cdef list part = (None if sc._sources is None else
                          part_order(g, list(sc._sources), list(sc._destinations)))
        cdef int want = g._order_size if part is None else len(part)
        if m != want:
            raise ScheduleError(f"the schedule runs {m} nodes, the graph {want}")
        self.cap = _verify_slots
        cdef int* pos = self.ints(sc.node_count, -1)
        cdef int* lastpos = self.ints(S, -1)
        self.emitter = self.ints(NS, -1)
        errors = []
        for k in range(m):
            i = sc.order[k]
            if i < 0 or i >= sc.node_count or pos[i] >= 0:
                raise ScheduleError(f"order position {k} holds a bad node index {i}")
            pos[i] = k
        for k in range(m):
            i = g._order[k] if part is None else part[k]
            if pos[i] < 0:
                raise ScheduleError(f"{g._label(i)} runs but is not in the order")
        # Indices: streams, signals (one emitter each), waits, entry and exit.
        for k in range(m):
            i = sc.order[k]
            s = sc.stream[i]
            e = sc.signal[i]
            if s < 0 or s >= S:
                errors.append(f"{g._label(i)} has no stream (stream {s})")
            else:
                lastpos[s] = k
            if e >= NS or e < -1 or (e >= 0 and self.emitter[e] >= 0):
                errors.append(f"{g._label(i)} emits signal {e}, out of range or emitted twice")
            elif e >= 0:
                self.emitter[e] = k
            for j in range(sc.wait_start[i], sc.wait_start[i + 1]):
                if sc.waits[j] < 0 or sc.waits[j] >= NS:
                    errors.append(f"{g._label(i)} waits on signal {sc.waits[j]}, out of range")
        cdef char* sflags = <char*>self.raw(S)  # per stream: 1 entry, 2 last node after begin
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
        self.m, self.S = m, S
        self.st = self.ints(m, -1)
        self.prev = self.ints(m, -1)
        cdef int* tail = self.ints(S, -1)
        for k in range(m):
            s = self.st[k] = sc.stream[sc.order[k]]
            self.prev[k] = tail[s]
            tail[s] = k
        # Predecessors by position (CSR); need[s]: the last position that asks about stream s.
        cdef int* pstart = self.ints(m + 1, 0)
        self.need = self.ints(S, -1)
        self.cross = <char*>self.raw(m)
        for k in range(m):
            for j in range(g._nodes[sc.order[k]].outgoing_size):
                u = pos[g._nodes[sc.order[k]].outgoings[j]]
                if u >= 0:
                    pstart[u + 1] += 1
                    if self.st[u] != self.st[k]:
                        self.cross[k] = 1
                        self.need[self.st[k]] = max(self.need[self.st[k]], u)
        for k in range(m):
            pstart[k + 1] += pstart[k]
        cdef int* pidx = self.ints(pstart[m], 0)
        cdef int* fill = self.ints(m, 0)
        for k in range(m):
            for j in range(g._nodes[sc.order[k]].outgoing_size):
                u = pos[g._nodes[sc.order[k]].outgoings[j]]
                if u >= 0:
                    pidx[pstart[u] + fill[u]] = k
                    fill[u] += 1
        # Releases: stream s gives its slot back after position need[s] (linked per position).
        cdef int* rel_head = self.ints(m, -1)
        cdef int* rel_next = self.ints(S, -1)
        for s in range(S):
            if self.need[s] >= 0:
                rel_next[s] = rel_head[self.need[s]]
                rel_head[self.need[s]] = s
        # Snapshots are kept for the later waiters that merge them.
        self.cons = self.ints(m, 0)
        for k in range(m):
            for j in range(sc.wait_start[sc.order[k]], sc.wait_start[sc.order[k] + 1]):
                e = self.emitter[sc.waits[j]]
                if 0 <= e < k:
                    self.cons[e] += 1
        self.snap = <int**>self.raw(sizeof(int*) * m)
        self.K = <int**>self.raw(sizeof(int*) * S)
        self.slot = self.ints(S, -1)
        self.slot_from = self.ints(S, -1)
        self.free_slots = self.ints(self.cap, -1)
        self.mark = self.ints(m, -1)
        self.stack = self.ints(m, 0)
        self.best = self.ints(S, -1)
        self.best_at = self.ints(S, -1)
        cdef int* direct = self.ints(m, -1)     # direct[e] == k: k waits on e's signal
        cdef char* flags = <char*>self.raw(m)   # per position: ordered after the run's begin
        cdef list late = []
        for k in range(m):
            i = sc.order[k]
            t = self.st[k]
            if self.slot[t] < 0 and self.cross[k] and self.need[t] > k:
                self.take_slot(t, k)
            flags[k] = (t == 0 or sflags[t] & 1) if self.prev[k] < 0 else sflags[t] >> 1
            for j in range(sc.wait_start[i], sc.wait_start[i + 1]):
                e = self.emitter[sc.waits[j]]
                if 0 <= e < k:          # a wait on a later (or no) emitter enforces nothing
                    direct[e] = k
                    flags[k] |= flags[e]
                    self.merge(t, self.snap[e], self.slot[self.st[e]], e)
                    self.cons[e] -= 1
                    if self.cons[e] == 0:
                        crelease(self.snap[e])
                        self.snap[e] = NULL
            sflags[t] = (sflags[t] & 1) | (flags[k] << 1)
            if not flags[k]:
                errors.append(f"{g._label(i)} may start before the run begins (stream {t} "
                              "is not an entry stream and it waits on nothing that is)")
            # Each edge u -> k: stream order, a direct wait, the clock, else a search.
            del late[:]
            lo = k
            for j in range(pstart[k], pstart[k + 1]):
                u = pidx[j]
                s = self.st[u]
                if u < k and (s == t or direct[u] == k):
                    continue
                sl = self.slot[s]
                if u < k and sl >= 0 and self.slot_from[s] <= u:
                    if cget(self.K[t], sl) >= u:
                        continue
                elif u < k:
                    late.append(u)
                    lo = min(lo, u)
                    continue
                errors.append(f"{g._label(sc.order[u])} -> {g._label(i)} (streams {s} -> {t})")
            if late:
                self.search(sc, k, lo)
                for u in late:
                    s = self.st[u]
                    if self.best_at[s] != k or self.best[s] < u:
                        errors.append(f"{g._label(sc.order[u])} -> {g._label(i)} (streams "
                                      f"{s} -> {t})")
            if self.cons[k] > 0:
                sl = self.slot[t]
                if sl >= 0 and cget(self.K[t], sl) < k:
                    self.cow(t)
                    self.K[t][2 + sl] = k
                self.snap[k] = cref(self.K[t])
            if k == lastpos[t]:
                crelease(self.K[t])
                self.K[t] = NULL
            s = rel_head[k]
            while s >= 0:
                if self.slot[s] >= 0:
                    self.free_slots[self.nfree] = self.slot[s]
                    self.nfree += 1
                    self.slot[s] = -1
                s = rel_next[s]
        # The end: stream 0, after its last node and its exit waits, must follow every
        # stream's last node. Mark what happens before that point, backwards through H.
        if m:
            self.search_end(sc, lastpos)
            for s in range(1, S):
                if lastpos[s] >= 0 and self.mark[lastpos[s]] != m:
                    errors.append(f"stream {s} ends with {g._label(sc.order[lastpos[s]])}, "
                                  "which stream 0 does not wait for at the end")
        if errors:
            more = f"; and {len(errors) - 10} more" if len(errors) > 10 else ""
            raise ScheduleError("schedule does not enforce: " + "; ".join(errors[:10]) + more)
        return 0

    cdef int search_end(self, Schedule sc, const int* lastpos) noexcept:
        """Stamp m on every position that happens before stream 0's end (its last node, if
        any, and the emitters of its exit waits)."""
        cdef int n = 0, x, y, j, m = self.m
        if lastpos[0] >= 0:
            self.stack[n] = lastpos[0]
            n += 1
            self.mark[lastpos[0]] = m
        for j in range(sc.exit_size):
            y = self.emitter[sc.exit_waits[j]]
            if y >= 0 and self.mark[y] != m:
                self.mark[y] = m
                self.stack[n] = y
                n += 1
        while n:
            n -= 1
            x = self.stack[n]
            y = self.prev[x]
            if y >= 0 and self.mark[y] != m:
                self.mark[y] = m
                self.stack[n] = y
                n += 1
            for j in range(sc.wait_start[sc.order[x]], sc.wait_start[sc.order[x] + 1]):
                y = self.emitter[sc.waits[j]]
                if 0 <= y < x and self.mark[y] != m:
                    self.mark[y] = m
                    self.stack[n] = y
                    n += 1
        return 0
