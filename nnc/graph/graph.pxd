from nnc.cmd.command cimport nnc_bound_t
from nnc.tensor.tensor cimport nnc_tensor_t
from nnc.base.parallel cimport nnc_stream_context_t

cdef enum:
    EXEC_CONTROL = 0x10                 # a while or case..of node (its bound work is BOUND_PY)

# One node ("exec") in C. Everything the run loop touches per node lives here, so the loop does
# no Python work except for Python-implemented commands.
ctypedef struct exec_info_t:
    int flags                           # EXEC_CONTROL or 0
    # The node's work, from the one bind path (nnc.cmd.command.cmd_bind): its param is the Cmd's in
    # Graph._cmds, fn/args belong to the call in Graph._py_calls, io points at this node's slots
    # in Graph._io (re-pointed whenever _io moves).
    nnc_bound_t bound
    int io_offset                       # first slot in Graph._io: inputs, then outputs
    int* outgoings                      # malloc'd successor indices, no duplicates
    int outgoing_size
    int outgoing_cap


cdef class Graph:
    cdef exec_info_t* _nodes            # _size live entries, _cap allocated
    cdef int _size
    cdef int _cap
    cdef nnc_tensor_t** _io             # tensor slots of all nodes; NULL for an absent tensor
    cdef int _io_size
    cdef int _io_cap
    cdef list _cmds                     # Cmd per node (owns exec_info_t.bound.param)
    cdef list _inputs                   # tuple of Tensor|None per node (owns the _io pointers)
    cdef list _outputs
    cdef list _names                    # str or None per node
    cdef list _py_calls                 # (fn, args) per node, or None (owns bound.fn, .args)
    cdef list _sources                  # list of node indices, or None for the default
    cdef list _destinations
    cdef int* _order                    # run order: nodes on a source-to-destination path
    cdef int _order_size
    cdef bint _dirty                    # _order is stale: edges, nodes or ends changed
    cdef readonly long version          # bumped by every change to nodes, edges or ends
    # State of the layers above, each in one structure that layer owns and documents; Graph
    # only holds the reference (typed object: graph.pxd cannot cimport a higher layer).
    cdef object _sched_state            # nnc.schedule.schedule.ScheduleState, or None (never
    #                                     scheduled): the default and one-stream schedules
    cdef object _run_state              # nnc.run.run.RunState, or None (never run on a
    #                                     stream): the streams, signals and last control task
    # In-flight guard, Graph's own (``_check_idle`` refuses changes while it is set): the
    # runner counts up when it enqueues a run and calls ``_run_finished`` when the run ends.
    cdef int _inflight                  # runs enqueued on streams and not finished (GIL-guarded)
    cdef object _inflight_stream        # the caller stream of those runs; None iff _inflight 0
    # Of those, the CPU-stream runs counted by parallel_stream_run_begin (pool threads spin
    # through them); each _run_finished ends one. 0 <= _spin_runs <= _inflight (GIL-guarded).
    cdef int _spin_runs
    # The one call using the graph now (a run, an enqueue, a change), or None; GIL-guarded. Set
    # only while that call lasts, so another thread (or a command of the graph) is refused
    # instead of seeing arrays reallocated under it (docs/threading.md, "Graphs and threads").
    cdef str _busy                      # what that call is doing ("running", ...), or None
    cdef unsigned long _busy_thread     # the thread making it (PyThread_get_thread_ident)
    # Cmds, Python calls and tensor tuples replaced while runs may still borrow them (a node
    # rebuilt by _prepare): kept until this graph is idle again. Only the outermost busy graph
    # of a tree of sub-graphs holds any, since its runs are the ones that borrow.
    cdef list _retired
    cdef long _epoch                    # tensor_movable_epoch() when Python calls were last built
    # Scratch memory of sequential runs (the C backends' context); only the thread marked busy
    # running the graph touches it. Freed with the graph.
    cdef nnc_stream_context_t _context
    # Place in a tree of while / case..of sub-graphs (set by nnc.graph.while_node and case_of
    # only). The guards walk up ``_control_parent``: a sub-graph is busy whenever an enclosing
    # graph is.
    cdef object _loop                   # a WhileNode if this is a loop body, else None
    cdef Graph _control_parent          # the graph whose while/case..of node runs this one
    cdef object __weakref__             # Schedules hold their graph weakly (no graph cycle)

    cdef int _prepare(self) except -1

    cdef int _check_idle(self, str what, object stream=*) except -1
    cdef int _enter(self, str what, str doing, object stream=*) except -1
    cdef int _leave(self) except -1
    cdef int _retire(self, object old) except -1

    cdef int _check_exec(self, object e) except -1
    cdef int _set_node(self, int idx, object cmd, list inputs, list outputs) except -1
    # The edge i -> j (i != j), unless it exists: 1 if added, 0 if it was there. The caller
    # checked the graph may change (concat: _check_idle; simplify: inside _enter).
    cdef int _edge_add(self, int i, int j) except -1
    cdef int _compile(self) except -1
    cdef int _run_node(self, int idx) except -1
    cdef int _run_py_node(self, int idx) except -1
    cdef int _run_order(self) except -1
    cdef int _run_order_traced(self) except -1
    cdef int _run_node_traced(self, int idx) except -1
    cdef int _run_on_stream(self, object stream, object schedule=*) except -1
    cdef int _fail_c(self, int idx, int rc) except -1
    cdef str _cycle(self, const int* indegree)


cdef class GraphExec:
    cdef readonly Graph graph
    cdef readonly int index             # position in graph; stable for the graph's life

    @staticmethod
    cdef GraphExec _new(Graph graph, int index)
