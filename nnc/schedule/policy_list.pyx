"""The "list" scheduling policy: a cost-aware list schedule onto ``max_streams`` streams
(0: as many as help), the baseline the other policies should beat.

A stream runs its nodes in position order (the run order, a topological order), so the policy
walks the nodes in that order and simulates the run with the node costs: a node is ready when
its predecessors finish, and starts when it is ready and its stream is free. Each node goes to
the stream on which it starts earliest; among streams free by its ready time (all equally
early) it prefers, in turn:

1. the stream whose last node is a predecessor that has this node as its *critical child* (the
   successor with the longest remaining path by cost, its bottom level): the critical path
   then stays on one stream and needs no signal;
2. the free stream of lowest id not *reserved* (its last node's critical child not placed yet);
3. a new stream, while fewer than ``max_streams`` exist;
4. the free reserved stream of lowest id.

If no stream is free by then (the cap is reached), the one free earliest, lowest id on a tie.
Two min-trees over stream ids (unreserved, reserved; key: the time the stream is free) answer
"lowest id free by t" and "free earliest" in O(log s): O((n + e) + n log s) in all.
"""

from libc.math cimport INFINITY
from libc.stdlib cimport free, malloc

from nnc.schedule.dag cimport dag_t
from nnc.schedule.schedule cimport register_policy


cdef inline void tree_set(double* t, int size, int i, double x) noexcept nogil:
    i += size
    t[i] = x
    i >>= 1
    while i:
        t[i] = t[2 * i] if t[2 * i] <= t[2 * i + 1] else t[2 * i + 1]
        i >>= 1


cdef inline int tree_first_le(const double* t, int size, double x) noexcept nogil:
    """Lowest leaf index whose key is <= x, or -1."""
    cdef int i = 1
    if not t[1] <= x:
        return -1
    while i < size:
        i = 2 * i if t[2 * i] <= x else 2 * i + 1
    return i - size


cdef int list_assign(const dag_t* d, int max_streams, int* stream, list extra) except -1:
    cdef int m = d.m, cap = max_streams if 0 < max_streams < m else m, size = 1
    cdef int k, j, v, p, s, best, S = 0, a, b
    cdef double c, r, x
    cdef double* bl = NULL              # [m] bottom level: cost of the longest path from k
    cdef int* crit = NULL               # [m] critical child (successor of largest bl), -1
    cdef double* fin = NULL             # [m] simulated finish time
    cdef int* tail = NULL               # [cap] last node of each stream
    cdef double* tu = NULL              # [2 size] min-tree of free times, unreserved streams
    cdef double* tr = NULL              # [2 size] the same for reserved streams
    if m == 0:
        return 1
    while size < cap:
        size *= 2
    try:
        bl = <double*>malloc(sizeof(double) * m)
        crit = <int*>malloc(sizeof(int) * m)
        fin = <double*>malloc(sizeof(double) * m)
        tail = <int*>malloc(sizeof(int) * cap)
        tu = <double*>malloc(sizeof(double) * 2 * size)
        tr = <double*>malloc(sizeof(double) * 2 * size)
        if not (bl and crit and fin and tail and tu and tr):
            raise MemoryError()
        for k in range(2 * size):
            tu[k] = tr[k] = INFINITY
        with nogil:
            for k in range(m - 1, -1, -1):
                best = -1
                for j in range(d.sstart[k], d.sstart[k + 1]):
                    v = d.sidx[j]
                    if best < 0 or bl[v] > bl[best] or (bl[v] == bl[best] and v < best):
                        best = v
                crit[k] = best
                bl[k] = (1.0 if d.cost == NULL else d.cost[k]) + (bl[best] if best >= 0 else 0)
            for k in range(m):
                c = 1.0 if d.cost == NULL else d.cost[k]
                r = 0
                best = -1
                for j in range(d.pstart[k], d.pstart[k + 1]):
                    p = d.pidx[j]
                    r = fin[p] if fin[p] > r else r
                    s = stream[p]
                    if crit[p] == k and tail[s] == p and (best < 0 or s < best):
                        best = s                                            # 1.
                if best < 0:
                    best = tree_first_le(tu, size, r)                       # 2.
                if best < 0 and S < cap:
                    best = S                                                # 3.
                    S += 1
                if best < 0:
                    best = tree_first_le(tr, size, r)                       # 4.
                if best < 0:            # none free by r: the earliest free, lowest id
                    a = tree_first_le(tu, size, tu[1])
                    b = tree_first_le(tr, size, tr[1])
                    best = a if b < 0 or (a >= 0 and (tu[1] < tr[1] or (
                        tu[1] == tr[1] and a < b))) else b
                x = tu[size + best] if tu[size + best] < tr[size + best] else tr[size + best]
                if x == INFINITY:       # a new stream (an opened one has one finite key)
                    x = 0
                fin[k] = (r if r > x else x) + c
                stream[k] = best
                tail[best] = k
                # Reserved while k's critical child waits to be placed.
                tree_set(tu, size, best, INFINITY if crit[k] >= 0 else fin[k])
                tree_set(tr, size, best, fin[k] if crit[k] >= 0 else INFINITY)
                for j in range(d.pstart[k], d.pstart[k + 1]):
                    p = d.pidx[j]           # k placed: release the streams that kept k's seat
                    s = stream[p]
                    if crit[p] == k and tail[s] == p:
                        tree_set(tr, size, s, INFINITY)
                        tree_set(tu, size, s, fin[p])
    finally:
        free(bl)
        free(crit)
        free(fin)
        free(tail)
        free(tu)
        free(tr)
    return S


register_policy("list", list_assign)
