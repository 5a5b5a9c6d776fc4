# The worker pool and the C state of a CPU stream's queue (NNC: ccv_nnc_stream.c's CPU stream
# context, run libdispatch-style: a stream is a serial queue, a few pool threads run them).
# nnc.stream.stream builds the Python Stream and Signal on top of what is declared here; this module
# never imports nnc.stream.stream.

from cpython.object cimport PyObject

from nnc.cmd.command cimport nnc_bound_t
from nnc.base.sync cimport (
    CLOCK_REALTIME, clock_gettime, mono_now, pthread_cond_t, pthread_mutex_lock, pthread_mutex_t,
    pthread_mutex_unlock, timespec,
)
from nnc.base.parallel cimport nnc_stream_context_t


# The pool's shared state and job queue live in nnc.stream.worker_state, signal records, their
# waiters and signal_lock in nnc.stream.record (what other modules use is re-exported here).
from nnc.stream.worker_state cimport pool_generation, pool_job_t, pool_refusing, pool_submit
from nnc.stream.record cimport (
    record_after_fork, record_new, record_release, signal_lock, signal_record_t, waiter_t,
)


cdef enum:
    # A task's kind (stream_task_t.bound.kind): TASK_C and TASK_PY are the bind path's BOUND_C
    # and BOUND_PY and run the bound work; the others are the stream's own.
    TASK_C = 1                          # bound: rc = c_exec(param, io, ..., the stream's context)
    TASK_PY = 2                         # bound: fn(*args) under the GIL
    TASK_EMIT = 3                       # record.done = 1, wake its waiters
    TASK_WAIT = 4                       # park the stream until record.done
    TASK_CALL = 5                       # call(arg), without the GIL
    TASK_STORE = 6                      # (<long long*>arg)[0] = value: a loop count, in order

cdef enum:
    # A task's flags, in stream_task_t.bound.flags above the bind path's BOUND_* bits (0x1-0x4).
    # Said by the pusher, read only by device streams (a CPU stream runs every task in order):
    TASK_NOW = 0x8                      # host bookkeeping that only orders later launches (a
    #                                     count store, multiview selection, carry-over
    #                                     re-pointing): a GPU stream runs it at enqueue time
    TASK_LAUNCH = 0x10                  # TASK_PY whose fn is a device backend: a GPU stream
    #                                     launches fn(*args, stream=...) at enqueue time
    # Read by whoever runs or drops the task:
    TASK_OWNS_PY = 0x20                 # fn, args and keep are owned references: drop after run
    TASK_OWNS_IO = 0x40                 # io was malloc'd for this task: free after run


# A queued unit of work. Tasks of graph runs borrow everything from the graph, which the run
# keeps alive; tasks from cmd_exec/add_callback own their references (TASK_OWNS_PY).
ctypedef struct stream_task_t:
    # The task's kind and flags (bound.kind, bound.flags: TASK_* above) and, for TASK_C and
    # TASK_PY, its work: a copy of the one bind path's record (nnc.cmd.command.cmd_bind), zeroed
    # beyond kind and flags for the other kinds. A copy, not a pointer to the graph node's
    # record: _prepare may rebind a node (Graph._set_node rewrites exec_info_t.bound in place)
    # while earlier runs' tasks are still queued, and those must run what was bound when they
    # were enqueued. What the copy points at (param, io, fn, args) stays alive until the task
    # has run: the graph keeps it (Graph._retire keeps replaced ones while runs are in flight),
    # or the task owns it (TASK_OWNS_IO, TASK_OWNS_PY). Kind and flags share the record's, not
    # fields of their own: the queue copies every task a few times, and 8 more bytes per task
    # measured slower per node on streams (benchmarks.dispatch's nnc stream column).
    nnc_bound_t bound
    PyObject* keep                      # keeps tensors alive (TASK_C from cmd_exec), or NULL
    PyObject* ctx                       # names the work in errors: Graph (with node) or Cmd
    int node                            # graph node index, or -1
    int label                           # index into the active trace's labels, or -1
    signal_record_t* record             # TASK_EMIT / TASK_WAIT
    void (*call)(void*) noexcept nogil  # TASK_CALL
    void* arg                           # TASK_CALL / TASK_STORE
    long long value                     # TASK_STORE


cdef enum:
    # A stream's place in the pool (stream_t.state). Only IDLE streams have no pool reference.
    STREAM_IDLE = 0                     # nothing queued, in no list
    STREAM_QUEUED = 1                   # tasks queued, in the pool's ready list
    STREAM_RUNNING = 2                  # one pool thread is running its tasks (only that one)
    # PARKED: its next task waits on a signal record not done yet; it is on that record's
    # waiter list, occupying no thread.
    STREAM_PARKED = 3


# The C state of a CPU stream: a serial queue the pool runs. Shared by its Python object, the
# pool (while state != IDLE) and whoever drains it (refs counts them all); freed, with the GIL,
# by whichever lets go last. Fields from ring to park are guarded by lock; ready_next by the
# pool's lock; errors and waiters by the GIL; context by being RUNNING (one thread at a time).
ctypedef struct stream_t:
    pthread_mutex_t lock
    pthread_cond_t idle                 # broadcast when completed catches up with submitted
    int refs                            # Python object + pool (state != IDLE) + drainers
    int index                           # the Stream's creation number (errors, trace tracks)
    int generation                      # the pool's fork generation when made (see fork rule)
    int state                           # STREAM_*
    stream_task_t* ring                 # circular queue of cap entries
    Py_ssize_t cap
    Py_ssize_t head                     # index of the oldest queued task
    Py_ssize_t count                    # queued tasks, not counting those a thread is running
    long long submitted                 # tasks ever enqueued
    long long completed                 # tasks ever finished; completed <= submitted
    int host_waiting                    # host threads sleeping on idle
    int trace                           # record timings into trace_buf
    void* trace_buf                     # trace_event_t[trace_cap], malloc'd
    Py_ssize_t trace_size
    Py_ssize_t trace_cap
    waiter_t park                       # on a record's waiter list while PARKED
    void* ready_next                    # next stream_t in the pool's ready list
    PyObject* errors                    # list of (where, exc) not yet raised by wait(); owned
    # wait()s in progress: one list each, which gets every failure recorded while it waits
    # (it starts as a copy of errors), so each of them raises it. Owned list of lists.
    PyObject* waiters
    # Scratch memory backends reuse run after run (NNC's per-stream workspace), passed to C
    # backends as their context; lives and dies with the stream, not with a thread.
    nnc_stream_context_t context


# One timed task, for nnc.trace. Times are CLOCK_MONOTONIC seconds (time.perf_counter's clock).
ctypedef struct trace_event_t:
    double t0
    double t1
    int kind
    int node
    int label
    long long record


cdef stream_t* stream_new(int index) except NULL
cdef int stream_enqueue(stream_t* s, stream_task_t* tasks, Py_ssize_t n) except -1
# A TASK_PY calling fn(*args) that owns its references (Stream._push_call, a graph run's end).
cdef void stream_task_call(stream_task_t* t, object fn, tuple args, object ctx,
                           object keep=*, int flags=*) noexcept
cdef void stream_release(stream_t* s) noexcept
cdef int stream_drain(stream_t* s, double timeout=*) except -1
cdef int stream_keep_error(stream_t* s, tuple entry) except -1
cdef int stream_check_not_worker(str what=*) except -1
cdef void record_done(signal_record_t* r) noexcept nogil
cdef void task_release_owned(stream_task_t* t) noexcept nogil
cdef int pool_start() except -1


cdef inline void slice_deadline(timespec* ts, double left) noexcept nogil:
    """ts = now on CLOCK_REALTIME (the condition variables' clock) + min(100 ms, ``left`` s;
    left < 0: no limit): a blocked host wait wakes at least every 100 ms to handle Ctrl-C."""
    cdef long ns = 100000000 if left < 0 or left > 0.1 else <long>(left * 1e9)
    clock_gettime(CLOCK_REALTIME, ts)
    ts.tv_nsec += ns
    if ts.tv_nsec >= 1000000000:
        ts.tv_sec += 1
        ts.tv_nsec -= 1000000000
