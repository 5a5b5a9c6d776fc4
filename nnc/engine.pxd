# MXNet's mutation-aware dependency engine on nnc's streams (docs/engine.md): the C state of
# vars, ops and an engine. Ownership and locks are written on each struct.

from cpython.object cimport PyObject

from nnc.cmd cimport nnc_cmd_exec_f, nnc_cmd_param_t
from nnc.record cimport signal_record_t
from nnc.sync cimport pthread_mutex_t
from nnc.tensor cimport nnc_tensor_t
from nnc.worker cimport stream_t, stream_task_t


cdef enum:
    OP_NONE = 0                         # nothing to run (a NOOP command, a delete without hook)
    OP_PY = 1                           # fn(*args) under the GIL (a Python fn, on_delete, or a
    #                                     command's Python backend)
    OP_C = 2                            # rc = cfn(arg), without the GIL
    OP_CMD_C = 3                        # rc = c_exec(param, io, ...), without the GIL

cdef enum:
    LANES_MAX = 64                      # bound on an engine's lane streams


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


cdef class Engine:
    cdef engine_t* e                    # shared with its vars and in-flight ops (a reference)
    cdef readonly bint naive            # ops run synchronously in push (MXNet's NaiveEngine)
    cdef readonly bint closed
    # Lanes: this engine's CPU streams, made up front (a stream costs no thread), so a push
    # never makes Python objects while it changes state. Host only (GIL).
    cdef list _lanes
    cdef stream_t* lane_s[LANES_MAX]
    cdef long long lane_tail[LANES_MAX]  # seq of the last op pushed on each lane
    cdef int n_lanes
    cdef void** cand                    # push scratch: the ops a push depends on
    cdef Py_ssize_t cap_cand
    cdef stream_task_t* tasks           # push scratch: the tasks it enqueues
    cdef Py_ssize_t cap_tasks
    cdef int n_vars
    cdef object _last_cfn               # the last C fn pushed (a CFUNC), and its address
    cdef size_t _last_addr
    cdef long long _stamp               # bumped by 2 per _vars call: var_t.stamp values
    cdef dict _streams                  # caller's streams used since the last wait_all
    cdef dict _buffers                  # (device, lo, hi) -> [var, vars it overlaps]
    cdef list _recording                # entries of the active record() region, or None

    cdef int _commit(self, op_t* op, tuple reads, tuple muts, object stream) except -1
    cdef int _pick_lane(self, Py_ssize_t nc) noexcept
    cdef int _check_var(self, object v, str what) except -1
    cdef tuple _vars(self, object read, object mutate)
    cdef object _check_stream(self, object stream)
    cdef int _finish_push(self, object stream) except -1
    cdef list _buffer(self, object tensor)
    cdef bint _drain(self, double limit) except -1
