# The C state of nnc.Engine (docs/engine.md): vars, ops, an engine's shared state, and the
# functions nnc.engine.engine drives them with. Ownership and locks are written on each struct.

from cpython.object cimport PyObject

from nnc.cmd.command cimport nnc_cmd_exec_f, nnc_cmd_param_t
from nnc.stream.record cimport signal_record_t
from nnc.tensor.tensor cimport nnc_tensor_t
from nnc.stream.worker cimport pool_job_t
from nnc.base.parallel cimport nnc_stream_context_t


# Atomics on fields several threads touch (see each struct): GCC/Clang builtins.
cdef extern from *:
    """
    static inline int nnc_engine_add(int* p, int v) {
        return __atomic_add_fetch(p, v, __ATOMIC_ACQ_REL);
    }
    static inline void nnc_engine_publish(long long* p, long long v) {
        __atomic_store_n(p, v, __ATOMIC_RELEASE);
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
    static inline int nnc_engine_done(int* p) {
        return __atomic_load_n(p, __ATOMIC_ACQUIRE);
    }
    static inline void nnc_engine_store(int* p, int v) {
        __atomic_store_n(p, v, __ATOMIC_RELEASE);
    }
    /* Start loading the n bytes at p for writing (the next op a push will recycle: its
       lines were last written by the worker that completed it). */
    static inline void nnc_engine_prefetch(void* p, size_t n) {
        for (size_t i = 0; i < n; i += 64) __builtin_prefetch((char*)p + i, 1, 3);
    }
    /* Ask for the line at p to be owned by this core (a write is coming): one transfer,
       where a load and then a store to a line another core wrote take two. */
    static inline void nnc_engine_own(void* p) {
    #if defined(__x86_64__)
        /* PREFETCHW (GCC emits a plain PREFETCHT0 for __builtin_prefetch(p, 1) unless
           built for a CPU with it; CPUs without it execute it as a NOP) */
        __asm__ __volatile__("prefetchw %0" : : "m"(*(const char*)p));
    #else
        __builtin_prefetch(p, 1, 3);
    #endif
    }
    /* op.mut_version lives in pointer-sized slots of op.buf. */
    _Static_assert(sizeof(void*) >= sizeof(long long), "nnc.engine.engine needs 64-bit pointers");
    /* An op's succ once it completed. */
    #define NNC_OP_DONE ((void*)1)
    /* Lock-free lists of ops and edges (a Treiber stack each): push by compare-and-swap,
       take the whole list by exchange. */
    static inline void* nnc_engine_peek(void** p) {
        return __atomic_load_n(p, __ATOMIC_ACQUIRE);
    }
    static inline void* nnc_engine_take(void** p, void* v) {
        return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL);
    }
    static inline int nnc_engine_cas(void** p, void** expected, void* v) {
        return __atomic_compare_exchange_n(p, expected, v, 1, __ATOMIC_ACQ_REL,
                                           __ATOMIC_ACQUIRE);
    }
    """
    int nnc_engine_add(int* p, int v) noexcept nogil
    void nnc_engine_publish(long long* p, long long v) noexcept nogil
    long long nnc_engine_load(long long* p) noexcept nogil
    int nnc_engine_state(int* p) noexcept nogil
    void nnc_engine_set(int* p) noexcept nogil
    void nnc_engine_prefetch(void* p, size_t n) noexcept nogil
    void nnc_engine_own(void* p) noexcept nogil
    void* OP_DONE "NNC_OP_DONE"
    void* nnc_engine_peek(void** p) noexcept nogil
    void* nnc_engine_take(void** p, void* v) noexcept nogil
    bint nnc_engine_cas(void** p, void** expected, void* v) noexcept nogil


cdef enum:
    OP_NONE = 0                         # nothing to run (a NOOP command, a delete without hook)
    OP_PY = 1                           # fn(*args) under the GIL (a Python fn, on_delete, or a
    #                                     command's Python backend)
    OP_C = 2                            # rc = cfn(arg), without the GIL
    OP_CMD_C = 3                        # rc = c_exec(param, io, ...), without the GIL

# A var's dependency state. Lives inside its EngineVar; every field but ``version`` is read and
# written by the host only, with the GIL held (push, wait, delete). ``version`` is stored by the
# op that writes the var, on a worker (writers of one var never overlap: each waits for the one
# before, so the stores come in push order), atomically, and read atomically by the host.
ctypedef struct var_t:
    int deleted                         # delete_var was pushed: any later use is an error
    long long stamp                     # host scratch: finds a var named twice in one push
    void* last_writer                   # op_t* (a reference), or NULL: never written
    void** readers                      # op_t* references: readers pushed since last_writer
    Py_ssize_t n_readers
    Py_ssize_t cap_readers
    PyObject* owner                     # the EngineVar holding this struct (borrowed)
    long long writes                    # writes pushed: the version each will publish
    # A line apart from the host's fields and from the object's header (the host changes its
    # reference count on every push naming the var), whatever the object's alignment: the
    # worker bumping it would otherwise take that line from the host at every write.
    char _apart[64]
    long long version                   # completed writes: each writer stores its own
    #                                     number, given at push (a store does not wait for the
    #                                     line as an atomic add would)
    char _after[64]


# A later op (or, with op NULL, the earlier op's own signal record) waiting for an earlier op:
# an entry of the earlier op's ``succ`` list. An op waits on one earlier op at a time, so it has
# one edge (``wait_edge``); an op's record has one too (``record_edge``). Whoever takes the list
# reads ``next`` before it releases ``op``, after which the edge may be reused.
cdef struct edge_t:
    op_t* op
    edge_t* next


# One pushed operation. Made and recycled by the host (GIL held, through its engine's free
# list); run once by a worker (or the pushing thread, naive engine). The fields workers write
# come first, on their own cache line, so the host's bookkeeping does not bounce with them.
# Invariant: refs counts 1 while not yet reclaimed by the host + each var naming it
# (last_writer, readers) + each host wait on it; only the host changes refs. Ops holding it in
# deps hold no reference: they all have a push number <= its mark, so once refs is 0 it waits
# in the engine's limbo until every op up to its mark is reclaimed (docs/engine.md,
# "Recycling").
# (A reference per dependency cost the host a cache miss per dependency at reclaim: the dep
# was pushed thousands of ops earlier.)
cdef struct op_t:
    # -- line 0, written by workers (atomics, or owned by the one thread that runs or
    #    releases the op); ops are 64-byte aligned --
    pool_job_t job                      # the pool job that runs it (op_job): first member
    # Later ops (and this op's record) waiting for it: a lock-free list, or OP_DONE once it
    # completed; its completer swaps OP_DONE in and releases what it took.
    edge_t* succ
    edge_t wait_edge                    # this op's entry in the succ list of the op it waits on
    op_t* next                          # free list or limbo (host), or retired list
    #                                     (lock-free)
    PyObject* err                       # the EngineError (owned), or NULL
    int failed                          # 1: failed or skipped; err is then set (the worker
    #                                     writes both, and bumps its engine's n_failed,
    #                                     before succ becomes OP_DONE)
    int wait_at                         # the first wait_at deps in parking order (newest, then
    #                                     the others in order) are done; moved on by whoever
    #                                     parks it (op_park), one thread at a time
    # -- written by the host at push, read by workers --
    int n_wait                          # deps it may park on: n_deps, or 0 on a stream
    int newest                          # index in deps of the newest (parked on first)
    int kind                            # OP_*
    int n_reads                         # deps[:n_reads] wrote what it reads (errors skip it)
    op_t** deps                         # earlier ops it depends on (RAW, WAW, WAR)
    var_t** muts                        # vars this writes (their EngineVars referenced)
    long long* mut_version              # the version each reaches once this op completes
    int n_muts
    int n_in
    int (*cfn)(void*) noexcept nogil    # OP_C
    void* arg                           # OP_C
    nnc_cmd_exec_f c_exec               # OP_CMD_C
    const nnc_cmd_param_t* param
    nnc_tensor_t** io                   # OP_CMD_C: into buf
    int n_out
    void* context                       # OP_CMD_C on a stream or inline: the workspace context
    void* engine                        # engine_t* (the op holds a reference while in flight)
    PyObject* fn                        # OP_PY callable (owned) or NULL
    PyObject* args                      # OP_PY argument tuple (owned) or NULL
    edge_t record_edge                  # in succ while a record waits for this op
    signal_record_t* record             # made on demand by the host (op_record), or NULL
    # A line apart: what the host changes whenever a later op names this one.
    char _apart[64]
    # -- host only (GIL) --
    long long seq                       # push number within its engine (beside mark: a push
    #                                     compares the seqs of deps it just marked)
    int refs
    int n_deps
    long long mark                      # the newest push naming it as a dep (or its own):
    #                                     dedupes deps within one push, and is final once
    #                                     refs is 0 (no var names it, so no push finds it)
    int cap_deps                        # deps: malloc'd, kept across reuse
    void* queue                         # stream_t* of a stream= op (compared, never used)
    PyObject* keep                      # what must outlive the run (owned) or NULL
    PyObject* name                      # the op's name (owned str) or NULL
    void** buf                          # storage for muts and io; kept across reuse
    Py_ssize_t buf_cap
    op_t* live_prev                     # the engine's list of ops not yet reclaimed, in push
    op_t* live_next                     # order (host, GIL): wait_all waits on its head


# An engine's shared C state: outlives its Engine object while ops are in flight.
cdef struct engine_t:
    # -- shared with workers (atomics) --
    int refs                            # the Engine + every EngineVar + ops in flight (the
    #                                     Engine takes them 64 at a time: Engine.credit)
    int orphan                          # the Engine is gone, so whoever retires an op
    #                                     reclaims it (with the GIL): a retired op holds its
    #                                     vars, which hold this struct (a cycle otherwise)
    op_t* retired                       # completed ops the host has not reclaimed yet
    #                                     (lock-free: workers push, the host takes them all)
    char _apart[64]
    # Ops that failed or were skipped, ever (atomic; written once per failure, read by every
    # op a worker runs, so on a line of its own: while it is 0 no op looks at its deps'
    # ``failed``, lines their completers wrote).
    int n_failed
    char _apart_failed[64]              # -- host only (GIL), a cache line apart --
    op_t* live_head                     # pushed and not reclaimed, oldest first; host (GIL)
    op_t* live_tail
    op_t* free_ops                      # recycled ops; host only (GIL)
    # Unreferenced ops (refs 0) that later ops may still look at through their deps, oldest
    # first; each moves to free_ops once every op up to its mark is reclaimed (host, GIL).
    op_t* limbo_head
    op_t* limbo_tail
    PyObject* errors                    # list of EngineErrors since the last wait_all; GIL
    long long pushed                    # ops ever pushed; host only
    # References to drop once the host's state is consistent again (GIL, host only): dropping
    # one may run any Python code, even a push, so reclaiming moves them here instead.
    PyObject** trash
    Py_ssize_t n_trash
    Py_ssize_t cap_trash


cdef class EngineVar:
    cdef var_t v
    cdef engine_t* e                    # its engine (a reference)
    cdef readonly int id                # creation number within its engine


# Workers: run one op, release the ops waiting for it and hand it back: op_run as a stream
# task (TASK_CALL) or inline, op_job as a pool job (which may go on with an op it released).
cdef void op_run(void* p) noexcept nogil
cdef void op_job(pool_job_t* job, nnc_stream_context_t* context) noexcept nogil
# Host (GIL held): an engine's C state, ops and their recycling. None of these runs Python
# code; references they let go of wait on the engine's trash list until trash_flush.
cdef engine_t* engine_new() except NULL
cdef void engine_unref(engine_t* e) noexcept nogil
cdef op_t* op_new(engine_t* e, Py_ssize_t slots) except NULL
cdef int op_reserve_deps(op_t* op, Py_ssize_t n) except -1
cdef bint op_is_done(op_t* op) noexcept nogil
cdef bint op_park(op_t* op) noexcept nogil
cdef signal_record_t* op_record(op_t* op) except? NULL
cdef void op_unref(engine_t* e, op_t* op) noexcept
cdef void op_discard(engine_t* e, op_t* op) noexcept
cdef void op_abort(op_t* op, object exc) noexcept
cdef int readers_add(engine_t* e, var_t* v, op_t* op) except -1
cdef bint reclaim(engine_t* e) noexcept
cdef void trash_flush(engine_t* e) noexcept  # may run any Python code
