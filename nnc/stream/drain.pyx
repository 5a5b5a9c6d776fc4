"""Draining every stream, and the exit rule: work enqueued before exit runs before exit.

NNC: ccv_nnc_stream.c keeps no such rule (a C program waits for its own streams); nnc must,
because Python finalizes the interpreter under running threads. The exit hook (``atexit``,
registered when this module is imported, which ``import nnc`` does right after nnc.stream.stream)
drains every stream, those whose Python object is gone included (the pool counts busy streams),
then stops the worker pool and joins its threads: none is left when the interpreter finalizes.
Ctrl-C while it waits, or an exit caused by Ctrl-C while work is pending, abandons that work:
the hook names it on stderr and ends the process with status 130 at once (``os._exit``), since
a pool thread must not outlive the interpreter. ``drain_all`` is also nnc_finalize's wait.
"""

import atexit
import os
import sys
import threading

from nnc.coro import current_scheduler
from nnc.stream.stream import _live
from nnc.stream.worker import pool_busy, pool_stop, pool_wait_quiet

from nnc.stream.stream cimport Stream
from nnc.base.sync cimport pthread_mutex_lock, pthread_mutex_unlock
from nnc.stream.worker cimport stream_check_not_worker


cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1


def drain_all():
    """Wait until every stream is idle: the coroutine schedulers of live streams, then the
    queues of all streams, dropped ones included (nnc_finalize, the exit hook). Raises only
    KeyboardInterrupt (Ctrl-C) or StreamError (called on a pool thread)."""
    cdef Stream st
    stream_check_not_worker("draining every stream")
    busy = True
    while busy:                         # draining one stream may enqueue work on another
        busy = False
        for st in list(_live):
            sched = st._scheduler
            if sched is not None and sched is not current_scheduler() and sched.active:
                busy = True
                while not sched.join(0.1):
                    PyErr_CheckSignals()
            st.kick()
        while not pool_wait_quiet(0.1):
            busy = True
            PyErr_CheckSignals()


def _pending():
    """[(stream index, tasks not finished)] of the live streams with work, and the number of
    busy streams whose object is gone."""
    cdef Stream st
    out = []
    for st in list(_live):
        pthread_mutex_lock(&st.s.lock)
        n = st.s.submitted - st.s.completed
        pthread_mutex_unlock(&st.s.lock)
        if n:
            out.append((st.index, n))
    return out, max(0, pool_busy() - len(out))


def _abandon():
    """Ctrl-C at exit: say what is given up, then end the process now (status 130)."""
    lost, dropped = _pending()
    what = ", ".join(f"stream #{i}: {n} task(s)" for i, n in lost)
    if dropped:
        what = (what + ", " if what else "") + f"{dropped} dropped stream(s)"
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    try:
        sys.stderr.write(f"nnc: interrupted at exit; abandoning unfinished work "
                         f"({what or 'none'})\n")
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
    """Drain every stream, then stop the pool and join its threads (module docstring)."""
    try:
        interrupted = (getattr(sys, "last_type", None) is KeyboardInterrupt
                       or _interrupted_at_shutdown)
        if interrupted and pool_busy():
            _abandon()                  # the program is dying of Ctrl-C: don't keep it alive
        drain_all()
        pool_stop()
    except KeyboardInterrupt:
        _abandon()


# Registered at import, before user atexit handlers that may still enqueue work (atexit runs
# them in reverse order, so this one runs after them).
atexit.register(_exit_hook)
