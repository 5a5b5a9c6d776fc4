# The C state of nnc.Engine (docs/engine.md): vars, ops, an engine's shared state, and the
# functions nnc.engine drives them with. Ownership and locks are written on each struct.

from cpython.object cimport PyObject

from nnc.cmd cimport nnc_cmd_exec_f, nnc_cmd_param_t
from nnc.record cimport signal_record_t
from nnc.sync cimport pthread_mutex_t
from nnc.tensor cimport nnc_tensor_t


# Atomics on fields several threads touch (see each struct): GCC/Clang builtins.
cdef extern from *:
    """
    static inline int nnc_engine_add(int* p, int v) {
        return __atomic_add_fetch(p, v, __ATOMIC_ACQ_REL);
    }
    static inline void nnc_engine_bump(long long* p) {
        __atomic_add_fetch(p, 1, __ATOMIC_RELEASE);
    }
    static inline long long nnc_engine_load(long long* p) {
        return __atomic_load_n(p, __ATOMIC_ACQUIRE);
    }
    static inline void nnc_engine_set(int* p) {
        __atomic_store_n(p, 1, __ATOMIC_SEQ_CST);
    }
    static inline int nnc_engine_state(int* p) {
        return __atomic_load_n(p, __ATOMIC_RELAXED);
    }
    """
    int nnc_engine_add(int* p, int v) noexcept nogil
    void nnc_engine_bump(long long* p) noexcept nogil
    long long nnc_engine_load(long long* p) noexcept nogil
    int nnc_engine_state(int* p) noexcept nogil
    void nnc_engine_set(int* p) noexcept nogil


cdef enum:
    OP_NONE = 0                         # nothing to run (a NOOP command, a delete without hook)
    OP_PY = 1                           # fn(*args) under the GIL (a Python fn, on_delete, or a
    #                                     command's Python backend)
    OP_C = 2                            # rc = cfn(arg), without the GIL
    OP_CMD_C = 3                        # rc = c_exec(param, io, ...), without the GIL

# A var's dependency state. Lives inside its EngineVar; every field but ``version`` is read and
# written by the host only, with the GIL held (push, wait, delete). ``version`` is bumped by the
# op that writes the var, on a worker (writers of one var never overlap: each waits for the one
# before), atomically, and read atomically by the host.
ctypedef struct var_t:
    long long version                   # completed writes
    int deleted                         # delete_var was pushed: any later use is an error
    long long stamp                     # host scratch: finds a var named twice in one push
    void* last_writer                   # op_t* (a reference), or NULL: never written
    void** readers                      # op_t* references: readers pushed since last_writer
    Py_ssize_t n_readers
    Py_ssize_t cap_readers
    PyObject* owner                     # the EngineVar holding this struct (borrowed)


# One pushed operation. Made and recycled by the host (GIL held, through its engine's free
# list); run once by a worker (or the pushing thread, naive engine), which writes only
# ``failed``, ``err`` and the versions, then marks ``record`` done and hands the op back on its
# engine's retired list. Invariant: refs counts 1 while not yet reclaimed by the host + each
# var naming it (last_writer, readers) + each op not yet reclaimed that holds it in deps;
# only the host changes refs.
cdef struct op_t:
    int refs
    int kind                            # OP_*
    int failed                          # 1: failed or skipped; err is then set (worker writes
    #                                     it before the record is done, readers read it after)
    PyObject* err                       # the EngineError (owned), or NULL
    signal_record_t* record             # done once the op has completed (owned reference)
    void* engine                        # engine_t* (the op holds a reference while in flight)
    void* queue                         # stream_t* it was enqueued on (compared, never used)
    long long seq                       # push number within its engine
    long long mark                      # host scratch: dedupes deps within one push
    int lane                            # the engine lane it went to, or -1
    int (*cfn)(void*) noexcept nogil    # OP_C
    void* arg                           # OP_C
    nnc_cmd_exec_f c_exec               # OP_CMD_C
    const nnc_cmd_param_t* param
    nnc_tensor_t** io                   # OP_CMD_C: into buf
    int n_in
    int n_out
    void* context                       # OP_CMD_C: the running stream's workspace context
    PyObject* fn                        # OP_PY callable (owned) or NULL
    PyObject* args                      # OP_PY argument tuple (owned) or NULL
    PyObject* keep                      # what must outlive the run (owned) or NULL
    PyObject* name                      # the op's name (owned str) or NULL
    op_t** deps                         # ops whose vars this reads (referenced; error check)
    int n_deps
    var_t** muts                        # vars this writes (their EngineVars referenced)
    int n_muts
    void** buf                          # storage for deps, muts and io; kept across reuse
    Py_ssize_t buf_cap
    op_t* next                          # free list (host) or retired list (engine lock)


# An engine's shared C state: outlives its Engine object while ops are in flight.
cdef struct engine_t:
    int refs                            # atomic: the Engine + every EngineVar + ops in flight
    pthread_mutex_t lock                # guards retired only
    op_t* retired                       # completed ops the host has not reclaimed yet
    op_t* free_ops                      # recycled ops; host only (GIL)
    PyObject* errors                    # list of EngineErrors since the last wait_all; GIL
    long long pushed                    # ops ever pushed; host only
    int orphan                          # atomic: the Engine is gone, so whoever retires an
    #                                     op reclaims it (with the GIL): a retired op holds
    #                                     its vars, which hold this struct (a cycle otherwise)
    # References to drop once the host's state is consistent again (GIL, host only): dropping
    # one may run any Python code, even a push, so reclaiming moves them here instead.
    PyObject** trash
    Py_ssize_t n_trash
    Py_ssize_t cap_trash


cdef class EngineVar:
    cdef var_t v
    cdef engine_t* e                    # its engine (a reference)
    cdef readonly int id                # creation number within its engine


# Workers: run one op (a TASK_CALL's function, or called inline by the naive engine).
cdef void op_run(void* p) noexcept nogil
# Host (GIL held): an engine's C state, ops and their recycling. None of these runs Python
# code; references they let go of wait on the engine's trash list until trash_flush.
cdef engine_t* engine_new() except NULL
cdef void engine_unref(engine_t* e) noexcept nogil
cdef op_t* op_new(engine_t* e, Py_ssize_t slots) except NULL
cdef void op_unref(engine_t* e, op_t* op) noexcept
cdef void op_discard(engine_t* e, op_t* op) noexcept
cdef void op_abort(op_t* op, object exc) noexcept
cdef int readers_add(engine_t* e, var_t* v, op_t* op) except -1
cdef void reclaim(engine_t* e) noexcept
cdef void trash_flush(engine_t* e) noexcept  # may run any Python code
