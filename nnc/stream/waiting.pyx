"""Waiting for streams and signals without tying up a thread per wait: ``Signal.wait`` from a
host thread, and asyncio futures that a stream's own worker completes (``Stream.as_future``,
``await s``).

NNC: ccv_nnc_stream_signal_wait from the host (CUDA: cudaEventSynchronize); the asyncio glue
has no NNC counterpart. Owns no state: a host wait sleeps on a condition variable of its own,
linked into the signal record's waiter list like a worker's wait task (nnc.stream.worker), and a
future is completed by a task queued on the stream (docs/threading.md, "Waiting").
"""

from nnc.base.core import StreamError

from nnc.stream.stream cimport Signal, Stream, timeout_seconds
from nnc.stream.worker cimport (
    mono_now, record_release, signal_lock, signal_record_t, slice_deadline,
    stream_check_not_worker, waiter_t,
)
from nnc.base.sync cimport (
    pthread_cond_destroy, pthread_cond_init, pthread_cond_timedwait, pthread_mutex_lock,
    pthread_mutex_unlock, timespec,
)


cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1


def signal_wait(Signal sig not None, timeout=None):
    """Signal.wait: True once the latest emit enqueued so far has happened (at once if never
    emitted), False if ``timeout`` seconds passed first."""
    cdef double limit = timeout_seconds(timeout)
    cdef signal_record_t* r
    stream_check_not_worker("Signal.wait()")
    pthread_mutex_lock(&signal_lock)
    r = sig.latest
    if r != NULL and r.done:
        r = NULL
    if r != NULL:
        r.refs += 1                     # a later emit replaces sig.latest: keep r alive
    pthread_mutex_unlock(&signal_lock)
    if r == NULL:
        return True
    try:
        return record_wait(r, limit)
    finally:
        record_release(r)


cdef bint record_wait(signal_record_t* r, double limit) except -1:
    """Sleep until r is done, as a worker's wait task does but in slices of at most 100 ms
    (Ctrl-C, the timeout); unlink our waiter from r before returning, since it lives on this
    stack. Emits signal waiters under the lock, so we are never signalled after unlinking."""
    cdef waiter_t me
    cdef waiter_t* w
    cdef waiter_t* prev
    cdef timespec ts
    cdef bint done = False
    cdef double end = mono_now() + limit, left = limit
    pthread_cond_init(&me.cond, NULL)
    try:
        while True:
            with nogil:
                pthread_mutex_lock(&signal_lock)
                if not r.done:
                    slice_deadline(&ts, left)
                    me.stream = NULL
                    me.next = <waiter_t*>r.waiters
                    r.waiters = &me
                    pthread_cond_timedwait(&me.cond, &signal_lock, &ts)
                    if not r.done:      # record_done empties the list itself
                        prev = NULL
                        w = <waiter_t*>r.waiters
                        while w != NULL and w != &me:
                            prev = w
                            w = w.next
                        if w != NULL and prev == NULL:
                            r.waiters = me.next
                        elif w != NULL:
                            prev.next = me.next
                done = r.done
                pthread_mutex_unlock(&signal_lock)
            if done:
                return True
            if limit >= 0:
                left = end - mono_now()
                if left <= 0:
                    return False
            PyErr_CheckSignals()
    finally:
        pthread_cond_destroy(&me.cond)


def stream_future(Stream s not None, loop=None):
    """Stream.as_future: a future of ``loop`` (default: the running one) completed once all
    work enqueued on s so far is done, with None or the StreamError s.wait() would raise.

    A task queued on s asks the loop (``call_soon_threadsafe``) to settle the future, so no
    thread waits. The failures are taken from s only then, on the loop's thread, as wait()
    takes them when it returns: a future cancelled meanwhile, or a loop closed (or closing)
    before it settles, takes none, and s's next wait() reports them. Cancelling cancels no work.
    """
    import asyncio

    if loop is None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise StreamError("as_future() needs a running asyncio event loop, or "
                              "loop=...") from None
    fut = loop.create_future()
    s.kick()
    if s.query():                       # idle: settle now, nothing to hand over
        _settle(s, fut)
    else:
        s._push_call(_resolve, (s, loop, fut), s, None, True, "as_future")
    return fut


def _resolve(Stream s, loop, fut):
    """On s's worker, after the work before it: have the loop's thread settle ``fut``."""
    try:
        loop.call_soon_threadsafe(_settle, s, fut)
    except RuntimeError:
        pass                            # the loop is closed: nobody can await the future


def _settle(Stream s, fut):
    """On the loop's thread: complete ``fut`` with the failures not raised yet (taking them,
    as wait() does), unless it was cancelled meanwhile."""
    cdef list errors = <list>s.s.errors
    if fut.done():
        return
    if errors:
        found = list(errors)
        del errors[:]
        fut.set_exception(s._error(found))
    else:
        fut.set_result(None)
