# The worker pool's shared state: the struct every pool thread and every enqueuer shares, the job
# queue beside the ready list, the pool's settings from the environment, and a thread's spin before
# it sleeps. nnc.stream.worker runs the threads and the streams on it (and re-exports what other
# modules use); this module knows nothing of streams but that the ready list links them.

from nnc.base.sync cimport pthread_cond_t, pthread_mutex_t
from nnc.base.parallel cimport nnc_stream_context_t


cdef enum:
    MAX_THREADS = 1024                  # a pool size beyond this is a mistake, not a setting


# A unit of work bound to no stream: any pool thread runs it, as soon as one is free (a
# libdispatch-style concurrent queue: nnc.engine.engine's ready ops). Owned by whoever submitted it
# until ``run`` is called; ``next`` is the pool's (its lock) while queued. ``run`` gets the
# running thread's scratch context, is called without the GIL, and must not touch the job after
# handing it to another thread.
ctypedef struct pool_job_t:
    void (*run)(pool_job_t* job, nnc_stream_context_t* context) noexcept nogil
    pool_job_t* next


# The pool. Every field is guarded by lock (a spinning thread only peeks, then takes it); the
# Python list of threading.Thread is nnc.stream.worker's, guarded by the GIL.
ctypedef struct pool_t:
    pthread_mutex_t lock
    pthread_cond_t work                 # signalled when a stream becomes ready or size shrinks
    pthread_cond_t quiet                # broadcast when busy drops to 0
    void* ready_head                    # FIFO of QUEUED stream_t, linked by their ready_next
    void* ready_tail
    pool_job_t* job_head                # FIFO of submitted jobs (pool_submit), linked by next
    pool_job_t* job_tail
    int size                            # threads wanted (0 until the first stream); any
    #                                     thread beyond it exits
    int running                         # threads started and not yet exited
    int sleeping                        # threads waiting on work
    int spinning                        # threads looking for work before they sleep (<= 1)
    # busy: streams not IDLE (QUEUED, RUNNING or PARKED) + jobs submitted and not yet finished
    int busy
    int stopping                        # the exit hook: every thread exits once all is done
    int generation                      # bumped in a forked child (whose pool starts anew)


# The one pool of the process (initialised at import; nnc.stream.worker resets it in a forked
# child).
cdef pool_t pool
# How long a pool thread that has just run work looks for more before it sleeps (seconds; 0:
# never). Set from NNC_SPIN_US at import and when the pool starts.
cdef double pool_spin_seconds


# NNC_NUM_THREADS if set (1 to MAX_THREADS, else NNCError), else the cores this process may use.
cdef int pool_default_size() except -1
# Read the settings of a starting pool (with the GIL): NNC_SPIN_US and the size, both checked
# before either changes (NNCError names a bad one).
cdef int pool_settings_read() except -1
# Queue a job for the next free pool thread; wakes a sleeping one unless one spins.
cdef void pool_submit(pool_job_t* job) noexcept nogil
# Wake one sleeping pool thread (no lock needed: the pool is always alive).
cdef void pool_wake_one() noexcept nogil
# A pool thread that has just run work and found none: look for more without the lock for up
# to NNC_SPIN_US (the caller counted itself in ``spinning``); True if some turned up.
cdef bint pool_spin() noexcept nogil
# Said once by each pool thread; read by the waits that must refuse to block one.
cdef void pool_thread_mark() noexcept nogil
cdef bint pool_thread_is() noexcept nogil
cdef int pool_generation() noexcept nogil
cdef bint pool_refusing() noexcept nogil
