"""The worker pool's shared state (worker_state.pxd): its struct, the job queue, its settings from
the environment, and how an idle pool thread spins before it sleeps.

Named for what it holds, the state nnc.stream.worker (the worker pool itself) edits: "pool" alone
would also name the pooling commands (MAX_POOL, AVG_POOL). Its C names keep the ``pool_`` prefix
of the struct they act on (``pool_submit``, ``pool_spin``).

libdispatch's two kinds of queue share one pool of threads: serial queues (nnc's streams, run
by nnc.stream.worker on the ready list here) and a concurrent queue (jobs: ``pool_submit``, any
free thread runs them). nnc.stream.worker owns the threads and everything about streams; this
module only keeps what both kinds of work, and the engine submitting jobs, share.
"""

import os

from nnc.base.core import NNCError

from nnc.base.parallel cimport (
    parallel_pending, parallel_runs_active, parallel_spin_apart, parallel_stream_runs_active,
)
from nnc.base.sync cimport (
    mono_now, mutex_init_spinning, pthread_cond_init, pthread_cond_signal, pthread_mutex_lock,
    pthread_mutex_unlock, sched_yield,
)


cdef extern from *:
    """
    static __thread int nnc__pool_thread = 0;
    static inline void nnc__set_pool_thread(void) { nnc__pool_thread = 1; }
    static inline int nnc__is_pool_thread(void) { return nnc__pool_thread; }
    /* A spinning thread's unlocked peeks at the pool (a stale value costs one more turn; the
       lock is taken before anything is taken from the pool). */
    static inline void* nnc__peek(void** p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    static inline int nnc__peek_int(int* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    static inline void nnc__cpu_relax(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield");
    #endif
    }
    """
    void _set_pool_thread "nnc__set_pool_thread"() noexcept nogil
    int _is_pool_thread "nnc__is_pool_thread"() noexcept nogil
    void* _peek "nnc__peek"(void** p) noexcept nogil
    int _peek_int "nnc__peek_int"(int* p) noexcept nogil
    void _cpu_relax "nnc__cpu_relax"() noexcept nogil


mutex_init_spinning(&pool.lock)
pthread_cond_init(&pool.work, NULL)
pthread_cond_init(&pool.quiet, NULL)
pool.size = 0                           # 0 until the first stream: then pool_default_size()


def _default_size():
    """NNC_NUM_THREADS if set (a positive integer), else the cores this process may use."""
    text = os.environ.get("NNC_NUM_THREADS", "").strip()
    if text:
        try:
            n = int(text)
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_THREADS:
            raise NNCError(f"NNC_NUM_THREADS={text!r}: expected a positive integer up to "
                           f"{MAX_THREADS}")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _default_spin():
    """NNC_SPIN_US if set (0 to 10,000 microseconds), else 50."""
    text = os.environ.get("NNC_SPIN_US", "").strip()
    if not text:
        return 50
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= 10000:
        raise NNCError(f"NNC_SPIN_US={text!r}: expected microseconds from 0 to 10000")
    return n


# A sleeping thread costs whoever hands it work a futex wake-up and a context switch, several
# microseconds on a loaded 2-core machine: more than an engine op or a small node, so a thread
# that has just worked spins first. NNC_SPIN_US=0 turns it off (an oversubscribed machine,
# where a spinning thread takes a core another process wants).
pool_spin_seconds = 50e-6
# How long past its last work a thread spins while a run on a CPU stream is in progress (at
# least pool_spin_seconds): long enough to bridge the gaps between a stream run's split
# commands (tens of microseconds), short enough that a run waiting for a signal does not
# keep a core busy for long. Waking a thread of an idle core took 1-2 ms on the VM.
cdef double STREAM_RUN_SPIN = 1e-3
try:
    pool_spin_seconds = _default_spin() * 1e-6
except NNCError:
    pass                                # a bad NNC_SPIN_US: reported when the pool starts


cdef int pool_default_size() except -1:
    return _default_size()


cdef int pool_settings_read() except -1:
    global pool_spin_seconds
    spin = _default_spin() * 1e-6
    pool.size = _default_size()
    pool_spin_seconds = spin
    return 0


cdef void pool_submit(pool_job_t* job) noexcept nogil:
    """Queue ``job`` for the next free pool thread (no lock held by the caller; the pool must
    have started). Wakes a sleeping thread unless one is spinning, which will find the job
    (and wake another if more are queued). Never refuses: a job submitted by a running job
    after the exit hook stopped the pool still runs, since threads exit only once no job is
    left; host code checks pool_refusing() first."""
    cdef bint wake
    job.next = NULL
    pthread_mutex_lock(&pool.lock)
    if pool.job_tail == NULL:
        pool.job_head = job
    else:
        pool.job_tail.next = job
    pool.job_tail = job
    pool.busy += 1
    wake = pool.sleeping > 0 and pool.spinning == 0
    pthread_mutex_unlock(&pool.lock)
    if wake:
        pool_wake_one()


cdef void pool_wake_one() noexcept nogil:
    pthread_cond_signal(&pool.work)


cdef bint pool_spin() noexcept nogil:
    cdef double start = mono_now(), end = start + pool_spin_seconds
    # Through a run on a CPU stream, spin on up to STREAM_RUN_SPIN past the last work: its
    # next split command is usually microseconds away, but it may wait long for a signal.
    cdef double stream_end = start + max(pool_spin_seconds, STREAM_RUN_SPIN)
    cdef double now
    cdef int _turn
    # Spinning beside a working nnc thread would take turns with it (nnc.base.parallel).
    parallel_spin_apart()
    while True:
        for _turn in range(64):
            if (_peek(&pool.ready_head) != NULL or _peek(<void**>&pool.job_head) != NULL
                    or parallel_pending()):
                return True
            _cpu_relax()
        # Past the deadline a spinner stops, unless a synchronous run that splits its commands
        # is in progress: its next command is moments away (nnc.base.parallel).
        if _peek_int(&pool.stopping) or _peek_int(&pool.running) > _peek_int(&pool.size):
            return False
        now = mono_now()
        if now > end and not parallel_runs_active() and not (
                now < stream_end and parallel_stream_runs_active()):
            return False
        # Give the core to a thread waiting for it, if any (the pushing host thread, when
        # there are more threads than cores): a spinner only waits for work others make.
        sched_yield()


cdef void pool_thread_mark() noexcept nogil:
    _set_pool_thread()


cdef bint pool_thread_is() noexcept nogil:
    return _is_pool_thread()


cdef int pool_generation() noexcept nogil:
    """Bumped in every forked child: what was made before a fork compares it (with the GIL)."""
    return pool.generation


cdef bint pool_refusing() noexcept nogil:
    """True once the exit hook stopped the pool: nothing may be enqueued any more (set and
    read with the GIL, so no task slips in after the threads have exited)."""
    return pool.stopping
