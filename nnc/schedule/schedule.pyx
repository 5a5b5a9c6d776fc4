"""Static schedules: every node of a graph's run order gets one stream, nodes that another
stream depends on get a signal, and each node lists the signals it waits on.

NNC: ccv_nnc_graph_static_schedule_t and ccv_nnc_graph_set_default_static_schedule. This module
holds the result (Schedule: C arrays indexed by node, schedule.pxd), the public entry points and
the registry of policies (POLICIES); the builder, which runs the "rank" policy itself and any
other policy through its registered assignment function, lives in nnc/schedule/builder.pyx, node
costs in costs.pyx, the verifier in verify.pyx.
"""

cimport cython
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

import operator
import warnings
import weakref
from collections import namedtuple

from nnc.base.core import DEBUG, GraphError, HazardWarning, ScheduleError
from nnc.base.device import parse_device, require_device
from nnc.graph.graph import register_scheduler

from nnc.cmd.command cimport Cmd
from nnc.graph.subgraph cimport ControlNode
from nnc.graph.while_node cimport WhileNode
from nnc.schedule.costs cimport normalize_costs, shown
from nnc.schedule.dag cimport dag_t, policy_assign_f
from nnc.graph.graph cimport EXEC_CONTROL, GraphExec
from nnc.graph.order cimport order_all, order_mark_reached, order_mark_reaching

ExecSchedule = namedtuple("ExecSchedule", ["streams", "signals", "waits"])
ExecSchedule.__doc__ = """One node's part of a schedule: the streams it runs on (empty: it does
not run), the signals it emits after running and the signals it waits on before."""

# The registry of scheduling policies: name -> Policy, or None for "rank" (the builder's own).
# Policy modules add themselves at import with register_policy (nnc/__init__.py imports them),
# so a new policy is one registration line; read-only for everyone else.
POLICIES = {"rank": None}


cdef class Policy:
    """A registered scheduling policy (fields: schedule.pxd)."""

    def __init__(self):
        raise TypeError("policies are registered by their modules (register_policy)")

    def __repr__(self):
        return f"<nnc.schedule.schedule.Policy {self.name!r}>"

    cdef int assign(self, const dag_t* d, int max_streams, int* stream, list extra) except -1:
        cdef int k, j
        if self.fn != NULL:
            return self.fn(d, max_streams, stream, extra)
        succ = [[d.sidx[j] for j in range(d.sstart[k], d.sstart[k + 1])] for k in range(d.m)]
        answer = tuple(self.py(succ, max_streams))
        streams, more = list(answer[0]), answer[1]
        if len(answer) > 2 and d.reorder != NULL:   # its own run order
            if len(answer[2]) != d.m:
                raise ScheduleError(f"scheduling policy {self.name!r} gave a run order of "
                                    f"{len(answer[2])} positions for {d.m} nodes")
            for k in range(d.m):
                d.reorder[k] = operator.index(answer[2][k])
        if len(streams) != d.m:
            raise ScheduleError(f"scheduling policy {self.name!r} assigned {len(streams)} "
                                f"streams for {d.m} nodes")
        for k in range(d.m):
            try:
                stream[k] = operator.index(streams[k])
            except (TypeError, OverflowError):
                raise ScheduleError(f"scheduling policy {self.name!r} gave node position {k} "
                                    f"the stream {shown(streams[k])}, not an int") from None
        extra.extend(more)
        return max(streams, default=-1) + 1


cdef int _add_policy(str name, Policy p) except -1:
    if not name or name in POLICIES:
        raise ScheduleError(f"scheduling policy {name!r} is empty or already registered")
    if p is not None:
        p.name = name
    POLICIES[name] = p
    return 0


cdef int register_policy(str name, policy_assign_f fn) except -1:
    """Register a policy written in Cython against nnc/schedule/dag.pxd (at its module's import)."""
    cdef Policy p = Policy.__new__(Policy)
    if fn == NULL:
        raise ScheduleError(f"scheduling policy {name!r} has no assignment function")
    p.fn = fn
    return _add_policy(name, p)


def _register_python_policy(str name not None, fn):
    """Testing hook: register a policy written in Python. ``fn(succ, max_streams)`` gets the
    DAG as successor lists by position and returns ``(streams, extra)``: a stream per position
    and extra edges (u, v), u < v; or ``(streams, extra, order)`` with its own run order (a
    permutation of the positions). The builder checks them as it does a C policy's output."""
    cdef Policy p = Policy.__new__(Policy)
    if not callable(fn):
        raise ScheduleError(f"scheduling policy {name!r} needs a callable, not {fn!r}")
    p.py = fn
    _add_policy(name, p)


def _unregister_policy(str name not None):
    """Testing hook: remove a policy registered with _register_python_policy."""
    p = POLICIES.get(name)
    if p is None or (<Policy>p).py is None:
        raise ScheduleError(f"{name!r} is not a policy registered from Python")
    del POLICIES[name]


cdef Policy policy_of(str name):
    return POLICIES[name]


cdef int* _ints(Py_ssize_t count, int fill) except NULL:
    cdef int* p = <int*>malloc(sizeof(int) * (count + 1))
    cdef Py_ssize_t i
    if p == NULL:
        raise MemoryError()
    for i in range(count + 1):
        p[i] = fill
    return p


@cython.no_gc_clear
cdef class _Scratch:
    """Owns the malloc'd blocks of one build or verification; frees them when collected.

    no_gc_clear: should a cycle ever hold it, the collector must not clear ``owned`` (plain
    ints, never part of a cycle) before __dealloc__ frees what it lists.
    """

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


cdef bint _in_use(Graph g):
    """Is g, or a graph enclosing it, in use (Graph._check_idle would refuse a change)?"""
    while g is not None:
        if g._busy is not None or g._inflight:
            return True
        g = g._control_parent
    return False


cdef bint enter_unless_in_use(Graph g, str what, str doing) except -1:
    """Mark g busy ``doing`` (Graph._enter) while nnc calls user code (a costs function, a
    Python policy) with C arrays sized from g in hand, so that the code gets a GraphError for
    any change of g or its sub-graphs instead of reallocating them. A graph in use already
    (a run building a loop body's schedule) is left as it is: its mark refuses changes just as
    well. Returns whether it marked g; the caller then calls g._leave() in a finally."""
    if _in_use(g):
        return False
    g._enter(what, doing)
    return True


cdef Schedule _build(Graph g, dict args, list part=None):
    from nnc.schedule.builder import build_schedule

    cdef bint entered = enter_unless_in_use(g, "schedule it", "being scheduled")
    try:
        return build_schedule(g, args["stream_type"], args["max_streams"], args["policy"],
                              args["costs"], part)
    finally:
        if entered:
            g._leave()


def _check_args(graph, stream_type, max_streams, policy):
    if not isinstance(graph, Graph):
        raise ScheduleError(f"static_schedule needs an nnc.Graph, not {type(graph).__name__}")
    if not isinstance(policy, str) or policy not in POLICIES:
        raise ScheduleError(f"unknown scheduling policy {policy!r}; expected one of "
                            f"{tuple(POLICIES)}")
    require_device(parse_device(stream_type), f"stream_type={stream_type!r}")
    try:
        cap = -1 if isinstance(max_streams, bool) else operator.index(max_streams)
    except TypeError:
        cap = -1
    if cap < 0:
        raise ScheduleError(f"max_streams must be an int >= 0 (0: no limit), not {max_streams!r}")
    return 0 if cap > 2**31 - 1 else cap


def static_schedule(graph, stream_type="cpu", max_streams=0, policy="rank", costs=None,
                    sources=None, destinations=None):
    """Build the graph's static schedule and make it the graph's default (``graph.schedule``).

    Every node of the run order gets one stream, signals go to nodes that another stream
    waits on, and no wait is redundant (docs/schedule.md). ``max_streams=0`` means no limit.
    ``stream_type`` ("cpu", "gpu" or "gpu:N") says what kind of stream each index becomes when
    the graph runs; on a GPU, each stream is on the GPU of its nodes (``stream_kinds``): a
    graph whose nodes are on several GPUs gets streams on each, at most ``max_streams`` per
    GPU, and stream_type's GPU only holds streams when no node has a GPU tensor. ``policy``
    names who picks the streams (a key of POLICIES, "rank" by default); ``costs`` gives the
    cost-aware ones each node's seconds: None (every node costs 1), a dict {GraphExec or node
    index: seconds}, a callable(GraphExec) -> seconds, or "profile" (measured now with
    ``graph.profile()``). The sub-graphs of while and case..of
    nodes are scheduled too, with the same arguments: each such node has one stream, which is
    stream 0 of its sub-graphs. Raises ScheduleError for bad arguments and GraphError for a
    cyclic graph. NNC: ccv_nnc_graph_set_default_static_schedule.

    With ``sources`` or ``destinations`` (a node or a sequence of nodes; the one left None is
    the graph's own), a *partial* schedule instead: of the nodes reachable from the sources
    that reach the destinations, returned and not attached (the default schedule stays as it
    is; a graph may have any number of partial schedules). ``g.run(stream=s, schedule=sched)``
    runs that part. It is not rebuilt when the graph changes: a run refuses it once stale.
    Only a top-level graph has partial schedules (a loop body or branch runs only as part of
    its parent's run). ScheduleError for a node of another graph or a source and destination
    with no path between them. NNC: ccv_nnc_graph_static_schedule_new.
    """
    max_streams = _check_args(graph, stream_type, max_streams, policy)
    cdef Graph g = graph
    if sources is not None or destinations is not None:
        return _partial(g, stream_type, max_streams, policy, costs, sources, destinations)
    g._check_idle("schedule it")
    if isinstance(costs, str) and costs == "profile":
        costs = dict(g.profile())   # runs the graph: before it is marked busy
    # Busy until every schedule of the tree is built: the costs function (and a Python policy)
    # runs while the builder holds arrays sized from g and its sub-graphs, which a change
    # would reallocate; they get a GraphError instead ("being scheduled").
    g._enter("schedule it", "being scheduled")
    try:
        args = dict(stream_type=stream_type, max_streams=max_streams, policy=policy,
                    costs=normalize_costs(g, costs))
        return _schedule(g, args)
    finally:
        g._leave()


cdef list _ends(Graph g, object nodes, str what):
    """Node indices of g from a GraphExec or a sequence of them (ScheduleError otherwise)."""
    items = [nodes] if isinstance(nodes, GraphExec) else nodes
    try:
        items = list(items)
    except TypeError:
        raise ScheduleError(f"{what} must be a node or a sequence of nodes of the graph, not "
                            f"{type(nodes).__name__}") from None
    if not items:
        raise ScheduleError(f"{what} is empty; pass None for the graph's own {what}")
    for e in items:
        if not isinstance(e, GraphExec) or (<GraphExec>e).graph is not g:
            raise ScheduleError(f"{what}: {e!r} is not a node of {g!r}")
    return [(<GraphExec>e).index for e in items]


cdef Schedule _partial(Graph g, str stream_type, int max_streams, str policy, object costs,
                       object sources, object destinations):
    """static_schedule with sources or destinations: a schedule of part of g, not attached."""
    cdef Schedule sched
    if g._control_parent is not None:
        raise ScheduleError(f"{g!r} is a loop body or branch: it runs only as part of its "
                            "parent's run, so it has no partial schedules (schedule the part "
                            "of the parent that holds its node)")
    srcs = _ends(g, sources, "sources") if sources is not None else None
    dsts = _ends(g, destinations, "destinations") if destinations is not None else None
    g._check_idle("schedule it")
    if isinstance(costs, str) and costs == "profile":
        costs = dict(g.profile())   # runs the graph: before it is marked busy
    g._enter("schedule it", "being scheduled")
    try:
        if g._dirty:
            g._compile()
        srcs = srcs if srcs is not None else [(<GraphExec>e).index for e in g.sources]
        dsts = dsts if dsts is not None else [(<GraphExec>e).index for e in g.destinations]
        part = part_order(g, srcs, dsts)
        args = dict(stream_type=stream_type, max_streams=max_streams, policy=policy,
                    costs=normalize_costs(g, costs))
        sched = _build(g, args, part)
        sched._sources = tuple(srcs)
        sched._destinations = tuple(dsts)
        if DEBUG:
            sched.verify()
        return sched
    finally:
        g._leave()


cdef list part_order(Graph g, list sources, list destinations):
    cdef int n = g._size, i, h
    cdef _Scratch mem = _Scratch.__new__(_Scratch)
    cdef int* indegree = mem.ints(n, 0)
    cdef int* queue = mem.ints(n, 0)
    cdef char* mark = <char*>mem.raw(n)
    # Kahn over the whole graph (its own sources and destinations do not limit a part).
    if order_all(g._nodes, n, indegree, queue) < n:
        g._compile()                    # names the cycle (GraphError)
        raise GraphError(f"{g!r} has a cycle")
    # Bit 1: reachable from a source; bit 2: reaches a destination (as Graph._compile does).
    for i in sources:
        mark[i] |= 1
    order_mark_reached(g._nodes, n, queue, mark)
    for i in destinations:
        mark[i] |= 2
    order_mark_reaching(g._nodes, n, queue, mark)
    lone = [i for i in dict.fromkeys(destinations) if not mark[i] & 1]
    lone += [i for i in dict.fromkeys(sources) if not mark[i] & 2 and i not in lone]
    if lone:
        names = ", ".join(g._label(i) for i in lone)
        raise ScheduleError(f"no path between the sources and destinations through {names}: "
                            "a partial schedule runs the nodes on a path from a source to a "
                            "destination")
    return [queue[h] for h in range(n) if mark[queue[h]] == 3]


cdef int check_runnable(Graph g, Schedule sched) except -1:
    cdef object owner = None if sched._graph is None else sched._graph()
    if owner is not g:
        raise ScheduleError(f"{sched!r} is a schedule of "
                            f"{'a freed graph' if owner is None else repr(owner)}, not of {g!r}")
    if sched.version != g.version:
        what = "partial schedule" if sched._sources is not None else "schedule"
        raise ScheduleError(
            f"the graph changed since this {what} was built (it is stale); build it again "
            "with nnc.static_schedule" + (", or run the default one (graph.schedule)"
                                          if sched._sources is None else ""))
    return 0


cdef Schedule _schedule(Graph g, dict args):
    sched = _build(g, args)
    if DEBUG:                   # NNC_DEBUG=1: check the builder and the graph's edges
        sched.verify()
        _warn_hazards(g)
    st = schedule_state(g)
    st.default = sched
    st.args = args
    for sub in _subgraphs(g):
        # Its enclosing graph is ours, marked busy: only a use of its own can refuse it.
        if (<Graph>sub)._busy is not None or (<Graph>sub)._inflight:
            (<Graph>sub)._check_idle("schedule it")
        _schedule(sub, args)
    return sched


cdef int _warn_hazards(Graph g) except -1:
    """Debug mode: warn (HazardWarning) about unordered nodes that race on memory. Not an error:
    NNC's own schedule tests build such graphs on purpose, and one thread runs them correctly."""
    from nnc.schedule.hazard import graph_hazards, hazards_message

    found = graph_hazards(g)
    if found:
        warnings.warn(hazards_message(g, found), HazardWarning, stacklevel=3)
    return 0


cdef list _subgraphs(Graph g):
    """The sub-graphs of g's while and case..of nodes (one level)."""
    cdef list out = []
    cdef int i
    for i in range(g._size):
        if g._nodes[i].flags & EXEC_CONTROL:
            out.extend((<ControlNode>(<Cmd>g._cmds[i]).fn).subgraphs())
    return out


cdef bint _current(Graph g, Schedule sched):
    """Was sched built for g as it is now (nodes, edges and, for a loop body, breakpoints)?"""
    if sched.version != g.version:
        return False
    return g._loop is None or sched.loop_key == (<WhileNode>g._loop).schedule_key()


cdef class ScheduleState:
    """The schedules of one graph (fields: schedule.pxd)."""


cdef ScheduleState schedule_state(Graph g):
    if g._sched_state is None:
        g._sched_state = ScheduleState.__new__(ScheduleState)
    return <ScheduleState>g._sched_state


cdef dict schedule_args(Graph g):
    cdef ScheduleState st = g._sched_state
    return None if st is None or st.default is None else st.args


def graph_schedule(Graph g not None):
    """The graph's default schedule, rebuilt with the same arguments if the graph changed;
    None if it has none."""
    cdef ScheduleState st = g._sched_state
    if st is None or st.default is None or _current(g, st.default):
        return None if st is None else st.default
    st.default = _build(g, st.args)
    return st.default


def flow_schedule(Graph g not None, dict args):
    """The schedule a run with control flow uses for g: its default one; else, for a sub-graph
    of a scheduled graph, one built with the parent's ``args`` (made its default, as
    static_schedule would have); else (``args`` None) a private one-stream schedule."""
    cdef ScheduleState st = schedule_state(g)
    if st.default is not None:
        return graph_schedule(g)
    if args is not None:
        st.default = _build(g, args)
        st.args = args
        return st.default
    if st.flow is None or not _current(g, st.flow):
        st.flow = _build(g, dict(stream_type="cpu", max_streams=1, policy="rank", costs=None))
    return st.flow


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
        self.stream_kinds = ("cpu",)
        self.signal_kinds = ()

    def __init__(self):
        raise TypeError("schedules are made by nnc.static_schedule or Schedule.from_tables")

    cdef int _alloc(self, int node_count, int order_size, int wait_size, list entry,
                    list exits, list entry_first=None, list head_exits=None) except -1:
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
        self.entry_first = mem.ints(self.entry_size, 0)
        for k in range(self.entry_size if entry_first is not None else 0):
            self.entry_first[k] = entry_first[k]
        head_exits = head_exits or []
        self.head_exit_size = len(head_exits)
        self.head_exit_waits = mem.ints(self.head_exit_size, -1)
        for k in range(self.head_exit_size):
            self.head_exit_waits[k] = head_exits[k]
        self.split = order_size
        self.loop_key = -1
        return 0

    cdef int _bind(self, Graph g) except -1:
        # Weakly: the graph holds this schedule (and its runtime of streams); a strong
        # reference back made a cycle that kept dropped graphs' worker threads alive until
        # the garbage collector ran.
        self._graph = weakref.ref(g)
        return 0

    cdef Graph graph_ref(self):
        cdef object g = None if self._graph is None else self._graph()
        if g is None:
            raise ScheduleError("the graph of this schedule was freed (a schedule holds its "
                                "graph weakly: keep a reference to the graph)")
        return <Graph>g

    cdef int _index(self, e) except -1:
        if not isinstance(e, GraphExec) or (<GraphExec>e).graph is not self.graph_ref():
            raise GraphError(f"expected a GraphExec of the scheduled graph, not {e!r}")
        return (<GraphExec>e).index

    # -- introspection -------------------------------------------------------------------------

    @property
    def graph(self):
        """The Graph this schedule was built for, or None once it was freed: the graph owns
        its schedule, and the schedule refers back to it only weakly."""
        return None if self._graph is None else self._graph()

    @property
    def order(self):
        """The nodes that run, in the order they are enqueued (a topological order)."""
        cdef Graph g = self.graph_ref()
        return tuple(GraphExec._new(g, self.order[k]) for k in range(self.order_size))

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
    def partial(self):
        """True for a schedule of part of the graph (made with sources or destinations)."""
        return self._sources is not None

    @property
    def sources(self):
        """A partial schedule's sources (GraphExecs); None for a schedule of the graph's run."""
        cdef Graph g
        if self._sources is None:
            return None
        g = self.graph_ref()
        return tuple(GraphExec._new(g, i) for i in self._sources)

    @property
    def destinations(self):
        """A partial schedule's destinations (GraphExecs); None for one of the graph's run."""
        cdef Graph g
        if self._destinations is None:
            return None
        g = self.graph_ref()
        return tuple(GraphExec._new(g, i) for i in self._destinations)

    @property
    def stale(self):
        """True once the graph has changed since this schedule was built (or was freed)."""
        g = self.graph
        return g is None or (<Graph>g).version != self.version

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
        cdef Graph g = self.graph_ref()
        return tuple(GraphExec._new(g, self.order[k]) for k in range(self.order_size)
                     if self.stream[self.order[k]] == stream)

    def __repr__(self):
        stale = ", stale" if self.stale else ""
        part = "partial, " if self._sources is not None else ""
        return (f"<nnc.Schedule {part}{self.order_size} nodes, {self.stream_count} streams, "
                f"{self.signal_count} signals, {self.stream_type}{stale}>")

    def __reduce__(self):
        raise TypeError("an nnc.Schedule cannot be copied or pickled: it belongs to its live "
                        "graph; schedule the rebuilt graph again with nnc.static_schedule")

    # -- by hand: tables in and out ------------------------------------------------------------

    def tables(self):
        """This schedule as plain tables, which :meth:`from_tables` turns back into one."""
        cdef int k, i, w
        cdef Graph g = self.graph_ref()
        streams, signals, waits = {}, {}, {}
        for k in range(self.order_size):
            i = self.order[k]
            e = GraphExec._new(g, i)
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
        c._bind(g)
        c.version, c.stream_type = g.version, stream_type
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
        kind = "cpu" if stream_type == "cpu" else f"gpu:{parse_device(stream_type)}"
        c.stream_kinds = (kind,) * c.stream_count
        c.signal_kinds = (kind,) * c.signal_count
        return c

    # -- simulation ----------------------------------------------------------------------------

    def simulate(self, costs, *, cores=None, streams_overlap=True, signal_cost=0.0,
                 launch_cost=0.0):
        """Simulate one run of this schedule with per-node ``costs`` (seconds); returns a
        SimResult (makespan, start / finish per node, busy time per stream, critical path,
        ``trace(path)``). ``costs``: a mapping {GraphExec or node index: s}, a
        callable(GraphExec) -> s, a sequence by node index, or "profile" (graph.profile()).
        ``cores``: nodes that may run at once (None: no limit); ``streams_overlap=False``:
        one node at a time, in enqueue order; ``signal_cost`` / ``launch_cost``: host seconds
        per wait / per node enqueued. The model: docs/schedule.md, "Simulator"."""
        from nnc.schedule.simulate import schedule_simulate

        return schedule_simulate(self, costs, cores=cores, streams_overlap=streams_overlap,
                                 signal_cost=signal_cost, launch_cost=launch_cost)

    # -- verification --------------------------------------------------------------------------

    def verify(self, hazards=False):
        """Raise ScheduleError unless the schedule enforces every edge of the graph's run.

        Schedule-independent (RAF's verifier): an edge u -> v is enforced when u comes before
        v on one stream, or a path leads from u to v through stream order (consecutive nodes of
        a stream) and signals (emitter -> each later waiter). Also checked: every node has a
        stream, indices are in range, each signal has one emitter, every node is ordered after
        the run's begin (stream 0 or an entry stream), and stream 0 ends after every stream.

        ``hazards=True`` also raises for data hazards of the graph (nnc.graph_hazards): nodes
        with no path between them that touch overlapping memory, one writing. The schedule
        orders only what the edges order, so such a pair races on streams.
        """
        from nnc.schedule.verify import schedule_verify

        schedule_verify(self)
        if hazards:
            from nnc.schedule.hazard import graph_hazards, hazards_message

            g = self.graph_ref()
            found = graph_hazards(g)
            if found:
                raise ScheduleError(hazards_message(g, found))


register_scheduler(graph_schedule)     # Graph.schedule (the graph layer cannot import this one)
