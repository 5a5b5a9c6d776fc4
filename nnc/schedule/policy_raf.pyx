"""RAF's "wavefront" and "asap" stream assignments (awslabs/raf, src/pass/stream_schedule_
wavefront.cc and stream_schedule_asap.cc) as scheduling policies over the
builder's DAG (nnc/schedule/dag.pxd). Graph-only: neither reads node costs.

Nodes are positions of a fixed topological run order, and a stream runs its nodes in position
order; RAF instead emits its own issue order. Both policies are written so that this changes no
stream, only when a wave barrier cannot be expressed (docs/schedule.md, "wavefront").

Owns no state between calls: each call allocates its scratch arrays and frees them on return.
``wavefront_streams`` and ``asap_streams`` run a policy on successor lists, for tests and docs.
"""

from libc.stdlib cimport free, malloc, qsort

from nnc.base.core import GraphError

from nnc.schedule.dag cimport DagBuffer, dag_max_streams, dag_t
from nnc.schedule.schedule cimport register_policy

# Most nodes one ASAP chain head searches back through for a stream end that reaches it; past
# it the head takes a new stream (never a wrong order: one more stream at worst).
cdef int ASAP_SEARCH = 512


cdef int _cmp_int(const void* a, const void* b) noexcept nogil:
    cdef int x = (<const int*>a)[0], y = (<const int*>b)[0]
    return (x > y) - (x < y)


cdef int* _ints(Py_ssize_t n) except NULL:
    """malloc n ints (at least one) or raise MemoryError."""
    cdef int* p = <int*>malloc((n if n > 0 else 1) * sizeof(int))
    if p == NULL:
        raise MemoryError()
    return p


cdef int _fold(int m, int S, int max_streams, int* stream) noexcept nogil:
    """Fold dense streams 0..S-1 onto max_streams (still dense); returns the count."""
    cdef int k
    if max_streams <= 0 or S <= max_streams:
        return S
    for k in range(m):
        stream[k] = stream[k] % max_streams
    return max_streams


# ---- wavefront ------------------------------------------------------------------------------
#
# Result layout: `nodes` lists every node, chain by chain; chain c is nodes[cs[c] : cs[c + 1]]
# (a dataflow path, so ascending positions); wave w is chains ws[w] .. ws[w + 1] - 1, and chain
# ws[w] + j of it runs on stream j (before folding).

cdef int _wave_chains(const dag_t* d, int* nodes, int* cs, int* ws, int* nc, int* nw) except -1:
    """Kahn's algorithm in rounds (RAF's WavefrontPartition): every node free at a round's start
    heads a chain, grown while the chain's last node has exactly one consumer whose only unmet
    input it is; after the round only the chain ends' consumers lose an unmet input."""
    cdef int m = d.m, k, c, e, w = 0, n = 0, chains = 0, nfree = 0, nnext, cur
    cdef int* rem = _ints(m)        # unmet inputs of each node
    cdef int* free_ = _ints(m)      # this round's free nodes, then the next round's
    try:
        for k in range(m):
            rem[k] = d.pstart[k + 1] - d.pstart[k]
            if rem[k] == 0:
                free_[nfree] = k
                nfree += 1
        while nfree > 0:
            # The next round's nodes arrive in chain-end order: position order makes stream j
            # the j-th free node in the run order, as RAF's tests expect.
            qsort(free_, nfree, sizeof(int), _cmp_int)
            ws[w] = chains
            w += 1
            for k in range(nfree):
                cur = free_[k]
                cs[chains] = n
                chains += 1
                nodes[n] = cur
                n += 1
                while d.sstart[cur + 1] - d.sstart[cur] == 1:
                    c = d.sidx[d.sstart[cur]]
                    if rem[c] != 1:
                        break
                    nodes[n] = c
                    n += 1
                    cur = c
            nnext = 0
            for c in range(ws[w - 1], chains):
                e = nodes[(cs[c + 1] if c + 1 < chains else n) - 1]
                for k in range(d.sstart[e], d.sstart[e + 1]):
                    rem[d.sidx[k]] -= 1
                    if rem[d.sidx[k]] == 0:
                        free_[nnext] = d.sidx[k]
                        nnext += 1
            nfree = nnext
        if n != m:
            raise GraphError(f"wavefront: {m - n} of {m} nodes are on a cycle or out of order")
        cs[chains] = n
        ws[w] = chains
        nc[0] = chains
        nw[0] = w
    finally:
        free(rem)
        free(free_)
    return 0


cdef int _barrier(const int* nodes, int c0, int c1, int d0, int d1, list extra) except -1:
    """Edges that put chain D = nodes[d0:d1] after chain C = nodes[c0:c1] of the wave before, on
    another stream. Usually one: C's end -> D's head. Where the run order puts part of C after
    D's head, each node y of D follows the last node of C before y (an edge u -> v needs u < v)."""
    cdef int i = c0, last = -1, j
    if nodes[c1 - 1] < nodes[d0]:
        extra.append((nodes[c1 - 1], nodes[d0]))
        return 0
    for j in range(d0, d1):
        while i < c1 and nodes[i] < nodes[j]:
            i += 1
        if i > c0 and nodes[i - 1] != last:
            last = nodes[i - 1]
            extra.append((last, nodes[j]))
    return 0


cdef int _wavefront(const dag_t* d, int max_streams, int* stream, list extra,
                    list waves) except -1:
    cdef int m = d.m, nc = 0, nw = 0, w, a, b, j, k, S = 0
    cdef int* nodes = _ints(m)
    cdef int* cs = _ints(m + 1)
    cdef int* ws = _ints(m + 1)
    try:
        _wave_chains(d, nodes, cs, ws, &nc, &nw)
        for w in range(nw):
            if ws[w + 1] - ws[w] > S:
                S = ws[w + 1] - ws[w]
            for j in range(ws[w + 1] - ws[w]):
                for k in range(cs[ws[w] + j], cs[ws[w] + j + 1]):
                    stream[nodes[k]] = j
        S = _fold(m, S, max_streams, stream)
        if d.reorder != NULL:
            # RAF's issue order, wave by wave (chains are dataflow paths and a chain's other
            # inputs are in earlier waves, so it is topological): a barrier is then always one
            # edge per pair of chains, the end of one to the head of the other.
            for k in range(m):
                d.reorder[k] = nodes[k]
        for w in range(nw - 1):
            for a in range(ws[w], ws[w + 1]):
                for b in range(ws[w + 1], ws[w + 2]):
                    if stream[nodes[cs[a]]] == stream[nodes[cs[b]]]:
                        continue
                    if d.reorder != NULL:
                        extra.append((nodes[cs[a + 1] - 1], nodes[cs[b]]))
                    else:
                        _barrier(nodes, cs[a], cs[a + 1], cs[b], cs[b + 1], extra)
        if waves is not None:
            for w in range(nw):
                waves.append([[nodes[k] for k in range(cs[a], cs[a + 1])]
                              for a in range(ws[w], ws[w + 1])])
    finally:
        free(nodes)
        free(cs)
        free(ws)
    return S


cdef int wavefront_assign(const dag_t* d, int max_streams, int* stream, list extra) except -1:
    return _wavefront(d, max_streams, stream, extra, None)


# ---- asap -----------------------------------------------------------------------------------

cdef int _heavy(const dag_t* d, int* hchild, int* hparent) except -1:
    """RAF's heavy edges: depth = nodes on the longest path to a sink; consumers visited deepest
    first (ties: position) each claim their first input (ascending position, our argument
    order) that no consumer claimed yet."""
    cdef int m = d.m, k, i, u, dm = 0
    cdef int* depth = _ints(m)
    cdef int* cnt = _ints(m + 2)
    cdef int* order = _ints(m)
    try:
        for k in range(m - 1, -1, -1):
            depth[k] = 1
            for i in range(d.sstart[k], d.sstart[k + 1]):
                if depth[d.sidx[i]] + 1 > depth[k]:
                    depth[k] = depth[d.sidx[i]] + 1
            if depth[k] > dm:
                dm = depth[k]
            hchild[k] = -1
            hparent[k] = -1
        # Counting sort by depth, deepest first, stable in position.
        for k in range(dm + 2):
            cnt[k] = 0
        for k in range(m):
            cnt[dm - depth[k] + 1] += 1
        for k in range(1, dm + 2):
            cnt[k] += cnt[k - 1]
        for k in range(m):
            order[cnt[dm - depth[k]]] = k
            cnt[dm - depth[k]] += 1
        for i in range(m):
            k = order[i]
            for u in range(d.pstart[k], d.pstart[k + 1]):
                if hparent[d.pidx[u]] < 0:
                    hparent[d.pidx[u]] = k
                    hchild[k] = d.pidx[u]
                    break
    finally:
        free(depth)
        free(cnt)
        free(order)
    return 0


cdef int _asap(const dag_t* d, int max_streams, int* stream, list chains,
               list light) except -1:
    cdef int m = d.m, k, i, u, best, S = 0, top, seen, lo = 0, nq = 0
    cdef int* hchild = _ints(m)
    cdef int* hparent = _ints(m)
    cdef int* endof = _ints(m)      # stream whose free chain end this node is, else -1
    cdef int* q = _ints(m)          # free chain ends in position order (freed ascending)
    cdef int* mark = _ints(m)       # last head whose backward search visited the node
    cdef int* stack = _ints(m)
    cdef int* send = _ints(m)       # the free chain end of each stream (valid while free)
    try:
        _heavy(d, hchild, hparent)
        for k in range(m):
            endof[k] = -1
            mark[k] = -1
        for k in range(m):
            if hchild[k] >= 0:
                stream[k] = stream[hchild[k]]
            else:
                # A chain head: the lowest stream whose chain has ended at a node that reaches
                # k, found by a backward search that never goes below the oldest free end.
                while lo < nq and endof[q[lo]] < 0:
                    lo += 1
                best = -1
                if lo < nq:
                    top = 0
                    seen = 0
                    stack[top] = k
                    top += 1
                    mark[k] = k
                    while top > 0 and seen < ASAP_SEARCH:
                        top -= 1
                        u = stack[top]
                        seen += 1
                        if endof[u] >= 0 and (best < 0 or endof[u] < best):
                            best = endof[u]
                        for i in range(d.pstart[u], d.pstart[u + 1]):
                            if d.pidx[i] >= q[lo] and mark[d.pidx[i]] != k:
                                mark[d.pidx[i]] = k
                                stack[top] = d.pidx[i]
                                top += 1
                if best >= 0:
                    stream[k] = best
                    endof[send[best]] = -1      # the reused end is no longer free
                else:
                    stream[k] = S
                    S += 1
            # A chain end with a consumer frees its stream; one without can reach no head.
            if hparent[k] < 0 and d.sstart[k + 1] > d.sstart[k]:
                endof[k] = stream[k]
                send[stream[k]] = k
                q[nq] = k
                nq += 1
        if chains is not None:
            for k in range(m):
                if hchild[k] < 0:
                    chain = [k]
                    u = k
                    while hparent[u] >= 0:
                        u = hparent[u]
                        chain.append(u)
                    chains.append(chain)
        if light is not None:
            for k in range(m):
                for i in range(d.sstart[k], d.sstart[k + 1]):
                    if hparent[k] != d.sidx[i]:
                        light.append((k, d.sidx[i]))
        S = _fold(m, S, max_streams, stream)
    finally:
        free(hchild)
        free(hparent)
        free(endof)
        free(q)
        free(mark)
        free(stack)
        free(send)
    return S


cdef int asap_assign(const dag_t* d, int max_streams, int* stream, list extra) except -1:
    return _asap(d, max_streams, stream, None, None)


# ---- test wrappers --------------------------------------------------------------------------

def wavefront_streams(succ, max_streams=0):
    """Run "wavefront" on ``succ`` (successor lists over positions, every u -> v with u < v):
    ``(streams, {"waves": [[chain, ...], ...], "extra": [(u, v), ...], "stream_count": S})``."""
    cdef int cap = dag_max_streams(max_streams)
    cdef DagBuffer g = DagBuffer.__new__(DagBuffer)
    g.load(succ)
    cdef int* stream = _ints(g.d.m)
    extra, waves = [], []
    try:
        S = _wavefront(&g.d, cap, stream, extra, waves)
        streams = [stream[k] for k in range(g.d.m)]
    finally:
        free(stream)
    return streams, {"waves": waves, "extra": extra, "stream_count": S}


def asap_streams(succ, max_streams=0):
    """Run "asap" on ``succ`` (as wavefront_streams): ``(streams, {"chains": [[node, ...], ...],
    "light": [(u, v), ...], "stream_count": S})``; chains in head order, heavy edges inside."""
    cdef int cap = dag_max_streams(max_streams)
    cdef DagBuffer g = DagBuffer.__new__(DagBuffer)
    g.load(succ)
    cdef int* stream = _ints(g.d.m)
    chains, light = [], []
    try:
        S = _asap(&g.d, cap, stream, chains, light)
        streams = [stream[k] for k in range(g.d.m)]
    finally:
        free(stream)
    return streams, {"chains": chains, "light": light, "stream_count": S}


register_policy("wavefront", wavefront_assign)     # static_schedule(g, policy="wavefront")
register_policy("asap", asap_assign)               # static_schedule(g, policy="asap")
