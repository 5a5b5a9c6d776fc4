"""The C API's handle table, per-thread error messages and argument conversion.

NNC: none (NNC hands out raw pointers; nnc hands out checked handles). A handle is a number that
names a slot of the table below: the slot holds one reference to the Python object, its kind
and a generation that changes when the handle is freed, so a freed, foreign or mistyped handle
is refused without being dereferenced. State owned here: the table (guarded by the GIL) and
each thread's last error message. nnc/capi/capi.pyx, the exported functions, is the only user.
"""

from cpython.object cimport PyObject
from libc.stdint cimport uintptr_t
from libc.stdlib cimport realloc
from libc.string cimport memcpy

import ast

from nnc.base.core import (
    CommandError,
    CUDAError,
    EngineError,
    GraphError,
    NNCError,
    ScheduleError,
    StreamError,
    TensorError,
)
from nnc.base.device import DeviceError
from nnc.tensor.io import TensorIOError


# The message of the last failed call, one per thread (C11 / GNU thread-local storage), so a C
# thread reads its own error even while others fail concurrently.
cdef extern from *:
    """
    static __thread char nnc_capi_message[1024];
    """
    char nnc_capi_message[1024]


# -- the handle table -----------------------------------------------------------------------

_KIND_NAMES = ("a freed handle", "nnc_tensor_h", "nnc_cmd_h", "nnc_graph_h", "nnc_graph_exec_h",
               "nnc_stream_h", "nnc_signal_h", "nnc_engine_h", "nnc_engine_var_h",
               "nnc_graph_static_schedule_h")

# A handle is (generation << SLOT_BITS) | (slot + 1): never 0 (NULL), and a handle outliving its
# object names a slot whose generation has moved on. Generations start at 1 and wrap below
# GEN_LIMIT, so a stale handle is refused unless its slot was reused 2^31 times (64-bit).
cdef int SLOT_BITS = 32 if sizeof(void*) >= 8 else 20
cdef uintptr_t SLOT_MASK = (<uintptr_t>1 << SLOT_BITS) - 1
cdef uintptr_t GEN_LIMIT = (<uintptr_t>1 << 31) if sizeof(void*) >= 8 else (<uintptr_t>1 << 11)

# One entry per slot, [object, kind, generation]: the object is the one reference the handle
# owns, kind is K_FREE for a free slot. Entries are appended whole and edited in place, and an
# object is released only after its entry is consistent: releasing may run Python code (a
# finalizer) and so let another thread in, which must never see a half-updated slot.
cdef list _table = []
cdef list _free_slots = []              # free slots, reused last-freed first


# The table's C mirror, for handle_peek: slot i is (generation, kind, object) of _table[i],
# the object borrowed from the entry (NULL while free). Written with the entry, before anything
# that may run Python code; same lock (the GIL).
ctypedef struct slot_t:
    uintptr_t generation
    int kind
    PyObject* obj
cdef slot_t* _slots = NULL
cdef Py_ssize_t _cap_slots = 0


class NullError(NNCError, ValueError):
    """A required pointer or handle is NULL."""


class HandleError(NNCError, ValueError):
    """A handle is freed, foreign or of another type."""


class RangeError(NNCError, IndexError):
    """An index or a count is out of range."""


cdef int _slots_reserve(Py_ssize_t n) except -1:
    """Room for n slots in the mirror (before the table grows to n entries)."""
    global _slots, _cap_slots
    cdef slot_t* grown
    cdef Py_ssize_t cap
    if n > _cap_slots:
        cap = max(64, 2 * _cap_slots, n)
        grown = <slot_t*>realloc(_slots, sizeof(slot_t) * cap)
        if grown == NULL:
            raise MemoryError()
        _slots, _cap_slots = grown, cap
    return 0


cdef size_t handle_new(object obj, int kind) except 0:
    cdef Py_ssize_t slot
    cdef list entry
    _slots_reserve(len(_table) + 1)
    if _free_slots:
        slot = _free_slots.pop()
        entry = _table[slot]
        entry[0] = obj                  # was None: nothing is released here
        entry[1] = kind
    else:
        if <uintptr_t>len(_table) >= SLOT_MASK:
            raise MemoryError("the nnc handle table is full")
        entry = [obj, kind, 1]
        _table.append(entry)            # nothing between these two lines can run Python code
        slot = len(_table) - 1
    _slots[slot].generation = <uintptr_t>entry[2]
    _slots[slot].kind = kind
    _slots[slot].obj = <PyObject*>obj
    return (<uintptr_t>entry[2] << SLOT_BITS) | <uintptr_t>(slot + 1)


cdef list _entry(const void* h, int kind, str what):
    """The entry of a live handle of this kind; raises for NULL, stale, foreign or mistyped."""
    if h == NULL:
        raise NullError(f"{what} is NULL")
    cdef uintptr_t v = <uintptr_t>h
    cdef Py_ssize_t slot = <Py_ssize_t>(v & SLOT_MASK) - 1
    if slot < 0 or slot >= len(_table) or <uintptr_t>_table[slot][2] != v >> SLOT_BITS:
        raise HandleError(f"{what} is not a live nnc handle (freed, or not made by nnc)")
    cdef list entry = _table[slot]
    if entry[1] != kind:
        raise HandleError(f"{what} is a freed handle" if entry[1] == K_FREE else
                          f"{what} is an {_KIND_NAMES[entry[1]]}, not an {_KIND_NAMES[kind]}")
    return entry


cdef object handle_get(const void* h, int kind, str what):
    return _entry(h, kind, what)[0]


cdef PyObject* handle_peek(const void* h, int kind) noexcept:
    """handle_get's object (borrowed: the table keeps it while the handle lives), or NULL for
    any handle handle_get refuses (then ask it for the message). Plain C: a hot path's
    lookup."""
    cdef uintptr_t v = <uintptr_t>h
    cdef Py_ssize_t slot = <Py_ssize_t>(v & SLOT_MASK) - 1
    if h == NULL or slot < 0 or slot >= len(_table):
        return NULL
    if _slots[slot].generation != v >> SLOT_BITS or _slots[slot].kind != kind:
        return NULL
    return _slots[slot].obj


cdef int _retire(Py_ssize_t slot) except -1:
    cdef list entry = _table[slot]
    obj = entry[0]                      # released last, by the del below
    entry[0] = None
    entry[1] = K_FREE
    entry[2] = 1 if entry[2] + 1 >= <long long>GEN_LIMIT else entry[2] + 1
    _slots[slot].generation = <uintptr_t>entry[2]
    _slots[slot].kind = K_FREE
    _slots[slot].obj = NULL
    _free_slots.append(slot)
    del obj
    return 0


cdef int handle_free(const void* h, int kind, str what) except -1:
    _entry(h, kind, what)
    return _retire(<Py_ssize_t>(<uintptr_t>h & SLOT_MASK) - 1)


cdef int handle_release(const void* h, int kind, str what) noexcept:
    """handle_free for the nnc_*_free functions: 0, or the error code with its message."""
    try:
        return handle_free(h, kind, what)
    except BaseException as e:
        return capi_fail(e)


cdef int handle_clear() except -1:
    """Free every live handle (nnc_shutdown)."""
    for slot in range(len(_table)):
        if _table[slot][1] != K_FREE:
            _retire(slot)
    return 0


def live_objects(int kind):
    """The objects of live handles of one kind (K_*), for nnc_shutdown."""
    return [e[0] for e in _table if e[1] == kind]


def live_handles():
    """Number of live handles (tests check that every handle a C program made was freed)."""
    return sum(1 for e in _table if e[1] != K_FREE)


# -- errors ---------------------------------------------------------------------------------

cdef const char* capi_message() noexcept nogil:
    """The calling thread's last error message ("" if none)."""
    return nnc_capi_message


cdef int capi_set_message(str text) noexcept:
    """Store text (truncated to 1023 UTF-8 bytes) as this thread's message."""
    cdef bytes b
    cdef Py_ssize_t n
    try:
        b = text.encode("utf-8", "replace")[:1023]
        n = len(b)
        memcpy(nnc_capi_message, <const char*>b, n)
        nnc_capi_message[n] = 0
    except BaseException:
        nnc_capi_message[0] = 0
    return 0


_CODES = (
    (TensorIOError, NNC_ERROR_IO),      # an OSError: before the ValueErrors below
    (DeviceError, NNC_ERROR_ARGUMENT),  # a bad device string is a bad argument, not a tensor
    (NullError, NNC_ERROR_NULL),
    (HandleError, NNC_ERROR_HANDLE),
    (RangeError, NNC_ERROR_INDEX),
    (CommandError, NNC_ERROR_COMMAND),
    (TensorError, NNC_ERROR_TENSOR),
    (GraphError, NNC_ERROR_GRAPH),
    (ScheduleError, NNC_ERROR_SCHEDULE),
    (StreamError, NNC_ERROR_STREAM),
    (EngineError, NNC_ERROR_ENGINE),
    (CUDAError, NNC_ERROR_CUDA),
    (MemoryError, NNC_ERROR_MEMORY),
    (IndexError, NNC_ERROR_INDEX),
    (ValueError, NNC_ERROR_ARGUMENT),
    (TypeError, NNC_ERROR_ARGUMENT),
    (OverflowError, NNC_ERROR_ARGUMENT),
)


cdef int capi_fail(object e) noexcept:
    """The code for exception e, its message stored for nnc_error_message(); never raises."""
    try:
        code = NNC_ERROR_UNKNOWN
        for cls, c in _CODES:
            if isinstance(e, cls):
                code = c
                break
        # The C API's own errors speak for themselves; nnc's say which kind they are.
        name = type(e).__name__
        text = str(e) if isinstance(e, (NullError, HandleError, RangeError)) else f"{name}: {e}"
        if e.__cause__ is not None:
            text += f" (caused by {type(e.__cause__).__name__}: {e.__cause__})"
        capi_set_message(text)
        return code
    except BaseException:
        return NNC_ERROR_UNKNOWN


# -- argument conversion ---------------------------------------------------------------------

cdef str arg_text(const char* s, str what):
    if s == NULL:
        raise NullError(f"{what} is NULL")
    return s.decode("utf-8")


cdef int arg_out(const void* out, str what="out") except -1:
    if out == NULL:
        raise NullError(f"{what} is NULL")
    return 0


cdef int arg_count(int n, const void* array, str what) except -1:
    if n < 0:
        raise RangeError(f"{what} size is {n}, must be >= 0")
    if n > 0 and array == NULL:
        raise NullError(f"{what} is NULL but its size is {n}")
    return 0


cdef list arg_tensors(const nnc_tensor_h* items, int n, str what):
    """Tensors from a C array of handles; NULL entries are absent tensors (None)."""
    arg_count(n, items, what)
    return [None if items[i] == NULL else handle_get(items[i], K_TENSOR, f"{what}[{i}]")
            for i in range(n)]


cdef GraphExec arg_exec(Graph g, const void* h, str what):
    """The node behind handle h, which must belong to g."""
    cdef GraphExec e = handle_get(h, K_EXEC, what)
    if e.graph is not g:
        raise GraphError(f"{what} is a node of another graph")
    return e


cdef list arg_execs(Graph g, const nnc_graph_exec_h* items, int n, str what):
    arg_count(n, items, what)
    return [arg_exec(g, items[i], f"{what}[{i}]") for i in range(n)]


def parse_params(str text):
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
