"""Signal records: made, reference-counted and recycled (see record.pxd for who owns what).

A record is one emit of a signal; waits capture it and block (or park their stream) until it
is done. A run on streams emits the same signals every time, so records go back to a free list
when their last reference drops and the next emit takes one from there: repeated runs allocate
none (tests/base/test_alloc.py). nnc.stream.worker marks records done and wakes their waiters.
"""

from libc.stdlib cimport free, malloc

from nnc.base.debug cimport DEBUG_RECORDS, debug_count
from nnc.base.sync cimport mutex_init_spinning, pthread_mutex_lock, pthread_mutex_unlock

mutex_init_spinning(&signal_lock)


cdef enum:
    RECORDS_KEPT = 4096                 # recycled records kept; beyond, they are freed

cdef signal_record_t* _records_free = NULL     # linked through .waiters; guarded by signal_lock
cdef int _records_kept = 0
cdef long long _record_seq = 0                 # guarded by signal_lock


cdef signal_record_t* record_new() noexcept nogil:
    global _records_free, _records_kept, _record_seq
    cdef signal_record_t* r
    pthread_mutex_lock(&signal_lock)
    r = _records_free
    if r != NULL:
        _records_free = <signal_record_t*>r.waiters
        _records_kept -= 1
    else:
        pthread_mutex_unlock(&signal_lock)
        r = <signal_record_t*>malloc(sizeof(signal_record_t))
        if r == NULL:
            return NULL
        pthread_mutex_lock(&signal_lock)
    debug_count(DEBUG_RECORDS, 1)
    r.done = 0
    r.reserved = 0
    r.refs = 1
    r.waiters = NULL
    _record_seq += 1
    r.id = _record_seq
    pthread_mutex_unlock(&signal_lock)
    return r


cdef void record_release(signal_record_t* r) noexcept nogil:
    global _records_free, _records_kept
    cdef bint drop = False
    if r == NULL:
        return
    pthread_mutex_lock(&signal_lock)
    r.refs -= 1
    if r.refs == 0:
        debug_count(DEBUG_RECORDS, -1)
        if _records_kept < RECORDS_KEPT:
            r.waiters = _records_free
            _records_free = r
            _records_kept += 1
        else:
            drop = True
    pthread_mutex_unlock(&signal_lock)
    if drop:
        free(r)


cdef void record_after_fork() noexcept nogil:
    global _records_free, _records_kept
    mutex_init_spinning(&signal_lock)
    _records_free = NULL                # leaked in the child: records of the parent's threads
    _records_kept = 0
