"""Invariant checks over the live C state of streams, graphs and tensors (debug mode).

Not an NNC port. Each check reads one object's C struct and returns the invariants that do not
hold, as sentences naming the object; the field comments in stream.pxd, graph/graph.pxd and
tensor.pxd state the invariants checked here. Importing this module registers the checks with
nnc.base.debug.check() (nnc/__init__ imports it), so the low debug module never imports up.

Live objects are found without bookkeeping: streams through nnc.stream.stream._live, graphs and
tensors through gc.get_objects() (both types hold Python references, so the collector tracks them).
That walks the whole heap: a debug tool, never on a hot path.

Threading: a stream's fields are read under its mutex, copied into C locals, and judged after
unlocking (no Python object is made while the mutex is held). Graph and tensor fields are guarded
by the GIL, which the caller holds. Signal records are not read: their fields are guarded by
the signal mutex (signal_lock, stream.pxd), which only nnc.stream.stream and nnc.stream.worker take;
nnc.base.debug.counters()["records"] counts them instead.
"""

from cpython.object cimport PyObject

import gc

from nnc.base.core import DATATYPE_NAMES, MAX_DIM
from nnc.base.debug import register_check

from nnc.cmd.command cimport BOUND_C, BOUND_NONE, BOUND_PY, Cmd, nnc_bound_t
from nnc.graph.graph cimport Graph, exec_info_t
from nnc.stream.stream cimport STAGE_SIZE, Stream
from nnc.stream.worker cimport (
    STREAM_IDLE, STREAM_PARKED, STREAM_QUEUED, STREAM_RUNNING, TASK_C, TASK_CALL, TASK_EMIT,
    TASK_PY, TASK_STORE, TASK_WAIT, stream_t, stream_task_t,
)
from nnc.base.sync cimport pthread_mutex_lock, pthread_mutex_unlock
from nnc.tensor.constant cimport constant_contains
from nnc.tensor.tensor cimport nnc_tensor_t, Tensor


cdef enum:
    # What is wrong with one queued task (_task_problem); 0: nothing.
    BAD_KIND = 1
    BAD_C = 2
    BAD_PY = 3
    BAD_RECORD = 4
    BAD_CALL = 5
    BAD_STORE = 6

_TASK_PROBLEMS = {
    BAD_KIND: "an unknown task kind",
    BAD_C: "a C task without its function or tensor slots",
    BAD_PY: "a Python task without its callable or arguments",
    BAD_RECORD: "an emit or wait without its signal record",
    BAD_CALL: "a C call task without its function",
    BAD_STORE: "a store task without its target",
}


cdef int _task_problem(const stream_task_t* t) noexcept nogil:
    if t.bound.kind == TASK_C:
        if t.bound.c_exec == NULL or t.bound.input_size < 0 or t.bound.output_size < 0 or (
                t.bound.io == NULL and t.bound.input_size + t.bound.output_size > 0):
            return BAD_C
    elif t.bound.kind == TASK_PY:
        if t.bound.fn == NULL or t.bound.args == NULL:
            return BAD_PY
    elif t.bound.kind == TASK_EMIT or t.bound.kind == TASK_WAIT:
        if t.record == NULL:
            return BAD_RECORD
    elif t.bound.kind == TASK_CALL:
        if t.call == NULL:
            return BAD_CALL
    elif t.bound.kind == TASK_STORE:
        if t.arg == NULL:
            return BAD_STORE
    else:
        return BAD_KIND
    return 0


cdef list stream_problems(Stream st):
    """The broken invariants of one live stream (stream.pxd), its queue and its stage."""
    cdef stream_t* s = st.s
    cdef stream_t c                     # a copy of the fields, taken under the mutex
    cdef Py_ssize_t i, bad_at = -1, stage_bad_at = -1
    cdef int bad = 0, stage_bad = 0, code
    out = []
    if s == NULL:
        return [f"{st!r} has no C state"]
    pthread_mutex_lock(&s.lock)
    c = s[0]
    if 0 < c.cap and 0 <= c.head < c.cap and 0 <= c.count <= c.cap and c.ring != NULL:
        for i in range(c.count):
            code = _task_problem(&c.ring[(c.head + i) % c.cap])
            if code != 0:
                bad, bad_at = code, i
                break
    pthread_mutex_unlock(&s.lock)
    # The stage is host-side state, guarded by the GIL we hold.
    if 0 <= st.stage_size <= STAGE_SIZE:
        for i in range(st.stage_size):
            code = _task_problem(&st.stage[i])
            if code != 0:
                stage_bad, stage_bad_at = code, i
                break
    else:
        out.append(f"{st!r}: {st.stage_size} staged tasks, outside [0, {STAGE_SIZE}]")
    if not (0 < c.cap and 0 <= c.head < c.cap and 0 <= c.count <= c.cap) or c.ring == NULL:
        out.append(f"{st!r}: ring of {c.cap} with head {c.head} and {c.count} queued")
    if not 0 <= c.completed <= c.submitted:
        out.append(f"{st!r}: {c.completed} tasks completed of {c.submitted} submitted")
    elif c.submitted - c.completed < c.count:
        out.append(f"{st!r}: {c.count} tasks queued but only {c.submitted - c.completed} "
                   "not completed")
    if c.state not in (STREAM_IDLE, STREAM_QUEUED, STREAM_RUNNING, STREAM_PARKED):
        out.append(f"{st!r}: unknown pool state {c.state}")
    elif c.refs != 1 + (c.state != STREAM_IDLE):
        out.append(f"{st!r}: {c.refs} references in pool state {c.state} (expected "
                   f"{1 + (c.state != STREAM_IDLE)}: the object, and the pool while busy)")
    if c.count > 0 and c.state == STREAM_IDLE:
        out.append(f"{st!r}: {c.count} tasks queued but the stream is idle in no pool list")
    if c.host_waiting < 0:
        out.append(f"{st!r}: host_waiting is {c.host_waiting}")
    if c.errors == NULL or type(<object>c.errors) is not list:
        out.append(f"{st!r}: its error list is missing")
    if not 0 <= c.trace_size <= c.trace_cap:
        out.append(f"{st!r}: {c.trace_size} trace events in a buffer of {c.trace_cap}")
    if bad:
        out.append(f"{st!r}: queued task {bad_at} is {_TASK_PROBLEMS[bad]}")
    if stage_bad:
        out.append(f"{st!r}: staged task {stage_bad_at} is {_TASK_PROBLEMS[stage_bad]}")
    return out


cdef list graph_problems(Graph g):
    """The broken invariants of one graph (graph/graph.pxd): nodes, tensor slots, edges, order."""
    cdef exec_info_t* node
    cdef nnc_bound_t* b
    cdef int i, j, k, n = g._size
    out = []
    name = f"<Graph at {id(g):#x}, {n} nodes>"
    if not 0 <= n <= g._cap or (n > 0 and g._nodes == NULL):
        return [f"{name}: {n} nodes in an array of {g._cap}"]
    if not 0 <= g._io_size <= g._io_cap:
        out.append(f"{name}: {g._io_size} tensor slots in an array of {g._io_cap}")
    lists = (("commands", g._cmds), ("input tuples", g._inputs), ("output tuples", g._outputs),
             ("names", g._names), ("Python calls", g._py_calls))
    for what, items in lists:
        if len(items) != n:
            out.append(f"{name}: {len(items)} {what} for {n} nodes")
    if out:
        return out
    for i in range(n):
        node = &g._nodes[i]
        label = g._label(i)
        b = &node.bound
        if b.kind not in (BOUND_NONE, BOUND_C, BOUND_PY):
            out.append(f"{name}: node {label} has bound kind {b.kind}, not one of NOOP, C, "
                       "Python")
        if b.kind == BOUND_C and b.c_exec == NULL:
            out.append(f"{name}: C node {label} has no backend function")
        call = g._py_calls[i]
        if b.kind == BOUND_PY and (call is None or b.fn != <PyObject*>call[0]
                                   or b.args != <PyObject*>call[1]):
            out.append(f"{name}: Python node {label} does not call its cached (fn, args)")
        if b.param != &(<Cmd>g._cmds[i]).param:
            out.append(f"{name}: node {label}'s parameters are not its Cmd's")
        ins, outs = g._inputs[i], g._outputs[i]
        if b.input_size != len(ins) or b.output_size != len(outs):
            out.append(f"{name}: node {label} has {b.input_size}+{b.output_size} slots "
                       f"for {len(ins)}+{len(outs)} tensors")
        elif not (0 <= node.io_offset and
                  node.io_offset + b.input_size + b.output_size <= g._io_size):
            out.append(f"{name}: node {label}'s tensor slots lie outside the slot array")
        elif b.io != g._io + node.io_offset:
            out.append(f"{name}: node {label}'s bound work points at stale tensor slots")
        else:
            for k, t in enumerate(ins + outs):
                if g._io[node.io_offset + k] != (NULL if t is None else &(<Tensor>t).t):
                    out.append(f"{name}: node {label}'s slot {k} does not point at its tensor")
                    break
        if not 0 <= node.outgoing_size <= node.outgoing_cap or (
                node.outgoing_size > 0 and node.outgoings == NULL):
            out.append(f"{name}: node {label} has {node.outgoing_size} edges in an array "
                       f"of {node.outgoing_cap}")
            continue
        seen = set()
        for k in range(node.outgoing_size):
            j = node.outgoings[k]
            if not 0 <= j < n or j == i or j in seen:
                out.append(f"{name}: node {label} has a bad or repeated successor {j}")
                break
            seen.add(j)
    if not g._dirty:
        out.extend(_order_problems(g, name))
    if g._inflight < 0 or (g._inflight == 0) != (g._inflight_stream is None):
        out.append(f"{name}: {g._inflight} runs in flight on {g._inflight_stream!r}")
    return out


cdef list _order_problems(Graph g, str name):
    """A clean graph's run order: distinct nodes, every edge between them pointing forward."""
    cdef int k, e, i, j
    position = {}
    for k in range(g._order_size):
        i = g._order[k]
        if not 0 <= i < g._size or i in position:
            return [f"{name}: run order has a bad or repeated node {i}"]
        position[i] = k
    for i, k in position.items():
        for e in range(g._nodes[i].outgoing_size):
            j = g._nodes[i].outgoings[e]
            if j in position and position[j] <= k:
                return [f"{name}: run order puts {g._label(j)} before its predecessor "
                        f"{g._label(i)}"]
    return []


cdef list tensor_problems(Tensor x):
    """The broken invariants of one tensor (tensor.pxd): datatype, shape, strides, extent."""
    cdef nnc_tensor_t* t = &x.t
    cdef int i
    cdef Py_ssize_t count = 1, expect = 1, lo = 0, hi = 0
    cdef bint contiguous = True, empty = False
    if t.data == NULL and t.ndim == 0 and t.datatype == 0:
        return []  # made by Tensor.__new__ and not filled in yet (a carry-over's snapshot)
    name = f"<{type(x).__name__} at {id(x):#x}>"
    if t.data == NULL:
        return [f"{name}: no data pointer"]
    if t.datatype not in DATATYPE_NAMES:
        return [f"{name}: unknown datatype {t.datatype:#x}"]
    if not 0 <= t.ndim <= MAX_DIM:
        return [f"{name}: {t.ndim} dimensions"]
    for i in range(t.ndim - 1, -1, -1):
        if t.dim[i] < 0:
            return [f"{name}: dimension {i} is {t.dim[i]}"]
        count *= t.dim[i]
        if t.dim[i] != 1 and t.stride[i] != expect:
            contiguous = False
        expect *= t.dim[i]
        if t.dim[i] == 0:
            empty = True
        elif t.stride[i] >= 0:
            hi += (t.dim[i] - 1) * t.stride[i]
        else:
            lo += (t.dim[i] - 1) * t.stride[i]
    out = []
    if count != t.count:
        out.append(f"{name}: count {t.count}, but its shape holds {count}")
    if t.contiguous and not contiguous:
        out.append(f"{name}: marked contiguous, but its strides are not C order")
    if t.device < 0 and not empty and (
            <char*>t.data + lo * t.itemsize < x._lo
            or <char*>t.data + (hi + 1) * t.itemsize > x._hi):
        out.append(f"{name}: its elements reach outside its owner's memory")
    if x._array is not None and x._array_data == t.data:
        if x._array.__array_interface__["data"][0] != <Py_ssize_t>t.data:
            out.append(f"{name}: its cached ndarray does not alias its data")
    if t.device < 0 and constant_contains(t.data):
        # Frozen memory never changes (packed copies of it are kept): nothing may write it.
        if not x.readonly:
            out.append(f"{name}: it points at frozen memory but is not read-only")
        if x._array is not None and x._array_data == t.data and x._array.flags.writeable:
            out.append(f"{name}: its cached ndarray over frozen memory is writable")
    return out


@register_check
def live_stream_problems():
    from nnc.stream.stream import _live

    out = []
    for st in list(_live):
        out.extend(stream_problems(st))
    return out


@register_check
def live_graph_and_tensor_problems():
    out = []
    for obj in gc.get_objects():
        if isinstance(obj, Graph):
            out.extend(graph_problems(obj))
        elif isinstance(obj, Tensor):
            out.extend(tensor_problems(obj))
    return out
