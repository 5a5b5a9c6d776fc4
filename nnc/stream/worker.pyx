"""The worker pool: CPU streams are serial queues that a few pool threads run.

One file of ~800 lines: the pool's threads, their run loop and the stream states they move
between share one lock and the invariants worker.pxd states on its fields; split, each part would
have to cimport the others' internals.

NNC: ccv_nnc_stream.c's CPU stream context, whose own documentation names libdispatch's model:
a stream is a *serial queue*, not a thread. One process-wide pool of worker threads, sized to the
usable cores (``nnc.set_num_threads``, or ``NNC_NUM_THREADS``), runs every stream. Any number of
streams costs no extra OS thread; a stream whose next task waits on a signal not yet emitted is
*parked* on that signal's record and occupies no thread; the emit makes it ready again.

A stream moves through four states (``stream_t.state``, worker.pxd):

- IDLE: nothing queued. The first task enqueued makes it QUEUED (it joins the ready list).
- QUEUED: in the pool's FIFO ready list; a pool thread takes the oldest.
- RUNNING: exactly one pool thread runs its tasks in order, POP_BATCH per lock. When it runs dry
  the stream goes IDLE; after SLICE tasks, if other streams are ready, it goes back to the end
  of the ready list (round-robin), so a long queue cannot starve short ones.
- PARKED: its next task waits on a signal record not done yet. The thread puts that wait and
  the rest of its batch back at the head of the queue and links the stream into the record's
  waiter list; the emit (``record_done``) makes it QUEUED again. Order within a stream is
  unchanged: nothing after the wait runs before the emit.

Pool threads are daemon ``threading.Thread``s: CPython makes their thread state once, so a
Python task (``with gil``) reuses it, and nothing makes or frees thread states outside the GIL
(docs/threading.md, "Interpreter exit"). They take the GIL only for Python tasks, failures and
freeing a stream nobody else holds. Locks: signal_lock, then a stream's lock, then the pool's;
the GIL is never taken while any is held.

Errors: a failing task (a C backend's status, a Python exception) is recorded on its stream
(``stream_keep_error``) and the stream keeps going; ``Stream.wait`` raises it (nnc.stream.stream).
"""

import os
import threading

from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

from nnc.base.core import NNCError, StreamError, error_repr

from nnc.base.debug cimport DEBUG_STREAMS, DEBUG_TASKS, DEBUG_WORKERS, debug_count
from nnc.base.sync cimport (
    pthread_cond_broadcast, pthread_cond_destroy, pthread_cond_init, pthread_cond_signal,
    pthread_cond_timedwait, pthread_cond_wait, mutex_init_spinning, pthread_mutex_destroy,
    pthread_mutex_lock, pthread_mutex_unlock, timespec,
)
from nnc.base.parallel import parallel_install_starter

from nnc.base.parallel cimport (
    nnc_context_free, nnc_stream_context_t, parallel_after_fork, parallel_busy_enter,
    parallel_busy_leave, parallel_help, parallel_install,
    parallel_pending, parallel_runs_active, parallel_set_spin, parallel_set_width,
    parallel_stream_runs_active,
)
from nnc.stream.worker_state cimport (
    MAX_THREADS, pool, pool_default_size, pool_settings_read, pool_spin, pool_spin_seconds,
    pool_t, pool_thread_is, pool_thread_mark,
)
from nnc.cmd.command cimport cmd_bound_run_c


cdef extern from "Python.h":
    object PyObject_Call(PyObject* fn, PyObject* args, PyObject* kwargs)
    int PyErr_CheckSignals() except -1


# The stream a pool thread is running (NULL on every other thread, and on a pool thread between
# streams): wait() refuses to block a pool thread, which could be waiting for its own queue.
cdef extern from *:
    """
    static __thread void* nnc__current_stream = NULL;
    static inline void nnc__set_current_stream(void* s) { nnc__current_stream = s; }
    static inline void* nnc__get_current_stream(void) { return nnc__current_stream; }
    """
    void _set_current "nnc__set_current_stream"(void* s) noexcept nogil
    void* _get_current "nnc__get_current_stream"() noexcept nogil


cdef enum:
    POP_BATCH = 32                      # tasks a thread takes from a queue per lock
    SLICE = 256                         # tasks a stream runs before others ready get a turn


# The pool (nnc.stream.worker_state's, initialised there) and the threading.Thread of every pool
# thread not yet joined (guarded by the GIL).
cdef pool_t* _pool = &pool
_threads = []


cdef inline void _wake_one() noexcept nogil:
    """Wake one sleeping pool thread. Called with no lock of this module held (a thread woken
    while one is held would block on it at once)."""
    pthread_cond_signal(&_pool.work)


# -- the ready list, and signal records waking parked streams --------------------------------

cdef bint _make_ready(stream_t* s) noexcept nogil:
    """Append s to the ready list; the caller holds s.lock and has just set s.state =
    STREAM_QUEUED. True if a thread sleeps: the caller then calls _wake_one once it has
    released its locks (a thread woken while they are held would block on them at once,
    costing futex calls and a context switch per hand-over; docs/threading.md)."""
    cdef bint wake
    pthread_mutex_lock(&_pool.lock)
    s.ready_next = NULL
    if _pool.ready_tail == NULL:
        _pool.ready_head = s
    else:
        (<stream_t*>_pool.ready_tail).ready_next = s
    _pool.ready_tail = s
    wake = _pool.sleeping > 0 and _pool.spinning == 0   # a spinning thread will find s
    pthread_mutex_unlock(&_pool.lock)
    return wake


cdef void record_done(signal_record_t* r) noexcept nogil:
    """Mark r done and wake what waits on it: parked streams become ready, host threads are
    signalled. The caller holds signal_lock."""
    cdef waiter_t* w = <waiter_t*>r.waiters
    cdef waiter_t* nxt
    cdef stream_t* s
    cdef int wake = 0
    r.done = 1
    r.reserved = 0
    r.waiters = NULL
    while w != NULL:
        nxt = w.next                    # read first: a host waiter's entry is on its stack
        if w.stream != NULL:
            s = <stream_t*>w.stream
            pthread_mutex_lock(&s.lock)
            s.state = STREAM_QUEUED
            wake += _make_ready(s)
            pthread_mutex_unlock(&s.lock)
        else:
            pthread_cond_signal(&w.cond)
        w = nxt
    # Still under signal_lock (the caller's), which pool threads never take while sleeping.
    while wake > 0:
        _wake_one()
        wake -= 1


# -- streams -----------------------------------------------------------------------------------

cdef stream_t* stream_new(int index) except NULL:
    """A new IDLE stream_t with one reference (the caller's); starts the pool if needed."""
    pool_start()
    cdef stream_t* s = <stream_t*>malloc(sizeof(stream_t))
    if s == NULL:
        raise MemoryError()
    memset(s, 0, sizeof(stream_t))
    s.cap = 64
    s.ring = <stream_task_t*>malloc(sizeof(stream_task_t) * s.cap)
    if s.ring == NULL:
        free(s)
        raise MemoryError()
    mutex_init_spinning(&s.lock)
    pthread_cond_init(&s.idle, NULL)
    s.park.stream = s                   # a stream waiter: its cond is never used
    errors = []
    waiters = []
    Py_INCREF(errors)
    Py_INCREF(waiters)
    s.errors = <PyObject*>errors
    s.waiters = <PyObject*>waiters
    s.refs = 1
    s.index = index
    s.generation = _pool.generation
    s.state = STREAM_IDLE
    debug_count(DEBUG_STREAMS, 1)
    return s


cdef void _stream_free(stream_t* s) noexcept:
    """Free the C state; called with the GIL by whoever drops the last reference."""
    Py_XDECREF(s.errors)
    Py_XDECREF(s.waiters)
    pthread_mutex_destroy(&s.lock)
    pthread_cond_destroy(&s.idle)
    nnc_context_free(&s.context)
    free(s.ring)
    free(s.trace_buf)
    free(s)
    debug_count(DEBUG_STREAMS, -1)


cdef void stream_release(stream_t* s) noexcept:
    """Drop one reference to s, freeing it if it was the last. With the GIL, no lock held."""
    cdef bint last
    if s.generation != _pool.generation:
        return      # made before a fork: its mutex may be held by a thread the child lacks; leak
    pthread_mutex_lock(&s.lock)
    s.refs -= 1
    last = s.refs == 0
    pthread_mutex_unlock(&s.lock)
    if last:
        _stream_free(s)


cdef void _free_from_pool(stream_t* s) noexcept with gil:
    """Free s, whose last reference the pool just dropped (s went IDLE and its Python object
    is gone). Takes the GIL, which freeing the error lists needs; no lock is held."""
    _stream_free(s)


cdef int stream_keep_error(stream_t* s, tuple entry) except -1:
    """Keep (where, exc) for the next wait() and for every wait() in progress (with the GIL)."""
    (<list>s.errors).append(entry)
    for box in <list>s.waiters:
        (<list>box).append(entry)
    return 0


cdef int stream_check_not_worker(str what="wait()") except -1:
    """StreamError on a pool thread running a stream's task, which must never block on a
    stream or signal: it could be waiting for work queued behind itself."""
    cdef stream_t* me = <stream_t*>_get_current()
    if me != NULL:
        raise StreamError(
            f"{what} on a stream worker thread (a callback or command running on nnc stream "
            f"#{me.index}): it could be waiting for its own queue and never return; wait on a "
            "host thread, or order the work with signals")
    if pool_thread_is():
        raise StreamError(
            f"{what} on an nnc pool thread (an engine op or a command's part running there): "
            "it could be waiting for work that needs this very thread and never return; wait "
            "on a host thread")
    return 0


cdef bint _ring_grow(stream_t* s, Py_ssize_t need, Py_ssize_t front) noexcept nogil:
    """Grow s's ring (s.lock held) to hold ``need`` more tasks, unwrapping the queue so that it
    starts at slot ``front``; False (nothing changed) if out of memory."""
    cdef Py_ssize_t cap = s.cap * 2, first
    while cap < s.count + need:
        cap *= 2
    cdef stream_task_t* ring = <stream_task_t*>malloc(sizeof(stream_task_t) * cap)
    if ring == NULL:
        return False
    first = min(s.count, s.cap - s.head)
    memcpy(ring + front, s.ring + s.head, sizeof(stream_task_t) * first)
    memcpy(ring + front + first, s.ring, sizeof(stream_task_t) * (s.count - first))
    free(s.ring)
    s.ring = ring
    s.cap = cap
    s.head = front
    return True


cdef int stream_check_generation(stream_t* s) except -1:
    """StreamError for a stream made before this process was forked: its queue may be mid-run
    on a thread the child does not have (and its mutexes held by it), so it cannot be used."""
    if s.generation != _pool.generation:
        raise StreamError(f"nnc stream #{s.index} was made before this process was forked; "
                          "streams (like CUDA contexts) do not survive fork: make new ones in "
                          "the child")
    return 0


cdef int stream_enqueue(stream_t* s, stream_task_t* tasks, Py_ssize_t n) except -1:
    """Append copies of n tasks to s's queue; an IDLE stream becomes ready. MemoryError if the
    queue cannot grow (then nothing is queued).

    The GIL stays held: the locks are held only briefly by anyone and nobody holding them ever
    waits for the GIL (the module docstring), so this cannot deadlock, and it saves a GIL
    release and re-acquire per hand-over."""
    cdef Py_ssize_t i
    cdef bint wake = False
    if _pool.stopping:
        raise StreamError(f"cannot enqueue on nnc stream #{s.index}: the interpreter is exiting "
                          "and nnc's exit hook has already stopped the worker pool")
    stream_check_generation(s)
    pthread_mutex_lock(&s.lock)
    if s.count + n > s.cap and not _ring_grow(s, n, 0):
        pthread_mutex_unlock(&s.lock)
        raise MemoryError()
    for i in range(n):
        s.ring[(s.head + s.count + i) % s.cap] = tasks[i]
    s.count += n
    s.submitted += n
    debug_count(DEBUG_TASKS, n)         # each task is counted off once it has run (_run_task)
    if s.state == STREAM_IDLE and n > 0:
        s.refs += 1                     # the pool's, until the stream is IDLE again
        s.state = STREAM_QUEUED
        pthread_mutex_lock(&_pool.lock)
        _pool.busy += 1
        pthread_mutex_unlock(&_pool.lock)
        wake = _make_ready(s)
    pthread_mutex_unlock(&s.lock)
    if wake:
        _wake_one()
    return 0


cdef void stream_task_call(stream_task_t* t, object fn, tuple args, object ctx,
                           object keep=None, int flags=0) noexcept:
    """Fill t with a TASK_PY calling ``fn(*args)`` that owns its references (TASK_OWNS_PY:
    task_release_owned drops them once it has run, or if it is never enqueued). ``ctx`` names it
    in errors, ``keep`` is kept alive until then; ``flags``: TASK_NOW or TASK_LAUNCH, which only
    GPU streams read. The caller holds the GIL and sets ``label`` if it traces."""
    memset(t, 0, sizeof(stream_task_t))
    t.bound.kind = TASK_PY
    t.bound.flags = TASK_OWNS_PY | flags
    t.node = -1
    t.label = -1
    Py_INCREF(fn)
    Py_INCREF(args)
    t.bound.fn = <PyObject*>fn
    t.bound.args = <PyObject*>args
    if keep is not None:
        Py_INCREF(keep)
        t.keep = <PyObject*>keep
    if ctx is not None:
        Py_INCREF(ctx)
        t.ctx = <PyObject*>ctx


cdef int stream_drain(stream_t* s, double timeout=-1) except -1:
    """Block until everything enqueued on s so far is done, without raising its errors; 1 once
    done, 0 if ``timeout`` seconds (>= 0; -1: no limit) passed first.

    Called with the GIL (and a reference to s); sleeps without it, waking every 100 ms so that
    Ctrl-C raises KeyboardInterrupt here (PyErr_CheckSignals runs the signal handlers). The
    target is what was submitted when the call began: work other threads (or tasks) enqueue
    meanwhile is not waited for, so a stream flooded faster than it runs still ends the wait.
    """
    cdef long long target
    cdef timespec ts
    cdef bint done = False
    cdef double end = mono_now() + timeout, left = timeout
    stream_check_not_worker()
    stream_check_generation(s)
    pthread_mutex_lock(&s.lock)         # with the GIL, as stream_enqueue: held only briefly
    target = s.submitted
    pthread_mutex_unlock(&s.lock)
    while True:
        with nogil:
            pthread_mutex_lock(&s.lock)
            s.host_waiting += 1
            slice_deadline(&ts, left)
            while s.completed < target:
                if pthread_cond_timedwait(&s.idle, &s.lock, &ts) != 0:
                    break
            done = s.completed >= target
            s.host_waiting -= 1
            pthread_mutex_unlock(&s.lock)
        if done:
            return 1
        if timeout >= 0:
            left = end - mono_now()
            if left <= 0:
                return 0
        PyErr_CheckSignals()


# -- running tasks -----------------------------------------------------------------------------

cdef inline double _now() noexcept nogil:
    return mono_now()


cdef void _trace_add(stream_t* s, stream_task_t* t, double t0, double t1) noexcept nogil:
    """Append t's timing to s's trace buffer (nnc.trace, read by trace_stop);
    the event is dropped if the buffer cannot grow, or if the trace stopped since the task
    began (trace_stop clears s.trace under this lock, then takes the buffer: nothing is written
    after that)."""
    cdef trace_event_t* ev
    cdef Py_ssize_t cap
    pthread_mutex_lock(&s.lock)
    if not s.trace:
        pthread_mutex_unlock(&s.lock)
        return
    if s.trace_size == s.trace_cap:
        cap = max(1024, s.trace_cap * 2)
        ev = <trace_event_t*>realloc(s.trace_buf, sizeof(trace_event_t) * cap)
        if ev == NULL:
            pthread_mutex_unlock(&s.lock)
            return
        s.trace_buf = ev
        s.trace_cap = cap
    ev = <trace_event_t*>s.trace_buf + s.trace_size
    s.trace_size += 1
    ev.t0 = t0
    ev.t1 = t1
    ev.kind = t.bound.kind
    ev.node = t.node
    ev.label = t.label
    ev.record = t.record.id if t.record != NULL else 0
    pthread_mutex_unlock(&s.lock)


cdef void _add_error(stream_t* s, stream_task_t* t, object exc) noexcept:
    """Record a failure (with the GIL held). Never raises."""
    where = "a task"
    try:
        ctx = <object>t.ctx if t.ctx != NULL else None
        if ctx is not None and t.node >= 0 and hasattr(ctx, "_label"):
            where = f"node {ctx._label(t.node)}"
        elif ctx is not None:
            where = error_repr(ctx)     # a callback: the user's object, whose repr may raise
    except BaseException:
        where = "a task"                # the failure is still recorded, only less well named
    try:
        stream_keep_error(s, (where, exc))
    except BaseException:
        pass                            # no memory for one list item: nothing else to do


cdef void _report_rc(stream_t* s, stream_task_t* t, int rc) noexcept with gil:
    from nnc.base.core import STATUS_NAMES
    _add_error(s, t, NNCError(f"backend returned {STATUS_NAMES.get(rc, rc)}"))


cdef void _run_py(stream_t* s, stream_task_t* t) noexcept with gil:
    try:
        PyObject_Call(t.bound.fn, t.bound.args, NULL)
    except BaseException as e:
        _add_error(s, t, e)


cdef void _drop_refs(stream_task_t* t) noexcept with gil:
    Py_XDECREF(t.bound.fn)
    Py_XDECREF(t.bound.args)
    Py_XDECREF(t.keep)
    Py_XDECREF(t.ctx)


cdef void task_release_owned(stream_task_t* t) noexcept nogil:
    """Free what a task owns once it has run (or been handed on): its io array
    (TASK_OWNS_IO) and its Python references (TASK_OWNS_PY, taking the GIL only then)."""
    if t.bound.flags & TASK_OWNS_IO:
        free(t.bound.io)
    if t.bound.flags & TASK_OWNS_PY:
        _drop_refs(t)


cdef void _block_on(signal_record_t* r) noexcept nogil:
    """Sleep until r is done: the fallback when a stream cannot park (no memory to put its
    batch back), which costs the thread, as every wait did before the pool."""
    cdef waiter_t me
    pthread_mutex_lock(&signal_lock)
    if not r.done:
        pthread_cond_init(&me.cond, NULL)
        me.stream = NULL
        me.next = <waiter_t*>r.waiters
        r.waiters = &me
        while not r.done:
            pthread_cond_wait(&me.cond, &signal_lock)
        pthread_cond_destroy(&me.cond)
    pthread_mutex_unlock(&signal_lock)


cdef void _run_task(stream_t* s, stream_task_t* t) noexcept nogil:
    # No Python object may live in this function, not even in a branch: Cython would then take
    # the GIL on every exit to release it, once per task. Python work goes through the
    # ``with gil`` helpers above, which take the GIL only when called.
    cdef int rc
    cdef double t0 = 0
    if s.trace:
        t0 = _now()
    if t.bound.kind == TASK_C:
        rc = cmd_bound_run_c(&t.bound, &s.context)     # pool threads hold no GIL: BOUND_NOGIL
        #                                                 says nothing here
        if rc != 0:
            _report_rc(s, t, rc)
    elif t.bound.kind == TASK_PY:
        _run_py(s, t)
    elif t.bound.kind == TASK_EMIT:
        pthread_mutex_lock(&signal_lock)
        record_done(t.record)
        pthread_mutex_unlock(&signal_lock)
    elif t.bound.kind == TASK_CALL:
        t.call(t.arg)
    elif t.bound.kind == TASK_STORE:
        (<long long*>t.arg)[0] = t.value
    elif t.bound.kind == TASK_WAIT:
        _block_on(t.record)             # reached only when parking failed; else done already
    if s.trace:
        _trace_add(s, t, t0, _now())
    record_release(t.record)
    task_release_owned(t)
    debug_count(DEBUG_TASKS, -1)


cdef bint _park(stream_t* s, stream_task_t* rest, Py_ssize_t n, Py_ssize_t ran) noexcept nogil:
    """rest[0] is a wait on a record: if it is not done, put rest[0:n] back at the head of s's
    queue, count the ``ran`` tasks of this batch before it completed, and park s on the record
    (True): from then on the calling thread must not touch s, which an emit may make ready
    and another thread run (and free) at once. False if the record is done (run the wait, a
    no-op) or the queue cannot grow (run it, blocking this thread)."""
    cdef signal_record_t* r = rest[0].record
    cdef Py_ssize_t i
    pthread_mutex_lock(&signal_lock)
    if r.done:
        pthread_mutex_unlock(&signal_lock)
        return False
    pthread_mutex_lock(&s.lock)
    if s.count + n > s.cap and not _ring_grow(s, n, n):   # n free slots in front, for rest
        pthread_mutex_unlock(&s.lock)
        pthread_mutex_unlock(&signal_lock)
        return False
    s.head = (s.head - n + s.cap) % s.cap
    for i in range(n):
        s.ring[(s.head + i) % s.cap] = rest[i]
    s.count += n
    s.completed += ran
    s.state = STREAM_PARKED
    s.park.next = <waiter_t*>r.waiters
    r.waiters = &s.park
    pthread_mutex_unlock(&s.lock)
    pthread_mutex_unlock(&signal_lock)
    return True


cdef void _serve(stream_t* s) noexcept nogil:
    """Run s (just taken from the ready list) until it runs dry, parks or has had its slice."""
    cdef stream_task_t batch[POP_BATCH]
    cdef Py_ssize_t n, i, served = 0
    cdef bint idle = False, last = False, requeued = False
    debug_count(DEBUG_WORKERS, 1)
    _set_current(s)
    pthread_mutex_lock(&s.lock)
    s.state = STREAM_RUNNING
    while True:
        n = min(s.count, POP_BATCH)
        for i in range(n):
            batch[i] = s.ring[(s.head + i) % s.cap]
        s.head = (s.head + n) % s.cap
        s.count -= n
        pthread_mutex_unlock(&s.lock)
        for i in range(n):
            if batch[i].bound.kind == TASK_WAIT and _park(s, batch + i, n - i, i):
                # s is no longer ours: an emit may already have made it ready again.
                _set_current(NULL)
                debug_count(DEBUG_WORKERS, -1)
                return
            _run_task(s, &batch[i])
        served += n
        pthread_mutex_lock(&s.lock)
        s.completed += n
        if s.host_waiting and s.completed == s.submitted:
            pthread_cond_broadcast(&s.idle)
        if s.count == 0:
            s.state = STREAM_IDLE
            s.refs -= 1                 # the pool's reference
            last = s.refs == 0
            idle = True
            break
        if served >= SLICE:
            pthread_mutex_lock(&_pool.lock)
            if _pool.ready_head != NULL:
                pthread_mutex_unlock(&_pool.lock)
                s.state = STREAM_QUEUED
                requeued = _make_ready(s)
                break
            pthread_mutex_unlock(&_pool.lock)
            served = 0
    pthread_mutex_unlock(&s.lock)
    _set_current(NULL)
    debug_count(DEBUG_WORKERS, -1)
    if requeued:
        _wake_one()
    if idle:
        pthread_mutex_lock(&_pool.lock)
        _pool.busy -= 1
        if _pool.busy == 0:
            pthread_cond_broadcast(&_pool.quiet)
        pthread_mutex_unlock(&_pool.lock)
        if last:
            _free_from_pool(s)


cdef void _pool_main() noexcept nogil:
    """A pool thread: take the oldest ready stream and serve it, else the oldest job and run
    it, repeat; with neither, help with the parts of commands split by nnc_parallel_for
    (nnc.base.parallel); with nothing at all, spin a little if it has just worked and no other
    thread spins, then sleep. Exit when the pool has more threads than its size, or when it
    stops and nothing is left to run."""
    cdef stream_t* s
    cdef pool_job_t* job
    cdef bint worked = False, wake
    # The last spin ran out without work: a CPU-stream run in progress then no longer keeps
    # this thread spinning (its spin is bounded) until it works or is woken again.
    cdef bint spun_out = False
    # Scratch memory for the jobs and parts this thread runs (streams bring their own).
    cdef nnc_stream_context_t helper
    helper.workspace = NULL
    helper.workspace_size = 0
    pool_thread_mark()
    pthread_mutex_lock(&_pool.lock)
    # Any thread beyond the pool's size exits (set_num_threads shrank it), whichever its id.
    while _pool.running <= _pool.size:
        s = <stream_t*>_pool.ready_head
        if s != NULL:
            _pool.ready_head = <stream_t*>s.ready_next
            wake = (_pool.ready_head != NULL or _pool.job_head != NULL) and (
                _pool.sleeping > 0 and _pool.spinning == 0)
            if _pool.ready_head == NULL:
                _pool.ready_tail = NULL
            s.ready_next = NULL
            pthread_mutex_unlock(&_pool.lock)
            if wake:
                _wake_one()
            parallel_busy_enter()
            _serve(s)
            parallel_busy_leave()
            worked, spun_out = True, False
            pthread_mutex_lock(&_pool.lock)
            continue
        job = _pool.job_head
        if job != NULL:
            _pool.job_head = job.next
            # More work waits, and whoever queued it may have woken nobody (it saw a spinner,
            # maybe this thread): pass the wake-up on, so that a burst reaches idle threads.
            wake = _pool.job_head != NULL and _pool.sleeping > 0 and _pool.spinning == 0
            if _pool.job_head == NULL:
                _pool.job_tail = NULL
            pthread_mutex_unlock(&_pool.lock)
            if wake:
                _wake_one()
            parallel_busy_enter()
            job.run(job, &helper)
            parallel_busy_leave()
            worked, spun_out = True, False
            pthread_mutex_lock(&_pool.lock)
            _pool.busy -= 1
            if _pool.busy == 0:
                pthread_cond_broadcast(&_pool.quiet)
            continue
        # Read under the pool's lock: a poster bumps it before waking us, so either we see it
        # here or its wake-up finds us asleep.
        if parallel_pending():
            pthread_mutex_unlock(&_pool.lock)
            parallel_help(&helper)
            spun_out = False
            pthread_mutex_lock(&_pool.lock)
            continue
        if _pool.stopping:
            break
        # Spin after work, or while a synchronous run or a CPU-stream run splits its commands
        # (woken for it by parallel_run_begin before any part exists): one spinner at a time.
        if ((worked or parallel_runs_active()
                or (parallel_stream_runs_active() and not spun_out))
                and _pool.spinning == 0 and pool_spin_seconds > 0):
            worked = False
            _pool.spinning += 1
            pthread_mutex_unlock(&_pool.lock)
            spun_out = not pool_spin()
            pthread_mutex_lock(&_pool.lock)
            _pool.spinning -= 1
            continue
        worked = False
        _pool.sleeping += 1
        pthread_cond_wait(&_pool.work, &_pool.lock)
        _pool.sleeping -= 1
        spun_out = False
    _pool.running -= 1
    pthread_cond_broadcast(&_pool.quiet)
    pthread_mutex_unlock(&_pool.lock)
    nnc_context_free(&helper)


cdef int _wake_helpers(int n, bint spinner_first) noexcept nogil:
    """nnc.base.parallel: wake up to n sleeping threads for a job's parts; with spinner_first,
    count a spinning thread as one of them (it will take a part) and return how many were left
    out that way: the caller wakes them later if too few joined, since after an idle spell the
    kernel may have put the spinner on the caller's core, where it helps nobody
    (docs/threading.md, "Intra-op parallelism")."""
    cdef int deferred = 0
    pthread_mutex_lock(&_pool.lock)
    if spinner_first and _pool.spinning > 0:
        deferred = min(n, _pool.spinning)
        n -= deferred
        if n == 0:
            pthread_mutex_unlock(&_pool.lock)
            return deferred
    if n >= _pool.sleeping:
        pthread_cond_broadcast(&_pool.work)
    else:
        while n > 0:
            pthread_cond_signal(&_pool.work)
            n -= 1
    pthread_mutex_unlock(&_pool.lock)
    return deferred


cdef int _helpers() noexcept nogil:
    """nnc.base.parallel: how many threads may help one command: size - 1, so a caller from
    outside the pool (a sequential run) and its helpers use no more threads than the pool has,
    and a pool thread's command is helped by the others; 0 until the pool starts (a racy read
    of an int: a limit, not a promise)."""
    return max(0, min(_pool.running, _pool.size) - 1)


parallel_install(_wake_helpers, _helpers)
parallel_set_spin(pool_spin_seconds)
try:
    # Commands cut before the pool starts are cut as they will be after (parallel_width).
    parallel_set_width(pool_default_size())
except NNCError:
    pass                                # a bad NNC_NUM_THREADS: reported when the pool starts


def _start_for_parts():
    pool_start()


parallel_install_starter(_start_for_parts)


def _thread_main():
    with nogil:
        _pool_main()


cdef int _grow() except -1:
    """Start threads until ``running`` reaches ``size`` (with the GIL, which guards _threads)."""
    cdef int id
    while True:
        pthread_mutex_lock(&_pool.lock)
        id = _pool.running
        if id >= _pool.size:
            pthread_mutex_unlock(&_pool.lock)
            return 0
        _pool.running += 1
        pthread_mutex_unlock(&_pool.lock)
        t = threading.Thread(target=_thread_main, name=f"nnc-worker-{id}", daemon=True)
        try:
            t.start()
        except Exception as e:
            # The pool keeps the threads it has: later streams and calls do not retry (and fail)
            # until set_num_threads asks again.
            pthread_mutex_lock(&_pool.lock)
            _pool.running -= 1
            _pool.size = max(1, _pool.running)
            pthread_mutex_unlock(&_pool.lock)
            parallel_set_width(_pool.size)
            raise StreamError(f"could not start nnc worker thread {id}: {e}") from e
        _threads.append(t)


cdef int pool_start() except -1:
    """Start the pool at its default size unless it runs (with the GIL); StreamError if a
    thread cannot start, so that nnc.Stream() fails before any work is enqueued."""
    if _pool.stopping:
        raise StreamError("the interpreter is exiting (nnc's exit hook already stopped the "
                          "worker pool): no new stream can be created")
    if _pool.size == 0:
        pool_settings_read()            # a bad setting is refused before anything changes
        parallel_set_width(_pool.size)
        parallel_set_spin(pool_spin_seconds)
    if _pool.running < _pool.size:
        _grow()
    return 0


def set_num_threads(n):
    """Size the worker pool to ``n`` threads (>= 1); takes effect at once: new threads start,
    surplus ones exit after the stream they are running. NNC has one CPU thread per stream
    context's queue; nnc shares a pool (see the module docstring)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_THREADS:
        raise NNCError(f"set_num_threads needs a positive int up to {MAX_THREADS}, not {n!r}")
    if _pool.stopping:
        raise StreamError("the interpreter is exiting: the worker pool is stopped")
    pthread_mutex_lock(&_pool.lock)
    _pool.size = n
    pthread_cond_broadcast(&_pool.work)
    pthread_mutex_unlock(&_pool.lock)
    parallel_set_width(n)
    _grow()
    _reap()


def get_num_threads():
    """The pool's size: threads it runs streams on (started with the first stream)."""
    return _pool.size if _pool.size else pool_default_size()


def _reap():
    """Forget the threads that have exited (after shrinking)."""
    _threads[:] = [t for t in _threads if t.is_alive()]


def pool_stats():
    """(threads running, streams busy, streams ready), for tests."""
    cdef int ready = 0
    cdef stream_t* s
    pthread_mutex_lock(&_pool.lock)
    s = <stream_t*>_pool.ready_head
    while s != NULL:
        ready += 1
        s = <stream_t*>s.ready_next
    out = (_pool.running, _pool.busy, ready)
    pthread_mutex_unlock(&_pool.lock)
    return out


def pool_wait_quiet(double timeout):
    """Wait (without the GIL, up to ``timeout`` s) until no stream has work; True if none has.
    For the exit hook and nnc_finalize, which also drain streams whose object is gone."""
    cdef timespec ts
    cdef bint quiet
    with nogil:
        pthread_mutex_lock(&_pool.lock)
        slice_deadline(&ts, timeout)
        if _pool.busy:
            pthread_cond_timedwait(&_pool.quiet, &_pool.lock, &ts)
        quiet = _pool.busy == 0
        pthread_mutex_unlock(&_pool.lock)
    return quiet


def pool_busy():
    """Streams with work queued, running or parked (dropped streams included), plus jobs not
    yet finished."""
    return _pool.busy


def pool_stop():
    """Refuse new streams, let every thread exit once nothing is ready, and join them
    (the exit hook, after draining). Parked streams stay parked: their emits never come."""
    pthread_mutex_lock(&_pool.lock)
    _pool.stopping = 1
    pthread_cond_broadcast(&_pool.work)
    pthread_mutex_unlock(&_pool.lock)
    for t in list(_threads):
        while t.is_alive():
            t.join(0.1)
    _threads[:] = []


def _after_fork_in_child():
    """os.fork in the child: only the forking thread survives, so the pool has no thread and
    its mutexes may be held by threads that are gone. Start over: fresh mutexes, no thread, no
    ready stream, a new generation (streams of the parent refuse to be used). The pool starts
    again with the child's first stream."""
    record_after_fork()
    mutex_init_spinning(&_pool.lock)
    pthread_cond_init(&_pool.work, NULL)
    pthread_cond_init(&_pool.quiet, NULL)
    _pool.ready_head = NULL
    _pool.ready_tail = NULL
    _pool.job_head = NULL               # the parent's jobs: their engines refuse the child
    _pool.job_tail = NULL
    _pool.running = 0
    _pool.sleeping = 0
    _pool.spinning = 0
    _pool.busy = 0
    _pool.generation += 1
    _threads[:] = []
    parallel_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
