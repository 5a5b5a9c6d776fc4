"""Stream worker threads, and the exit rule: work enqueued before exit runs before exit.

NNC: the CPU stream context's thread (ccv_nnc_stream.c). Each ``nnc.Stream`` gets one
:class:`Worker`, started when the stream is made (a thread that cannot start is a StreamError
from ``nnc.Stream()``, before any work is enqueued). It is a daemon ``threading.Thread``: CPython
makes its thread state in the parent, under the GIL, and the worker keeps it for life, so every
``with gil`` of the worker (a Python task, a failure) reuses it. A raw pthread instead made and
freed a thread state per GIL acquisition, outside the GIL, which raced tracemalloc (CPython
3.11) and interpreter finalization (docs/threading.md, "Interpreter exit").

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

from nnc._core import StreamError

from nnc.stream cimport Stream, stream_drain, stream_release, stream_t, stream_worker_main
from nnc.sync cimport pthread_cond_signal, pthread_mutex_lock, pthread_mutex_unlock


cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1

# stream index -> Worker, for every worker thread not yet exited; guarded by the GIL. A worker
# removes itself as it exits, with the GIL, just before letting go of its stream.
_workers = {}


cdef class Worker:
    """The thread serving one stream (a daemon ``threading.Thread`` named nnc-stream-N)."""

    def _run(self):
        cdef stream_t* s = self.s
        with nogil:
            stream_worker_main(s)
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


def _exit_hook():
    """Drain every stream, refuse new work, stop and join every worker (see the docstring)."""
    from nnc import stream as stream_module

    try:
        if getattr(sys, "last_type", None) is KeyboardInterrupt and any(
                w.pending() for w in list(_workers.values())):
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
