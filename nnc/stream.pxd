from cpython.object cimport PyObject
from libc.stdlib cimport free

from nnc.cmd cimport nnc_cmd_exec_f, nnc_cmd_param_t
from nnc.debug cimport DEBUG_RECORDS, debug_count
from nnc.sync cimport (
    CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, pthread_cond_signal, pthread_cond_t,
    pthread_mutex_lock, pthread_mutex_t, pthread_mutex_unlock, timespec,
)
from nnc.tensor cimport nnc_tensor_t, Tensor


# One recorded emit of a signal (a CUDA event record). A wait captures the signal's latest record
# when it is enqueued and blocks until that record is done; a signal never emitted has no record,
# so waiting on it is a no-op. Fields are guarded by the module's signal lock.
ctypedef struct signal_record_t:
    int done                            # 1 once the emitting stream reached the emit
    int reserved                        # made by Signal._reserve, its emit not enqueued yet
    int refs                            # Signal.latest + queued tasks holding it; freed at 0
    long long id                        # unique, for trace flow arrows
    void* waiters                       # waiter_t list of blocked workers


# A worker blocked on a signal record: it sleeps on its own condition variable (under the signal
# lock), so an emit wakes only the workers waiting for that record, not every waiting worker.
# Lives on the waiting worker's stack; the record's list is walked once, by the emit, under the
# lock, and never after done is set.
ctypedef struct waiter_t:
    pthread_cond_t cond
    waiter_t* next


# Guards every signal_record_t (all fields) and the record sequence. Lives in stream.pyx (made
# when it is imported); the worker loop (nnc.worker) takes it for emit and wait tasks.
cdef pthread_mutex_t signal_lock


# record_done and record_release run once per emit/wait task on the worker (nnc.worker): inline
# here, so the worker loop pays no call into another module per task.
cdef inline void record_done(signal_record_t* r) noexcept nogil:
    """Mark r done and wake the workers blocked on it; the caller holds signal_lock."""
    cdef waiter_t* w = <waiter_t*>r.waiters
    r.done = 1
    r.reserved = 0
    while w != NULL:
        pthread_cond_signal(&w.cond)
        w = w.next
    r.waiters = NULL


cdef inline void record_release(signal_record_t* r) noexcept nogil:
    """Drop one reference to r (NULL: nothing), freeing it at 0; takes signal_lock."""
    if r == NULL:
        return
    pthread_mutex_lock(&signal_lock)
    r.refs -= 1
    if r.refs == 0:
        free(r)
        debug_count(DEBUG_RECORDS, -1)
    pthread_mutex_unlock(&signal_lock)


cdef inline double mono_now() noexcept nogil:
    """CLOCK_MONOTONIC seconds (time.perf_counter's clock): deadlines of host waits."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef inline void slice_deadline(timespec* ts, double left) noexcept nogil:
    """ts = now on CLOCK_REALTIME (the condition variables' clock) + min(100 ms, ``left`` s;
    left < 0: no limit): a blocked host wait wakes at least every 100 ms to handle Ctrl-C."""
    cdef long ns = 100000000 if left < 0 or left > 0.1 else <long>(left * 1e9)
    clock_gettime(CLOCK_REALTIME, ts)
    ts.tv_nsec += ns
    if ts.tv_nsec >= 1000000000:
        ts.tv_sec += 1
        ts.tv_nsec -= 1000000000


cdef enum:
    TASK_C = 1                          # rc = c_exec(param, io, n_in, io + n_in, n_out)
    TASK_PY = 2                         # fn(*args) under the GIL
    TASK_EMIT = 3                       # record.done = 1, wake waiters
    TASK_WAIT = 4                       # block until record.done
    TASK_CALL = 5                       # call(arg), without the GIL
    TASK_STORE = 6                      # (<long long*>arg)[0] = value: a loop count, in order

cdef enum:
    TASK_OWNS_PY = 0x2                  # fn, args and keep are owned references: drop after run
    TASK_OWNS_IO = 0x4                  # io was malloc'd for this task: free after run
    # Said by the pusher, read only by device streams (a CPU stream runs every task in order):
    TASK_NOW = 0x8                      # host bookkeeping that only orders later launches (a
    #                                     count store, multiview selection, carry-over
    #                                     re-pointing): a GPU stream runs it at enqueue time
    TASK_LAUNCH = 0x10                  # TASK_PY whose fn is a device backend: a GPU stream
    #                                     launches fn(*args, stream=...) at enqueue time


# A queued unit of work. Tasks of graph runs borrow everything from the graph, which the run
# keeps alive; tasks from cmd_exec/add_callback own their references (TASK_OWNS_PY).
ctypedef struct stream_task_t:
    int kind
    int flags
    nnc_cmd_exec_f c_exec
    const nnc_cmd_param_t* param
    nnc_tensor_t** io
    int input_size
    int output_size
    PyObject* fn                        # TASK_PY: the callable
    PyObject* args                      # TASK_PY: its argument tuple
    PyObject* keep                      # keeps tensors alive (TASK_C from cmd_exec), or NULL
    PyObject* ctx                       # names the work in errors: Graph (with node) or Cmd
    int node                            # graph node index, or -1
    int label                           # index into the active trace's labels, or -1
    signal_record_t* record             # TASK_EMIT / TASK_WAIT
    void (*call)(void*) noexcept nogil  # TASK_CALL
    void* arg                           # TASK_CALL / TASK_STORE
    long long value                     # TASK_STORE


# The C state of a CPU stream, shared by its Python object, its worker thread and whoever drains
# it (refs counts them all); freed, with the GIL, by whichever lets go last. The fields from ring
# to trace_cap are guarded by lock; errors and waiters by the GIL.
ctypedef struct stream_t:
    pthread_mutex_t lock
    pthread_cond_t work                 # signalled when a task arrives or closing is set
    pthread_cond_t idle                 # broadcast when completed catches up with submitted
    int refs                            # Python object + worker (until it exits) + drainers
    int index                           # the Stream's creation number (names thread, errors)
    stream_task_t* ring                 # circular queue of cap entries
    Py_ssize_t cap
    Py_ssize_t head                     # index of the oldest queued task
    Py_ssize_t count                    # queued tasks, not counting the one running
    long long submitted                 # tasks ever enqueued
    long long completed                 # tasks ever finished; completed <= submitted
    int worker                          # 1 from creation until the worker thread has exited
    int closing                         # no more tasks (object gone, or exit): exit once drained
    int host_waiting                    # someone sleeps on idle
    int sleeping                        # the worker sleeps on work (set and cleared by it)
    PyObject* errors                    # list of (where, exc) not yet raised by wait(); owned
    # wait()s in progress: one list each, which gets every failure recorded while it waits
    # (it starts as a copy of errors), so each of them raises it. Owned list of lists.
    PyObject* waiters
    int trace                           # record timings into trace_buf
    void* trace_buf                     # trace_event_t[trace_cap], malloc'd
    Py_ssize_t trace_size
    Py_ssize_t trace_cap


# One timed task, for nnc.trace. Times are CLOCK_MONOTONIC seconds (time.perf_counter's clock).
ctypedef struct trace_event_t:
    double t0
    double t1
    int kind
    int node
    int label
    long long record


cdef enum:
    STAGE_SIZE = 64                     # tasks staged by the host per hand-over (Stream.push)


# The device half of a GPU stream ("gpu:N"): nnc.cuda subclasses it and fills the registry
# (stream_register_device) when imported, so this layer never imports nnc.cuda. A Stream whose
# _device is set hands it every task, emit and wait; its stream_t keeps only the failures.
cdef class DeviceStream:
    cdef int push(self, Stream owner, stream_task_t* task) except -1
    cdef int emit(self, Stream owner, Signal sig) except -1
    cdef int wait_signal(self, Stream owner, Signal sig) except -1
    cdef int drain(self, Stream owner, double timeout) except -1    # 1 done, 0 timed out
    cdef int query(self) except -1


cdef class Stream:
    cdef stream_t* s
    # Tasks pushed but not yet handed to the worker: host side only, guarded by the GIL.
    # Invariant: empty whenever the host is not inside a run's enqueue loop (kick() empties it).
    cdef stream_task_t stage[STAGE_SIZE]
    cdef Py_ssize_t stage_size
    cdef object _scheduler              # nnc.coro.Scheduler, made on first use, or None
    cdef readonly str kind              # "cpu"
    cdef readonly int index             # creation number, names the worker thread and track
    cdef object __weakref__             # nnc.stream._live holds streams weakly
    cdef DeviceStream _device           # None for "cpu"; the CUDA stream for "gpu:N"

    cdef int push(self, stream_task_t* task, bint wake=*) except -1
    cdef int kick(self) except -1


cdef class Signal:
    cdef signal_record_t* latest        # the last emit enqueued, or NULL if never emitted
    cdef readonly str kind
    cdef object _device                 # None for "cpu"; the CUDA event (nnc.cuda) for "gpu:N"


cdef int stream_emit(Stream s, Signal sig, bint wake=*) except -1
cdef int stream_wait_signal(Stream s, Signal sig, bint wake=*) except -1
cdef int signal_reserve(Signal sig) except -1
cdef int signal_set(Signal sig) noexcept
cdef int stream_store_count(Stream s, Tensor count, long long value, bint wake=*) except -1
cdef int stream_add_error(Stream s, str where, object exc) except -1
# For nnc.worker, the threads serving streams and running the tasks:
cdef int stream_record_error(stream_t* s, tuple entry) except -1
cdef void stream_set_current_worker(stream_t* s) noexcept nogil
cdef int stream_drain(stream_t* s, double timeout=*) except -1
# For nnc.waiting (host waits on signals, asyncio futures):
cdef int stream_check_not_worker(str what=*) except -1
cdef double timeout_seconds(object timeout) except? -2
cdef void stream_release(stream_t* s, bint worker) noexcept
cdef int stream_move_errors(Stream src, Stream dst) except -1
