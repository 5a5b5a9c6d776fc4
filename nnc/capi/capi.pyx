"""The C ABI: ``cdef api`` functions that C programs call through ``nnc/nnc.h``.

NNC: ccv_nnc.h (the C interface itself). Every function here takes the GIL itself (``with
gil``), so any C thread may call it; none lets a Python exception escape: each returns 0 or a
negative ``NNC_ERROR_*`` code and leaves a message in a thread-local buffer that
``nnc_error_message()`` returns. Objects cross the boundary as opaque handles (nnc/capi/handle.pyx
owns the table, the messages and argument conversion).

State owned here: none beyond what handles point at, and the thunks of backends with a user
context. docs/capi.md documents every function, ownership and threading.

One file of ~790 lines, plus three includes, because every exported function must be in the
one module whose ``__pyx_capi__`` nnc.h loads (nnc.capi.capi): a second module would need a
second loader table in the header and a second import in every C program. The includes hold
whole concepts: multiview.pxi (a node's tensors re-pointed, multiviews), engine.pxi (backends
with a user context, the dependency engine) and tools.pxi (graph tools, tensor helpers,
signals, stream callbacks, thread settings); their ``cdef api`` functions are exported from
this module's ``__pyx_capi__`` like the rest. Each function is a thin wrapper; the helpers
live in nnc/capi/handle.pyx.
"""

from cpython.object cimport PyObject
from libc.stdint cimport int64_t, uintptr_t
from libc.string cimport memcpy

import numpy as np

from nnc.base.core import DATATYPE_NAMES, GraphError, NNCError, ScheduleError, StreamError
from nnc.capi.handle cimport (
    K_CMD, K_ENGINE, K_ENGINE_VAR, K_EXEC, K_GRAPH, K_SCHEDULE, K_SIGNAL, K_STREAM, K_TENSOR,
    NNC_ABI_VERSION, NNC_BACKEND_CONTIGUOUS, NNC_ERROR_ABI, NNC_ERROR_ARGUMENT, NNC_ERROR_MEMORY,
    NNC_ERROR_NULL, NNC_MAX_DIM_C, NNC_MULTIVIEW_K0N, NNC_MULTIVIEW_K1N, NNC_MULTIVIEW_PHI,
    NNC_PRIORITY_DEFAULT, arg_count, arg_exec, arg_execs, arg_out, arg_tensors, arg_text,
    c_case_of_f, c_engine_fn_f, c_exec_ctx_f, c_exec_f, c_param_t, c_part_f, c_stream_callback_f,
    c_tensor_t, c_while_f, capi_fail, capi_message, capi_set_message, handle_clear, handle_free,
    handle_get, handle_new, handle_peek, handle_release, nnc_cmd_h, nnc_engine_h, nnc_engine_var_h,
    nnc_graph_exec_h, nnc_graph_h, nnc_graph_static_schedule_h, nnc_signal_h, nnc_stream_h,
    nnc_tensor_h,
)
from nnc.engine.engine cimport Engine
from nnc.engine.op cimport EngineVar, var_t
from nnc.cmd.command cimport nnc_cmd_exec_f, nnc_cmd_param_t, register_c_backend
from nnc.graph.graph cimport Graph, GraphExec
from nnc.stream.stream cimport Signal, Stream
from nnc.tensor.tensor cimport Tensor, nnc_tensor_t
from nnc.base.parallel cimport nnc_part_f, nnc_workspace, parallel_threads
from nnc.base.parallel cimport nnc_parallel_for as parallel_for

from nnc.capi.handle import (
    HandleError, NullError, RangeError, live_handles, live_objects, parse_params,
)
from nnc.cmd.command import Cmd, cmd_exec, register_command
from nnc.base.device import ArrayInterface, parse_device
from nnc.base.parallel import get_intra_op_threads, set_intra_op_threads
from nnc.schedule.schedule import static_schedule
from nnc.tensor.multiview import MultiView
from nnc.stream.worker import get_num_threads, set_num_threads
from nnc.tensor.io import tensor_eq, tensor_read, tensor_write, tensor_zero
from nnc.tensor.tensor import FORMAT_NAMES, tensor_resize

__all__ = ["live_handles", "parse_params"]


cdef extern from "Python.h" nogil:
    ctypedef struct PyThreadState:
        pass
    int PyGILState_Check()
    PyThreadState* PyEval_SaveThread()
    void PyEval_RestoreThread(PyThreadState* state)


cdef api const char* nnc_error_message() noexcept nogil:
    """The message of the calling thread's last failed call ("" if none failed)."""
    return capi_message()


# -- initialisation --------------------------------------------------------------------------

cdef inline Py_ssize_t _at(const void* field, const void* base) noexcept:
    return <const char*>field - <const char*>base


cdef int _layout_ok():
    """The header's structs have the Cython structs' layout, field by field (checked at import:
    C backends and expressions compiled against nnc_types.h read these structs directly)."""
    cdef c_tensor_t a
    cdef nnc_tensor_t b
    cdef c_param_t p
    cdef nnc_cmd_param_t q
    return (sizeof(a) == sizeof(b) and sizeof(p) == sizeof(q) and NNC_MAX_DIM_C == 12
            and _at(&a.data, &a) == _at(&b.data, &b)
            and _at(&a.datatype, &a) == _at(&b.datatype, &b)
            and _at(&a.device, &a) == _at(&b.device, &b)
            and _at(&a.ndim, &a) == _at(&b.ndim, &b)
            and _at(&a.itemsize, &a) == _at(&b.itemsize, &b)
            and _at(&a.contiguous, &a) == _at(&b.contiguous, &b)
            and _at(&a.format, &a) == _at(&b.format, &b)
            and _at(&a.count, &a) == _at(&b.count, &b)
            and _at(&a.dim, &a) == _at(&b.dim, &b)
            and _at(&a.stride, &a) == _at(&b.stride, &b)
            and _at(&p.a, &p) == _at(&q.a, &q)
            and _at(&p.transpose_a, &p) == _at(&q.transpose_a, &q)
            and _at(&p.transpose_b, &p) == _at(&q.transpose_b, &q)
            and _at(&p.groups, &p) == _at(&q.groups, &q)
            and _at(&p.size, &p) == _at(&q.size, &q)
            and _at(&p.stride, &p) == _at(&q.stride, &q)
            and _at(&p.pad, &p) == _at(&q.pad, &q)
            and _at(&p.b, &p) == _at(&q.b, &q)
            and _at(&p.count_include_pad, &p) == _at(&q.count_include_pad, &q)
            and _at(&p.activation, &p) == _at(&q.activation, &q))


if not _layout_ok():
    raise ImportError("nnc/nnc_types.h does not match nnc/tensor/tensor.pxd and "
                      "nnc/cmd/command.pxd; rebuild")


cdef api int nnc_abi_check(int version, size_t tensor_size, size_t param_size) noexcept with gil:
    """Called by nnc_init(): the caller's nnc.h agrees with this build."""
    if version != NNC_ABI_VERSION or tensor_size != sizeof(c_tensor_t) \
            or param_size != sizeof(c_param_t):
        capi_set_message(
            f"nnc.h ABI {version} (tensor {tensor_size} B, param {param_size} B) does not match "
            f"the installed nnc ABI {NNC_ABI_VERSION} (tensor {sizeof(c_tensor_t)} B, param "
            f"{sizeof(c_param_t)} B): rebuild against the headers in nnc.get_include()")
        return NNC_ERROR_ABI
    return 0


cdef api int nnc_stream_workspace(void* context, size_t size, void** out) noexcept nogil:
    """For C backends: ``*out`` = ``size`` bytes of scratch memory owned by ``context`` (the
    backend's last argument: its stream's, or its run's), reused run after run and freed with
    its owner; contents are not kept when it grows. Needs no GIL (backends run without it).
    NNC: ccv_nnc_stream_context_get_workspace."""
    cdef void* p
    if context == NULL or out == NULL:
        return NNC_ERROR_NULL
    p = nnc_workspace(context, size)
    if p == NULL:
        return NNC_ERROR_MEMORY
    out[0] = p
    return 0


cdef api int nnc_parallel_for(int64_t parts, c_part_f fn, void* arg,
                              void* context) noexcept nogil:
    """For C backends: run ``fn(arg, part, ctx)`` for every part in [0, parts) on the calling
    thread and idle threads of nnc's pool (intra-op parallelism, nnc.base.parallel), returning once
    all have run: 0, or the first failing part's status (parts not yet started are skipped).
    ``context`` is the backend's own; each part gets its running thread's (``ctx``), so a part
    may take scratch memory with nnc_stream_workspace. Needs no GIL, and lets go of it while
    the parts run when the caller holds it, so parts may call the C API."""
    cdef PyThreadState* state
    cdef int rc
    if fn == NULL:
        return NNC_ERROR_NULL
    if parts < 0:
        return NNC_ERROR_ARGUMENT
    if parts < 2 or parallel_threads() < 2 or not PyGILState_Check():
        return parallel_for(<Py_ssize_t>parts, <nnc_part_f>fn, arg, context)
    # A synchronous run holds the GIL around a backend on small outputs (cmd_bound_run). A
    # part a pool thread runs takes the GIL in every C API call, and this thread waits for
    # that part before it returns: holding the GIL meanwhile would deadlock. Letting it go is
    # what the same run does anyway around a backend on large outputs (BOUND_NOGIL), and the
    # parts this thread runs take it back through their API calls like any other thread.
    state = PyEval_SaveThread()
    rc = parallel_for(<Py_ssize_t>parts, <nnc_part_f>fn, arg, context)
    PyEval_RestoreThread(state)
    return rc


cdef api int nnc_shutdown() noexcept with gil:
    """Drain every stream, then drop every handle (nnc_finalize calls it before Py_FinalizeEx).

    Every stream: also those whose handle was freed (nnc_stream_free) with work still queued,
    so the work enqueued before nnc_finalize runs before it returns, as at Python's exit."""
    try:
        from nnc.stream.drain import drain_all

        # Engines first: their ops may still be queued (an engine closed here keeps its
        # errors; the handles go next, so nothing could read them anyway).
        for eng in live_objects(K_ENGINE):
            if not eng.closed:
                eng.close()
        drain_all()
        handle_clear()
        return 0
    except BaseException as e:
        return capi_fail(e)


# -- tensors ---------------------------------------------------------------------------------

cdef api int nnc_tensor_new(nnc_tensor_h* out, void* data, int datatype, int ndim,
                            const int64_t* dims) noexcept with gil:
    """A tensor over caller-owned C-contiguous memory (zero copy). NNC: ccv_nnc_tensor_new."""
    try:
        arg_out(out)
        t = _caller_tensor(data, datatype, ndim, dims, "NHWC")
        out[0] = <nnc_tensor_h>handle_new(t, K_TENSOR)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_view_new(nnc_tensor_h* out, nnc_tensor_h tensor, int ndim,
                                 const int64_t* dims, int64_t offset,
                                 const int64_t* strides) noexcept with gil:
    """A view aliasing part of tensor: offset and strides count elements (strides NULL: C order);
    its extent must lie inside tensor's memory. NNC: ccv_nnc_tensor_view_new."""
    try:
        arg_out(out)
        t = <Tensor>handle_get(tensor, K_TENSOR, "tensor")
        if ndim < 0 or ndim > NNC_MAX_DIM_C:
            raise RangeError(f"ndim is {ndim}, must be in [0, {NNC_MAX_DIM_C}]")
        arg_count(ndim, dims, "dims")
        shape = tuple(dims[i] for i in range(ndim))
        steps = None if strides == NULL else tuple(strides[i] for i in range(ndim))
        out[0] = <nnc_tensor_h>handle_new(t.view(shape, offset, steps), K_TENSOR)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_free(nnc_tensor_h tensor) noexcept with gil:
    """Release the handle; graphs and commands using the tensor keep it alive."""
    return handle_release(tensor, K_TENSOR, "tensor")


cdef api int nnc_tensor_get(nnc_tensor_h tensor, c_tensor_t* out) noexcept with gil:
    """Copy the tensor's C view (data pointer, datatype, shape, strides) into out."""
    try:
        arg_out(out)
        t = <Tensor>handle_get(tensor, K_TENSOR, "tensor")
        memcpy(out, &t.t, sizeof(c_tensor_t))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_write(nnc_tensor_h tensor, const char* db_path,
                              const char* name) noexcept with gil:
    """Write tensor as name into the SQLite tensor database at db_path (created if missing),
    replacing a tensor of that name, in NNC's schema (nnc.tensor_write).
    NNC: ccv_nnc_tensor_write."""
    try:
        t = handle_get(tensor, K_TENSOR, "tensor")
        tensor_write(t, arg_text(db_path, "db_path"), arg_text(name, "name"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_tensor_read(const char* db_path, const char* name,
                             nnc_tensor_h* tensor) noexcept with gil:
    """Read tensor name from the database at db_path: into *tensor (same shape and datatype,
    else NNC_ERROR_TENSOR) or, when *tensor is NULL, into a new tensor whose handle it stores
    there (nnc.tensor_read). NNC_ERROR_IO: no such name, or no readable database.
    NNC: ccv_nnc_tensor_read."""
    try:
        arg_out(tensor, "tensor")
        path = arg_text(db_path, "db_path")
        key = arg_text(name, "name")
        if tensor[0] == NULL:
            tensor[0] = <nnc_tensor_h>handle_new(tensor_read(path, key), K_TENSOR)
        else:
            tensor_read(path, key, handle_get(tensor[0], K_TENSOR, "*tensor"))
        return 0
    except BaseException as e:
        return capi_fail(e)


# -- commands --------------------------------------------------------------------------------

cdef api int nnc_cmd_new(nnc_cmd_h* out, const char* name, const char* params) noexcept with gil:
    """A command by name; params: "key=value, ..." literals, or NULL. NNC: ccv_nnc_cmd."""
    try:
        arg_out(out)
        kwargs = parse_params("" if params == NULL else arg_text(params, "params"))
        out[0] = <nnc_cmd_h>handle_new(Cmd(arg_text(name, "name"), **kwargs), K_CMD)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_cmd_free(nnc_cmd_h cmd) noexcept with gil:
    return handle_release(cmd, K_CMD, "cmd")


cdef api int nnc_cmd_exec(nnc_cmd_h cmd, const nnc_tensor_h* inputs, int input_size,
                          const nnc_tensor_h* outputs, int output_size,
                          nnc_stream_h stream) noexcept with gil:
    """Run one command now, or enqueue it on stream (not NULL). NNC: ccv_nnc_cmd_exec."""
    try:
        c = handle_get(cmd, K_CMD, "cmd")
        ins = arg_tensors(inputs, input_size, "inputs")
        outs = arg_tensors(outputs, output_size, "outputs")
        s = None if stream == NULL else handle_get(stream, K_STREAM, "stream")
        cmd_exec(c, ins, outs, stream=s)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_cmd_register(const char* name, const char* inplace) noexcept with gil:
    """Register a new command (no shape check: its backends check what they need).
    inplace: "none", "allow", "enforce" or "any"; NULL means "none". NNC: REGISTER_COMMAND."""
    try:
        mode = "none" if inplace == NULL else arg_text(inplace, "inplace")
        register_command(arg_text(name, "name"), inplace=mode)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef int _register_backend(const char* command, const char* backend, c_exec_f fn,
                           int datatypes, int flags, int priority) except -1:
    """nnc_cmd_backend_register and _ctx after their own checks: fn is the function to call."""
    all_types = 0
    for code in DATATYPE_NAMES:
        all_types |= code
    if datatypes & ~all_types:
        raise ValueError(f"datatypes 0x{datatypes:x} has bits that are no NNC_* datatype")
    if flags & ~NNC_BACKEND_CONTIGUOUS:
        raise ValueError(f"flags 0x{flags:x} has unknown bits")
    if priority < 0 and priority != NNC_PRIORITY_DEFAULT:
        raise ValueError(f"priority {priority} must be >= 0 or NNC_PRIORITY_DEFAULT")
    register_c_backend(arg_text(command, "command"), arg_text(backend, "backend"),
                       <nnc_cmd_exec_f>fn, datatypes or all_types,
                       bool(flags & NNC_BACKEND_CONTIGUOUS), None,
                       None if priority == NNC_PRIORITY_DEFAULT else priority, True)
    return 0


cdef api int nnc_cmd_backend_register(const char* command, const char* backend, c_exec_f fn,
                                      int datatypes, int flags, int priority) noexcept with gil:
    """Make the C function fn backend ``backend`` of ``command`` (re-registering a name is an
    error unless it is the same registration). datatypes: OR of NNC_* codes, 0 for all. It
    runs without the GIL on stream workers (and on large tensors elsewhere).
    NNC: REGISTER_COMMAND_BACKEND."""
    try:
        if fn == NULL:
            raise NullError("fn is NULL")
        _register_backend(command, backend, fn, datatypes, flags, priority)
        return 0
    except BaseException as e:
        return capi_fail(e)


# -- streams and signals ---------------------------------------------------------------------

cdef str _kind(const char* kind):
    """A stream or signal kind: NULL means "cpu"; an unknown kind is a bad argument."""
    text = "cpu" if kind == NULL else arg_text(kind, "kind")
    parse_device(text)                  # DeviceError: NNC_ERROR_ARGUMENT
    return text


cdef api int nnc_stream_new(const char* kind, nnc_stream_h* out) noexcept with gil:
    """A stream: "cpu" (NULL means "cpu"). NNC: ccv_nnc_stream_context_new."""
    try:
        arg_out(out)
        out[0] = <nnc_stream_h>handle_new(Stream(_kind(kind)), K_STREAM)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_stream_free(nnc_stream_h stream) noexcept with gil:
    """Release the handle; work already enqueued still runs. NNC: ccv_nnc_stream_context_free."""
    return handle_release(stream, K_STREAM, "stream")


cdef api int nnc_stream_wait(nnc_stream_h stream) noexcept with gil:
    """Block (without the GIL) until the stream's work is done; NNC_ERROR_STREAM if some of it
    failed. NNC: ccv_nnc_stream_context_wait."""
    try:
        (<Stream>handle_get(stream, K_STREAM, "stream")).wait()
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_stream_query(nnc_stream_h stream, int* done) noexcept with gil:
    """*done = 1 if the stream has no pending work, else 0."""
    try:
        arg_out(done, "done")
        done[0] = 1 if (<Stream>handle_get(stream, K_STREAM, "stream")).query() else 0
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_signal_new(const char* kind, nnc_signal_h* out) noexcept with gil:
    """A signal (NULL kind means "cpu"). NNC: ccv_nnc_stream_signal_new."""
    try:
        arg_out(out)
        out[0] = <nnc_signal_h>handle_new(Signal(_kind(kind)), K_SIGNAL)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_signal_free(nnc_signal_h signal) noexcept with gil:
    return handle_release(signal, K_SIGNAL, "signal")


cdef api int nnc_stream_emit_signal(nnc_stream_h stream, nnc_signal_h signal) noexcept with gil:
    """Record signal on stream. NNC: ccv_nnc_stream_context_emit_signal."""
    try:
        s = handle_get(stream, K_STREAM, "stream")
        s.emit(handle_get(signal, K_SIGNAL, "signal"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_stream_wait_signal(nnc_stream_h stream, nnc_signal_h signal) noexcept with gil:
    """Make stream wait for signal's latest record (none: no wait).
    NNC: ccv_nnc_stream_context_wait_signal."""
    try:
        s = handle_get(stream, K_STREAM, "stream")
        s.wait_signal(handle_get(signal, K_SIGNAL, "signal"))
        return 0
    except BaseException as e:
        return capi_fail(e)


# -- graphs ----------------------------------------------------------------------------------

cdef api int nnc_graph_new(nnc_graph_h* out) noexcept with gil:
    """An empty concrete graph. NNC: ccv_nnc_graph_new."""
    try:
        arg_out(out)
        out[0] = <nnc_graph_h>handle_new(Graph(), K_GRAPH)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_free(nnc_graph_h graph) noexcept with gil:
    """Release the handle; a run in progress, a parent loop or node handles keep the graph
    alive. NNC: ccv_nnc_graph_free."""
    return handle_release(graph, K_GRAPH, "graph")


cdef api int nnc_graph_exec_new(nnc_graph_h graph, nnc_cmd_h cmd, const nnc_tensor_h* inputs,
                                int input_size, const nnc_tensor_h* outputs, int output_size,
                                nnc_graph_exec_h* out) noexcept with gil:
    """Add a node running cmd; shapes, dtypes and aliasing are checked now.
    NNC: ccv_nnc_graph_exec_new."""
    try:
        arg_out(out)
        g = handle_get(graph, K_GRAPH, "graph")
        e = g.exec(handle_get(cmd, K_CMD, "cmd"), arg_tensors(inputs, input_size, "inputs"),
                   arg_tensors(outputs, output_size, "outputs"))
        out[0] = <nnc_graph_exec_h>handle_new(e, K_EXEC)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_exec_free(nnc_graph_exec_h exec) noexcept with gil:
    """Release a node handle (the node stays in its graph)."""
    return handle_release(exec, K_EXEC, "exec")


cdef api int nnc_graph_exec_count(nnc_graph_h graph, int* count) noexcept with gil:
    """*count = the number of nodes of graph."""
    try:
        arg_out(count, "count")
        count[0] = len(<Graph>handle_get(graph, K_GRAPH, "graph"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_exec_get(nnc_graph_h graph, int index,
                                nnc_graph_exec_h* out) noexcept with gil:
    """A new handle to node index (creation order, 0-based) of graph."""
    try:
        arg_out(out)
        g = <Graph>handle_get(graph, K_GRAPH, "graph")
        if index < 0 or index >= len(g):
            raise RangeError(f"node index {index} is out of range [0, {len(g)})")
        out[0] = <nnc_graph_exec_h>handle_new(GraphExec._new(g, index), K_EXEC)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_exec_concat(nnc_graph_h graph, nnc_graph_exec_h source,
                                   nnc_graph_exec_h destination) noexcept with gil:
    """source runs before destination. NNC: ccv_nnc_graph_exec_concat."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        g.concat(arg_exec(g, source, "source"), arg_exec(g, destination, "destination"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_exec_disjoin(nnc_graph_h graph, nnc_graph_exec_h source,
                                    nnc_graph_exec_h destination) noexcept with gil:
    """Remove the edge source -> destination. NNC: ccv_nnc_graph_exec_disjoin."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        g.disjoin(arg_exec(g, source, "source"), arg_exec(g, destination, "destination"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_set_sources(nnc_graph_h graph, const nnc_graph_exec_h* sources,
                                   int source_size) noexcept with gil:
    """Set the run's sources; size 0 restores the default. NNC: ccv_nnc_graph_set_sources."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        g.sources = arg_execs(g, sources, source_size, "sources") or None
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_set_destinations(nnc_graph_h graph,
                                        const nnc_graph_exec_h* destinations,
                                        int destination_size) noexcept with gil:
    """Set the run's destinations; size 0 restores the default.
    NNC: ccv_nnc_graph_set_destinations."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        g.destinations = arg_execs(g, destinations, destination_size, "destinations") or None
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_run(nnc_graph_h graph, nnc_stream_h stream) noexcept with gil:
    """stream NULL: run now on this thread. Else enqueue the run (on the graph's static
    schedule, if it has one) and return; nnc_stream_wait(stream) joins it.
    NNC: ccv_nnc_graph_run."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        g.run(stream=None if stream == NULL else handle_get(stream, K_STREAM, "stream"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_static_schedule(nnc_graph_h graph, const char* stream_type,
                                       int max_streams) noexcept with gil:
    """Build the graph's default static schedule (sub-graphs included); stream_type NULL
    means "cpu", max_streams 0 no limit. NNC: ccv_nnc_graph_set_default_static_schedule."""
    try:
        static_schedule(handle_get(graph, K_GRAPH, "graph"),
                        "cpu" if stream_type == NULL else arg_text(stream_type, "stream_type"),
                        max_streams)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_schedule_info(nnc_graph_h graph, int* stream_count,
                                     int* signal_count) noexcept with gil:
    """The default schedule's stream and signal counts (either pointer may be NULL)."""
    try:
        sched = (<Graph>handle_get(graph, K_GRAPH, "graph")).schedule
        if sched is None:
            raise ScheduleError("the graph has no static schedule; call "
                                "nnc_graph_static_schedule first")
        if stream_count != NULL:
            stream_count[0] = sched.stream_count
        if signal_count != NULL:
            signal_count[0] = sched.signal_count
        return 0
    except BaseException as e:
        return capi_fail(e)


# -- partial static schedules ----------------------------------------------------------------

cdef api int nnc_graph_static_schedule_new(nnc_graph_h graph, const char* stream_type,
                                           int max_streams, const nnc_graph_exec_h* sources,
                                           int source_size,
                                           const nnc_graph_exec_h* destinations,
                                           int destination_size,
                                           nnc_graph_static_schedule_h* out) noexcept with gil:
    """A schedule of the nodes of graph reachable from sources that reach destinations (size 0:
    the graph's own), beside its default one (nnc.static_schedule with sources= and
    destinations=); stream_type NULL means "cpu", max_streams 0 no limit. The handle keeps the
    graph alive. NNC: ccv_nnc_graph_static_schedule_new."""
    try:
        arg_out(out)
        g = <Graph>handle_get(graph, K_GRAPH, "graph")
        srcs = arg_execs(g, sources, source_size, "sources") or g.sources
        dsts = arg_execs(g, destinations, destination_size, "destinations") or g.destinations
        sched = static_schedule(
            g, "cpu" if stream_type == NULL else arg_text(stream_type, "stream_type"),
            max_streams, sources=srcs, destinations=dsts)
        out[0] = <nnc_graph_static_schedule_h>handle_new((sched, g), K_SCHEDULE)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_static_schedule_free(
        nnc_graph_static_schedule_h schedule) noexcept with gil:
    """Release the schedule handle (and its hold on the graph); runs already enqueued with it
    still run. NNC: ccv_nnc_graph_static_schedule_free."""
    return handle_release(schedule, K_SCHEDULE, "schedule")


cdef api int nnc_graph_run_with_schedule(nnc_graph_h graph,
                                         nnc_graph_static_schedule_h schedule,
                                         nnc_stream_h stream) noexcept with gil:
    """Enqueue a run of the schedule's nodes on stream and return; nnc_stream_wait(stream)
    joins it (g.run_with_schedule). NNC_ERROR_SCHEDULE for a schedule of another graph or a
    stale one (the graph changed since it was built).
    NNC: ccv_nnc_graph_run_with_schedule."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        sched = handle_get(schedule, K_SCHEDULE, "schedule")[0]
        g.run_with_schedule(sched, handle_get(stream, K_STREAM, "stream"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_static_schedule_info(nnc_graph_static_schedule_h schedule,
                                            int* node_count, int* stream_count,
                                            int* signal_count) noexcept with gil:
    """The schedule's node, stream and signal counts (each pointer may be NULL)."""
    try:
        sched = handle_get(schedule, K_SCHEDULE, "schedule")[0]
        if node_count != NULL:
            node_count[0] = len(sched.order)
        if stream_count != NULL:
            stream_count[0] = sched.stream_count
        if signal_count != NULL:
            signal_count[0] = sched.signal_count
        return 0
    except BaseException as e:
        return capi_fail(e)


# -- while and case..of ----------------------------------------------------------------------

cdef class _CExpr:
    """A C expression with its data pointer and input tensors, callable as the Python
    expression WhileNode and CaseOfNode expect. The C function receives the tensors' C views
    (whose data pointers loops may move between calls); the arrays passed in are ignored."""
    cdef c_while_f while_fn
    cdef c_case_of_f case_of_fn
    cdef const void* data
    cdef list tensors                   # keeps the Tensors (and so ptrs[]) alive
    cdef c_tensor_t* ptrs[64]
    cdef int n

    def _set_tensors(self, list tensors):
        if len(tensors) > 64:
            raise RangeError(f"a C expression takes at most 64 inputs, not {len(tensors)}")
        self.tensors = tensors
        self.n = len(tensors)
        for i, t in enumerate(tensors):
            self.ptrs[i] = NULL if t is None else <c_tensor_t*>&(<Tensor>t).t
        return self

    def __call__(self, *args):
        cdef int rc
        cdef int64_t count
        if self.while_fn != NULL:
            count = args[0]
            with nogil:
                rc = self.while_fn(count, self.ptrs, self.n, self.data)
            if rc < 0:
                raise GraphError(f"the C while expression failed with {rc} at count {count}")
            return rc != 0
        with nogil:
            rc = self.case_of_fn(self.ptrs, self.n, self.data)
        return rc


cdef api int nnc_graph_while_new(nnc_graph_h graph, nnc_graph_h body,
                                 nnc_graph_exec_h* out) noexcept with gil:
    """Add a node of graph that runs body as a loop. NNC: ccv_nnc_graph_while."""
    try:
        arg_out(out)
        g = handle_get(graph, K_GRAPH, "graph")
        out[0] = <nnc_graph_exec_h>handle_new(g.while_(handle_get(body, K_GRAPH, "body")), K_EXEC)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_set_while_expr(nnc_graph_h body, c_while_f expr, const void* data,
                                      const nnc_tensor_h* inputs, int input_size,
                                      const nnc_graph_exec_h* breakpoints,
                                      int breakpoint_size) noexcept with gil:
    """On a loop body: expr(count, inputs, input_size, data) runs after the breakpoints; data
    is passed through untouched. NNC: ccv_nnc_graph_set_while_expr."""
    try:
        b = handle_get(body, K_GRAPH, "body")
        if expr == NULL:
            raise NullError("expr is NULL")
        ins = arg_tensors(inputs, input_size, "inputs")
        f = _CExpr()
        f.while_fn = expr
        f.data = data
        bps = arg_execs(b, breakpoints, breakpoint_size, "breakpoints")
        b.set_while_expr(f._set_tensors(ins), ins, bps)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_while_count(nnc_graph_h body, int64_t* count) noexcept with gil:
    """On a loop body: the count at which its last run ended."""
    try:
        arg_out(count, "count")
        count[0] = handle_get(body, K_GRAPH, "body").while_count
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_add_carry_over(nnc_graph_h body, nnc_tensor_h source,
                                      nnc_tensor_h destination) noexcept with gil:
    """On a loop body: from the second iteration on, destination aliases the memory source
    held at the end of the previous one. NNC: ccv_nnc_graph_add_carry_over."""
    try:
        b = handle_get(body, K_GRAPH, "body")
        b.add_carry_over(handle_get(source, K_TENSOR, "source"),
                         handle_get(destination, K_TENSOR, "destination"))
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_case_of_new(nnc_graph_h graph, const nnc_tensor_h* inputs,
                                   int input_size, const nnc_tensor_h* outputs, int output_size,
                                   nnc_graph_exec_h* out) noexcept with gil:
    """Add a case..of node over inputs -> outputs. NNC: ccv_nnc_graph_case_of_new."""
    try:
        arg_out(out)
        g = handle_get(graph, K_GRAPH, "graph")
        e = g.case_of(arg_tensors(inputs, input_size, "inputs"),
                      arg_tensors(outputs, output_size, "outputs"))
        out[0] = <nnc_graph_exec_h>handle_new(e, K_EXEC)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_set_case_of_expr(nnc_graph_h graph, nnc_graph_exec_h exec,
                                        c_case_of_f expr, const void* data,
                                        int offset) noexcept with gil:
    """index = offset + expr(node inputs, input_size, data); < 0 runs no branch.
    NNC: ccv_nnc_graph_set_case_of_expr."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        e = arg_exec(g, exec, "exec")
        if expr == NULL:
            raise NullError("expr is NULL")
        f = _CExpr()
        f.case_of_fn = expr
        f.data = data
        g.set_case_of_expr(e, f._set_tensors(e.inputs), offset)
        return 0
    except BaseException as e:
        return capi_fail(e)


cdef api int nnc_graph_set_case_of(nnc_graph_h graph, nnc_graph_exec_h exec, nnc_graph_h branch,
                                   int index) noexcept with gil:
    """Make branch the branch index (>= 0) of case..of node exec. NNC: ccv_nnc_graph_set_case_of."""
    try:
        g = handle_get(graph, K_GRAPH, "graph")
        e = arg_exec(g, exec, "exec")
        if index < 0:
            raise RangeError(f"branch index {index} must be >= 0")
        g.set_case_of(e, handle_get(branch, K_GRAPH, "branch"), index)
        return 0
    except BaseException as e:
        return capi_fail(e)


include "multiview.pxi"
include "engine.pxi"
include "tools.pxi"
