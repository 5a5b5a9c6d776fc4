"""The builder behind static_schedule for every policy, and NNC's "rank" policy (NNC:
ccv_nnc_graph.c, _ccv_nnc_graph_static_schedule_new and _ccv_nnc_graph_schedule_assign_signals).

One file of ~800 lines: the rank policy's stream choice (_Builder.choose, chain) and the signal
placement every policy's answer goes through (run_assigned) share one _Builder's scratch arrays
and vector clocks.

Any other policy (schedule.POLICIES) only assigns streams: the builder hands it the DAG
(nnc/schedule/dag.pxd), checks its answer, adds the edges it asks for, and places signals and
waits for its streams exactly as for the rank policy's (run_assigned).

We port the algorithm NNC's doc/nnc-schd.rst describes (longest-chain ranks, command tie-break,
no redundant waits), not the upstream code's degenerate ranks; docs/schedule.md has the rules,
a worked example, the deadlock argument, the costs and the differences from upstream.

A build runs in a _Builder, whose scratch arrays (indexed by run-order position) and vector
clocks it frees when collected. Reachability questions ("is u known to have finished at this
point of stream t?") are answered by vector clocks over *slots*: a stream holds a slot from its
creation until it can never be asked about again (retirement), and at most CLOCK_SLOTS slots
exist. Clocks are shared copy-on-write between a stream and the nodes that ran on it, and a
node's clock is freed once all its successors have been visited. Streams without a slot are
answered conservatively (correct, but a wait may be redundant), which happens only with more
than CLOCK_SLOTS live streams.
"""

from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

import operator

from nnc.base.core import NNCError, ScheduleError
from nnc.base.device import parse_device

from nnc.cmd.command cimport Cmd
from nnc.graph.while_node cimport WhileNode
from nnc.schedule.costs cimport fill_costs, shown
from nnc.schedule.dag cimport dag_t
from nnc.graph.graph cimport EXEC_CONTROL, Graph
from nnc.schedule.schedule cimport Policy, Schedule, _Scratch, policy_of

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


cdef class _Builder(_Scratch):
    """State of one build. Arrays are by run-order position, or by stream (at most m)."""
    cdef int m, max_streams
    cdef bint assigned                  # a policy assigned the streams (run_assigned)
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

    cdef int setup(self, Graph g, const int* order, int m, int split, dict extra) except -1:
        """Edges by position over ``order``. With split < m (a loop body), every head sink
        (a node before split with no successor before split) also gets an edge to every tail
        source (a node from split on with no predecessor from split on): the host evaluates
        the loop expression between the two parts, so tail nodes follow all head nodes.
        ``extra`` (position -> later positions) adds edges that order a control node and the
        nodes touching the tensors it re-points (control.moved_tensor_pairs)."""
        cdef int n = g._size, k, j, v, e = 0, r, x
        cdef char* sink
        cdef char* source
        cdef ivec tails
        self.m = m
        self.pos = self.ints(n, -1)
        for k in range(m):
            self.pos[order[k]] = k
        sink = <char*>self.raw(m)
        source = <char*>self.raw(m)
        memset(sink, 0, m)
        memset(source, 0, m)
        tails.v = NULL
        tails.n = tails.cap = 0
        if split < m:
            for k in range(m):
                sink[k] = k < split
                source[k] = k >= split
            for k in range(m):
                for j in range(g._nodes[order[k]].outgoing_size):
                    v = self.pos[g._nodes[order[k]].outgoings[j]]
                    if v >= 0 and v < split:
                        sink[k] = 0
                    if v >= split and k >= split:
                        source[v] = 0
        try:
            for k in range(m):
                if source[k]:
                    ipush(&tails, k)
            self.sstart = self.ints(m, 0)
            self.pstart = self.ints(m, 0)
            for k in range(m):
                x = order[k]
                for j in range(g._nodes[x].outgoing_size):
                    v = self.pos[g._nodes[x].outgoings[j]]
                    if v >= 0:
                        e += 1
                        self.pstart[v + 1] += 1
                if sink[k]:
                    for j in range(tails.n):
                        if not _is_succ(g, self.pos, x, tails.v[j]):
                            e += 1
                            self.pstart[tails.v[j] + 1] += 1
                for v in extra.get(k, ()):
                    e += 1
                    self.pstart[v + 1] += 1
                self.sstart[k + 1] = e
            for k in range(m):
                self.pstart[k + 1] += self.pstart[k]
            self.sidx = self.ints(e, 0)
            self.pidx = self.ints(e, 0)
            self.remaining = self.ints(m, 0)    # a fill cursor first, then successors left
            e = 0
            for k in range(m):
                x = order[k]
                for j in range(g._nodes[x].outgoing_size):
                    v = self.pos[g._nodes[x].outgoings[j]]
                    if v >= 0:
                        self.add_edge(k, v, e)
                        e += 1
                if sink[k]:
                    for j in range(tails.n):
                        if not _is_succ(g, self.pos, x, tails.v[j]):
                            self.add_edge(k, tails.v[j], e)
                            e += 1
                for v in extra.get(k, ()):
                    self.add_edge(k, v, e)
                    e += 1
        finally:
            free(tails.v)
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
            self.cmd[k] = (<Cmd>g._cmds[order[k]]).info.id
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

    cdef inline int add_edge(self, int k, int v, int e) noexcept:
        self.sidx[e] = v
        self.pidx[self.pstart[v] + self.remaining[v]] = k
        self.remaining[v] += 1
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
                    if self.max_streams == 0 or self.assigned:  # never reused: garbage
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

    cdef int run_assigned(self, int streams) except -1:
        """Signals and waits for the streams a policy put in ``st`` (checked: dense, in range).
        A stream runs its nodes in position order, a topological order of every edge, so any
        assignment is deadlock-free: the earliest node not yet run always has its predecessors
        done and is next on its stream. A stream takes a clock slot at its first node and
        retires once its last node and every successor of its nodes have been visited."""
        cdef int k, t
        cdef int* last = self.ints(streams, -1)
        self.S = streams
        for k in range(self.m):
            t = self.st[k]
            last[t] = k
            self.need[t] = max(self.need[t], self.maxsucc[k])
            if self.first[t] < 0:
                self.first[t] = k
        for k in range(self.m):
            t = self.st[k]
            if self.first[t] == k:
                self.slot[t] = self.new_slot(t)
            self.tail[t] = k
            self.waits(k)
            if self.remaining[k] > 0:
                self.snap[k] = cref(self.K[t])
            if last[t] == k:
                self.item(self.ret_head, max(k, self.need[t]), t)
            self.visited(k)
        return 0


cdef bint _is_succ(Graph g, const int* pos, int x, int v) noexcept:
    """Is position v a successor of node x?"""
    cdef int j
    for j in range(g._nodes[x].outgoing_size):
        if pos[g._nodes[x].outgoings[j]] == v:
            return True
    return False


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


cdef list _exits(_Builder b, int* prev, int* last, char* mark, int* stack):
    """Positions of the last nodes (``last``, per stream) that stream 0 must wait on to know
    that every stream has finished: those its own last node does not already imply; later
    ones first, so that each wait is needed."""
    cdef list exits = []
    cdef int k, s
    memset(mark, 0, b.m)
    if last[0] >= 0:
        _mark(b, prev, mark, stack, last[0])
    for k in sorted([last[s] for s in range(1, b.S) if last[s] >= 0], reverse=True):
        if not mark[k]:
            exits.append(k)
            _mark(b, prev, mark, stack, k)
    exits.sort()
    for k in exits:
        if b.sig[k] < 0:
            b.sig[k] = b.nsig
            b.nsig += 1
    return exits


cdef int _assign(_Builder b, Policy p, Graph g, const int* order, int split, int max_streams,
                 object costs, dict extra, int** perm) except -1:
    """Ask policy p for the streams of b's DAG (into b.st) and check its answer; its extra
    edges go into ``extra`` (position -> later positions), its own run order, if it gave one,
    into ``perm`` (a permutation of positions, owned by b; else NULL). Returns the stream
    count. A bad answer raises ScheduleError naming the policy: nothing it wrote is trusted
    unchecked."""
    cdef dag_t d
    cdef int m = b.m, k, n, u, v
    cdef double* cost = <double*>b.raw(sizeof(double) * m)
    cdef char* used
    cdef list more = []
    d.m = m
    d.split = split
    d.sstart, d.sidx, d.pstart, d.pidx, d.cmd = b.sstart, b.sidx, b.pstart, b.pidx, b.cmd
    d.cost = cost if fill_costs(g, costs, order, m, cost) else NULL
    d.reorder = b.ints(m, -1)
    perm[0] = NULL
    for k in range(m):
        b.st[k] = -1
    try:
        n = p.assign(&d, max_streams, b.st, more)
    except NNCError:
        raise
    except Exception as exc:
        raise ScheduleError(f"scheduling policy {p.name!r} failed: {shown(exc)}") from exc
    if m == 0:
        return 1
    if n < 1 or n > m or (max_streams and n > max_streams):
        raise ScheduleError(f"scheduling policy {p.name!r} reported {n} streams for {m} nodes"
                            + (f" (max_streams={max_streams})" if max_streams else ""))
    used = <char*>b.raw(n)
    for k in range(m):
        if b.st[k] < 0 or b.st[k] >= n:
            raise ScheduleError(f"scheduling policy {p.name!r} gave node position {k} the "
                                f"stream {b.st[k]}, outside 0 .. {n - 1}")
        used[b.st[k]] = 1
    for k in range(n):
        if not used[k]:
            raise ScheduleError(f"scheduling policy {p.name!r} left stream {k} of {n} unused "
                                "(streams must be numbered densely from 0)")
    if d.reorder[0] >= 0:
        used = <char*>b.raw(m)
        for k in range(m):
            u = d.reorder[k]
            if not 0 <= u < m or used[u]:
                raise ScheduleError(f"scheduling policy {p.name!r} gave a run order that is not "
                                    f"a permutation of the positions 0 .. {m - 1} (entry {k}: "
                                    f"{u})")
            used[u] = 1
        perm[0] = d.reorder
    for edge in more:
        try:
            u, v = [operator.index(x) for x in edge]   # ints only: 0.5 must not become 0
        except (TypeError, ValueError, OverflowError):
            raise ScheduleError(f"scheduling policy {p.name!r} asked for the extra edge "
                                f"{edge!r}, not a pair of node positions") from None
        # Against the given run order u < v; with the policy's own order, _reorder checks it.
        if not (0 <= u < v < m or (perm[0] != NULL and 0 <= v < m and 0 <= u < m and u != v)):
            raise ScheduleError(f"scheduling policy {p.name!r} asked for the extra edge "
                                f"{edge!r}: it needs 0 <= u < v < {m}")
        if v not in extra.get(u, ()):
            extra.setdefault(u, []).append(v)
    return n


cdef int _reorder(_Builder b, Policy p, const int* perm, dict extra, int* inv) except -1:
    """Check that the run order ``perm`` (from policy p) keeps every edge of b's DAG and of
    ``extra``; fills inv (position -> new position) and renumbers ``extra`` in place to the new
    positions. A loop body's head stays first: setup's head-to-tail edges are DAG edges."""
    cdef int m = b.m, k, j, v
    for k in range(m):
        inv[perm[k]] = k
    for k in range(m):
        for j in range(b.sstart[k], b.sstart[k + 1]):
            v = b.sidx[j]
            if inv[v] < inv[k]:
                raise ScheduleError(f"scheduling policy {p.name!r} ordered position {v} before "
                                    f"its predecessor {k}")
    moved = {}
    for k, vs in extra.items():
        for v in vs:
            if inv[v] < inv[k]:
                raise ScheduleError(f"scheduling policy {p.name!r} ordered position {v} before "
                                    f"{k}, against the extra edge {k} -> {v}")
            moved.setdefault(inv[k], []).append(inv[v])
    extra.clear()
    extra.update(moved)
    return 0


cdef Schedule _build(Graph g, str stream_type, int max_streams, str policy, object costs,
                     list part):
    cdef _Builder b = _Builder.__new__(_Builder)
    cdef _Builder b0, b1
    cdef Policy p = policy_of(policy)
    cdef dict extra
    cdef int streams, added
    cdef Schedule sched = Schedule.__new__(Schedule)
    cdef int m, k, s, i, j, w, split
    cdef int* order
    cdef int* perm = NULL
    cdef int* inv
    cdef int* neworder
    cdef list entry = [], exits, head_exits = []
    cdef long loop_key = -1
    if g._dirty:
        g._compile()
    m = g._order_size
    order = g._order
    split = m
    if part is not None:
        # A partial schedule (schedule.part_order): its nodes in their order; never a loop
        # body (static_schedule refuses sub-graphs).
        m = len(part)
        split = m
        order = b.ints(m, -1)
        for k in range(m):
            order[k] = part[k]
    elif g._loop is not None and (<WhileNode>g._loop).schedule_key() >= 0:
        # A loop body: head (breakpoints and their ancestors) first, then the rest.
        loop_order, split, loop_key = (<WhileNode>g._loop).split_order()
        order = b.ints(m, -1)
        for k in range(m):
            order[k] = loop_order[k]
    b.max_streams = max_streams
    extra = _moved_edges(g, order, m, split) if max_streams != 1 else {}
    b.setup(g, order, m, split, extra)
    if p is None or m == 0:
        b.run()
    else:
        added = sum(len(v) for v in extra.values())
        streams = _assign(b, p, g, order, split, max_streams, costs, extra, &perm)
        if perm != NULL:
            # The policy's run order: renumber everything by it (b0 keeps the old arrays alive).
            inv = b.ints(m, -1)
            _reorder(b, p, perm, extra, inv)
            neworder = b.ints(m, -1)
            for k in range(m):
                neworder[k] = order[perm[k]]
            order = neworder
            b0, b = b, _Builder.__new__(_Builder)
            b.max_streams = max_streams
            b.setup(g, order, m, split, extra)
            for k in range(m):
                b.st[k] = b0.st[perm[k]]
        elif sum(len(v) for v in extra.values()) > added:
            # The policy's edges join the DAG the waits enforce: set it up again with them
            # (b0 keeps the loop order and the streams alive while b copies them).
            b0, b = b, _Builder.__new__(_Builder)
            b.max_streams = max_streams
            b.setup(g, order, m, split, extra)
            memcpy(b.st, b0.st, sizeof(int) * m)
        b.assigned = True
        b.run_assigned(streams)
    # The kind of each stream: "cpu", or on a GPU schedule the GPU of its nodes.
    kinds = ["cpu"] * max(b.S, 1)
    if stream_type != "cpu" and m:
        dev = [_node_gpu(g, order[k]) for k in range(m)]
        if len({d for d in dev if d >= 0}) > 1:
            # Several GPUs: one stream per (stream, GPU) of its nodes, then the waits again
            # (b1 keeps the arrays alive while b copies them; b0 may own ``order``).
            b1, b = b, _Builder.__new__(_Builder)
            per_pos, kinds = _device_streams(b1, dev, m)
            b.max_streams = max_streams
            b.setup(g, order, m, split, extra)
            for k in range(m):
                b.st[k] = per_pos[k]
            b.assigned = True
            b.run_assigned(len(kinds))
        else:
            one = [d for d in dev if d >= 0]
            kinds = [f"gpu:{one[0] if one else parse_device(stream_type)}"] * max(b.S, 1)
    elif stream_type != "cpu":
        kinds = [f"gpu:{parse_device(stream_type)}"]
    # 5. Entry: streams != 0 whose first node has no predecessor wait on the begin signal.
    # Exit: stream 0 waits on the last node of each other stream it does not already know to
    # have finished (for a loop body also after the head, from the head's last nodes).
    cdef int* prev = b.ints(m, -1)
    cdef int* last = b.ints(b.S, -1)
    cdef int* stack = b.ints(m, 0)
    cdef char* mark = <char*>b.raw(m)
    for k in range(m):
        s = b.st[k]
        prev[k] = last[s]
        last[s] = k
        if k == split - 1 and split < m:
            head_exits = _exits(b, prev, last, mark, stack)
    for s in range(1, b.S):
        if b.pstart[b.first[s]] == b.pstart[b.first[s] + 1]:
            entry.append(s)
    exits = _exits(b, prev, last, mark, stack) if m else []
    sched._bind(g)
    sched.version = g.version
    sched.stream_type = stream_type
    sched.max_streams = max_streams
    sched.policy = policy
    sched._alloc(g._size, m, b.wemit.n, entry, [b.sig[k] for k in exits],
                 [b.first[s] for s in entry], [b.sig[k] for k in head_exits])
    sched.stream_count = max(b.S, 1)
    sched.signal_count = b.nsig
    sched.stream_kinds = tuple(kinds)
    signal_kinds = [kinds[0]] * b.nsig
    for k in range(m):
        if b.sig[k] >= 0:
            signal_kinds[b.sig[k]] = kinds[b.st[k]]
    sched.signal_kinds = tuple(signal_kinds)
    sched.split = split
    sched.loop_key = loop_key
    memcpy(sched.order, order, sizeof(int) * m)
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


cdef int _node_gpu(Graph g, int idx) except -2:
    """The GPU node idx runs on in a GPU schedule: that of its first GPU output, else of its
    first GPU input (so a DATA_TRANSFER between GPUs runs on the destination's, where its
    consumers are); -1 for a node without GPU tensors (a NOOP), which runs where its stream's
    other nodes do."""
    for ts in (g._outputs[idx], g._inputs[idx]):
        for t in ts:
            d = "cpu" if t is None else getattr(t, "device", "cpu")
            if d != "cpu":
                return parse_device(d)
    return -1


cdef tuple _device_streams(_Builder b, list dev, int m):
    """Split the streams in b.st so that each holds the nodes of one GPU: stream s becomes one
    stream per GPU of its nodes, numbered by (s, first position), so stream 0 keeps its first
    node. A node without a GPU stays with the GPU of the node before it on its stream (else the
    one after), so NOOPs cost no stream of their own; a stream of such nodes only is on the
    graph's first GPU. Each stream's nodes keep their order, so the order of every new stream
    is a suborder of the old one. Returns (new stream per position, kind per new stream)."""
    cdef int k, s, d
    cdef list first_dev = [-1] * b.S, cur = [-1] * b.S, key = [None] * m
    cdef int graph_dev = next(d for d in dev if d >= 0)
    for k in range(m):
        s = b.st[k]
        if first_dev[s] < 0 and dev[k] >= 0:
            first_dev[s] = dev[k]
    groups = {}
    for k in range(m):
        s = b.st[k]
        d = dev[k]
        if d >= 0:
            cur[s] = d
        else:
            d = cur[s] if cur[s] >= 0 else first_dev[s] if first_dev[s] >= 0 else graph_dev
        key[k] = (s, d)
        groups.setdefault((s, d), k)
    ordered = sorted(groups, key=lambda sd: (sd[0], groups[sd]))
    number = {sd: i for i, sd in enumerate(ordered)}
    return [number[key[k]] for k in range(m)], [f"gpu:{sd[1]}" for sd in ordered]


cdef dict _moved_edges(Graph g, const int* order, int m, int split):
    """Edges (by position) that order a while or case..of node and the nodes on other streams
    that touch tensors it re-points while it runs (control.moved_tensor_pairs), unless an
    edge, or the head-to-tail edges of a loop body, already joins them."""
    from nnc.schedule.repointed import moved_tensor_pairs

    cdef dict extra = {}
    cdef int k, u, v
    for k in range(m):
        if g._nodes[order[k]].flags & EXEC_CONTROL:
            break
    else:
        return extra                    # no while or case..of node: nothing moves
    pos = {order[k]: k for k in range(m)}
    for a, c, _t in moved_tensor_pairs(g, [order[k] for k in range(m)]):
        u, v = pos[a], pos[c]
        if u < split <= v or v in extra.get(u, ()):
            continue                    # head to tail: the split orders them already
        extra.setdefault(u, []).append(v)
    return extra


def build_schedule(Graph g not None, str stream_type, int max_streams, str policy, costs=None,
                   list part=None):
    """A Schedule of g by a registered policy; costs as costs.normalize_costs left them
    (static_schedule checked the arguments). ``part``: the node indices of a partial
    schedule in a topological order (None: g's run order)."""
    return _build(g, stream_type, max_streams, policy, costs, part)
