# Signal records: one emit of a signal (NNC's CUDA-event-like record on a stream), what waits on
# it, and the lock that guards them all. Made and recycled here; nnc.stream.worker marks them done
# and wakes their waiters (record_done), nnc.stream.stream makes them when a signal is emitted.

from nnc.base.sync cimport pthread_cond_t, pthread_mutex_t


# One recorded emit of a signal (a CUDA event record). A wait captures the signal's latest record
# when it is enqueued and blocks until that record is done; a signal never emitted has no record,
# so waiting on it is a no-op. Fields are guarded by signal_lock.
ctypedef struct signal_record_t:
    int done                            # 1 once the emitting stream reached the emit
    int reserved                        # made by Signal._reserve, its emit not enqueued yet
    int refs                            # Signal.latest + queued tasks holding it; freed at 0
    long long id                        # unique, for trace flow arrows
    void* waiters                       # waiter_t list: parked streams and blocked host threads


# Something waiting for a signal record: a parked stream (``stream`` set: the emit makes it
# ready again, no thread sleeps) or a host thread (``stream`` NULL: it sleeps on ``cond``, on its
# own stack). Linked into the record's list under signal_lock; record_done walks the list once,
# under that lock, and empties it.
ctypedef struct waiter_t:
    pthread_cond_t cond                 # host waits only (initialised by the waiting thread)
    void* stream                        # the parked stream_t, or NULL for a host wait
    waiter_t* next


# Guards every signal_record_t (all fields) and the record sequence. Lock order, everywhere:
# signal_lock, then a stream's lock, then the pool's lock; the GIL is never taken while any of
# them is held (docs/threading.md).
cdef pthread_mutex_t signal_lock


# A new record (refs 1, not done, a fresh id), or NULL out of memory. Records are recycled
# through a free list (guarded by signal_lock), so a graph run on streams, which emits the
# same number of signals every time, allocates none after its first run.
cdef signal_record_t* record_new() noexcept nogil
# Drop one reference to r (NULL: nothing), recycling it at 0; takes signal_lock.
cdef void record_release(signal_record_t* r) noexcept nogil
# In a forked child (nnc.stream.worker's fork handler): a fresh lock, and the free list forgotten.
cdef void record_after_fork() noexcept nogil
