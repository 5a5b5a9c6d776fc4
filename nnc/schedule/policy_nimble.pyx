"""The "nimble" scheduling policy: Nimble's stream assignment (Kwon et al., NeurIPS 2020; the
upstream passes autostream.cpp and DAGDecomposition.cpp), ported from its description.

1. Minimum equivalent graph (MEG): the transitive reduction of the DAG, keeping u -> v only
   when no other path u -> ... -> v exists.
2. A maximum bipartite matching of the MEG's edges (out-copy u on the left, in-copy v on the
   right; Hopcroft-Karp). A matched edge makes v the chain successor of u, so the matching cuts
   the nodes into n - |matching| chains (a minimum path cover of the MEG). Every MEG edge left
   unmatched joins two chains: the paper's minimum synchronisation count, |E_MEG| - |matching|.
3. Chains are ordered by reachability (chain i before chain j when i's tail reaches j's head). A
   second maximum matching over that order (Dilworth) strings chains into the fewest sequences;
   each sequence is one stream, so the stream count is the width of the chain order.
4. max_streams > 0 folds the streams beyond the cap onto the stream that became free earliest
   (the least-overlapping one), which is always deadlock-free (a stream runs in position order).

Any two nodes on one stream are ordered by a path, so incomparable nodes never share a stream
(the paper's maximum logical concurrency) unless the cap folds them. docs/schedule.md, "nimble",
has a worked example and the costs.
"""

from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from nnc.base.core import ScheduleError

from nnc.schedule.dag cimport DagBuffer, dag_max_streams
from nnc.schedule.schedule cimport register_policy

# Words of reachability bitset per transitive-reduction pass (n rows of W words): 32 MiB.
cdef Py_ssize_t _BITSET_WORDS = 1 << 22


cdef class _Nimble:
    """One assignment's scratch arrays (malloc'd, freed when collected) and its results.

    Positions are 0 .. n-1. ss/si: successors, ascending per row (built from the ascending
    predecessor rows). keep[e]: successor edge e is in the MEG. ms/mi: the MEG, same layout.
    mate_l[u] = v / mate_r[v] = u for a matched MEG edge u -> v (-1: none). chain_of[k]: k's
    chain, chains numbered by their head's position; head/tail[c]: its first and last node.
    cnext/cprev[c]: the chain after/before c on its stream (-1: none). stream_of[c]: c's stream.
    """
    cdef list blocks
    cdef int n, e, meg_edges, matched, chains, streams
    cdef int* ss
    cdef int* si
    cdef char* keep
    cdef int* ms
    cdef int* mi
    cdef int* mate_l
    cdef int* mate_r
    cdef int* chain_of
    cdef int* head
    cdef int* tail
    cdef int* cnext
    cdef int* cprev
    cdef int* stream_of

    def __cinit__(self):
        self.blocks = []

    def __dealloc__(self):
        for p in self.blocks:
            free(<void*><size_t>p)

    cdef void* raw(self, size_t size) except NULL:
        cdef void* p = malloc(size if size > 0 else 1)
        if p == NULL:
            raise MemoryError()
        self.blocks.append(<size_t>p)
        return p

    cdef int* ints(self, Py_ssize_t count, int fill) except NULL:
        cdef int* p = <int*>self.raw(sizeof(int) * count)
        cdef Py_ssize_t i
        for i in range(count):
            p[i] = fill
        return p

    cdef void drop(self, void* p):
        """Free one block early (the reduction's bitsets are the big one)."""
        self.blocks.remove(<size_t>p)
        free(p)

    cdef int load(self, const dag_t* d) except -1:
        """Successor rows, ascending, from the predecessor rows; checks every edge goes forward."""
        cdef int n = d.m, k, i, p
        if n < 0:
            raise ScheduleError(f"the DAG has {n} nodes")
        self.n = n
        self.e = d.pstart[n] if n > 0 else 0
        self.ss = self.ints(n + 1, 0)
        self.si = self.ints(self.e, 0)
        for k in range(n):
            for i in range(d.pstart[k], d.pstart[k + 1]):
                p = d.pidx[i]
                if p < 0 or p >= k:
                    raise ScheduleError(f"edge {p} -> {k} does not go forward in the run order")
                self.ss[p + 1] += 1
        for k in range(n):
            self.ss[k + 1] += self.ss[k]
        cdef int* fill = self.ints(n, 0)
        for k in range(n):
            fill[k] = self.ss[k]
        for k in range(n):                      # k ascending: each successor row ascends
            for i in range(d.pstart[k], d.pstart[k + 1]):
                p = d.pidx[i]
                self.si[fill[p]] = k
                fill[p] += 1
        self.drop(fill)
        return 0

    cdef int reduce(self) except -1:
        """keep[e] = 1 for the MEG's edges: u -> v stays unless an earlier child of u reaches v.

        Reachability is bitsets over blocks of B target positions: one pass per block computes,
        for every u (descending), the block's part of reach(u) as the union of its children's,
        testing each child in the block before adding it. A child w that reaches v has w < v, so
        children in ascending order see every witness first (a duplicate edge finds itself).
        A row is kept only up to hi[u]: the furthest position u reaches, capped by the furthest
        child any test at u or an ancestor of u asks about. That skips rows that cannot touch
        the block and narrows the rest, so short-range DAGs cost O(e * span / 64) in all and
        long-range ones at most O(e * n / 64) word operations, in 32 MiB of bitsets.
        """
        cdef int n = self.n, u, c, b0, b1, lo, top, w, off
        cdef Py_ssize_t i
        self.keep = <char*>self.raw(self.e)
        memset(self.keep, 1, self.e)
        if n == 0:
            return 0
        # hi[u]: the last bit of u's row anyone reads: min(furthest position u reaches, last
        # position a test at u or at one of its ancestors asks about).
        cdef int* hi = self.ints(n, -1)
        cdef int* need = self.ints(n, -1)
        for u in range(n):
            if self.ss[u + 1] > self.ss[u]:
                need[u] = max(need[u], self.si[self.ss[u + 1] - 1])
            for i in range(self.ss[u], self.ss[u + 1]):
                c = self.si[i]
                need[c] = max(need[c], need[u])
        for u in range(n - 1, -1, -1):          # hi = furthest reach for now
            for i in range(self.ss[u], self.ss[u + 1]):
                c = self.si[i]
                hi[u] = max(hi[u], max(c, hi[c]))
        for u in range(n):
            hi[u] = min(hi[u], need[u])
        self.drop(need)
        cdef Py_ssize_t words = max(1, min((n + 63) // 64, _BITSET_WORDS // n))
        cdef int span = <int>(64 * words)
        cdef uint64_t* bits = <uint64_t*>self.raw(sizeof(uint64_t) * words * n)
        cdef uint64_t* row
        cdef uint64_t* crow
        for b0 in range(0, n, span):
            b1 = min(n, b0 + span)
            for u in range(b1 - 1, -1, -1):
                if hi[u] < b0:
                    continue
                row = bits + u * words
                lo = (max(u + 1, b0) - b0) >> 6
                top = (min(hi[u], b1 - 1) - b0) >> 6
                for w in range(lo, top + 1):
                    row[w] = 0
                for i in range(self.ss[u], self.ss[u + 1]):
                    c = self.si[i]
                    if c >= b1:
                        break                   # it and all later children reach past the block
                    if c >= b0:
                        off = c - b0
                        if (row[off >> 6] >> (off & 63)) & 1:
                            self.keep[i] = 0
                        else:
                            row[off >> 6] |= (<uint64_t>1) << (off & 63)
                    if hi[c] >= b0 and c + 1 < b1:
                        crow = bits + c * words
                        for w in range((max(c + 1, b0) - b0) >> 6,
                                       ((min(min(hi[c], hi[u]), b1 - 1) - b0) >> 6) + 1):
                            row[w] |= crow[w]
        self.drop(bits)
        self.drop(hi)
        self.ms = self.ints(n + 1, 0)
        for u in range(n):
            self.ms[u + 1] = self.ms[u]
            for i in range(self.ss[u], self.ss[u + 1]):
                self.ms[u + 1] += self.keep[i]
        self.meg_edges = self.ms[n]
        self.mi = self.ints(self.meg_edges, 0)
        w = 0
        for i in range(self.e):
            if self.keep[i]:
                self.mi[w] = self.si[i]
                w += 1
        return 0

    cdef int match_meg(self) except -1:
        """Hopcroft-Karp on the MEG: BFS layers from the free left copies, then layered DFS
        (iterative: chains can be 100k deep). O(E sqrt(V))."""
        cdef int n = self.n, u, v, x, sp, head_q, tail_q, t, found
        cdef int inf = n + 1
        self.mate_l = self.ints(n, -1)
        self.mate_r = self.ints(n, -1)
        if n == 0:
            return 0
        cdef int* dist = self.ints(n, 0)
        cdef int* queue = self.ints(n, 0)
        cdef int* it = self.ints(n, 0)
        cdef int* stack = self.ints(n, 0)
        for u in range(n):                      # greedy start: most edges match at once
            for t in range(self.ms[u], self.ms[u + 1]):
                v = self.mi[t]
                if self.mate_r[v] < 0:
                    self.mate_l[u] = v
                    self.mate_r[v] = u
                    self.matched += 1
                    break
        while True:
            head_q = tail_q = 0
            for u in range(n):
                if self.mate_l[u] < 0:
                    dist[u] = 0
                    queue[tail_q] = u
                    tail_q += 1
                else:
                    dist[u] = inf
            found = 0
            while head_q < tail_q:
                u = queue[head_q]
                head_q += 1
                for t in range(self.ms[u], self.ms[u + 1]):
                    x = self.mate_r[self.mi[t]]
                    if x < 0:
                        found = 1
                    elif dist[x] == inf:
                        dist[x] = dist[u] + 1
                        queue[tail_q] = x
                        tail_q += 1
            if not found:
                return 0
            for u in range(n):
                it[u] = self.ms[u]
            for u in range(n):
                if self.mate_l[u] >= 0 or dist[u] != 0:
                    continue
                sp = 0
                stack[0] = u
                while sp >= 0:
                    x = stack[sp]
                    if it[x] == self.ms[x + 1]:
                        dist[x] = inf           # a dead end for the rest of the phase
                        sp -= 1
                        if sp >= 0:
                            it[stack[sp]] += 1
                        continue
                    v = self.mi[it[x]]
                    if self.mate_r[v] < 0:
                        for t in range(sp, -1, -1):     # flip the path
                            x = stack[t]
                            v = self.mi[it[x]]
                            self.mate_l[x] = v
                            self.mate_r[v] = x
                        self.matched += 1
                        break
                    if dist[self.mate_r[v]] == dist[x] + 1:
                        sp += 1
                        stack[sp] = self.mate_r[v]
                    else:
                        it[x] += 1

    cdef int cut_chains(self) except -1:
        """Chains from the matching: a node without a matched in-edge starts one."""
        cdef int n = self.n, k, c = 0, x
        self.chain_of = self.ints(n, -1)
        self.head = self.ints(n, -1)
        self.tail = self.ints(n, -1)
        for k in range(n):
            if self.mate_r[k] >= 0:
                continue
            self.head[c] = x = k
            while True:
                self.chain_of[x] = c
                self.tail[c] = x
                if self.mate_l[x] < 0:
                    break
                x = self.mate_l[x]
            c += 1
        self.chains = c
        return 0

    cdef int match_chains(self) except -1:
        """A maximum matching of the chain order: left chain i -> right chain j when i's tail
        reaches j's head, without building that (possibly quadratic) relation.

        An augmenting search from a free left chain walks the MEG from its tail; a node that is
        the head of chain j either ends the search (j has no chain before it) or continues from
        the tail of the chain matched before j. Each node and each left chain is entered at most
        once per phase (marks kept across the phase's searches); a phase that augments nothing
        ran every search on one unchanged matching, so no augmenting path is left and the
        matching is maximum. Each phase is O(n + E_MEG).
        """
        cdef int n = self.n, nc = self.chains, i, j, k, x, y, sp, phase, found, right
        self.cnext = self.ints(nc, -1)
        self.cprev = self.ints(nc, -1)
        if nc == 0:
            return 0
        for i in range(nc):                     # greedy start: a head right after the tail
            for k in range(self.ms[self.tail[i]], self.ms[self.tail[i] + 1]):
                x = self.mi[k]
                j = self.chain_of[x]
                if self.head[j] == x and self.cprev[j] < 0:
                    self.cnext[i] = j
                    self.cprev[j] = i
                    break
        # Stack frames: kind[f] 0 = a node reached by the walk (id = node), 1 = a left chain
        # (id = chain; walks on from its tail); it[f]: next successor index (-1: for a node that
        # heads a matched chain, the jump to that chain's predecessor first); via[f]: for a
        # left chain, the right chain whose head led to it (-1 for the search's start).
        cdef int cap = n + nc + 1
        cdef int* kind = self.ints(cap, 0)
        cdef int* ident = self.ints(cap, 0)
        cdef int* it = self.ints(cap, 0)
        cdef int* via = self.ints(cap, 0)
        cdef int* seen_node = self.ints(n, 0)
        cdef int* seen_chain = self.ints(nc, 0)
        phase = 0
        while True:
            phase += 1
            found = 0
            for i in range(nc):
                if self.cnext[i] >= 0 or seen_chain[i] == phase:
                    continue
                seen_chain[i] = phase
                sp = 0
                kind[0] = 1
                ident[0] = i
                it[0] = self.ms[self.tail[i]]
                via[0] = -1
                while sp >= 0:
                    if kind[sp] == 0 and it[sp] == -1:
                        it[sp] = self.ms[ident[sp]]
                        j = self.chain_of[ident[sp]]
                        y = self.cprev[j]
                        if seen_chain[y] != phase:
                            seen_chain[y] = phase
                            sp += 1
                            kind[sp] = 1
                            ident[sp] = y
                            it[sp] = self.ms[self.tail[y]]
                            via[sp] = j
                        continue
                    x = ident[sp] if kind[sp] == 0 else self.tail[ident[sp]]
                    if it[sp] == self.ms[x + 1]:
                        sp -= 1
                        continue
                    y = self.mi[it[sp]]
                    it[sp] += 1
                    if seen_node[y] == phase:
                        continue
                    seen_node[y] = phase
                    j = self.chain_of[y]
                    if self.head[j] == y and self.cprev[j] < 0:
                        right = j               # augment: relink every left chain on the path
                        for k in range(sp, -1, -1):
                            if kind[k] == 1:
                                self.cnext[ident[k]] = right
                                self.cprev[right] = ident[k]
                                right = via[k]
                        found = 1
                        break
                    sp += 1
                    kind[sp] = 0
                    ident[sp] = y
                    it[sp] = -1 if self.head[j] == y else self.ms[y]
            if not found:
                return 0

    cdef int number_streams(self) except -1:
        """One stream per sequence of chains, numbered by the position of its first node."""
        cdef int i, c, s = 0
        self.stream_of = self.ints(self.chains, -1)
        for i in range(self.chains):            # chains are numbered by head position
            if self.cprev[i] >= 0:
                continue
            c = i
            while c >= 0:
                self.stream_of[c] = s
                c = self.cnext[c]
            s += 1
        self.streams = s
        return 0

    cdef int assign(self, const dag_t* d, int max_streams, int* stream) except -1:
        if max_streams < 0:
            raise ScheduleError(f"max_streams must be >= 0 (0: no limit), not {max_streams}")
        self.load(d)
        self.reduce()
        self.match_meg()
        self.cut_chains()
        self.match_chains()
        self.number_streams()
        cdef int k
        for k in range(self.n):
            stream[k] = self.stream_of[self.chain_of[k]]
        if max_streams > 0 and self.streams > max_streams:
            self.fold(max_streams, stream)
            return max_streams
        return self.streams

    cdef int fold(self, int cap, int* stream) except -1:
        """Streams cap, cap + 1, ... (in order of their first node) each join the stream whose
        last node comes earliest (ties: the lower stream): the least overlap in run order."""
        cdef int n = self.n, s, k, top
        cdef int* first = self.ints(self.streams, -1)
        cdef int* last = self.ints(self.streams, -1)
        cdef int* to = self.ints(self.streams, -1)
        for k in range(n):
            s = stream[k]
            if first[s] < 0:
                first[s] = k
            last[s] = k
        # Binary min-heap of physical streams keyed by (end, stream).
        cdef int* heap = self.ints(cap, 0)
        cdef int* end = self.ints(cap, 0)
        for s in range(cap):
            to[s] = s
            end[s] = last[s]
            heap[s] = s
        for s in range(cap // 2 - 1, -1, -1):
            _sift(heap, end, cap, s)
        for s in range(cap, self.streams):
            top = heap[0]
            to[s] = top
            end[top] = max(end[top], last[s])
            _sift(heap, end, cap, 0)
        for k in range(n):
            stream[k] = to[stream[k]]
        return 0


cdef inline bint _before(const int* end, int a, int b) noexcept:
    return end[a] < end[b] or (end[a] == end[b] and a < b)


cdef void _sift(int* heap, const int* end, int size, int i) noexcept:
    cdef int small, child, t
    while True:
        small = i
        child = 2 * i + 1
        if child < size and _before(end, heap[child], heap[small]):
            small = child
        child += 1
        if child < size and _before(end, heap[child], heap[small]):
            small = child
        if small == i:
            return
        t = heap[i]
        heap[i] = heap[small]
        heap[small] = t
        i = small


cdef int nimble_assign(const dag_t* d, int max_streams, int* stream, list extra) except -1:
    cdef _Nimble nb = _Nimble()
    return nb.assign(d, max_streams, stream)


def nimble_streams(succ, max_streams=0):
    """Test wrapper: the nimble assignment of a DAG given as successor lists over positions.

    ``succ[u]`` lists the successors of position u (each v with u < v < len(succ)). Returns
    ``(streams, info)``: the stream of each position and a dict with ``"meg_edges"`` (the
    minimum equivalent graph's edges, (u, v) ascending), ``"matching"`` (its matched edges),
    ``"chains"`` (each chain's positions, chains by head position) and ``"waits_bound"``
    (|E_MEG| - |matching|, the paper's minimum synchronisation count).
    ScheduleError for an edge that does not go forward or a bad ``max_streams``.
    """
    dag_max_streams(max_streams)
    cdef DagBuffer g = DagBuffer.__new__(DagBuffer)
    g.load(succ)
    cdef int n = g.d.m, i, v
    cdef _Nimble keep = _Nimble()                  # owns the output array
    cdef int* out = keep.ints(n, -1)
    cdef _Nimble nb = _Nimble()
    nb.assign(&g.d, max_streams, out)
    streams = [out[i] for i in range(n)]
    meg, matching = [], []
    for v in range(n):
        for i in range(nb.ms[v], nb.ms[v + 1]):
            meg.append((v, nb.mi[i]))
        if nb.mate_l[v] >= 0:
            matching.append((v, nb.mate_l[v]))
    chains = [[] for _ in range(nb.chains)]
    for v in range(n):
        chains[nb.chain_of[v]].append(v)
    info = {"meg_edges": meg, "matching": matching, "chains": chains,
            "waits_bound": nb.meg_edges - nb.matched}
    return streams, info


register_policy("nimble", nimble_assign)   # static_schedule(g, policy="nimble")
