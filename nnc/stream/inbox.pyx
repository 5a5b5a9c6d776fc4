"""Inbox: where a coroutine scheduler's wake-ups arrive, posted from C without the GIL.

NNC: the stream callback of ``co.c`` (``_co_stream_await``'s host function puts the task back
on the scheduler's queue and signals its condition variable). nnc.coro's scheduler takes
wake-ups from an inbox: ``post(item)`` from any thread, ``take(block)`` by the thread that
drives the scheduler. This one is a C list under a pthread mutex, so a stream worker can post
a wake-up as one of its C tasks (``inbox_deliver``) without taking the GIL, and the scheduler
thread sleeps in ``take`` with the GIL released: a WaitFor on a stream is then two plain
thread hand-offs (host to worker, worker to scheduler thread) and no GIL hand-off.

A message is made with the GIL (``inbox_message``: it owns a reference to the item and holds
the inbox's C state alive), delivered without it, and returned as the item by ``take``. An
inbox dropped with messages in flight keeps its C state until the last one arrives; those
late messages are freed then, taking the GIL just for that.
"""

from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from nnc.base.sync cimport (
    CLOCK_MONOTONIC, clock_gettime, pthread_cond_destroy, pthread_cond_init, pthread_cond_signal,
    pthread_cond_wait, pthread_create, pthread_join, pthread_mutex_destroy, pthread_mutex_init,
    pthread_mutex_lock, pthread_mutex_unlock, pthread_t, sem_destroy, sem_init, sem_post, sem_t,
    sem_wait, timespec,
)


cdef void _box_release(inbox_t* b) noexcept nogil:
    """Drop one reference to b (b.lock not held); free it at zero."""
    cdef bint last
    pthread_mutex_lock(&b.lock)
    b.refs -= 1
    last = b.refs == 0
    pthread_mutex_unlock(&b.lock)
    if last:
        pthread_mutex_destroy(&b.lock)
        pthread_cond_destroy(&b.cond)
        free(b)


cdef void _msg_free(inbox_msg_t* m) noexcept with gil:
    Py_DECREF(<object>m.item)
    free(m)


cdef inbox_msg_t* inbox_message(Inbox box, object item) except NULL:
    """A message that will deliver ``item`` to ``box``; hand it to inbox_deliver or discard."""
    cdef inbox_msg_t* m = <inbox_msg_t*>malloc(sizeof(inbox_msg_t))
    if m == NULL:
        raise MemoryError()
    Py_INCREF(item)
    m.item = <PyObject*>item
    m.next = NULL
    m.box = box.b
    pthread_mutex_lock(&box.b.lock)
    box.b.refs += 1
    pthread_mutex_unlock(&box.b.lock)
    return m


cdef void inbox_deliver(void* msg) noexcept nogil:
    """Append msg to its inbox and wake the taker (any thread, no GIL needed)."""
    cdef inbox_msg_t* m = <inbox_msg_t*>msg
    cdef inbox_t* b = <inbox_t*>m.box
    cdef bint dropped
    pthread_mutex_lock(&b.lock)
    dropped = b.closed
    if not dropped:
        if b.head == NULL:
            b.head = m
        else:
            b.tail.next = m
        b.tail = m
    pthread_mutex_unlock(&b.lock)
    if not dropped:
        # After unlocking (b stays alive: this message holds a reference until the release
        # below): a taker woken under the lock would block on it at once.
        pthread_cond_signal(&b.cond)
    if dropped:
        _msg_free(m)                    # nobody will take it: the rare GIL for a dead inbox
    _box_release(b)


cdef void inbox_discard(void* msg) noexcept:
    """Free a message that will never be delivered (its task could not be enqueued)."""
    cdef inbox_msg_t* m = <inbox_msg_t*>msg
    cdef inbox_t* b = <inbox_t*>m.box
    Py_DECREF(<object>m.item)
    free(m)
    _box_release(b)


cdef class Inbox:
    """A scheduler inbox in C (see the module docstring); same methods as nnc.coro.Inbox."""

    def __cinit__(self):
        cdef inbox_t* b = <inbox_t*>malloc(sizeof(inbox_t))
        if b == NULL:
            raise MemoryError()
        memset(b, 0, sizeof(inbox_t))
        pthread_mutex_init(&b.lock, NULL)
        pthread_cond_init(&b.cond, NULL)
        b.refs = 1
        self.b = b

    def __dealloc__(self):
        cdef inbox_t* b = self.b
        cdef inbox_msg_t* m
        cdef inbox_msg_t* nxt
        if b == NULL:
            return
        pthread_mutex_lock(&b.lock)
        b.closed = 1
        m = b.head
        b.head = NULL
        pthread_mutex_unlock(&b.lock)
        while m != NULL:
            nxt = m.next
            Py_DECREF(<object>m.item)
            free(m)
            m = nxt
        _box_release(b)

    def post(self, item):
        """Deliver ``item`` now (with the GIL; C code uses inbox_message + inbox_deliver)."""
        inbox_deliver(inbox_message(self, item))

    def take(self, bint block=True):
        """Every item delivered so far, oldest first; with ``block``, sleep (without the GIL)
        until there is one."""
        cdef inbox_t* b = self.b
        cdef inbox_msg_t* m
        cdef inbox_msg_t* nxt
        if block:
            with nogil:
                pthread_mutex_lock(&b.lock)
                while b.head == NULL:
                    pthread_cond_wait(&b.cond, &b.lock)
                m = b.head
                b.head = NULL
                pthread_mutex_unlock(&b.lock)
        else:
            # Nobody holding b.lock ever waits for the GIL, so keeping the GIL here is safe
            # and spares a release and re-acquire on every poll.
            pthread_mutex_lock(&b.lock)
            m = b.head
            b.head = NULL
            pthread_mutex_unlock(&b.lock)
        out = []
        while m != NULL:
            nxt = m.next
            out.append(<object>m.item)
            Py_DECREF(<object>m.item)
            free(m)
            m = nxt
        return out


# -- the machine's floor: what one hand-off costs between two plain C threads -----------------

ctypedef struct _pingpong_t:
    sem_t ping
    sem_t pong
    long n


cdef void* _pong(void* arg) noexcept nogil:
    cdef _pingpong_t* p = <_pingpong_t*>arg
    cdef long _i
    for _i in range(p.n):
        sem_wait(&p.ping)
        sem_post(&p.pong)
    return NULL


def handoff_roundtrip(long n=20000):
    """Seconds per round trip between two C threads (post, wake, post back, wake), GIL-free.

    A WaitFor on a stream costs two such hand-offs at best (host to worker, worker to the
    scheduler thread); benchmarks report loop overheads beside this number, measured in the
    same process, because the VM's wake-up cost varies several-fold with outside load.
    """
    cdef _pingpong_t p
    cdef pthread_t tid
    cdef timespec t0, t1
    cdef long _i
    if n < 1:
        raise ValueError("n must be at least 1")
    p.n = n
    sem_init(&p.ping, 0, 0)
    sem_init(&p.pong, 0, 0)
    if pthread_create(&tid, NULL, _pong, &p) != 0:
        sem_destroy(&p.ping)
        sem_destroy(&p.pong)
        raise OSError("could not start a thread")
    with nogil:
        clock_gettime(CLOCK_MONOTONIC, &t0)
        for _i in range(n):
            sem_post(&p.ping)
            sem_wait(&p.pong)
        clock_gettime(CLOCK_MONOTONIC, &t1)
        pthread_join(tid, NULL)
    sem_destroy(&p.ping)
    sem_destroy(&p.pong)
    return ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9) / n
