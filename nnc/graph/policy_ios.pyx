"""The "ios" scheduling policy: IOS's dynamic program over stages (Ding et al., MLSys 2021), in
the form RAF re-implements it (blocks cut at cut nodes, 64-bit state masks), with a modelled
rather than measured stage latency (issue 16; docs/schedule.md "Policy "ios"").

The run order is cut into *blocks* of at most ``block_size`` positions, preferring cuts where
only the block's last node has edges past it. Per block, a DP state is the mask of nodes still
to schedule; a decision is an *ending* E of the state S (E closed under successors within S, at
most ``max_stage_ops`` nodes), scheduled as the last stage of S:

    cost(S) = min over E of cost(S - E) + latency(E),   cost(0) = 0.

A stage's groups are the connected parts of E (union of the edges inside E); a part over
``max_group_size`` nodes prunes the ending (the paper's r), and the smallest parts (by node
count, then first position) merge until at most ``max_num_groups`` remain (RAF's merge). The
model: latency(E) = max over groups of the group's summed cost + ``stage_overhead``. Ties go to
the lowest mask left (S - E), i.e. the ending of the latest nodes, so the answer is deterministic
for a cost table and equal stages follow the run order. A block whose DP visits
more than ``max_states`` states is split in two at its middle position and each half solved.
"""

from libc.stdint cimport uint64_t
from libc.stdlib cimport calloc, free, malloc

from nnc._core import ScheduleError

from nnc.graph.dag cimport dag_t
from nnc.graph.schedule cimport register_policy

cdef enum:
    MAX_BLOCK = 64                  # a state is a uint64_t mask of the block's nodes

# The pruning parameters (set_ios_options); static_schedule has no per-policy arguments.
cdef int BLOCK_SIZE = 20
cdef int MAX_STAGE_OPS = 10
cdef int MAX_NUM_GROUPS = 0         # 0: max_streams, or 5 when max_streams is 0
cdef int MAX_GROUP_SIZE = 0         # 0: no limit
cdef int MAX_STATES = 512
cdef double STAGE_OVERHEAD = 5e-6   # seconds a stage barrier costs in the model


cdef struct block_t:
    int n                           # nodes: positions b0 .. b0 + n - 1
    int groups                      # max groups per stage
    int ops                         # max nodes per ending
    int gsize                       # max nodes per connected part, 0: any
    int states                      # DP states allowed before the block is split
    double overhead
    uint64_t succ[MAX_BLOCK]        # successors inside the block, as masks
    uint64_t adj[MAX_BLOCK]         # successors | predecessors
    double cost[MAX_BLOCK]
    # The memo: open addressing over `cap` slots (a power of two); used[i] marks a slot.
    int cap
    int count
    int overflow
    uint64_t* key
    uint64_t* best                  # the chosen ending of the state
    double* val
    char* used


cdef inline int _low(uint64_t x) noexcept nogil:
    cdef int i = 0
    while not (x >> i) & 1:
        i += 1
    return i


cdef int _groups(block_t* b, uint64_t E, uint64_t* gm, double* gc) noexcept nogil:
    """Split E into its groups (masks gm, summed costs gc, ordered by first node); -1 when a
    connected part is over the group-size limit."""
    cdef int k = 0, i, j, a, x, y
    cdef int size[MAX_BLOCK]
    cdef uint64_t rem = E, comp, grow, new
    while rem:
        comp = rem & (~rem + 1)
        grow = comp
        while grow:                 # flood fill over the edges inside E
            i = _low(grow)
            grow &= grow - 1
            new = b.adj[i] & E & ~comp
            comp |= new
            grow |= new
        rem &= ~comp
        gm[k] = comp
        gc[k] = 0
        size[k] = 0
        while comp:
            i = _low(comp)
            comp &= comp - 1
            gc[k] += b.cost[i]
            size[k] += 1
        if b.gsize > 0 and size[k] > b.gsize:
            return -1
        k += 1
    while k > b.groups:             # merge the two smallest (size, then first node)
        x = y = -1
        for j in range(k):
            if x < 0 or size[j] < size[x]:
                y = x
                x = j
            elif y < 0 or size[j] < size[y]:
                y = j
        a = x if x < y else y
        j = y if x < y else x
        gm[a] |= gm[j]
        gc[a] += gc[j]
        size[a] += size[j]
        for i in range(j, k - 1):
            gm[i] = gm[i + 1]
            gc[i] = gc[i + 1]
            size[i] = size[i + 1]
        k -= 1
    return k


cdef double _latency(block_t* b, uint64_t E) noexcept nogil:
    cdef uint64_t gm[MAX_BLOCK]
    cdef double gc[MAX_BLOCK]
    cdef double lat = 0
    cdef int k = _groups(b, E, gm, gc), i
    if k < 0:
        return -1
    for i in range(k):
        lat = gc[i] if gc[i] > lat else lat
    return lat + b.overhead


cdef int _slot(block_t* b, uint64_t S) noexcept nogil:
    cdef int i = <int>(((S * <uint64_t>0x9E3779B97F4A7C15) >> 32) & <uint64_t>(b.cap - 1))
    while b.used[i] and b.key[i] != S:
        i = (i + 1) & (b.cap - 1)
    return i


cdef double _solve(block_t* b, uint64_t S) noexcept nogil:
    """cost(S), memoised; each ending of S is built by deciding its nodes from the highest
    down (a node's successors are decided before it: it may join only when they all did)."""
    cdef double best = 1e300, lat, c
    cdef uint64_t arg = 0
    cdef int i, t = 0, nn = 0
    cdef int nodes[MAX_BLOCK]
    cdef int cnt[MAX_BLOCK + 1]
    cdef char tried[MAX_BLOCK + 1]  # 0: nothing yet, 1: included, 2: excluded too
    cdef uint64_t Es[MAX_BLOCK + 1]
    if S == 0 or b.overflow:
        return 0
    i = _slot(b, S)
    if b.used[i]:
        return b.val[i]
    if b.count >= b.states:
        b.overflow = 1
        return 0
    b.count += 1
    for i in range(b.n - 1, -1, -1):
        if (S >> i) & 1:
            nodes[nn] = i
            nn += 1
    Es[0] = 0
    cnt[0] = 0
    tried[0] = 0
    while t >= 0 and not b.overflow:
        if t == nn:                 # an ending decided
            if Es[t]:
                lat = _latency(b, Es[t])
                if lat >= 0:
                    c = _solve(b, S & ~Es[t]) + lat
                    if c < best or (c == best and Es[t] > arg):
                        best = c
                        arg = Es[t]
            t -= 1
            continue
        i = nodes[t]
        if tried[t] == 0:
            tried[t] = 1
            if cnt[t] < b.ops and (b.succ[i] & S & ~Es[t]) == 0:
                Es[t + 1] = Es[t] | (<uint64_t>1 << i)
                cnt[t + 1] = cnt[t] + 1
                t += 1
                tried[t] = 0
                continue
        if tried[t] == 1:
            tried[t] = 2
            Es[t + 1] = Es[t]
            cnt[t + 1] = cnt[t]
            t += 1
            tried[t] = 0
            continue
        t -= 1
    if b.overflow:
        return 0
    i = _slot(b, S)                 # the recursion inserted states, never removed any
    b.used[i] = 1
    b.key[i] = S
    b.val[i] = best
    b.best[i] = arg
    return best


cdef int _too_many_states(block_t* b) noexcept nogil:
    """Whether the block has more than b.states states (sets closed under predecessors, the
    empty one aside), counted by deciding nodes from the highest down and stopping at the
    budget, so the DP never starts on a block it would have to abandon."""
    cdef uint64_t S = ~<uint64_t>0 if b.n == 64 else (<uint64_t>1 << b.n) - 1
    cdef int t = 0, count = 0
    cdef char tried[MAX_BLOCK + 1]
    cdef uint64_t Es[MAX_BLOCK + 1]     # the complement of a state is an ending of the block
    Es[0] = 0
    tried[0] = 0
    while t >= 0:
        if t == b.n:
            count += Es[t] != S
            if count > b.states:
                return 1
            t -= 1
            continue
        if tried[t] == 0:
            tried[t] = 1
            if (b.succ[b.n - 1 - t] & ~Es[t]) == 0:
                Es[t + 1] = Es[t] | (<uint64_t>1 << (b.n - 1 - t))
                t += 1
                tried[t] = 0
                continue
        if tried[t] == 1:
            tried[t] = 2
            Es[t + 1] = Es[t]
            t += 1
            tried[t] = 0
            continue
        t -= 1
    return 0


cdef int _block(const dag_t* d, block_t* b, int b0, int b1, list stages) except -1:
    """Solve positions b0 .. b1 - 1 and append its stages (lists of groups of positions) in run
    order; a block over the state budget is split in two at its middle and each half solved."""
    cdef int n = b1 - b0, i, j, v, k, g
    cdef uint64_t S, E
    cdef uint64_t gm[MAX_BLOCK]
    cdef double gc[MAX_BLOCK]
    b.n = n
    for i in range(n):
        b.succ[i] = b.adj[i] = 0
        b.cost[i] = 1.0 if d.cost == NULL else d.cost[b0 + i]
    for i in range(n):
        for j in range(d.sstart[b0 + i], d.sstart[b0 + i + 1]):
            v = d.sidx[j] - b0
            if v < n:
                b.succ[i] |= <uint64_t>1 << v
                b.adj[i] |= <uint64_t>1 << v
                b.adj[v] |= <uint64_t>1 << i
    for i in range(b.cap):
        b.used[i] = 0
    b.count = b.overflow = 0
    S = ~<uint64_t>0 if n == 64 else (<uint64_t>1 << n) - 1
    with nogil:
        b.overflow = _too_many_states(b)
        if not b.overflow:
            _solve(b, S)
    if b.overflow:
        _block(d, b, b0, b0 + n // 2, stages)
        _block(d, b, b0 + n // 2, b1, stages)
        return 0
    block = []
    while S:
        E = b.best[_slot(b, S)]
        k = _groups(b, E, gm, gc)
        stage = []
        for g in range(k):
            group = []
            for i in range(n):
                if (gm[g] >> i) & 1:
                    group.append(b0 + i)
            stage.append(group)
        block.append(stage)
        S &= ~E
    block.reverse()
    stages.extend(block)
    return 0


cdef list _blocks(const dag_t* d, int size):
    """Cut positions 0 .. m-1 into runs of at most `size`, ending a run at its last clean cut (a
    position k that no edge from a node before k passes: a cut node), else at the size."""
    cdef int m = d.m, start = 0, k, j, far = -1, cut = -1
    cdef char* clean = <char*>malloc(m if m else 1)
    if clean == NULL:
        raise MemoryError()
    for k in range(m):
        clean[k] = far <= k
        for j in range(d.sstart[k], d.sstart[k + 1]):
            far = d.sidx[j] if d.sidx[j] > far else far
    out = []
    try:
        k = 0
        while k < m:
            if clean[k]:
                cut = k
            if k - start + 1 == size or k == m - 1:
                if cut < start or k == m - 1:
                    cut = k
                out.append((start, cut + 1))
                start = k = cut + 1
                cut = -1
                continue
            k += 1
    finally:
        free(clean)
    return out


cdef int _ios(const dag_t* d, int max_streams, int* stream, list extra, dict info) except -1:
    cdef block_t* b = <block_t*>calloc(1, sizeof(block_t))
    cdef int S = 1, gi, hi, groups
    cdef double total = 0
    if b == NULL:
        raise MemoryError()
    groups = MAX_NUM_GROUPS if MAX_NUM_GROUPS > 0 else (max_streams if max_streams > 0 else 5)
    if max_streams > 0 and groups > max_streams:
        groups = max_streams
    b.groups = groups
    b.ops = MAX_STAGE_OPS
    b.gsize = MAX_GROUP_SIZE
    b.states = MAX_STATES
    b.overhead = STAGE_OVERHEAD
    b.cap = 1
    while b.cap < 2 * MAX_STATES:
        b.cap *= 2
    stages = []
    try:
        b.key = <uint64_t*>malloc(b.cap * sizeof(uint64_t))
        b.best = <uint64_t*>malloc(b.cap * sizeof(uint64_t))
        b.val = <double*>malloc(b.cap * sizeof(double))
        b.used = <char*>malloc(b.cap)
        if not (b.key and b.best and b.val and b.used):
            raise MemoryError()
        blocks = _blocks(d, BLOCK_SIZE)
        for b0, b1 in blocks:
            _block(d, b, b0, b1, stages)
    finally:
        free(b.key)
        free(b.best)
        free(b.val)
        free(b.used)
        free(b)
    prev = None
    for stage in stages:
        lat = 0.0
        for gi, group in enumerate(stage):
            c = 0.0
            for k in group:
                stream[k] = gi
                c += 1.0 if d.cost == NULL else d.cost[k]
            lat = c if c > lat else lat
        total += lat + STAGE_OVERHEAD
        S = len(stage) if len(stage) > S else S
        if prev is not None:        # the barrier: each group after every group before it
            for gi, a in enumerate(prev):
                for hi, z in enumerate(stage):
                    if gi != hi and a[len(a) - 1] < z[0]:
                        extra.append((a[len(a) - 1], z[0]))
        prev = stage
    if info is not None:
        info["stages"] = stages
        info["latency"] = total
        info["blocks"] = blocks
        info["stream_count"] = S if d.m else 0
    return S


cdef int ios_assign(const dag_t* d, int max_streams, int* stream, list extra) except -1:
    return _ios(d, max_streams, stream, extra, None)


# ---- options and the Python wrapper ----------------------------------------------------------

_LIMITS = {"block_size": (1, MAX_BLOCK), "max_stage_ops": (1, MAX_BLOCK),
           "max_num_groups": (0, MAX_BLOCK), "max_group_size": (0, MAX_BLOCK),
           "max_states": (1, 1 << 20)}


def _options():
    return {"block_size": BLOCK_SIZE, "max_stage_ops": MAX_STAGE_OPS,
            "max_num_groups": MAX_NUM_GROUPS, "max_group_size": MAX_GROUP_SIZE,
            "max_states": MAX_STATES, "stage_overhead": STAGE_OVERHEAD}


def set_ios_options(**options):
    """Set the "ios" pruning parameters for every later schedule; returns the old values (a dict
    that ``set_ios_options(**old)`` restores). Unknown names and bad values raise ScheduleError
    and change nothing."""
    global BLOCK_SIZE, MAX_STAGE_OPS, MAX_NUM_GROUPS, MAX_GROUP_SIZE, MAX_STATES, STAGE_OVERHEAD
    old = _options()
    for name, x in options.items():
        if name == "stage_overhead":
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < 1e300:
                raise ScheduleError(f"stage_overhead must be a finite number >= 0, not {x!r}")
            continue
        if name not in _LIMITS:
            raise ScheduleError(f"unknown ios option {name!r}; the options are "
                                f"{', '.join(sorted(old))}")
        lo, hi = _LIMITS[name]
        if isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi:
            raise ScheduleError(f"{name} must be an int in {lo} .. {hi}, not {x!r}")
    BLOCK_SIZE = options.get("block_size", BLOCK_SIZE)
    MAX_STAGE_OPS = options.get("max_stage_ops", MAX_STAGE_OPS)
    MAX_NUM_GROUPS = options.get("max_num_groups", MAX_NUM_GROUPS)
    MAX_GROUP_SIZE = options.get("max_group_size", MAX_GROUP_SIZE)
    MAX_STATES = options.get("max_states", MAX_STATES)
    STAGE_OVERHEAD = float(options.get("stage_overhead", STAGE_OVERHEAD))
    return old


cdef class _Csr:
    """A dag_t over Python successor lists (positions u < v) and optional costs."""
    cdef dag_t d
    cdef int* buf
    cdef double* cost

    def __dealloc__(self):
        free(self.buf)
        free(self.cost)

    cdef int load(self, succ, costs) except -1:
        cdef int m, k, e = 0, i
        if not isinstance(succ, (list, tuple)):
            raise ScheduleError(f"succ must be a list of successor lists, not "
                                f"{type(succ).__name__}")
        m = len(succ)
        rows = []
        for k in range(m):
            if not isinstance(succ[k], (list, tuple)):
                raise ScheduleError(f"successors of {k} must be a list, not {succ[k]!r}")
            for x in succ[k]:
                if isinstance(x, bool) or not isinstance(x, int) or not k < x < m:
                    raise ScheduleError(f"edge {k} -> {x!r}: successors must be positions "
                                        f"after {k} and below {m}")
            rows.append(sorted(set(succ[k])))
            e += len(rows[k])
        self.buf = <int*>malloc((4 * (m + 1) + 2 * e + 1) * sizeof(int))
        if self.buf == NULL:
            raise MemoryError()
        cdef int* sstart = self.buf
        cdef int* pstart = sstart + m + 1
        cdef int* fill = pstart + m + 1
        cdef int* sidx = fill + m + 1
        cdef int* pidx = sidx + e
        sstart[0] = 0
        for k in range(m + 1):
            pstart[k] = 0
        for k in range(m):
            sstart[k + 1] = sstart[k] + len(rows[k])
            for i, v in enumerate(rows[k]):
                sidx[sstart[k] + i] = v
                pstart[v + 1] += 1
        for k in range(m):
            pstart[k + 1] += pstart[k]
            fill[k] = pstart[k]
        for k in range(m):
            for i in range(sstart[k], sstart[k + 1]):
                pidx[fill[sidx[i]]] = k
                fill[sidx[i]] += 1
        self.d.m = m
        self.d.sstart = sstart
        self.d.sidx = sidx
        self.d.pstart = pstart
        self.d.pidx = pidx
        self.d.cmd = fill
        self.d.cost = NULL
        if costs is not None:
            if not isinstance(costs, (list, tuple)) or len(costs) != m:
                raise ScheduleError(f"costs must be a list of {m} numbers, not {costs!r}")
            self.cost = <double*>malloc((m if m else 1) * sizeof(double))
            if self.cost == NULL:
                raise MemoryError()
            for k in range(m):
                x = costs[k]
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < 1e300:
                    raise ScheduleError(f"cost of node {k} must be a finite number >= 0, "
                                        f"not {x!r}")
                self.cost[k] = x
            self.d.cost = self.cost
        return 0


def ios_stages(succ, costs=None, max_streams=0, **options):
    """Run "ios" on ``succ`` (successor lists over positions, every u -> v with u < v) with
    ``costs`` (one per node, None: unit) and, for this call only, the given options:
    ``(streams, {"stages": [[group, ...], ...], "latency": modelled, "blocks": [(b0, b1), ...],
    "extra": [(u, v), ...], "stream_count": S})``; a group is a list of positions."""
    if (isinstance(max_streams, bool) or not isinstance(max_streams, int)
            or not 0 <= max_streams < 2 ** 31):
        raise ScheduleError(f"max_streams must be an int >= 0 (0: no limit), not {max_streams!r}")
    cdef _Csr g = _Csr.__new__(_Csr)
    g.load(succ, costs)
    cdef int* stream = <int*>malloc((g.d.m if g.d.m else 1) * sizeof(int))
    if stream == NULL:
        raise MemoryError()
    info, extra = {}, []
    old = set_ios_options(**options)
    try:
        _ios(&g.d, max_streams, stream, extra, info)
        streams = [stream[k] for k in range(g.d.m)]
    finally:
        set_ios_options(**old)
        free(stream)
    info["extra"] = extra
    return streams, info


register_policy("ios", ios_assign)     # static_schedule(g, policy="ios")
