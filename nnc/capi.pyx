"""The C ABI: ``cdef api`` functions that C programs call through ``nnc/nnc.h``.

NNC: ccv_nnc.h (the C interface itself). Every function here takes the GIL itself (``with
gil``), so any C thread may call it; none lets a Python exception escape: each returns 0 or a
negative ``NNC_ERROR_*`` code and leaves a message in a thread-local buffer that
``nnc_error_message()`` returns. Objects cross the boundary as opaque handles, numbers that name a
slot of the handle table below; a slot's generation changes when its handle is freed, so a freed,
foreign or mistyped handle is refused without being dereferenced.

State owned here: the handle table (guarded by the GIL) and the per-thread error message.
docs/capi.md documents every function, ownership and threading.
"""

from libc.stdint cimport int64_t, uintptr_t
from libc.string cimport memcpy

import ast

import numpy as np

from nnc._core import (
    DATATYPE_NAMES,
    CommandError,
    GraphError,
    NNCError,
    ScheduleError,
    StreamError,
    TensorError,
)
from nnc.cmd cimport nnc_cmd_exec_f, nnc_cmd_param_t, register_c_backend
from nnc.graph.graph cimport Graph, GraphExec
from nnc.stream cimport Signal, Stream
from nnc.tensor cimport Tensor, nnc_tensor_t

from nnc.cmd import Cmd, cmd_exec, register_command
from nnc.graph.schedule import static_schedule


# The header's view of the shared types, under their C names (nnc/nnc_types.h). The module
# checks at import that they match the Cython structs field for field.
cdef extern from "nnc_types.h":
    int NNC_ABI_VERSION
    int NNC_MAX_DIM_C "NNC_MAX_DIM"
    ctypedef void* nnc_tensor_h
    ctypedef void* nnc_cmd_h
    ctypedef void* nnc_graph_h
    ctypedef void* nnc_graph_exec_h
    ctypedef void* nnc_stream_h
    ctypedef void* nnc_signal_h
    ctypedef struct c_tensor_t "nnc_tensor_t":
        void* data
        int datatype
        int ndim
        Py_ssize_t count
        Py_ssize_t dim[12]
        Py_ssize_t stride[12]
    ctypedef struct c_param_t "nnc_cmd_param_t":
        double a
        int pad[4]
    ctypedef int (*c_exec_f "nnc_cmd_exec_f")(
        const c_param_t*, c_tensor_t**, int, c_tensor_t**, int, void*) noexcept nogil
    ctypedef int (*c_while_f "nnc_graph_while_f")(
        int64_t, c_tensor_t* const*, int, const void*) noexcept nogil
    ctypedef int (*c_case_of_f "nnc_graph_case_of_f")(
        c_tensor_t* const*, int, const void*) noexcept nogil
    enum:
        NNC_ERROR_UNKNOWN, NNC_ERROR_NULL, NNC_ERROR_HANDLE, NNC_ERROR_INDEX,
        NNC_ERROR_ARGUMENT, NNC_ERROR_COMMAND, NNC_ERROR_TENSOR, NNC_ERROR_GRAPH,
        NNC_ERROR_SCHEDULE, NNC_ERROR_STREAM, NNC_ERROR_MEMORY, NNC_ERROR_ABI,
        NNC_PRIORITY_DEFAULT, NNC_BACKEND_CONTIGUOUS


# The message of the last failed call, one per thread (C11 / GNU thread-local storage), so a C
# thread reads its own error even while others fail concurrently.
cdef extern from *:
    """
    static __thread char nnc_capi_message[1024];
    """
    char nnc_capi_message[1024]


# -- the handle table -----------------------------------------------------------------------

cdef enum:
    K_FREE = 0
    K_TENSOR = 1
    K_CMD = 2
    K_GRAPH = 3
    K_EXEC = 4
    K_STREAM = 5
    K_SIGNAL = 6

_KIND_NAMES = ("a freed handle", "nnc_tensor_h", "nnc_cmd_h", "nnc_graph_h", "nnc_graph_exec_h",
               "nnc_stream_h", "nnc_signal_h")

# A handle is (generation << SLOT_BITS) | (slot + 1): never 0 (NULL), and a handle outliving its
# object names a slot whose generation has moved on. Generations start at 1 and wrap below
# GEN_LIMIT, so a stale handle is refused unless its slot was reused 2^31 times (64-bit).
cdef int SLOT_BITS = 32 if sizeof(void*) >= 8 else 20
cdef uintptr_t SLOT_MASK = (<uintptr_t>1 << SLOT_BITS) - 1
cdef uintptr_t GEN_LIMIT = (<uintptr_t>1 << 31) if sizeof(void*) >= 8 else (<uintptr_t>1 << 11)

cdef list _objects = []                 # slot -> the object the handle owns a reference to
cdef list _kinds = []                   # slot -> K_*; K_FREE when the slot is free
cdef list _gens = []                    # slot -> current generation
cdef list _free_slots = []              # free slots, reused last-freed first


class _NullError(NNCError, ValueError):
    """A required pointer or handle is NULL."""


class _HandleError(NNCError, ValueError):
    """A handle is freed, foreign or of another type."""


class _RangeError(NNCError, IndexError):
    """An index or a count is out of range."""


cdef uintptr_t _handle_new(object obj, int kind) except 0:
    cdef Py_ssize_t slot
    if _free_slots:
        slot = _free_slots.pop()
        _objects[slot] = obj
        _kinds[slot] = kind
    else:
        slot = len(_objects)
        if <uintptr_t>slot >= SLOT_MASK:
            raise MemoryError("the nnc handle table is full")
        _objects.append(obj)
        _kinds.append(kind)
        _gens.append(1)
    return (<uintptr_t>_gens[slot] << SLOT_BITS) | <uintptr_t>(slot + 1)


cdef Py_ssize_t _slot(const void* h, int kind, str what) except -1:
    """The slot of a live handle of this kind; raises for NULL, stale, foreign or mistyped."""
    if h == NULL:
        raise _NullError(f"{what} is NULL")
    cdef uintptr_t v = <uintptr_t>h
    cdef Py_ssize_t slot = <Py_ssize_t>(v & SLOT_MASK) - 1
    cdef uintptr_t gen = v >> SLOT_BITS
    if slot < 0 or slot >= len(_objects) or <uintptr_t>_gens[slot] != gen:
        raise _HandleError(f"{what} is not a live nnc handle (freed, or not made by nnc)")
    if _kinds[slot] != kind:
        raise _HandleError(f"{what} is a freed handle" if _kinds[slot] == K_FREE else
                           f"{what} is an {_KIND_NAMES[_kinds[slot]]}, "
                           f"not an {_KIND_NAMES[kind]}")
    return slot


cdef object _get(const void* h, int kind, str what):
    return _objects[_slot(h, kind, what)]


cdef int _retire(Py_ssize_t slot) except -1:
    _objects[slot] = None
    _kinds[slot] = K_FREE
    _gens[slot] = 1 if _gens[slot] + 1 >= <long long>GEN_LIMIT else _gens[slot] + 1
    _free_slots.append(slot)
    return 0


cdef int _handle_free(const void* h, int kind, str what) except -1:
    return _retire(_slot(h, kind, what))


def _live_handles():
    """Number of live handles (tests check that every handle a C program made was freed)."""
    return sum(1 for k in _kinds if k != K_FREE)


# -- errors ---------------------------------------------------------------------------------

cdef void _set_message(str text) noexcept:
    cdef bytes b
    cdef Py_ssize_t n
    try:
        b = text.encode("utf-8", "replace")[:1023]
        n = len(b)
        memcpy(nnc_capi_message, <const char*>b, n)
        nnc_capi_message[n] = 0
    except BaseException:
        nnc_capi_message[0] = 0


_CODES = (
    (_NullError, NNC_ERROR_NULL),
    (_HandleError, NNC_ERROR_HANDLE),
    (_RangeError, NNC_ERROR_INDEX),
    (CommandError, NNC_ERROR_COMMAND),
    (TensorError, NNC_ERROR_TENSOR),
    (GraphError, NNC_ERROR_GRAPH),
    (ScheduleError, NNC_ERROR_SCHEDULE),
    (StreamError, NNC_ERROR_STREAM),
    (MemoryError, NNC_ERROR_MEMORY),
    (IndexError, NNC_ERROR_INDEX),
    (ValueError, NNC_ERROR_ARGUMENT),
    (TypeError, NNC_ERROR_ARGUMENT),
    (OverflowError, NNC_ERROR_ARGUMENT),
)


cdef int _fail(object e) noexcept:
    """The code for exception e, its message stored for nnc_error_message(); never raises."""
    try:
        code = NNC_ERROR_UNKNOWN
        for cls, c in _CODES:
            if isinstance(e, cls):
                code = c
                break
        name = type(e).__name__
        text = str(e) if name.startswith("_") else f"{name}: {e}"
        if e.__cause__ is not None:
            text += f" (caused by {type(e.__cause__).__name__}: {e.__cause__})"
        _set_message(text)
        return code
    except BaseException:
        return NNC_ERROR_UNKNOWN


cdef api const char* nnc_error_message() noexcept nogil:
    """The message of the calling thread's last failed call ("" if none failed)."""
    return nnc_capi_message


# -- argument conversion ---------------------------------------------------------------------

cdef str _text(const char* s, str what):
    if s == NULL:
        raise _NullError(f"{what} is NULL")
    return s.decode("utf-8")


cdef int _check_out(const void* out, str what="out") except -1:
    if out == NULL:
        raise _NullError(f"{what} is NULL")
    return 0


cdef int _check_count(int n, const void* array, str what) except -1:
    if n < 0:
        raise _RangeError(f"{what} size is {n}, must be >= 0")
    if n > 0 and array == NULL:
        raise _NullError(f"{what} is NULL but its size is {n}")
    return 0


cdef list _tensors(const nnc_tensor_h* items, int n, str what):
    """Tensors from a C array of handles; NULL entries are absent tensors (None)."""
    _check_count(n, items, what)
    return [None if items[i] == NULL else _get(items[i], K_TENSOR, f"{what}[{i}]")
            for i in range(n)]


cdef GraphExec _exec_of(Graph g, const void* h, str what):
    """The node behind handle h, which must belong to g."""
    cdef GraphExec e = _get(h, K_EXEC, what)
    if e.graph is not g:
        raise GraphError(f"{what} is a node of another graph")
    return e


cdef list _execs(Graph g, const nnc_graph_exec_h* items, int n, str what):
    _check_count(n, items, what)
    return [_exec_of(g, items[i], f"{what}[{i}]") for i in range(n)]


def _parse_params(str text):
    """``"a=0.5, size=(2, 2)"`` -> dict: keyword arguments of literals only (ast.literal_eval),
    so a parameter string can never run code."""
    if not text.strip():
        return {}
    try:
        call = ast.parse(f"f({text})", mode="eval").body
    except SyntaxError:
        call = None
    if (not isinstance(call, ast.Call) or call.args
            or any(k.arg is None for k in call.keywords)):
        raise ValueError(f"parameters must read 'name=value, ...', not {text!r}")
    try:
        return {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except ValueError:
        raise ValueError(f"parameter values must be literals (numbers, strings, tuples): "
                         f"{text!r}") from None


class _CMemory:
    """Presents caller-owned C memory to NumPy (zero copy); the caller keeps it alive."""

    def __init__(self, uintptr_t data, tuple shape, str typestr):
        self.__array_interface__ = {"data": (data, False), "shape": shape, "typestr": typestr,
                                    "version": 3}


# -- initialisation --------------------------------------------------------------------------

cdef int _layout_ok():
    """The header's structs have the Cython structs' layout (checked at import)."""
    cdef c_tensor_t a
    cdef nnc_tensor_t b
    cdef c_param_t p
    cdef nnc_cmd_param_t q
    return (sizeof(a) == sizeof(b) and sizeof(p) == sizeof(q) and NNC_MAX_DIM_C == 12
            and <char*>&a.count - <char*>&a == <char*>&b.count - <char*>&b
            and <char*>&a.stride - <char*>&a == <char*>&b.stride - <char*>&b
            and <char*>&a.ndim - <char*>&a == <char*>&b.ndim - <char*>&b
            and <char*>&p.pad - <char*>&p == <char*>&q.pad - <char*>&q)


if not _layout_ok():
    raise ImportError("nnc/nnc_types.h does not match nnc/tensor.pxd and nnc/cmd.pxd; rebuild")


cdef api int nnc_abi_check(int version, size_t tensor_size, size_t param_size) noexcept with gil:
    """Called by nnc_init(): the caller's nnc.h agrees with this build."""
    if version != NNC_ABI_VERSION or tensor_size != sizeof(c_tensor_t) \
            or param_size != sizeof(c_param_t):
        _set_message(f"nnc.h ABI {version} (tensor {tensor_size} B, param {param_size} B) does "
                     f"not match the installed nnc ABI {NNC_ABI_VERSION} (tensor "
                     f"{sizeof(c_tensor_t)} B, param {sizeof(c_param_t)} B): rebuild against "
                     "the headers in nnc.get_include()")
        return NNC_ERROR_ABI
    return 0


cdef api int nnc_shutdown() noexcept with gil:
    """Drop every handle and drain every stream (nnc_finalize calls it before Py_FinalizeEx)."""
    try:
        for slot in range(len(_objects)):
            if _kinds[slot] == K_STREAM:
                (<Stream>_objects[slot])._drain()
        for slot in range(len(_objects)):
            if _kinds[slot] != K_FREE:
                _retire(slot)
        return 0
    except BaseException as e:
        return _fail(e)


# -- tensors ---------------------------------------------------------------------------------

cdef api int nnc_tensor_new(nnc_tensor_h* out, void* data, int datatype, int ndim,
                            const int64_t* dims) noexcept with gil:
    """A tensor over caller-owned C-contiguous memory (zero copy). NNC: ccv_nnc_tensor_new."""
    try:
        _check_out(out)
        if data == NULL:
            raise _NullError("data is NULL")
        name = DATATYPE_NAMES.get(datatype)
        if name is None:
            raise ValueError(f"datatype 0x{datatype:x} is not one of the NNC_* datatype codes")
        if ndim < 0 or ndim > NNC_MAX_DIM_C:
            raise _RangeError(f"ndim is {ndim}, must be in [0, {NNC_MAX_DIM_C}]")
        _check_count(ndim, dims, "dims")
        shape = tuple(dims[i] for i in range(ndim))
        if any(d < 0 for d in shape):
            raise ValueError(f"dims {shape} has a negative size")
        array = np.asarray(_CMemory(<uintptr_t>data, shape, np.dtype(name).str))
        out[0] = <nnc_tensor_h>_handle_new(Tensor(array), K_TENSOR)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_tensor_free(nnc_tensor_h tensor) noexcept with gil:
    """Release the handle; graphs and commands using the tensor keep it alive."""
    try:
        return _handle_free(tensor, K_TENSOR, "tensor")
    except BaseException as e:
        return _fail(e)


cdef api int nnc_tensor_get(nnc_tensor_h tensor, c_tensor_t* out) noexcept with gil:
    """Copy the tensor's C view (data pointer, datatype, shape, strides) into out."""
    try:
        _check_out(out)
        t = <Tensor>_get(tensor, K_TENSOR, "tensor")
        memcpy(out, &t.t, sizeof(c_tensor_t))
        return 0
    except BaseException as e:
        return _fail(e)


# -- commands --------------------------------------------------------------------------------

cdef api int nnc_cmd_new(nnc_cmd_h* out, const char* name, const char* params) noexcept with gil:
    """A command by name; params: "key=value, ..." literals, or NULL. NNC: ccv_nnc_cmd."""
    try:
        _check_out(out)
        kwargs = _parse_params("" if params == NULL else _text(params, "params"))
        out[0] = <nnc_cmd_h>_handle_new(Cmd(_text(name, "name"), **kwargs), K_CMD)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_cmd_free(nnc_cmd_h cmd) noexcept with gil:
    try:
        return _handle_free(cmd, K_CMD, "cmd")
    except BaseException as e:
        return _fail(e)


cdef api int nnc_cmd_exec(nnc_cmd_h cmd, const nnc_tensor_h* inputs, int input_size,
                          const nnc_tensor_h* outputs, int output_size,
                          nnc_stream_h stream) noexcept with gil:
    """Run one command now, or enqueue it on stream (not NULL). NNC: ccv_nnc_cmd_exec."""
    try:
        c = _get(cmd, K_CMD, "cmd")
        ins = _tensors(inputs, input_size, "inputs")
        outs = _tensors(outputs, output_size, "outputs")
        s = None if stream == NULL else _get(stream, K_STREAM, "stream")
        cmd_exec(c, ins, outs, stream=s)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_cmd_register(const char* name, const char* inplace) noexcept with gil:
    """Register a new command (no shape check: its backends check what they need).
    inplace: "none", "allow", "enforce" or "any"; NULL means "none". NNC: REGISTER_COMMAND."""
    try:
        mode = "none" if inplace == NULL else _text(inplace, "inplace")
        register_command(_text(name, "name"), inplace=mode)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_cmd_backend_register(const char* command, const char* backend, c_exec_f fn,
                                      int datatypes, int flags, int priority) noexcept with gil:
    """Make the C function fn backend ``backend`` of ``command`` (re-registering a name
    replaces it). datatypes: OR of NNC_* codes, 0 for all. It runs without the GIL on stream
    workers (and on large tensors elsewhere). NNC: REGISTER_COMMAND_BACKEND."""
    try:
        if fn == NULL:
            raise _NullError("fn is NULL")
        all_types = 0
        for code in DATATYPE_NAMES:
            all_types |= code
        if datatypes & ~all_types:
            raise ValueError(f"datatypes 0x{datatypes:x} has bits that are no NNC_* datatype")
        if flags & ~NNC_BACKEND_CONTIGUOUS:
            raise ValueError(f"flags 0x{flags:x} has unknown bits")
        if priority < 0 and priority != NNC_PRIORITY_DEFAULT:
            raise ValueError(f"priority {priority} must be >= 0 or NNC_PRIORITY_DEFAULT")
        register_c_backend(_text(command, "command"), _text(backend, "backend"),
                           <nnc_cmd_exec_f>fn, datatypes or all_types,
                           bool(flags & NNC_BACKEND_CONTIGUOUS), None,
                           None if priority == NNC_PRIORITY_DEFAULT else priority, True)
        return 0
    except BaseException as e:
        return _fail(e)


# -- streams and signals ---------------------------------------------------------------------

cdef str _kind(const char* kind):
    """A stream or signal kind: NULL means "cpu"; an unknown kind is a bad argument."""
    text = "cpu" if kind == NULL else _text(kind, "kind")
    if text != "cpu" and text != "gpu" and not text.startswith("gpu:"):
        raise ValueError(f"unknown stream kind {text!r}; expected 'cpu', 'gpu' or 'gpu:N'")
    return text


cdef api int nnc_stream_new(const char* kind, nnc_stream_h* out) noexcept with gil:
    """A stream: "cpu" (NULL means "cpu"). NNC: ccv_nnc_stream_context_new."""
    try:
        _check_out(out)
        out[0] = <nnc_stream_h>_handle_new(Stream(_kind(kind)), K_STREAM)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_stream_free(nnc_stream_h stream) noexcept with gil:
    """Release the handle; work already enqueued still runs. NNC: ccv_nnc_stream_context_free."""
    try:
        return _handle_free(stream, K_STREAM, "stream")
    except BaseException as e:
        return _fail(e)


cdef api int nnc_stream_wait(nnc_stream_h stream) noexcept with gil:
    """Block (without the GIL) until the stream's work is done; NNC_ERROR_STREAM if some of it
    failed. NNC: ccv_nnc_stream_context_wait."""
    try:
        (<Stream>_get(stream, K_STREAM, "stream")).wait()
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_stream_query(nnc_stream_h stream, int* done) noexcept with gil:
    """*done = 1 if the stream has no pending work, else 0."""
    try:
        _check_out(done, "done")
        done[0] = 1 if (<Stream>_get(stream, K_STREAM, "stream")).query() else 0
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_signal_new(const char* kind, nnc_signal_h* out) noexcept with gil:
    """A signal (NULL kind means "cpu"). NNC: ccv_nnc_stream_signal_new."""
    try:
        _check_out(out)
        out[0] = <nnc_signal_h>_handle_new(Signal(_kind(kind)), K_SIGNAL)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_signal_free(nnc_signal_h signal) noexcept with gil:
    try:
        return _handle_free(signal, K_SIGNAL, "signal")
    except BaseException as e:
        return _fail(e)


cdef api int nnc_stream_emit_signal(nnc_stream_h stream, nnc_signal_h signal) noexcept with gil:
    """Record signal on stream. NNC: ccv_nnc_stream_context_emit_signal."""
    try:
        s = _get(stream, K_STREAM, "stream")
        s.emit(_get(signal, K_SIGNAL, "signal"))
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_stream_wait_signal(nnc_stream_h stream, nnc_signal_h signal) noexcept with gil:
    """Make stream wait for signal's latest record (none: no wait).
    NNC: ccv_nnc_stream_context_wait_signal."""
    try:
        s = _get(stream, K_STREAM, "stream")
        s.wait_signal(_get(signal, K_SIGNAL, "signal"))
        return 0
    except BaseException as e:
        return _fail(e)


# -- graphs ----------------------------------------------------------------------------------

cdef api int nnc_graph_new(nnc_graph_h* out) noexcept with gil:
    """An empty concrete graph. NNC: ccv_nnc_graph_new."""
    try:
        _check_out(out)
        out[0] = <nnc_graph_h>_handle_new(Graph(), K_GRAPH)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_free(nnc_graph_h graph) noexcept with gil:
    """Release the handle; a run in progress, a parent loop or node handles keep the graph
    alive. NNC: ccv_nnc_graph_free."""
    try:
        return _handle_free(graph, K_GRAPH, "graph")
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_exec_new(nnc_graph_h graph, nnc_cmd_h cmd, const nnc_tensor_h* inputs,
                                int input_size, const nnc_tensor_h* outputs, int output_size,
                                nnc_graph_exec_h* out) noexcept with gil:
    """Add a node running cmd; shapes, dtypes and aliasing are checked now.
    NNC: ccv_nnc_graph_exec_new."""
    try:
        _check_out(out)
        g = _get(graph, K_GRAPH, "graph")
        e = g.exec(_get(cmd, K_CMD, "cmd"), _tensors(inputs, input_size, "inputs"),
                   _tensors(outputs, output_size, "outputs"))
        out[0] = <nnc_graph_exec_h>_handle_new(e, K_EXEC)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_exec_free(nnc_graph_exec_h exec) noexcept with gil:
    """Release a node handle (the node stays in its graph)."""
    try:
        return _handle_free(exec, K_EXEC, "exec")
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_exec_count(nnc_graph_h graph, int* count) noexcept with gil:
    """*count = the number of nodes of graph."""
    try:
        _check_out(count, "count")
        count[0] = len((<Graph>_get(graph, K_GRAPH, "graph")).execs)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_exec_get(nnc_graph_h graph, int index,
                                nnc_graph_exec_h* out) noexcept with gil:
    """A new handle to node index (creation order, 0-based) of graph."""
    try:
        _check_out(out)
        execs = (<Graph>_get(graph, K_GRAPH, "graph")).execs
        if index < 0 or index >= len(execs):
            raise _RangeError(f"node index {index} is out of range [0, {len(execs)})")
        out[0] = <nnc_graph_exec_h>_handle_new(execs[index], K_EXEC)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_exec_concat(nnc_graph_h graph, nnc_graph_exec_h source,
                                   nnc_graph_exec_h destination) noexcept with gil:
    """source runs before destination. NNC: ccv_nnc_graph_exec_concat."""
    try:
        g = _get(graph, K_GRAPH, "graph")
        g.concat(_exec_of(g, source, "source"), _exec_of(g, destination, "destination"))
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_exec_disjoin(nnc_graph_h graph, nnc_graph_exec_h source,
                                    nnc_graph_exec_h destination) noexcept with gil:
    """Remove the edge source -> destination. NNC: ccv_nnc_graph_exec_disjoin."""
    try:
        g = _get(graph, K_GRAPH, "graph")
        g.disjoin(_exec_of(g, source, "source"), _exec_of(g, destination, "destination"))
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_set_sources(nnc_graph_h graph, const nnc_graph_exec_h* sources,
                                   int source_size) noexcept with gil:
    """Set the run's sources; size 0 restores the default. NNC: ccv_nnc_graph_set_sources."""
    try:
        g = _get(graph, K_GRAPH, "graph")
        g.sources = _execs(g, sources, source_size, "sources") or None
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_set_destinations(nnc_graph_h graph,
                                        const nnc_graph_exec_h* destinations,
                                        int destination_size) noexcept with gil:
    """Set the run's destinations; size 0 restores the default.
    NNC: ccv_nnc_graph_set_destinations."""
    try:
        g = _get(graph, K_GRAPH, "graph")
        g.destinations = _execs(g, destinations, destination_size, "destinations") or None
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_run(nnc_graph_h graph, nnc_stream_h stream) noexcept with gil:
    """stream NULL: run now on this thread. Else enqueue the run (on the graph's static
    schedule, if it has one) and return; nnc_stream_wait(stream) joins it.
    NNC: ccv_nnc_graph_run."""
    try:
        g = _get(graph, K_GRAPH, "graph")
        g.run(stream=None if stream == NULL else _get(stream, K_STREAM, "stream"))
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_static_schedule(nnc_graph_h graph, const char* stream_type,
                                       int max_streams) noexcept with gil:
    """Build the graph's default static schedule (sub-graphs included); stream_type NULL
    means "cpu", max_streams 0 no limit. NNC: ccv_nnc_graph_set_default_static_schedule."""
    try:
        static_schedule(_get(graph, K_GRAPH, "graph"),
                        "cpu" if stream_type == NULL else _text(stream_type, "stream_type"),
                        max_streams)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_schedule_info(nnc_graph_h graph, int* stream_count,
                                     int* signal_count) noexcept with gil:
    """The default schedule's stream and signal counts (either pointer may be NULL)."""
    try:
        sched = (<Graph>_get(graph, K_GRAPH, "graph")).schedule
        if sched is None:
            raise ScheduleError("the graph has no static schedule; call "
                                "nnc_graph_static_schedule first")
        if stream_count != NULL:
            stream_count[0] = sched.stream_count
        if signal_count != NULL:
            signal_count[0] = sched.signal_count
        return 0
    except BaseException as e:
        return _fail(e)


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
            raise _RangeError(f"a C expression takes at most 64 inputs, not {len(tensors)}")
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
        _check_out(out)
        g = _get(graph, K_GRAPH, "graph")
        out[0] = <nnc_graph_exec_h>_handle_new(g.while_(_get(body, K_GRAPH, "body")), K_EXEC)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_set_while_expr(nnc_graph_h body, c_while_f expr, const void* data,
                                      const nnc_tensor_h* inputs, int input_size,
                                      const nnc_graph_exec_h* breakpoints,
                                      int breakpoint_size) noexcept with gil:
    """On a loop body: expr(count, inputs, input_size, data) runs after the breakpoints; data
    is passed through untouched. NNC: ccv_nnc_graph_set_while_expr."""
    try:
        b = _get(body, K_GRAPH, "body")
        if expr == NULL:
            raise _NullError("expr is NULL")
        ins = _tensors(inputs, input_size, "inputs")
        f = _CExpr()
        f.while_fn = expr
        f.data = data
        b.set_while_expr(f._set_tensors(ins), ins, _execs(b, breakpoints, breakpoint_size,
                                                          "breakpoints"))
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_while_count(nnc_graph_h body, int64_t* count) noexcept with gil:
    """On a loop body: the count at which its last run ended."""
    try:
        _check_out(count, "count")
        count[0] = _get(body, K_GRAPH, "body").while_count
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_add_carry_over(nnc_graph_h body, nnc_tensor_h source,
                                      nnc_tensor_h destination) noexcept with gil:
    """On a loop body: from the second iteration on, destination aliases the memory source
    held at the end of the previous one. NNC: ccv_nnc_graph_add_carry_over."""
    try:
        _get(body, K_GRAPH, "body").add_carry_over(_get(source, K_TENSOR, "source"),
                                                   _get(destination, K_TENSOR, "destination"))
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_case_of_new(nnc_graph_h graph, const nnc_tensor_h* inputs,
                                   int input_size, const nnc_tensor_h* outputs, int output_size,
                                   nnc_graph_exec_h* out) noexcept with gil:
    """Add a case..of node over inputs -> outputs. NNC: ccv_nnc_graph_case_of_new."""
    try:
        _check_out(out)
        g = _get(graph, K_GRAPH, "graph")
        e = g.case_of(_tensors(inputs, input_size, "inputs"),
                      _tensors(outputs, output_size, "outputs"))
        out[0] = <nnc_graph_exec_h>_handle_new(e, K_EXEC)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_set_case_of_expr(nnc_graph_h graph, nnc_graph_exec_h exec,
                                        c_case_of_f expr, const void* data,
                                        int offset) noexcept with gil:
    """index = offset + expr(node inputs, input_size, data); < 0 runs no branch.
    NNC: ccv_nnc_graph_set_case_of_expr."""
    try:
        g = _get(graph, K_GRAPH, "graph")
        e = _exec_of(g, exec, "exec")
        if expr == NULL:
            raise _NullError("expr is NULL")
        f = _CExpr()
        f.case_of_fn = expr
        f.data = data
        g.set_case_of_expr(e, f._set_tensors(e.inputs), offset)
        return 0
    except BaseException as e:
        return _fail(e)


cdef api int nnc_graph_set_case_of(nnc_graph_h graph, nnc_graph_exec_h exec, nnc_graph_h branch,
                                   int index) noexcept with gil:
    """Make branch the branch index (>= 0) of case..of node exec. NNC: ccv_nnc_graph_set_case_of."""
    try:
        g = _get(graph, K_GRAPH, "graph")
        e = _exec_of(g, exec, "exec")
        if index < 0:
            raise _RangeError(f"branch index {index} must be >= 0")
        g.set_case_of(e, _get(branch, K_GRAPH, "branch"), index)
        return 0
    except BaseException as e:
        return _fail(e)
