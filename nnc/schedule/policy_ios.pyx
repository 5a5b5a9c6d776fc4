"""The "ios" scheduling policy: IOS's dynamic program over stages (Ding et al., MLSys 2021), in
the form RAF re-implements it (blocks, 64-bit state masks, schedule units), with a modelled
rather than measured stage latency (docs/schedule.md "Policy "ios"").

The run order is cut into *blocks* of at most ``block_size`` positions, ending at complete cuts
(_blocks). Inside a block, cheap followers join their chain's *unit* (_block). Per block, a DP
state is the mask of units still to schedule; a decision is an *ending* E of the state S (E
closed under successors within S, at most ``max_stage_ops`` units), scheduled as the last stage
of S:

    cost(S) = min over E of cost(S - E) + latency(E),   cost(0) = 0.

A stage's groups are the connected parts of E (union of the edges inside E); a part over
``max_group_size`` units prunes the ending (the paper's r), and the two cheapest parts merge
until at most ``max_num_groups`` remain. The model: latency(E) = the groups' time on ``cores``
cores (_spread) + ``stage_overhead``. Ties go to the lowest mask left (S - E), i.e. the ending
of the latest units, so the answer is deterministic for a cost table and equal stages follow
the run order. A block whose DP would visit more than ``max_states`` states is split in two at
its middle position and each half solved. The stages become the run order, the streams follow
the chains (_emit), and barriers are extra edges only when asked for.
"""

from libc.stdint cimport uint64_t
from libc.stdlib cimport calloc, free, malloc

from nnc.base.core import ScheduleError

from nnc.schedule.dag cimport DagBuffer, dag_max_streams, dag_t
from nnc.schedule.schedule cimport register_policy

cdef enum:
    MAX_BLOCK = 64                  # a state is a uint64_t mask of the block's nodes

# The pruning parameters (set_ios_options); static_schedule has no per-policy arguments.
cdef int BLOCK_SIZE = 20
cdef int MAX_STAGE_OPS = 10
cdef int MAX_NUM_GROUPS = 0         # 0: max_streams, or 5 when max_streams is 0
cdef int MAX_GROUP_SIZE = 0         # 0: no limit
cdef int MAX_STATES = 256
cdef double STAGE_OVERHEAD = 5e-6   # seconds a stage costs in the model beyond its groups
cdef int CORES = 0                  # groups that truly run at once; 0: nnc's pool threads
cdef bint BARRIERS = False          # enforce the stage order with extra edges (IOS's runtime)
cdef double UNIT_SHARE = 0.01       # a node this cheap beside the chain it ends joins its unit


cdef struct block_t:
    int n                           # nodes: positions b0 .. b0 + n - 1
    int groups                      # max groups per stage
    int cores                       # groups that run at once (the latency model)
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
    while k > b.groups:             # merge the two cheapest (cost, then first node)
        x = y = -1
        for j in range(k):
            if x < 0 or gc[j] < gc[x]:
                y = x
                x = j
            elif y < 0 or gc[j] < gc[y]:
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


cdef double _spread(double* gc, int k, int cores) noexcept nogil:
    """How long k groups of summed costs gc take on `cores` cores: the largest group when
    each has a core, else the longest-processing-time-first list schedule (each group, costliest
    first, on the core that frees first), which is what a pool of `cores` threads running the
    groups' streams comes to. gc is reordered."""
    cdef double load[MAX_BLOCK]
    cdef double lat = 0, x
    cdef int i, j, c
    if k <= cores:
        for i in range(k):
            lat = gc[i] if gc[i] > lat else lat
        return lat
    for i in range(1, k):           # insertion sort, costliest first (k <= 64)
        x = gc[i]
        j = i - 1
        while j >= 0 and gc[j] < x:
            gc[j + 1] = gc[j]
            j -= 1
        gc[j + 1] = x
    for c in range(cores):
        load[c] = 0
    for i in range(k):
        c = 0
        for j in range(1, cores):
            if load[j] < load[c]:
                c = j
        load[c] += gc[i]
    for c in range(cores):
        lat = load[c] if load[c] > lat else lat
    return lat


cdef double _latency(block_t* b, uint64_t E) noexcept nogil:
    cdef uint64_t gm[MAX_BLOCK]
    cdef double gc[MAX_BLOCK]
    cdef int k = _groups(b, E, gm, gc)
    if k < 0:
        return -1
    return _spread(gc, k, b.cores) + b.overhead


cdef int _slot(block_t* b, uint64_t S) noexcept nogil:
    cdef int i = <int>(((S * <uint64_t>0x9E3779B97F4A7C15) >> 32) & <uint64_t>(b.cap - 1))
    while b.used[i] and b.key[i] != S:
        i = (i + 1) & (b.cap - 1)
    return i


cdef double _solve(block_t* b, uint64_t S) noexcept nogil:
    """cost(S), memoised; each ending of S is built by deciding its nodes from the highest
    down (a node's successors are decided before it: it may join only when they all did).
    The first ending seen is kept whatever it costs (arg 0: none yet; an ending is never
    empty): a state with no ending kept would give the stage walk in _block no stage to take.
    Costs sum to a finite double (costs.pyx), and a sum the overheads take to inf only ties."""
    cdef double best = 0, lat, c
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
                    if arg == 0 or c < best or (c == best and Es[t] > arg):
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
    order; a block over the state budget is split in two at its middle and each half solved.

    The DP works on *units* (RAF's fused conv-relu schedule units, by cost): a node whose only
    predecessor is in the block, has it as its only successor, and costs at most UNIT_SHARE of
    that predecessor's unit joins the unit (a fused ReLU's NOOP, a cheap epilogue). A unit is a
    chain entered only at its head and left only from its tail, so units numbered by their
    first position are in topological order, as the DP needs."""
    cdef int n = b1 - b0, i, j, v, k, g, u, nu = 0
    cdef uint64_t S, E
    cdef uint64_t gm[MAX_BLOCK]
    cdef double gc[MAX_BLOCK]
    cdef int uid[MAX_BLOCK]
    cdef double c
    members = []
    for i in range(n):
        c = 1.0 if d.cost == NULL else d.cost[b0 + i]
        uid[i] = -1
        if d.cost != NULL and d.pstart[b0 + i + 1] - d.pstart[b0 + i] == 1:
            u = d.pidx[d.pstart[b0 + i]]
            if u >= b0 and d.sstart[u + 1] - d.sstart[u] == 1 and \
                    c <= UNIT_SHARE * b.cost[uid[u - b0]]:
                uid[i] = uid[u - b0]
                b.cost[uid[i]] += c
                members[uid[i]].append(b0 + i)
        if uid[i] < 0:
            uid[i] = nu
            b.cost[nu] = c
            b.succ[nu] = b.adj[nu] = 0
            members.append([b0 + i])
            nu += 1
    b.n = nu
    for i in range(n):
        for j in range(d.sstart[b0 + i], d.sstart[b0 + i + 1]):
            v = d.sidx[j] - b0
            if v < n and uid[v] != uid[i]:
                b.succ[uid[i]] |= <uint64_t>1 << uid[v]
                b.adj[uid[i]] |= <uint64_t>1 << uid[v]
                b.adj[uid[v]] |= <uint64_t>1 << uid[i]
    for i in range(b.cap):
        b.used[i] = 0
    b.count = b.overflow = 0
    S = ~<uint64_t>0 if nu == 64 else (<uint64_t>1 << nu) - 1
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
        if (E & S) == 0:            # no stage would shrink S: refuse rather than loop forever
            raise ScheduleError(f"ios: the DP kept no stage for the state {S:#x} of the block "
                                f"{b0} .. {b1 - 1}")
        k = _groups(b, E, gm, gc)
        stage = []
        for g in range(k):
            group = []
            for i in range(nu):
                if (gm[g] >> i) & 1:
                    group.extend(members[i])
            group.sort()
            stage.append(group)
        block.append(stage)
        S &= ~E
    block.reverse()
    stages.extend(block)
    return 0


cdef list _blocks(const dag_t* d, int size):
    """Cut positions 0 .. m-1 into runs of at most `size`, ending a run at its last *complete*
    cut, else at the size. The cut after position k is complete when every node before it
    with an edge across it has an edge to every node after it with an edge from before it
    (crossing edges = |sources| x |targets|): then everything after the cut that depends on the
    nodes before it depends on all of their ends, so solving the two sides apart loses nothing.
    A cut node (every crossing edge leaves one node) is the simplest case; the join of
    Inception's branches (each of the next module's branches reads all of them) is another."""
    cdef int m = d.m, start = 0, k, j, u, v, lo, hi, cut = -1
    cdef long long* diff = <long long*>calloc(3 * (m + 2), sizeof(long long))
    cdef long long* dx
    cdef long long* dy
    cdef long long c = 0, x = 0, y = 0
    cdef char* clean = <char*>malloc(m if m else 1)
    if diff == NULL or clean == NULL:
        free(diff)
        free(clean)
        raise MemoryError()
    dx = diff + m + 2
    dy = dx + m + 2
    for u in range(m):              # the cut after k: u <= k < v
        lo = hi = -1
        for j in range(d.sstart[u], d.sstart[u + 1]):
            v = d.sidx[j]
            diff[u] += 1
            diff[v] -= 1
            hi = v if v > hi else hi
        if hi >= 0:
            dx[u] += 1
            dx[hi] -= 1
        for j in range(d.pstart[u], d.pstart[u + 1]):
            v = d.pidx[j]
            lo = v if lo < 0 or v < lo else lo
        if lo >= 0:
            dy[lo] += 1
            dy[u] -= 1
    for k in range(m):
        c += diff[k]
        x += dx[k]
        y += dy[k]
        clean[k] = c == x * y
    free(diff)
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


cdef int _cores() except -1:
    """The model's cores: CORES, or nnc's pool threads (the CPU streams' workers)."""
    from nnc.stream.worker import get_num_threads

    return CORES if CORES > 0 else max(1, min(get_num_threads(), MAX_BLOCK))


cdef int _emit(const dag_t* d, list stages, int groups, int cores, int* stream, list extra,
               double* total) except -1:
    """Streams, run order and (with BARRIERS) barrier edges for the DP's stages, and in
    ``total`` their modelled latency (the DP's objective); returns the stream count. A group
    continues the stream of the predecessor that finishes it (its first node's latest
    predecessor), when no other group of the stage took that stream, so a chain across stages
    needs no signal; else it takes the lowest stream free in the stage (the ids stay dense).
    The run order is stage by stage, a stage's nodes by position: a topological order, since
    a stage holds no node whose predecessor is in a later stage and the edges inside a stage
    stay inside one group."""
    cdef int k, j, s, p, best, i = 0, S = 1
    cdef double t0 = 0, t, lat
    cdef double gc[MAX_BLOCK]
    cdef char* taken = <char*>calloc(groups + 1, 1)
    cdef double* end = <double*>malloc((d.m + 1) * sizeof(double))  # modelled finish time
    if taken == NULL or end == NULL:
        free(taken)
        free(end)
        raise MemoryError()
    try:
        prev = None
        for stage in stages:
            for s in range(groups):
                taken[s] = 0
            ids = [-1] * len(stage)
            lat = 0
            for gi, group in enumerate(stage):      # continue a predecessor's stream
                k = group[0]
                best = -1                           # the one finishing last; a tie: lower stream
                for j in range(d.pstart[k], d.pstart[k + 1]):
                    p = d.pidx[j]
                    if best < 0 or end[p] > end[best] or (end[p] == end[best] and
                                                          stream[p] < stream[best]):
                        best = p
                if best >= 0 and stream[best] < groups and not taken[stream[best]]:
                    ids[gi] = stream[best]
                    taken[stream[best]] = 1
            for gi, group in enumerate(stage):      # else the lowest free one
                if ids[gi] < 0:
                    s = 0
                    while taken[s]:
                        s += 1
                    ids[gi] = s
                    taken[s] = 1
                t = t0
                for k in group:
                    stream[k] = ids[gi]
                    t += 1.0 if d.cost == NULL else d.cost[k]
                    end[k] = t
                gc[gi] = t - t0
                lat = t - t0 if t - t0 > lat else lat
            t0 += lat
            total[0] += _spread(gc, len(stage), cores) + STAGE_OVERHEAD
            S = len(stage) if len(stage) > S else S
            for k in sorted([k for group in stage for k in group]):
                if d.reorder != NULL:
                    d.reorder[i] = k
                i += 1
            if BARRIERS and prev is not None:   # each group after every group before it
                for a in prev:
                    for z in stage:
                        if stream[a[len(a) - 1]] != stream[z[0]]:
                            extra.append((a[len(a) - 1], z[0]))
            prev = stage
    finally:
        free(taken)
        free(end)
    return S


cdef int _ios(const dag_t* d, int max_streams, int* stream, list extra, dict info) except -1:
    cdef block_t* b = <block_t*>calloc(1, sizeof(block_t))
    cdef int S, groups, b_cores
    cdef double total = 0
    if b == NULL:
        raise MemoryError()
    b_cores = _cores()
    # Default: max_streams, or 5 without a cap, but no more groups than cores: on CPU streams
    # a group beyond the cores only queues behind the others (set max_num_groups to override).
    groups = MAX_NUM_GROUPS if MAX_NUM_GROUPS > 0 else min(max_streams if max_streams > 0 else 5,
                                                           b_cores)
    if max_streams > 0 and groups > max_streams:
        groups = max_streams
    b.groups = groups
    b.cores = b_cores
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
    S = _emit(d, stages, groups, b_cores, stream, extra, &total)
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
           "max_states": (1, 1 << 20), "cores": (0, MAX_BLOCK)}


def _options():
    return {"block_size": BLOCK_SIZE, "max_stage_ops": MAX_STAGE_OPS,
            "max_num_groups": MAX_NUM_GROUPS, "max_group_size": MAX_GROUP_SIZE,
            "max_states": MAX_STATES, "stage_overhead": STAGE_OVERHEAD, "cores": CORES,
            "barriers": BARRIERS}


def set_ios_options(**options):
    """Set the "ios" pruning and model parameters for every later schedule; returns the old
    values (a dict that ``set_ios_options(**old)`` restores). Unknown names and bad values
    raise ScheduleError and change nothing."""
    global BLOCK_SIZE, MAX_STAGE_OPS, MAX_NUM_GROUPS, MAX_GROUP_SIZE, MAX_STATES, STAGE_OVERHEAD
    global CORES, BARRIERS
    old = _options()
    for name, x in options.items():
        if name == "stage_overhead":
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < 1e300:
                raise ScheduleError(f"stage_overhead must be a finite number >= 0, not {x!r}")
            continue
        if name == "barriers":
            if not isinstance(x, bool):
                raise ScheduleError(f"barriers must be True or False, not {x!r}")
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
    CORES = options.get("cores", CORES)
    BARRIERS = options.get("barriers", BARRIERS)
    return old


def ios_stages(succ, costs=None, max_streams=0, **options):
    """Run "ios" on ``succ`` (successor lists over positions, every u -> v with u < v) with
    ``costs`` (one per node, None: unit) and, for this call only, the given options:
    ``(streams, {"stages": [[group, ...], ...], "latency": modelled, "blocks": [(b0, b1), ...],
    "extra": [(u, v), ...], "stream_count": S})``; a group is a list of positions."""
    dag_max_streams(max_streams)
    cdef DagBuffer g = DagBuffer.__new__(DagBuffer)
    g.load(succ, costs)
    cdef int* stream = <int*>malloc((2 * g.d.m + 1) * sizeof(int))
    if stream == NULL:
        raise MemoryError()
    g.d.reorder = stream + g.d.m
    info, extra = {}, []
    old = set_ios_options(**options)
    try:
        _ios(&g.d, max_streams, stream, extra, info)
        streams = [stream[k] for k in range(g.d.m)]
        info["order"] = [g.d.reorder[k] for k in range(g.d.m)]
    finally:
        g.d.reorder = NULL
        set_ios_options(**old)
        free(stream)
    info["extra"] = extra
    return streams, info


register_policy("ios", ios_assign)     # static_schedule(g, policy="ios")
