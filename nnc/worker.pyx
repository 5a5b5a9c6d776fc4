"""Stream worker threads, the loop running their tasks, and the exit rule: work enqueued
before exit runs before exit.

NNC: the CPU stream context's thread (ccv_nnc_stream.c). Each ``nnc.Stream`` gets one
:class:`Worker`, started when the stream is made (a thread that cannot start is a StreamError
from ``nnc.Stream()``, before any work is enqueued). It is a daemon ``threading.Thread``: CPython
makes its thread state in the parent, under the GIL, and the worker keeps it for life, so every
``with gil`` of the worker (a Python task, a failure) reuses it. A raw pthread instead made and
freed a thread state per GIL acquisition, outside the GIL, which raced tracemalloc (CPython
3.11) and interpreter finalization (docs/threading.md, "Interpreter exit").

The worker loop (``_worker_main``, ``_run_task``) pops the stream's tasks in batches and runs them
without the GIL: C backends, signal emits and waits, loop counts and C calls; it takes the GIL only
for Python tasks and to record a failure, which ``wait()`` raises (nnc.stream). While nnc.trace
records, it times each task into the stream's trace buffer (``trace_start``, ``trace_stop``).

``_workers`` knows every worker, including those of streams whose Python object is gone, so the
exit hook (an ``atexit`` callback) drains all of them, then closes them and joins their threads:
no worker is left when the interpreter finalizes. Ctrl-C while the hook waits, or an exit caused
by Ctrl-C while work is pending, abandons that work: the hook names it on stderr and ends the
process with status 130 at once (``os._exit``), since a worker must not outlive the interpreter.
"""

import atexit
import os
import sys
import threading

from cpython.object cimport PyObject
from cpython.ref cimport Py_XDECREF
from libc.stdlib cimport free, realloc

from nnc._core import NNCError, StreamError
from nnc.tracing import tracing_begin, tracing_end

from nnc.debug cimport DEBUG_TASKS, DEBUG_WORKERS, debug_count
from nnc.stream cimport (
    TASK_C, TASK_CALL, TASK_EMIT, TASK_OWNS_IO, TASK_OWNS_PY, TASK_PY, TASK_STORE, TASK_WAIT,
    Stream, record_done, record_release, signal_lock, stream_drain, stream_record_error,
    stream_release, stream_set_current_worker, stream_t, stream_task_t, trace_event_t, waiter_t,
)
from nnc.sync cimport (
    CLOCK_MONOTONIC, clock_gettime, pthread_cond_broadcast, pthread_cond_destroy,
    pthread_cond_init, pthread_cond_signal, pthread_cond_wait, pthread_mutex_lock,
    pthread_mutex_unlock, timespec,
)


cdef extern from "Python.h":
    object PyObject_Call(PyObject* fn, PyObject* args, PyObject* kwargs)
    int PyErr_CheckSignals() except -1


cdef enum:
    POP_BATCH = 32                      # tasks a worker takes from its queue per lock


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef void _trace_add(stream_t* s, stream_task_t* t, double t0, double t1) noexcept nogil:
    """Append t's timing to s's trace buffer (nnc.trace, read by trace_stop);
    the event is dropped if the buffer cannot grow."""
    cdef trace_event_t* ev
    cdef Py_ssize_t cap
    pthread_mutex_lock(&s.lock)
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
    ev.kind = t.kind
    ev.node = t.node
    ev.label = t.label
    ev.record = t.record.id if t.record != NULL else 0
    pthread_mutex_unlock(&s.lock)


cdef void _add_error(stream_t* s, stream_task_t* t, object exc) noexcept:
    """Record a failure (with the GIL held). Never raises."""
    try:
        where = "a task"
        ctx = <object>t.ctx if t.ctx != NULL else None
        if ctx is not None and t.node >= 0 and hasattr(ctx, "_label"):
            where = f"node {ctx._label(t.node)}"
        elif ctx is not None:
            where = repr(ctx)
        stream_record_error(s, (where, exc))
    except BaseException:
        pass


cdef void _report_rc(stream_t* s, stream_task_t* t, int rc) noexcept with gil:
    from nnc._core import STATUS_NAMES
    _add_error(s, t, NNCError(f"backend returned {STATUS_NAMES.get(rc, rc)}"))


cdef void _run_py(stream_t* s, stream_task_t* t) noexcept with gil:
    try:
        PyObject_Call(t.fn, t.args, NULL)
    except BaseException as e:
        _add_error(s, t, e)


cdef void _drop_refs(stream_task_t* t) noexcept with gil:
    Py_XDECREF(t.fn)
    Py_XDECREF(t.args)
    Py_XDECREF(t.keep)
    Py_XDECREF(t.ctx)


cdef void _run_task(stream_t* s, stream_task_t* t) noexcept nogil:
    # No Python object may live in this function, not even in a branch: Cython would then take
    # the GIL on every exit to release it, once per task. Python work goes through the
    # ``with gil`` helpers above, which take the GIL only when called.
    cdef int rc
    cdef double t0 = 0
    cdef waiter_t me
    if s.trace:
        t0 = _now()
    if t.kind == TASK_C:
        rc = t.c_exec(t.param, t.io, t.input_size, t.io + t.input_size, t.output_size, NULL)
        if rc != 0:
            _report_rc(s, t, rc)
    elif t.kind == TASK_PY:
        _run_py(s, t)
    elif t.kind == TASK_EMIT:
        pthread_mutex_lock(&signal_lock)
        record_done(t.record)
        pthread_mutex_unlock(&signal_lock)
    elif t.kind == TASK_CALL:
        t.call(t.arg)
    elif t.kind == TASK_STORE:
        (<long long*>t.arg)[0] = t.value
    elif t.kind == TASK_WAIT:
        pthread_mutex_lock(&signal_lock)
        if not t.record.done:
            pthread_cond_init(&me.cond, NULL)
            me.next = <waiter_t*>t.record.waiters
            t.record.waiters = &me
            while not t.record.done:
                pthread_cond_wait(&me.cond, &signal_lock)
            pthread_cond_destroy(&me.cond)
        pthread_mutex_unlock(&signal_lock)
    if s.trace:
        _trace_add(s, t, t0, _now())
    record_release(t.record)
    if t.flags & TASK_OWNS_IO:
        free(t.io)
    if t.flags & TASK_OWNS_PY:
        _drop_refs(t)
    debug_count(DEBUG_TASKS, -1)


cdef void _worker_main(stream_t* s) noexcept nogil:
    """The worker loop: run tasks in order until the stream is closing and drained."""
    # Tasks are taken POP_BATCH at a time, so the lock is taken twice per batch, not per task;
    # completed counts them once the whole batch has run (wait() waits for all of it anyway).
    cdef stream_task_t batch[POP_BATCH]
    cdef Py_ssize_t n, i
    debug_count(DEBUG_WORKERS, 1)
    stream_set_current_worker(s)
    pthread_mutex_lock(&s.lock)
    while True:
        while s.count == 0 and not s.closing:
            s.sleeping = 1
            pthread_cond_wait(&s.work, &s.lock)
            s.sleeping = 0
        if s.count == 0:
            break
        n = min(s.count, POP_BATCH)
        for i in range(n):
            batch[i] = s.ring[(s.head + i) % s.cap]
        s.head = (s.head + n) % s.cap
        s.count -= n
        pthread_mutex_unlock(&s.lock)
        for i in range(n):
            _run_task(s, &batch[i])
        pthread_mutex_lock(&s.lock)
        s.completed += n
        if s.host_waiting and s.completed == s.submitted:
            pthread_cond_broadcast(&s.idle)
    pthread_mutex_unlock(&s.lock)
    stream_set_current_worker(NULL)
    debug_count(DEBUG_WORKERS, -1)


def trace_start(tracer):
    """Start recording (nnc.trace): tasks are named as they are enqueued (nnc.tracing) and
    every stream's worker times them into its trace buffer (_trace_add)."""
    from nnc import stream as stream_module
    cdef Stream st
    tracing_begin(tracer)
    for st in list(stream_module._live):
        with nogil:
            pthread_mutex_lock(&st.s.lock)
            st.s.trace = 1
            st.s.trace_size = 0
            pthread_mutex_unlock(&st.s.lock)


def trace_stop():
    """Stop recording; drain every stream; return [(stream index, [event tuples])]."""
    from nnc import stream as stream_module
    cdef Stream st
    cdef trace_event_t* buf
    cdef trace_event_t* ev
    cdef Py_ssize_t i, size
    out = []
    try:
        for st in list(stream_module._live):
            st._drain()
            # Take the buffer under the lock, then build Python objects after unlocking: the
            # GIL is never taken while a stream lock is held (docs/threading.md).
            with nogil:
                pthread_mutex_lock(&st.s.lock)
                st.s.trace = 0
                buf = <trace_event_t*>st.s.trace_buf
                size = st.s.trace_size
                st.s.trace_buf = NULL
                st.s.trace_size = 0
                st.s.trace_cap = 0
                pthread_mutex_unlock(&st.s.lock)
            try:
                events = []
                for i in range(size):
                    ev = buf + i
                    events.append((ev.t0, ev.t1, ev.kind, ev.node, ev.label, ev.record))
            finally:
                free(buf)
            if events:
                out.append((st.index, events))
    finally:
        tracing_end()
    return out


# stream index -> Worker, for every worker thread not yet exited; guarded by the GIL. A worker
# removes itself as it exits, with the GIL, just before letting go of its stream.
_workers = {}


cdef class Worker:
    """The thread serving one stream (a daemon ``threading.Thread`` named nnc-stream-N)."""

    def _run(self):
        cdef stream_t* s = self.s
        with nogil:
            _worker_main(s)
        # The GIL is held again, through this thread's own thread state, until the end.
        self.s = NULL
        _workers.pop(self.index, None)
        stream_release(s, True)

    def drain(self):
        """Wait until the stream's work so far is done (its object may be gone)."""
        cdef stream_t* s = self.s
        if s == NULL:
            return
        pthread_mutex_lock(&s.lock)
        s.refs += 1                     # the worker may exit and let go of s while we sleep
        pthread_mutex_unlock(&s.lock)
        try:
            stream_drain(s)
        finally:
            stream_release(s, False)

    def pending(self):
        """Tasks enqueued and not finished (0 once the worker has exited)."""
        cdef long long n = 0
        if self.s != NULL:
            pthread_mutex_lock(&self.s.lock)
            n = self.s.submitted - self.s.completed
            pthread_mutex_unlock(&self.s.lock)
        return n

    def close(self):
        """Refuse further tasks; the worker exits once its queue is empty."""
        if self.s != NULL:
            pthread_mutex_lock(&self.s.lock)
            self.s.closing = 1
            pthread_mutex_unlock(&self.s.lock)
            # After unlocking; s stays alive: freeing it needs the GIL, which we hold.
            pthread_cond_signal(&self.s.work)

    def __repr__(self):
        return f"<nnc.worker.Worker of stream #{self.index}>"


def worker_start(Stream st not None):
    """Start st's worker thread (Stream.__cinit__); StreamError if it cannot start."""
    cdef stream_t* s = st.s
    cdef Worker w = Worker.__new__(Worker)
    w.s = s
    w.index = st.index
    s.refs += 1                         # no other thread knows s yet: no lock needed
    s.worker = 1
    try:
        w.thread = threading.Thread(target=w._run, name=f"nnc-stream-{st.index}", daemon=True)
        _workers[st.index] = w
        w.thread.start()
    except Exception as e:
        _workers.pop(st.index, None)
        w.s = NULL
        s.refs -= 1
        s.worker = 0
        raise StreamError(f"could not start the worker thread of {st!r}: {e}") from e


def drain_all():
    """Wait until every stream is idle: the coroutine schedulers of live streams and the queues
    of all streams, dropped ones included (nnc_finalize, the exit hook). Raises only
    KeyboardInterrupt (Ctrl-C) or StreamError (called on a worker thread)."""
    from nnc import stream as stream_module
    from nnc.coro import current_scheduler

    busy = True
    while busy:                         # draining one stream may enqueue work on another
        busy = False
        for st in list(stream_module._live):
            sched = (<Stream>st)._scheduler
            if sched is not None and sched is not current_scheduler() and sched.active:
                busy = True
                while not sched.join(0.1):
                    PyErr_CheckSignals()
        for w in list(_workers.values()):
            if (<Worker>w).pending():
                busy = True
                (<Worker>w).drain()


def _abandon():
    """Ctrl-C at exit: say what is given up, then end the process now (status 130)."""
    lost = [(w.index, w.pending()) for w in list(_workers.values()) if w.pending()]
    what = ", ".join(f"stream #{i}: {n} task(s)" for i, n in lost) or "none"
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    try:
        sys.stderr.write(f"nnc: interrupted at exit; abandoning unfinished work ({what})\n")
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(130)


# Set when a Ctrl-C lands in threading._shutdown, which runs before atexit: the interpreter
# swallows it there (PyErr_WriteUnraisable, "Exception ignored"), so the exit hook would wait for
# never-ending work although the user asked to stop. Guarded by the GIL.
_interrupted_at_shutdown = False
_unraisablehook = sys.unraisablehook    # the hook _note_unraisable chains to


def _note_unraisable(unraisable):
    """sys.unraisablehook while nnc is imported: remembers a KeyboardInterrupt swallowed once
    threading has begun shutting down (and only then), and passes everything on unchanged."""
    global _interrupted_at_shutdown
    if (getattr(threading, "_SHUTTING_DOWN", False) and unraisable.exc_type is not None
            and issubclass(unraisable.exc_type, KeyboardInterrupt)):
        _interrupted_at_shutdown = True
    _unraisablehook(unraisable)


sys.unraisablehook = _note_unraisable


def _exit_hook():
    """Drain every stream, refuse new work, stop and join every worker (see the docstring)."""
    from nnc import stream as stream_module

    try:
        interrupted = (getattr(sys, "last_type", None) is KeyboardInterrupt
                       or _interrupted_at_shutdown)
        if interrupted and any(w.pending() for w in list(_workers.values())):
            _abandon()                  # the program is dying of Ctrl-C: don't keep it alive
        drain_all()
        stream_module._refuse_new_work()
        workers = list(_workers.values())
        for w in workers:
            w.close()
        for w in workers:
            while w.thread.is_alive():
                w.thread.join(0.1)
    except KeyboardInterrupt:
        _abandon()


atexit.register(_exit_hook)
