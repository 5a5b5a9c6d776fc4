"""The CUDA host callback that wakes Python without ever taking the GIL on a driver thread.

NNC: ccv_nnc_stream.c's stream callbacks (cudaLaunchHostFunc in gpu/ccv_nnc_compat.cu).
``cuLaunchHostFunc(stream, fn, userData)`` makes the driver call ``fn(userData)`` on its own
thread once the stream reaches that point. A Python callable there would take the GIL on the
driver's thread, a known deadlock (the callback holds a driver lock
and waits for the GIL while a thread holding the GIL enters the driver). So ``fn`` is the C
function ``_on_host`` below, ``noexcept nogil``: it pushes its record on a done list under a
pthread mutex and posts a POSIX semaphore, nothing more.

**One** watcher thread per process (started on the first arm, never one per stream) blocks in
``sem_wait`` without the GIL, pops the done records and calls each ``wake()`` with the GIL,
outside every lock. That is how nnc.coro's ``WaitFor(cuda_stream)`` learns a stream finished.
No CUDA header is needed: the driver sees only a C function pointer and a void*.
"""

from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc

import threading
import traceback

from nnc.base.sync cimport (
    pthread_mutex_init, pthread_mutex_lock, pthread_mutex_t, pthread_mutex_unlock, sem_init,
    sem_post, sem_t, sem_wait,
)


cdef sem_t _sem
cdef pthread_mutex_t _lock
cdef hostfn_arm_t* _done = NULL
cdef long _armed = 0                    # arms not yet woken (GIL-protected)
sem_init(&_sem, 0, 0)
pthread_mutex_init(&_lock, NULL)

_watcher = None
_watcher_lock = threading.Lock()


cdef void _on_host(void* user_data) noexcept nogil:
    """The host function given to cuLaunchHostFunc: no GIL, no Python, no CUDA calls."""
    global _done
    cdef hostfn_arm_t* a = <hostfn_arm_t*>user_data
    pthread_mutex_lock(&_lock)
    a.next = _done
    _done = a
    pthread_mutex_unlock(&_lock)
    sem_post(&_sem)


cdef hostfn_arm_t* _take_done() noexcept nogil:
    global _done
    cdef hostfn_arm_t* a
    pthread_mutex_lock(&_lock)
    a = _done
    _done = NULL
    pthread_mutex_unlock(&_lock)
    return a


def _watch():
    global _armed
    cdef hostfn_arm_t* a
    cdef hostfn_arm_t* nxt
    while True:
        with nogil:
            sem_wait(&_sem)
            a = _take_done()
        # The list is newest-first; wake in completion order.
        ready = []
        while a != NULL:
            nxt = a.next
            ready.append(<object>a.wake)
            Py_DECREF(<object>a.wake)
            free(a)
            a = nxt
        for wake in reversed(ready):
            _armed -= 1
            try:
                wake()
            except BaseException:  # a failing wake must not kill the only watcher
                traceback.print_exc()
        # Drop them before sleeping: a wake may hold a whole graph run (nnc.Stream("gpu")'s host
        # tasks), which must not outlive it while this thread waits for the next one.
        ready = wake = None


def fn_address():
    """The address of the C host function, for ``CUhostFn(address)``."""
    return <uintptr_t>&_on_host


def arm(wake):
    """Register ``wake`` (called once, on the watcher thread) and return the userData address
    to pass with :func:`fn_address` to cuLaunchHostFunc. If the launch fails, call
    :func:`disarm` with it, or the record leaks."""
    global _watcher, _armed
    if not callable(wake):
        raise TypeError(f"wake must be callable, not {type(wake).__name__}")
    cdef hostfn_arm_t* a = <hostfn_arm_t*>malloc(sizeof(hostfn_arm_t))
    if a == NULL:
        raise MemoryError()
    if _watcher is None:
        with _watcher_lock:
            if _watcher is None:
                _watcher = threading.Thread(target=_watch, name="nnc-cuda-hostfn", daemon=True)
                _watcher.start()
    Py_INCREF(wake)
    a.next = NULL
    a.wake = <void*>wake
    _armed += 1
    return <uintptr_t>a


def disarm(uintptr_t address):
    """Free an armed record whose host function was never launched (its wake never runs)."""
    global _armed
    cdef hostfn_arm_t* a = <hostfn_arm_t*>address
    Py_DECREF(<object>a.wake)
    free(a)
    _armed -= 1


def pending():
    """How many armed wakes have not run yet."""
    return _armed


def post(uintptr_t address):
    """Hand an armed record to the watcher now, as the host function would (no stream: work
    pushed while a stream captures runs once, at capture, not on every replay)."""
    _on_host(<void*>address)


def on_watcher():
    """True on the watcher thread, which must never wait for a host function (its own)."""
    return _watcher is not None and threading.current_thread() is _watcher
