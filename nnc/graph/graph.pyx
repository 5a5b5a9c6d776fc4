"""Concrete graphs: nodes holding a command and its tensors, explicit edges, sequential runs.

NNC: ccv_nnc_graph.c (building, topological order), ccv_nnc_graph_run.c (the node loop).

State (see graph.pxd for the field invariants): nodes are C structs in one growable array and
keep their index for the graph's life (NNC's topsort renumbers nodes; we keep a separate run
order instead, so ``GraphExec`` handles never go stale). Edges are per-node successor arrays.
The run order is recomputed only after a change (``_dirty``): a global Kahn pass rejects cycles,
then the nodes on a path from a source to a destination are ordered topologically. A run walks
that C array and, per node, calls a C backend or, for Python-implemented commands, one cached
Python callable with cached argument lists: repeated runs allocate nothing.

One file of ~800 lines because it is one cdef class (with its node handle): Cython keeps a class's
methods in its module, and the layers above already hold what is not the graph itself (while and
case..of in while_node / case_of, schedules, runs on streams, tools), registered as its methods.
"""

from cpython.pythread cimport PyThread_get_thread_ident
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memset

from collections import namedtuple

from nnc.base.core import STATUS_NAMES as _STATUS_NAMES
from nnc.base.core import CommandError, GraphError, NNCError, ScheduleError, error_repr
from nnc.tensor.multiview import register_anchor_type

from nnc.cmd.command cimport (
    BOUND_NONE, BOUND_PY, Backend, Cmd, cmd_bind, cmd_bound_run, cmd_select, cmd_validate,
    nnc_bound_t, tensor_list, tensors_movable,
)
from nnc.base.debug cimport DEBUG_GRAPHS, debug_count
from nnc.base.parallel cimport (
    nnc_context_free, parallel_ready, parallel_run_begin, parallel_run_end,
    parallel_stream_run_end,
)
from nnc.tensor.tensor cimport Tensor, tensor_movable_epoch
from nnc.base.trace_switch cimport trace_host, trace_now, trace_on
from nnc.stream.stream cimport Stream
from nnc.graph.order cimport order_all, order_mark_reached, order_mark_reaching


# -- entry points of the layers above (docs/design.md, "Registries") ---------------------------
# Graph's methods for loops and branches, schedules, runs on streams and tools are implemented
# by higher layers, which this module must not import. Each registers its functions here when
# it is imported; nnc/__init__ imports every layer, so after ``import nnc`` all are filled.
cdef object _while = None               # nnc.graph.while_node: a _WhileEntries
cdef object _case_of = None             # nnc.graph.case_of: a _CaseOfEntries
cdef object _scheduler = None           # nnc.schedule.schedule: graph_schedule(g) -> Schedule|None
cdef object _runner = None              # nnc.run.run: graph_run_on_stream(g, stream, schedule)
cdef object _tools = None               # nnc.run.tools: a _ToolEntries
cdef object _freeze = None              # nnc.graph.freeze: a _FreezeEntries


# What nnc.graph.while_node, nnc.graph.case_of and nnc.run.tools implement for Graph (fields
# named as the methods).
_WhileEntries = namedtuple("_WhileEntries", [
    "while_", "set_while_expr", "add_carry_over", "while_count", "count_tensor"])
_CaseOfEntries = namedtuple("_CaseOfEntries", ["case_of", "set_case_of_expr", "set_case_of"])
_ToolEntries = namedtuple("_ToolEntries", ["profile", "autotune", "dot", "simplify"])
_FreezeEntries = namedtuple("_FreezeEntries", ["freeze", "memory"])


def register_while(**entries):
    """nnc.graph.while_node's entry points (keyword arguments named as _WhileEntries' slots)."""
    global _while
    _while = _WhileEntries(**entries)


def register_case_of(**entries):
    """nnc.graph.case_of's entry points (keyword arguments named as _CaseOfEntries' slots)."""
    global _case_of
    _case_of = _CaseOfEntries(**entries)


def register_scheduler(graph_schedule):
    """nnc.schedule.schedule's ``graph_schedule(g)``: the default schedule, or None."""
    global _scheduler
    _scheduler = graph_schedule


def register_runner(run_on_stream):
    """nnc.run.run's ``graph_run_on_stream(g, stream, schedule=None)``."""
    global _runner
    _runner = run_on_stream


def register_tools(profile, autotune, dot, simplify):
    """nnc.run.tools' ``graph_profile``, ``graph_autotune``, ``graph_dot``, ``graph_simplify``."""
    global _tools
    _tools = _ToolEntries(profile, autotune, dot, simplify)


def register_freeze(**entries):
    """nnc.graph.freeze's entry points (keyword arguments named as _FreezeEntries' slots)."""
    global _freeze
    _freeze = _FreezeEntries(**entries)


cdef bint _any_readonly(tuple tensors) except -1:
    cdef object t
    for t in tensors:
        if t is not None and (<Tensor>t).readonly:
            return True
    return False


cdef object _needs(object entry, str module):
    if entry is None:
        raise GraphError(f"this needs {module}, which is not loaded; import nnc (it loads "
                         "every layer)")
    return entry


cdef class GraphExec:
    """A handle to one node of a graph (NNC: ccv_nnc_graph_exec_t)."""

    def __init__(self):
        raise TypeError("graph nodes are made by Graph.exec")

    @staticmethod
    cdef GraphExec _new(Graph graph, int index):
        cdef GraphExec e = GraphExec.__new__(GraphExec)
        e.graph = graph
        e.index = index
        return e

    @property
    def cmd(self):
        return self.graph._cmds[self.index]

    @property
    def name(self):
        return self.graph._names[self.index]

    @property
    def inputs(self):
        return list(self.graph._inputs[self.index])

    @property
    def outputs(self):
        return list(self.graph._outputs[self.index])

    @property
    def backend(self):
        return (<Cmd>self.graph._cmds[self.index]).backend

    @backend.setter
    def backend(self, name):
        """Pin this node to backend ``name``; it must accept the node's tensors."""
        cdef Graph g = self.graph
        cdef Cmd old = g._cmds[self.index], cmd
        for b in old.info.backends:
            if b.name == name:
                break
        else:
            raise CommandError(f"{old.name} has no backend {name!r}")
        cmd = old.copy_with(b)
        cmd.pinned = True
        g._enter("change a backend", "being changed")
        try:
            g._set_node(self.index, cmd, list(g._inputs[self.index]),
                        list(g._outputs[self.index]))
        finally:
            g._leave()

    def set_io(self, inputs=(), outputs=()):
        """Replace this node's tensors; the backend is chosen again for them.

        NNC: ccv_nnc_graph_exec_set_io.
        """
        cdef Graph g = self.graph
        cmd = <Cmd>g._cmds[self.index]
        if cmd.info.control:
            raise GraphError(f"the tensors of {cmd.name} node {self!r} are fixed")
        ins = tensor_list(inputs, "inputs")
        outs = tensor_list(outputs, "outputs")
        g._enter("change a node", "being changed")
        try:
            g._set_node(self.index, cmd, ins, outs)
            g.version += 1
            g._dirty = True
        finally:
            g._leave()

    @property
    def outgoings(self):
        cdef exec_info_t* node = &self.graph._nodes[self.index]
        return [GraphExec._new(self.graph, node.outgoings[i]) for i in range(node.outgoing_size)]

    def __eq__(self, other):
        if not isinstance(other, GraphExec):
            return NotImplemented
        return self.graph is (<GraphExec>other).graph and self.index == (<GraphExec>other).index

    def __hash__(self):
        return hash((id(self.graph), self.index))

    def __repr__(self):
        return f"<GraphExec {self.graph._label(self.index)}>"

    def __reduce__(self):
        raise TypeError("an nnc.GraphExec cannot be copied or pickled: it is a handle to a "
                        "node of a live graph, which cannot be pickled either")


cdef class Graph:
    """A concrete graph (NNC: ccv_nnc_graph_t). Build with exec/concat, then run()."""

    def __cinit__(self):
        self._nodes = NULL
        self._size = self._cap = 0
        self._io = NULL
        self._io_size = self._io_cap = 0
        self._cmds = []
        self._inputs = []
        self._outputs = []
        self._names = []
        self._py_calls = []
        self._sources = None
        self._destinations = None
        self._order = NULL
        self._order_size = 0
        self._dirty = True
        self.version = 0
        self._sched_state = None
        self._run_state = None
        self._inflight = 0
        self._inflight_stream = None
        debug_count(DEBUG_GRAPHS, 1)
        self._busy = None
        self._busy_thread = 0
        self._retired = []

    def __dealloc__(self):
        cdef int i
        debug_count(DEBUG_GRAPHS, -1)
        if self._nodes != NULL:
            for i in range(self._size):
                free(self._nodes[i].outgoings)
            free(self._nodes)
        free(self._io)
        free(self._order)
        nnc_context_free(&self._context)

    def _label(self, int idx):
        name = self._names[idx]
        cmd = (<Cmd>self._cmds[idx]).name
        return f"#{idx} {cmd}" if name is None else f"#{idx} {name} ({cmd})"

    cdef int _check_idle(self, str what, object stream=None) except -1:
        """Raise GraphError if this graph or a graph enclosing it (sub-graphs run as part of
        their parent's runs and borrow their arrays likewise) is in use: running on a stream,
        or in a call on some thread. With ``stream``, this graph's own runs on that stream do
        not count (runs submitted to one stream complete in order)."""
        cdef Graph g = self
        while g is not None:
            if g._busy is None and not g._inflight:
                g = g._control_parent
                continue
            whose = "the graph" if g is self else f"its enclosing graph {g!r}"
            if g._busy is not None:
                if g._busy_thread == PyThread_get_thread_ident():
                    raise GraphError(
                        f"cannot {what} while {whose} is {g._busy} on this thread: code that "
                        "nnc calls meanwhile (a command, a costs function) cannot change or run "
                        "that graph"
                    )
                raise GraphError(
                    f"cannot {what} while {whose} is {g._busy} on another thread; a graph is "
                    "used by one thread at a time (docs/threading.md)"
                )
            if g is not self or stream is None:
                raise GraphError(f"cannot {what} while {whose} runs on "
                                 f"{g._inflight_stream!r}; wait for that stream first")
            if g._inflight_stream is not stream:
                raise GraphError(
                    f"the graph is already running on {g._inflight_stream!r}; runs of one "
                    "graph must be submitted to one stream (or wait for it first)"
                )
            g = g._control_parent
        return 0

    cdef int _enter(self, str what, str doing, object stream=None) except -1:
        """_check_idle, then mark the graph busy ``doing`` until _leave (always paired, in a
        finally). Check and mark happen under the GIL with no Python code between them."""
        self._check_idle(what, stream)
        self._busy = doing
        self._busy_thread = PyThread_get_thread_ident()
        return 0

    cdef int _leave(self) except -1:
        self._busy = None
        self._busy_thread = 0
        if not self._inflight and self._retired:
            self._retired = []
        return 0

    cdef int _retire(self, object old) except -1:
        """Keep ``old`` (what a node's C struct pointed at) alive while a run may borrow it:
        queued tasks of this graph's or an enclosing graph's runs, or a run on this thread."""
        cdef Graph g = self, owner = None
        while g is not None:
            if g._inflight or g._busy is not None:
                owner = g
            g = g._control_parent
        if owner is not None:
            owner._retired.append(old)
        return 0

    cdef int _prepare(self) except -1:
        """Compile if needed; re-check nodes whose tensors became movable or were frozen
        (rebuilding their Python calls, which hold ndarrays of the memory a tensor left, and
        refusing outputs now read-only or that a loop may point at read-only memory)."""
        cdef int i
        if self._dirty:
            self._compile()
        if self._epoch != tensor_movable_epoch():
            for i in range(self._size):
                if (tensors_movable(list(self._inputs[i] + self._outputs[i]))
                        or _any_readonly(self._inputs[i]) or _any_readonly(self._outputs[i])):
                    self._set_node(i, self._cmds[i], list(self._inputs[i]),
                                   list(self._outputs[i]))
            self._epoch = tensor_movable_epoch()
        return 0

    def _run_finished(self):
        """Called on the stream once an asynchronous run has completed."""
        if self._spin_runs > 0:
            self._spin_runs -= 1
            parallel_stream_run_end()
        self._inflight -= 1
        if self._inflight == 0:
            self._inflight_stream = None
            if self._busy is None and self._retired:
                self._retired = []

    cdef int _check_exec(self, object e) except -1:
        if not isinstance(e, GraphExec):
            raise GraphError(f"expected a GraphExec of this graph, not {type(e).__name__}")
        if (<GraphExec>e).graph is not self:
            raise GraphError(f"{e!r} belongs to another graph")
        return (<GraphExec>e).index

    cdef int _set_node(self, int idx, object cmd_obj, list inputs, list outputs) except -1:
        """Validate, choose the backend and fill node idx's C struct and cached Python call."""
        cdef Cmd cmd = cmd_obj
        cdef Backend b
        cdef exec_info_t* node = &self._nodes[idx]
        cdef int n = len(inputs) + len(outputs), i
        cmd_validate(cmd, inputs, outputs)
        b = cmd._backend
        # A backend already chosen for this command (by autotune, or a node's own Cmd reused)
        # stays if it accepts these tensors; pinned ones are verified by cmd_select.
        if b is None or cmd.pinned or not b.accepts(cmd, inputs, outputs):
            b = cmd_select(cmd, inputs, outputs)
        cmd = cmd.copy_with(b)
        # Reuse the node's tensor slots when the count matches, else append new ones.
        if not (idx < len(self._inputs) and
                node.bound.input_size + node.bound.output_size == n):
            if self._io_size + n > self._io_cap:
                cap = max(16, self._io_cap * 2, self._io_size + n)
                io = <nnc_tensor_t**>realloc(self._io, sizeof(nnc_tensor_t*) * cap)
                if io == NULL:
                    raise MemoryError()
                self._io = io
                self._io_cap = cap
                for i in range(self._size):    # the slots moved: re-point every bound node
                    if i != idx:
                        self._nodes[i].bound.io = self._io + self._nodes[i].io_offset
            node.io_offset = self._io_size
            self._io_size += n
        call = cmd_bind(cmd, b, inputs, outputs, self._io + node.io_offset, &node.bound)
        node.flags = EXEC_CONTROL if cmd.info.control else 0
        if idx < len(self._cmds):
            # Queued tasks may borrow the old param, call and tensors (a run re-preparing a
            # node while earlier runs are queued): they stay alive until those runs end.
            self._retire((self._cmds[idx], self._py_calls[idx], self._inputs[idx],
                          self._outputs[idx]))
            self._cmds[idx] = cmd
            self._inputs[idx] = tuple(inputs)
            self._outputs[idx] = tuple(outputs)
            self._py_calls[idx] = call
        else:
            self._cmds.append(cmd)
            self._inputs.append(tuple(inputs))
            self._outputs.append(tuple(outputs))
            self._py_calls.append(call)
        return 0

    def exec(self, cmd, inputs=(), outputs=(), name=None):
        """Add a node running ``cmd`` on ``inputs`` -> ``outputs``; returns its GraphExec.

        Shapes, dtypes and aliasing are checked now and the backend is chosen now (the pinned
        one, or the default for these tensors), so a run never fails on a malformed node.
        NNC: ccv_nnc_graph_exec_new.
        """
        if isinstance(cmd, Cmd) and (<Cmd>cmd).info.control:
            raise GraphError(f"{cmd.name} nodes are made with Graph.while_ and Graph.case_of")
        return self._exec_control(cmd, inputs, outputs, name)

    def _exec_control(self, cmd, inputs=(), outputs=(), name=None):
        """Graph.exec without the refusal of WHILE/CASE_OF (while_node and case_of use it)."""
        if not isinstance(cmd, Cmd):
            raise CommandError(f"Graph.exec needs an nnc.Cmd, not {type(cmd).__name__}")
        ins = tensor_list(inputs, "inputs")
        outs = tensor_list(outputs, "outputs")
        cdef int idx
        cdef exec_info_t* nodes
        # Busy while _set_node validates (Python code: another thread may get the GIL) and
        # reallocates _nodes and _io, which a run on another thread would be reading.
        self._enter("add a node", "being changed")
        try:
            idx = self._size
            if self._size == self._cap:
                cap = max(16, self._cap * 2)
                nodes = <exec_info_t*>realloc(self._nodes, sizeof(exec_info_t) * cap)
                if nodes == NULL:
                    raise MemoryError()
                self._nodes = nodes
                self._cap = cap
            memset(&self._nodes[idx], 0, sizeof(exec_info_t))
            self._set_node(idx, cmd, ins, outs)
            self._names.append(None if name is None else str(name))
            self._size += 1
            self._dirty = True
            self.version += 1
        finally:
            self._leave()
        return GraphExec._new(self, idx)

    def concat(self, a, b):
        """Make ``a`` run before ``b``. Returns False if the edge already existed.

        NNC: ccv_nnc_graph_exec_concat.
        """
        cdef int i = self._check_exec(a), j = self._check_exec(b)
        self._check_idle("add an edge")
        if i == j:
            raise GraphError(f"cannot make {a!r} depend on itself")
        return self._edge_add(i, j) == 1

    cdef int _edge_add(self, int i, int j) except -1:
        cdef exec_info_t* node = &self._nodes[i]
        cdef int* grown
        cdef int k
        for k in range(node.outgoing_size):
            if node.outgoings[k] == j:
                return 0
        if node.outgoing_size == node.outgoing_cap:
            cap = max(4, node.outgoing_cap * 2)
            grown = <int*>realloc(node.outgoings, sizeof(int) * cap)
            if grown == NULL:
                raise MemoryError()
            node.outgoings = grown
            node.outgoing_cap = cap
        node.outgoings[node.outgoing_size] = j
        node.outgoing_size += 1
        self._dirty = True
        self.version += 1
        return 1

    def disjoin(self, a, b):
        """Remove the edge ``a -> b``; GraphError if there is none. NNC: ..._exec_disjoin."""
        cdef int i = self._check_exec(a), j = self._check_exec(b), k
        cdef exec_info_t* node = &self._nodes[i]
        self._check_idle("remove an edge")
        for k in range(node.outgoing_size):
            if node.outgoings[k] == j:
                node.outgoings[k] = node.outgoings[node.outgoing_size - 1]
                node.outgoing_size -= 1
                self._dirty = True
                self.version += 1
                return
        raise GraphError(f"there is no edge {a!r} -> {b!r} to disjoin")

    def _ends(self, value, what):
        if value is None:
            return None
        if isinstance(value, GraphExec):
            value = [value]
        idx = []
        for e in value:
            i = self._check_exec(e)
            if i not in idx:
                idx.append(i)
        if not idx:
            raise GraphError(f"{what} must name at least one node (or be None for the default)")
        return idx

    def _default_ends(self, bint sources):
        cdef int i, k
        cdef list ends = []
        cdef char* has = <char*>malloc(self._size + 1)
        if has == NULL:
            raise MemoryError()
        memset(has, 0, self._size + 1)
        for i in range(self._size):
            if sources:
                for k in range(self._nodes[i].outgoing_size):
                    has[self._nodes[i].outgoings[k]] = 1
            elif self._nodes[i].outgoing_size:
                has[i] = 1
        ends = [i for i in range(self._size) if not has[i]]
        free(has)
        return ends

    @property
    def sources(self):
        """Nodes a run starts from: set explicitly, or those without incoming edges."""
        idx = self._sources if self._sources is not None else self._default_ends(True)
        return [GraphExec._new(self, i) for i in idx]

    @sources.setter
    def sources(self, value):
        self._check_idle("change the sources")
        self._sources = self._ends(value, "sources")
        self._dirty = True
        self.version += 1

    @property
    def destinations(self):
        """Nodes a run ends at: set explicitly, or those without outgoing edges."""
        idx = self._destinations if self._destinations is not None else self._default_ends(False)
        return [GraphExec._new(self, i) for i in idx]

    @destinations.setter
    def destinations(self, value):
        self._check_idle("change the destinations")
        self._destinations = self._ends(value, "destinations")
        self._dirty = True
        self.version += 1

    cdef str _cycle(self, const int* indegree):
        """Name one cycle among the nodes a Kahn pass could not order (indegree > 0)."""
        cdef int i, start = -1
        for i in range(self._size):
            if indegree[i] > 0:
                start = i
                break
        seen = {}
        path = []
        i = start
        while i not in seen:
            seen[i] = len(path)
            path.append(i)
            for k in range(self._nodes[i].outgoing_size):
                j = self._nodes[i].outgoings[k]
                if indegree[j] > 0:
                    i = j
                    break
        cycle = path[seen[i]:] + [i]
        return " -> ".join(self._label(n) for n in cycle)

    cdef int _compile(self) except -1:
        """Recompute the run order; raise GraphError for cycles or unreachable destinations."""
        cdef int n = self._size, i, head = 0, tail = 0
        cdef int* indegree = <int*>malloc(sizeof(int) * (n + 1))
        cdef int* queue = <int*>malloc(sizeof(int) * (n + 1))
        cdef char* mark = <char*>malloc(n + 1)
        cdef int* order
        try:
            if indegree == NULL or queue == NULL or mark == NULL:
                raise MemoryError()
            # 1. Kahn over the whole graph: any node left unordered lies on or behind a cycle.
            tail = order_all(self._nodes, n, indegree, queue)
            if tail < n:
                raise GraphError(f"graph has a cycle: {self._cycle(indegree)}")
            # queue[0:n] is now a topological order of all nodes.
            srcs = self._sources if self._sources is not None else self._default_ends(True)
            dsts = (self._destinations if self._destinations is not None
                    else self._default_ends(False))
            # 2. Forward reachability from the sources, in topological order (bit 1).
            memset(mark, 0, n + 1)
            for i in srcs:
                mark[i] = 1
            order_mark_reached(self._nodes, n, queue, mark)
            missing = [i for i in dsts if not mark[i] & 1]
            if missing:
                names = ", ".join(self._label(i) for i in missing)
                raise GraphError(f"destinations not reachable from the sources: {names}")
            # 3. Backward reachability from the destinations, in reverse order (bit 2).
            for i in dsts:
                mark[i] |= 2
            order_mark_reaching(self._nodes, n, queue, mark)
            # 4. The run order: the topological order restricted to nodes on a path.
            order = <int*>realloc(self._order, sizeof(int) * (n + 1))
            if order == NULL:
                raise MemoryError()
            self._order = order
            self._order_size = 0
            for head in range(n):
                i = queue[head]
                if mark[i] == 3:
                    order[self._order_size] = i
                    self._order_size += 1
            self._dirty = False
        finally:
            free(indegree)
            free(queue)
            free(mark)
        return 0

    def topsort(self):
        """The nodes a run visits, in the order it visits them (NNC: ccv_nnc_graph_topsort)."""
        if self._dirty:
            self._compile()
        return [GraphExec._new(self, self._order[i]) for i in range(self._order_size)]

    cdef int _fail_c(self, int idx, int rc) except -1:
        cmd = <Cmd>self._cmds[idx]
        raise CommandError(
            f"node {self._label(idx)}: backend {cmd.backend} failed: {_STATUS_NAMES.get(rc, rc)}"
        )

    cdef int _run_node(self, int idx) except -1:
        cdef const nnc_bound_t* b = &self._nodes[idx].bound
        cdef int rc
        if b.kind == BOUND_PY:
            return self._run_py_node(idx)
        rc = cmd_bound_run(b, &self._context)   # C work (or NOOP): no Python, no try
        if rc != 0:
            self._fail_c(idx, rc)
        return 0

    cdef int _run_py_node(self, int idx) except -1:
        """A Python node: its failure becomes a CommandError naming the node."""
        try:
            cmd_bound_run(&self._nodes[idx].bound, &self._context)
        except NNCError:
            raise
        except Exception as e:
            raise CommandError(f"node {self._label(idx)} failed: {error_repr(e)}") from e
        return 0

    cdef int _run_order(self) except -1:
        cdef int k
        if trace_on:                    # one check per run, none per node (nnc.trace)
            return self._run_order_traced()
        for k in range(self._order_size):
            self._run_node(self._order[k])
        return 0

    cdef int _run_order_traced(self) except -1:
        """_run_order inside a "Graph.run" slice of the calling thread's track."""
        cdef double t0 = trace_now()
        cdef int k
        try:
            for k in range(self._order_size):
                self._run_node_traced(self._order[k])
        finally:
            trace_host("Graph.run", "run", t0, trace_now(), {"nodes": self._order_size})
        return 0

    cdef int _run_node_traced(self, int idx) except -1:
        """_run_node inside a slice named after the node (NOOPs get none, as on streams)."""
        cdef double t0
        if self._nodes[idx].bound.kind == BOUND_NONE:
            return 0
        t0 = trace_now()
        try:
            self._run_node(idx)
        finally:
            trace_host(self._label(idx), "cmd", t0, trace_now(), {"node": idx})
        return 0

    def run(self, stream=None, schedule=None):
        """Run every node on a source-to-destination path once, in topological order.

        Without a stream: now, on the calling thread. With ``stream=s``: enqueue the run and
        return at once; ``s.wait()`` joins it. With a default schedule (``static_schedule``)
        the nodes go to the schedule's streams, joined to ``s`` by signals at begin and end;
        without one, every node runs on ``s``. A GPU stream runs a ``stream_type="gpu"``
        schedule the same way (docs/gpu.md). NNC: ccv_nnc_graph_run.

        ``schedule=sched`` (with a stream) runs the nodes of that schedule of this graph
        instead: a partial one (``static_schedule(g, sources=..., destinations=...)``) runs
        only its part. ScheduleError without a stream, for another graph's schedule and for a
        stale one. NNC: ccv_nnc_graph_run_with_schedule.
        """
        if schedule is not None:
            self._run_on_stream(stream, schedule)
            return
        if stream is not None:
            self._run_on_stream(stream)
            return
        # Busy for the whole run: C backends and Python commands let other threads in.
        cdef bint counted = False
        self._enter("run it synchronously", "running")
        try:
            self._prepare()
            parallel_ready()            # idle pool threads may take parts of big commands
            counted = parallel_run_begin()
            self._run_order()
        finally:
            parallel_run_end(counted)
            self._leave()

    def run_with_schedule(self, schedule, stream=None):
        """Enqueue a run of ``schedule``'s nodes (a partial or the default schedule of this
        graph) on ``stream``: ``run(stream=stream, schedule=schedule)``.
        NNC: ccv_nnc_graph_run_with_schedule."""
        if schedule is None:
            raise ScheduleError("run_with_schedule needs a schedule of this graph, not None")
        self._run_on_stream(stream, schedule)

    cdef int _run_on_stream(self, object stream, object schedule=None) except -1:
        """run(stream=...): the graph's own part (its guard, compile and bind) here, around
        the registered runner (nnc.run.run), which enqueues and calls back into nothing of this
        module."""
        runner = _needs(_runner, "nnc.run.run")
        if schedule is not None:
            if stream is None:
                raise ScheduleError(
                    "a run with a schedule needs a stream (the schedule says which streams "
                    "its nodes run on): g.run(stream=s, schedule=sched), then s.wait()")
        if not isinstance(stream, Stream):
            raise GraphError(f"run(stream=...) needs an nnc.Stream, not {type(stream).__name__}")
        # Busy while enqueueing: _prepare and the runner's control-flow checks run Python code,
        # so another thread could otherwise change or run the graph meanwhile. Earlier runs on
        # this stream may still be queued: whatever _prepare replaces, they keep (_retire).
        self._enter("run it", "enqueueing a run", stream)
        try:
            self._prepare()
            if schedule is None:
                runner(self, stream)
            else:
                runner(self, stream, schedule)
        finally:
            self._leave()
        return 0

    def profile(self, repeat=1):
        """Run like ``run()`` ``repeat`` times, timing each node; returns [(GraphExec, best s)]."""
        return _needs(_tools, "nnc.run.tools").profile(self, repeat)

    def autotune(self, trials=3):
        """Time each node's compatible backends on scratch copies (best of ``trials``) and keep
        the fastest. Nodes with a pinned backend keep it. NNC: ccv_nnc_graph_autotune."""
        return _needs(_tools, "nnc.run.tools").autotune(self, trials)

    def simplify(self):
        """Fold into each CONVOLUTION the in-place epilogue its only successor applies: an ADD
        of a tensor of the output's shape (the residual), then a RELU, CLAMP, HARD_SWISH or
        SWISH (the activation); folded nodes become NOOPs (edges kept; an ADD's other
        predecessors become the convolution's). Returns how many nodes were folded. Call it before
        ``nnc.static_schedule`` (it changes edges). NNC: CCV_NNC_SIMPLIFY_OPS_FUSION."""
        return _needs(_tools, "nnc.run.tools").simplify(self)

    # -- constant weights (nnc/graph/freeze.pyx) ------------------------------------------------

    def freeze(self, tensors=None):
        """Make weights constant, so kernels may keep packed copies of them: move ``tensors``
        (by default every tensor a CONVOLUTION or GEMM node reads as its weight or bias that no
        node writes, in sub-graphs too) into frozen memory (:meth:`nnc.Tensor.freeze`), and
        re-bind every node reading them. Returns the tensors frozen (those already frozen are
        not listed). GraphError for a tensor a node writes (or a loop may re-point), and while
        the graph runs. See docs/design.md, "Constant weights"."""
        return _needs(_freeze, "nnc.graph.freeze").freeze(self, tensors)

    def memory(self):
        """What the graph's constant weights cost: ``{"frozen_bytes": ..., "packed_bytes": ...,
        "frozen_blocks": ...}``, the frozen memory its tensors (sub-graphs' too) lie in, each
        block counted once, and the packed copies kernels keep of it."""
        return _needs(_freeze, "nnc.graph.freeze").memory(self)

    # -- while and case..of (nnc/graph/while_node.pyx, nnc/graph/case_of.pyx) -----------------

    def while_(self, body, name=None):
        """Add a node that runs ``body`` as a loop (NNC: ccv_nnc_graph_while)."""
        self._check_idle("add a node")
        return _needs(_while, "nnc.graph.while_node").while_(self, body, name)

    def set_while_expr(self, expr, inputs=(), breakpoints=()):
        """On a loop body: ``expr(count, *arrays)`` is evaluated after the breakpoints ran;
        falsy ends the loop. ``expr`` may be an :class:`nnc.Compare` instead (of the count or
        of an input's one element), which a CUDA-graph capture can evaluate on the device.
        NNC: ccv_nnc_graph_set_while_expr."""
        self._check_idle("change the loop expression")
        _needs(_while, "nnc.graph.while_node").set_while_expr(self, expr, inputs, breakpoints)

    def add_carry_over(self, src, dst):
        """On a loop body: from the second iteration on, ``dst`` aliases the memory ``src``
        held at the end of the previous one. NNC: ccv_nnc_graph_add_carry_over."""
        self._check_idle("add a carry-over")
        _needs(_while, "nnc.graph.while_node").add_carry_over(self, src, dst)

    @property
    def while_count(self):
        """On a loop body: the count at which the last run of the loop ended."""
        return _needs(_while, "nnc.graph.while_node").while_count(self)

    @property
    def count_tensor(self):
        """On a loop body: an int64 [1] tensor holding the loop count (for expressions of
        nested loops). NNC: ccv_nnc_tensor_for_while_count."""
        return _needs(_while, "nnc.graph.while_node").count_tensor(self)

    def case_of(self, inputs=(), outputs=(), name=None):
        """Add a node that runs one of several branch graphs, chosen by an expression on
        ``inputs`` (NNC: ccv_nnc_graph_case_of_new)."""
        self._check_idle("add a node")
        return _needs(_case_of, "nnc.graph.case_of").case_of(self, inputs, outputs, name)

    def set_case_of_expr(self, e, expr, offset=0):
        """``index = offset + expr(*arrays)`` picks the branch; < 0 runs none. ``expr`` may be
        an :class:`nnc.Compare` instead (1 when it holds, else 0)."""
        self._check_idle("change a case..of expression")
        _needs(_case_of, "nnc.graph.case_of").set_case_of_expr(self, e, expr, offset)

    def set_case_of(self, e, branch, index):
        """Make ``branch`` (a Graph) the branch ``index`` of case..of node ``e``."""
        self._check_idle("change a branch")
        _needs(_case_of, "nnc.graph.case_of").set_case_of(self, e, branch, index)

    @property
    def schedule(self):
        """The default schedule (set by nnc.static_schedule), rebuilt with the same arguments
        if the graph changed since; None if the graph has none."""
        if self._sched_state is None:
            return None
        return _needs(_scheduler, "nnc.schedule.schedule")(self)

    @property
    def execs(self):
        """All nodes, in creation order."""
        return [GraphExec._new(self, i) for i in range(self._size)]

    def __len__(self):
        return self._size

    def named_tensors(self):
        """{name: tensor}: the tensors of the nodes given a name, as ``"<node>.inputs[k]"`` and
        ``"<node>.outputs[k]"`` (absent ones skipped). NNC's concrete graph names no tensors; this
        is what write_tensors / read_tensors keep, as a CNNP model keeps its parameters."""
        named = {}
        for e in self.execs:
            if e.name is None:
                continue
            for kind, ts in (("inputs", e.inputs), ("outputs", e.outputs)):
                for k, t in enumerate(ts):
                    if t is not None:
                        named[f"{e.name}.{kind}[{k}]"] = t
        return named

    def write_tensors(self, db, tensors=None):
        """Write ``tensors`` ({name: tensor}; default: named_tensors()) into the tensor database
        ``db`` (a path or an sqlite3.Connection), in one transaction (nnc.tensor_write's rows)."""
        from nnc.tensor.io import tensors_write
        tensors_write(self.named_tensors() if tensors is None else tensors, db)

    def read_tensors(self, db, tensors=None):
        """Read ``tensors`` ({name: tensor}; default: named_tensors()) from ``db`` in place; every
        name is checked (present, same shape and dtype) before any tensor changes."""
        from nnc.tensor.io import tensors_read
        tensors_read(self.named_tensors() if tensors is None else tensors, db)

    def dot(self, *args, **kwargs):
        """dot(long=False): Graphviz text of the graph (NNC: ccv_nnc_graph_dot).

        ``long=True`` adds each node's tensor shapes and, under a default schedule, its stream,
        its signal and the signals it waits on. (``long`` is a C type name in Cython, so
        the signature is spelled out by hand.)
        """
        if len(args) + len(kwargs) > 1 or (kwargs and "long" not in kwargs):
            raise TypeError("dot() takes one optional argument, long")
        long_form = bool(args[0] if args else kwargs.get("long", False))
        return _needs(_tools, "nnc.run.tools").dot(self, long_form)

    def __repr__(self):
        return f"<Graph {self._size} nodes>"

    def __reduce__(self):
        raise TypeError("an nnc.Graph cannot be copied or pickled: a concrete graph holds live "
                        "tensors, commands with backends, sub-graphs and schedules; rebuild it "
                        "with the code that built it, or save it with nnc.onnx.save")


register_anchor_type(Graph)             # a K0N / K1N multiview's anchor is a loop body Graph
