"""A C backend's context: its scratch memory (the workspace), and one command's parts on the
caller and the pool's idle threads (intra-op parallelism). One module because a part runs with
the context of the thread that takes it, and takes its scratch from there.

Workspaces: scratch memory C backends reuse run after run. NNC keeps BLAS and cuDNN workspaces
per stream context (ccv_nnc_stream_context_get_workspace); here a stream, a graph's sequential
runs, a synchronous cmd_exec (``thread_context``) and each pool thread helping with parts own one
(parallel.pxd says who owns what; docs/threading.md, "Stream workspaces"). C programs reach it
through the C ABI's ``nnc_stream_workspace`` (nnc.capi.capi).

Parts:

NNC's CPU_OPT backends split their loops with ``parallel_for`` over their own threads; nnc's
streams already run on one pool (nnc.stream.worker), so a backend's parts are offered to the same
threads: inter-op (streams) and intra-op (parts) parallelism share one set of cores, and
nothing else (OpenBLAS's threads, an OpenMP runtime) competes for them.

How a call runs (``nnc_parallel_for``, parallel.pxd):

- The caller posts a *job* (on its own stack) with room for up to ``intra_op_threads - 1``
  helpers (at most the pool's size - 1 and the parts - 1) and wakes that many sleeping pool
  threads, if that many sleep, unless a pool thread spins (as one does through a run that
  splits its commands): then it wakes nobody yet, runs its first part, and wakes the helpers
  still missing only if no thread joined meanwhile (a late wake-up). A thread that finishes
  its stream's work later joins too, before it would sleep: in a scheduled run, the thread
  whose stream waits for another stream's output helps compute it. With room for none (one
  part, one thread) the caller runs every part itself: no lock, no wake-up.
- Parts are claimed one at a time with atomic counters, so a slow part or a late helper does
  not make the others wait (the split need not be even): the caller from the first part up,
  helpers from the last part down (``nnc_parallel_for``), or everyone from the first up
  (``nnc_parallel_for_in_turn``). Backends number their parts in the order of the rows they
  write, so from one split command to the next the caller keeps the top of the image and a
  helper the bottom: what a thread wrote last is what it reads next, still in its own core's
  cache, where parts taken in turn went to whichever thread came first (the 2-vCPU Xeon,
  two threads: MobileNet-V2, MnasNet, EfficientNet-B0 and SqueezeNet 4-7 % faster; ResNet
  and Inception-V3 the same within 1 %). A convolution's channel cut takes its parts in turn:
  parts next to each other there are blocks of rows of one weight panel, meant to be read by
  different threads while the panel is in cache.
- The caller runs parts until none is left, then closes the job (no new helper may join) and
  waits only for the parts helpers already took. A helper never waits for anything, so this
  cannot deadlock, and with every pool thread busy (a scheduled run whose streams fill the
  pool) a command simply runs on its own thread.

Locks: this module's ``_lock`` guards the job list and each job's room/inside counts; it is
never held while taking the pool's lock or while running a part. The pool's threads read
``parallel_pending`` under the pool's lock before they sleep, and posters bump it before
waking them, so a wake-up is never lost (docs/threading.md, "Intra-op parallelism").
"""

import threading

from nnc.base.core import NNCError

from libc.stdlib cimport calloc, free

from nnc.base.sync cimport (
    mono_now, pthread_cond_destroy, pthread_cond_init, pthread_cond_signal, pthread_cond_t,
    pthread_cond_wait, pthread_mutex_init, pthread_mutex_lock, pthread_mutex_t,
    pthread_mutex_unlock, pthread_t, timespec,
)


cdef extern from *:
    """
    static inline Py_ssize_t nnc__claim(Py_ssize_t* p) {
        return __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
    }
    static inline Py_ssize_t nnc__load_ssize(Py_ssize_t* p) {
        return __atomic_load_n(p, __ATOMIC_RELAXED);
    }
    static inline void nnc__store_ssize(Py_ssize_t* p, Py_ssize_t v) {
        __atomic_store_n(p, v, __ATOMIC_RELAXED);
    }
    static inline void nnc__first_failure(int* p, int rc) {
        int zero = 0;
        __atomic_compare_exchange_n(p, &zero, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
    static inline int nnc__load_int(int* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void nnc__add_int(int* p, int v) { __atomic_add_fetch(p, v, __ATOMIC_RELEASE); }
    static inline void nnc__pause(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield");
    #endif
    }
    """
    Py_ssize_t _claim "nnc__claim"(Py_ssize_t* p) noexcept nogil
    void _store_ssize "nnc__store_ssize"(Py_ssize_t* p, Py_ssize_t v) noexcept nogil
    Py_ssize_t _load_ssize "nnc__load_ssize"(Py_ssize_t* p) noexcept nogil
    void _first_failure "nnc__first_failure"(int* p, int rc) noexcept nogil
    int _load_int "nnc__load_int"(int* p) noexcept nogil
    void _add_int "nnc__add_int"(int* p, int v) noexcept nogil
    void _pause "nnc__pause"() noexcept nogil


# Threads of nnc that work on one CPU only take turns, however many cores idle. The kernel
# places a thread when it wakes, often on its waker's CPU (wake-affine): a pool thread woken for
# a run lands beside the thread that woke it, and its balancing did not part them for whole
# benchmark runs (Inception-V3 at 75x75, runs alternating between 1 and 2 intra-op threads: 5.3
# ms at both in about one process of three, 3.6-4.0 ms at 2 otherwise; its scheduled runs
# bimodal, 3.3-3.5 or 5.3-6.2 ms). So each CPU has a count of nnc's threads working on it: the
# caller of a synchronous run for the run, a command's caller while its parts run, a pool thread
# while it serves a stream, runs a job or helps with parts. A pool thread about to work, or to
# spin, on a CPU another one works on moves to a CPU none works on, if it may run on one: allowed
# only those for a moment, it is migrated at once; then its affinity mask is put back as it was
# (which moves nothing). The counts are hints, read and written with relaxed atomics: a thread
# the kernel migrates while it works leaves its count behind until it stops or, for a run's
# caller, until its next split command counts it where it runs then.
cdef extern from *:
    """
    #ifdef __linux__
    #include <sched.h>
    #include <string.h>
    static int nnc__busy[CPU_SETSIZE];          /* nnc's working threads per CPU */
    static __thread int nnc__busy_cpu = -1;     /* where this thread counted itself, or -1 */
    static __thread int nnc__busy_depth = 0;    /* nested enters on this thread */
    static int nnc__cpu_now(void) { return sched_getcpu(); }
    static int nnc__busy_at(int cpu) {
        return cpu >= 0 && cpu < CPU_SETSIZE
               ? __atomic_load_n(&nnc__busy[cpu], __ATOMIC_RELAXED) : 0;
    }
    /* Move the calling thread off cpu onto one where no nnc thread works (none allowed: stay). */
    static void nnc__move_off(int cpu) {
        cpu_set_t was, idle;
        int i, any = 0;
        if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(was), &was) != 0
                || CPU_COUNT(&was) < 2)
            return;
        CPU_ZERO(&idle);
        for (i = 0; i < CPU_SETSIZE; i++) {
            if (i != cpu && CPU_ISSET(i, &was) && nnc__busy_at(i) == 0) {
                CPU_SET(i, &idle);
                any = 1;
            }
        }
        if (any && sched_setaffinity(0, sizeof(idle), &idle) == 0)
            sched_setaffinity(0, sizeof(was), &was);
    }
    static void nnc__busy_enter(int move) {
        int cpu;
        if (nnc__busy_depth++ > 0) {
            /* Already counted (a run's caller at each of its commands): where it runs now,
             * since the kernel may have migrated it since. */
            cpu = sched_getcpu();
            if (cpu >= 0 && cpu < CPU_SETSIZE && cpu != nnc__busy_cpu) {
                __atomic_add_fetch(&nnc__busy[cpu], 1, __ATOMIC_RELAXED);
                if (nnc__busy_cpu >= 0)
                    __atomic_sub_fetch(&nnc__busy[nnc__busy_cpu], 1, __ATOMIC_RELAXED);
                nnc__busy_cpu = cpu;
            }
            return;
        }
        cpu = sched_getcpu();
        if (move && nnc__busy_at(cpu) > 0) {
            nnc__move_off(cpu);
            cpu = sched_getcpu();
        }
        if (cpu < 0 || cpu >= CPU_SETSIZE)
            cpu = -1;
        else
            __atomic_add_fetch(&nnc__busy[cpu], 1, __ATOMIC_RELAXED);
        nnc__busy_cpu = cpu;
    }
    static void nnc__busy_leave(void) {
        if (nnc__busy_depth <= 0 || --nnc__busy_depth > 0)
            return;
        if (nnc__busy_cpu >= 0)
            __atomic_sub_fetch(&nnc__busy[nnc__busy_cpu], 1, __ATOMIC_RELAXED);
        nnc__busy_cpu = -1;
    }
    static void nnc__spin_apart(void) {
        int cpu = sched_getcpu();
        if (nnc__busy_at(cpu) > 0)
            nnc__move_off(cpu);
    }
    /* In a forked child only the forking thread lives: nobody else works anywhere. */
    static void nnc__busy_after_fork(void) {
        memset(nnc__busy, 0, sizeof(nnc__busy));
        nnc__busy_cpu = -1;
    }
    #else
    enum { CPU_SETSIZE = 0 };
    static int nnc__cpu_now(void) { return -1; }
    static int nnc__busy_at(int cpu) { (void)cpu; return 0; }
    static void nnc__move_off(int cpu) { (void)cpu; }
    static void nnc__busy_enter(int move) { (void)move; }
    static void nnc__busy_leave(void) {}
    static void nnc__spin_apart(void) {}
    static void nnc__busy_after_fork(void) {}
    #endif
    """
    enum:
        CPU_SETSIZE
    int _cpu_now "nnc__cpu_now"() noexcept nogil
    int _busy_at "nnc__busy_at"(int cpu) noexcept nogil
    void _move_off "nnc__move_off"(int cpu) noexcept nogil
    void _busy_enter "nnc__busy_enter"(int move) noexcept nogil
    void _busy_leave "nnc__busy_leave"() noexcept nogil
    void _spin_apart "nnc__spin_apart"() noexcept nogil
    void _busy_after_fork "nnc__busy_after_fork"() noexcept nogil


# One nnc_parallel_for call, on its caller's stack. fn/arg/parts never change; next and rc are
# atomics any participant updates; room, inside and link are written under _lock (inside
# atomically too, so the caller may watch it without the lock). The caller unlinks the job and
# waits for inside == 0, then takes _lock once more, before its frame goes away.
ctypedef struct job_t:
    nnc_part_f fn
    void* arg
    Py_ssize_t parts
    Py_ssize_t taken                    # parts claimed so far (>= parts: none left)
    Py_ssize_t next                     # the caller's claims so far: it runs 0, 1, 2, ...
    Py_ssize_t high                     # helpers' claims so far: they run parts-1, parts-2, ...
    bint in_turn                        # every thread claims from next (else: from both ends)
    int rc                              # first failure, or 0
    int room                            # helpers that may still join; 0 once closed
    int inside                          # helpers running parts of this job now
    pthread_cond_t done                 # the caller waits here for inside == 0
    job_t* link                         # next open job


cdef pthread_mutex_t _lock
cdef job_t* _jobs = NULL                # open jobs, newest first (guarded by _lock)
cdef int _open = 0                      # jobs in _jobs with room > 0 (written under _lock)
cdef int _intra_op = 0                  # threads per command; 0: every pool thread
# parallel_width: the pool's size, set by nnc.stream.worker whenever it changes (a racy int: a
# command reads it once, when it plans its parts); 1 until the worker module sets it.
cdef int _width = 1
cdef parallel_wake_f _wake = NULL       # registered by the pool
cdef parallel_helpers_f _helpers = NULL
cdef bint _started = False              # the pool was asked to start (with the GIL)
cdef int _runs = 0                      # synchronous runs that may split, in progress (atomic)
cdef int _stream_runs = 0               # the same for runs enqueued on CPU streams (atomic)
# How long a caller whose parts are done spins for its helpers' last parts before it sleeps
# (the pool's spin time, NNC_SPIN_US; set by nnc.stream.worker; 0: sleep at once).
cdef double _wait_spin = 50e-6
_starter = None                 # the pool's start function (registered by nnc.stream.worker)
pthread_mutex_init(&_lock, NULL)


def parallel_install_starter(start):
    """nnc.stream.worker: ``start()`` starts the pool's threads (StreamError once it is stopped)."""
    global _starter
    _starter = start


cdef int parallel_ready() except -1:
    """Before a synchronous run (``g.run()``, ``cmd_exec``): start the pool once, so its idle
    threads can take parts. With intra-op threads at 1, or once the exit hook stopped the pool,
    parts simply run on the caller."""
    global _started
    if _started or _starter is None or _intra_op == 1:
        return 0
    _started = True
    try:
        _starter()
    except NNCError:
        pass
    return 0


# Wake a job's helpers late when a pool thread spins (see the module's docstring); 0: at once.
cdef bint _late_wake = True
# A pool thread about to work or spin where another nnc thread works moves off it; off: A/B runs.
cdef bint _move_apart = True
# parallel_probe(late_wake=True): post the job as if a spinner had taken every wake-up.
cdef bint _probe_late = False
# nnc_parallel_for's helpers take parts from the last (see the module's docstring); off: from
# the lowest, as the caller does (A/B runs).
cdef bint _two_ended = True


def _set_late_wake(bint on):
    """Turn late wake-ups on or off (for A/B runs in benchmarks); returns the previous
    setting."""
    global _late_wake
    old = _late_wake
    _late_wake = on
    return old


def _set_move_apart(bint on):
    """Whether a pool thread about to work or spin on a CPU where another nnc thread works
    moves off it (for A/B runs and tests); returns the previous setting."""
    global _move_apart
    old = _move_apart
    _move_apart = on
    return old


def _set_two_ended(bint on):
    """Whether nnc_parallel_for's helpers take parts from the last (else from the lowest, as
    the caller does: A/B runs); returns the previous setting."""
    global _two_ended
    old = _two_ended
    _two_ended = on
    return old


def _move_off_now():
    """Move the calling thread off the CPU it runs on, as a helper on its caller's CPU does;
    returns (CPU before, CPU after), -1 where unknown (for tests)."""
    cdef int before = _cpu_now(), after
    with nogil:
        _move_off(before)
        after = _cpu_now()
    return before, after


cdef void parallel_install(parallel_wake_f wake, parallel_helpers_f helpers) noexcept nogil:
    global _wake, _helpers
    _wake = wake
    _helpers = helpers


def _set_wait_spin(double seconds):
    """Set how long a caller spins for its helpers' last parts (for sweeps in benchmarks; the
    pool sets it from NNC_SPIN_US when it starts); returns the previous value."""
    old = _wait_spin
    parallel_set_spin(seconds)
    return old


cdef void parallel_set_spin(double seconds) noexcept nogil:
    global _wait_spin
    _wait_spin = seconds if seconds > 0 else 0


cdef void parallel_after_fork() noexcept nogil:
    """In a forked child: the jobs, and the synchronous runs in progress, belonged to threads
    that are gone (a run counted here would keep the child's pool spinning for good)."""
    global _jobs, _open, _started, _runs, _stream_runs
    pthread_mutex_init(&_lock, NULL)
    _jobs = NULL
    _open = 0
    _runs = 0
    _stream_runs = 0
    _started = False
    _busy_after_fork()


cdef int parallel_threads() noexcept nogil:
    cdef int helpers = _helpers() if _helpers != NULL else 0
    if helpers < 0:
        helpers = 0
    if _intra_op:
        return min(_intra_op, helpers + 1)
    return helpers + 1


cdef int parallel_width() noexcept nogil:
    return _width


cdef void parallel_set_width(int width) noexcept nogil:
    global _width
    _width = max(1, width)


cdef inline bint _run_begin(int* runs) noexcept nogil:
    """Count a run that may split (if its commands may use helpers) and wake them."""
    cdef int threads = parallel_threads()
    if threads <= 1:
        return False
    _add_int(runs, 1)
    if _wake != NULL:
        _wake(threads - 1, False)
    return True


cdef bint parallel_run_begin() noexcept nogil:
    if not _run_begin(&_runs):
        return False
    _busy_enter(False)                  # the caller works here for the whole run
    return True


cdef void parallel_run_end(bint counted) noexcept nogil:
    if counted:
        _busy_leave()
        _add_int(&_runs, -1)


cdef void parallel_busy_enter() noexcept nogil:
    _busy_enter(_move_apart)


cdef void parallel_busy_leave() noexcept nogil:
    _busy_leave()


cdef void parallel_spin_apart() noexcept nogil:
    if _move_apart:
        _spin_apart()


def _busy_counts():
    """{CPU: nnc threads counted working there} for the CPUs with any (for tests)."""
    return {i: _busy_at(i) for i in range(CPU_SETSIZE) if _busy_at(i)}


cdef bint parallel_runs_active() noexcept nogil:
    return _load_int(&_runs) > 0


cdef bint parallel_stream_run_begin() noexcept nogil:
    return _run_begin(&_stream_runs)


cdef void parallel_stream_run_end() noexcept nogil:
    _add_int(&_stream_runs, -1)


cdef bint parallel_stream_runs_active() noexcept nogil:
    return _load_int(&_stream_runs) > 0


def _runs_in_progress(bint streams=False):
    """How many synchronous runs (``streams``: runs on CPU streams) that may split commands are
    in progress (for tests)."""
    return _load_int(&_stream_runs if streams else &_runs)


cdef bint parallel_pending() noexcept nogil:
    return _load_int(&_open) > 0


cdef inline Py_ssize_t _claim_part(job_t* j, bint helper) noexcept nogil:
    """The next part for the caller (lowest first) or a helper (highest first); -1: none."""
    if _claim(&j.taken) >= j.parts:
        return -1
    if j.in_turn or not _two_ended:
        return _claim(&j.next)
    if helper:
        return j.parts - 1 - _claim(&j.high)
    return _claim(&j.next)


cdef inline void _run_parts(job_t* j, void* context, bint helper) noexcept nogil:
    cdef Py_ssize_t p
    cdef int rc
    while True:
        p = _claim_part(j, helper)
        if p < 0:
            return
        rc = j.fn(j.arg, p, context)
        if rc != 0:
            _first_failure(&j.rc, rc)
            _store_ssize(&j.taken, j.parts)     # skip the parts nobody started


cdef void _close(job_t* j) noexcept nogil:
    """Unlink j (under _lock) so no helper joins it any more."""
    global _jobs
    cdef job_t** at = &_jobs
    while at[0] != NULL and at[0] != j:
        at = &at[0].link
    if at[0] == j:
        at[0] = j.link
    if j.room > 0:
        _add_int(&_open, -1)
        j.room = 0


cdef bint parallel_help(void* context) noexcept nogil:
    """Take parts of one open job until it has none left; True if there was one. One job
    only: the pool thread then looks at its ready list again (streams come first)."""
    cdef job_t* j
    pthread_mutex_lock(&_lock)
    j = _jobs
    while j != NULL and (j.room == 0 or _load_ssize(&j.taken) >= j.parts):
        if j.room > 0:
            # Every part is taken: no room left for anyone, so parallel_pending stops saying
            # there is (a pool thread would otherwise spin here until the caller closes it).
            j.room = 0
            _add_int(&_open, -1)
        j = j.link
    if j == NULL:
        pthread_mutex_unlock(&_lock)
        return False
    j.room -= 1
    if j.room == 0:
        _add_int(&_open, -1)
    j.inside += 1
    pthread_mutex_unlock(&_lock)
    _busy_enter(_move_apart)
    _run_parts(j, context, True)
    _busy_leave()
    pthread_mutex_lock(&_lock)
    _add_int(&j.inside, -1)
    if j.inside == 0:
        pthread_cond_signal(&j.done)
    pthread_mutex_unlock(&_lock)
    return True


cdef void _await_helpers(job_t* j) noexcept nogil:
    """Spin (up to _wait_spin) until no helper runs a part of j. A helper's last part usually
    ends within microseconds of the caller's, and a caller that sleeps instead is woken by a
    futex wake-up, which takes tens of microseconds on a VM whose idle core halted: paid once
    per split command, that was a large part of what a second thread gained."""
    cdef double end = mono_now() + _wait_spin
    cdef int _turn
    while True:
        for _turn in range(64):
            if _load_int(&j.inside) == 0:
                return
            _pause()
        if mono_now() > end:
            return


cdef void _run_parts_late_wake(job_t* j, void* context, int deferred) noexcept nogil:
    """_run_parts for a job posted with ``deferred`` wake-ups left to spinning pool threads:
    after the caller's first part, make up for those that did not join. Why: waking a
    sleeping thread per split command, when the spinner takes the part anyway, made a third
    busy thread on a two-core machine for every command (MobileNet-V2 at two threads 13 %
    slower); waking nobody at all left a job without help whenever the spinner shared the
    caller's core, as after an idle spell (ten 8x8 convolutions 40 % slower)."""
    cdef Py_ssize_t p = _claim_part(j, False)
    cdef int rc, missing
    if p >= 0:
        rc = j.fn(j.arg, p, context)
        if rc != 0:
            _first_failure(&j.rc, rc)
            _store_ssize(&j.taken, j.parts)     # skip the parts nobody started
    pthread_mutex_lock(&_lock)
    # room reaches 0 when every helper joined, or when every part is taken (nothing to help)
    missing = j.room
    pthread_mutex_unlock(&_lock)
    if missing > 0 and _load_ssize(&j.taken) < j.parts:
        _wake(min(missing, deferred), False)
    _run_parts(j, context, False)


cdef int nnc_parallel_for(Py_ssize_t parts, nnc_part_f fn, void* arg,
                          void* context) noexcept nogil:
    return _parallel_for(parts, fn, arg, context, False)


cdef int nnc_parallel_for_in_turn(Py_ssize_t parts, nnc_part_f fn, void* arg,
                                  void* context) noexcept nogil:
    return _parallel_for(parts, fn, arg, context, True)


cdef int _parallel_for(Py_ssize_t parts, nnc_part_f fn, void* arg, void* context,
                       bint in_turn) noexcept nogil:
    global _jobs
    cdef job_t j
    cdef int helpers, deferred
    j.in_turn = in_turn
    j.fn = fn
    j.arg = arg
    j.parts = parts
    j.taken = 0
    j.next = 0
    j.high = 0
    j.rc = 0
    helpers = parallel_threads() - 1 if parts > 1 else 0
    if helpers > parts - 1:
        helpers = <int>(parts - 1)
    if helpers <= 0:
        _run_parts(&j, context, False)
        return j.rc
    j.room = helpers
    j.inside = 0
    pthread_cond_init(&j.done, NULL)
    pthread_mutex_lock(&_lock)
    j.link = _jobs
    _jobs = &j
    _add_int(&_open, 1)
    pthread_mutex_unlock(&_lock)
    _busy_enter(False)                  # helpers on this CPU move off it
    deferred = helpers if _probe_late else _wake(helpers, _late_wake)
    if deferred == 0:
        _run_parts(&j, context, False)
    else:
        _run_parts_late_wake(&j, context, deferred)
    _busy_leave()
    pthread_mutex_lock(&_lock)
    _close(&j)
    if j.inside > 0 and _wait_spin > 0:
        pthread_mutex_unlock(&_lock)
        _await_helpers(&j)
        # Taking the lock again also waits for a helper still inside its last critical
        # section (it signals j.done under the lock): j must outlive that.
        pthread_mutex_lock(&_lock)
    while j.inside > 0:
        pthread_cond_wait(&j.done, &_lock)
    pthread_mutex_unlock(&_lock)
    pthread_cond_destroy(&j.done)
    return j.rc


def set_intra_op_threads(n):
    """Let one command use up to ``n`` threads (itself and ``n - 1`` idle pool threads); 1
    runs every command on its own thread; None: as many as the pool has (the default). Applies
    to sequential runs (``g.run()``), streams and ``cmd_exec`` alike (docs/threading.md)."""
    global _intra_op
    if n is None:
        _intra_op = 0
        return
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1024:
        raise NNCError(f"set_intra_op_threads needs None or an int from 1 to 1024, not {n!r}")
    _intra_op = n


def get_intra_op_threads():
    """The limit set_intra_op_threads set, or None (every pool thread may help)."""
    return _intra_op or None


# -- a probe for tests and benchmarks: which thread ran each part -----------------------------

cdef extern from "<pthread.h>" nogil:
    pthread_t pthread_self()

cdef extern from "<time.h>" nogil:
    int nanosleep(const timespec*, timespec*)


ctypedef struct _probe_t:
    unsigned long* ran_by               # part -> pthread id of the thread that ran it
    long sleep_ns                       # each part sleeps this long (a stand-in for work)
    Py_ssize_t fail_part                # this part returns -1 (NNC_INVALID); -1: none


cdef int _probe_part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef _probe_t* p = <_probe_t*>arg
    cdef timespec ts
    p.ran_by[part] = pthread_self()
    if p.sleep_ns > 0:
        ts.tv_sec = p.sleep_ns // 1000000000
        ts.tv_nsec = p.sleep_ns % 1000000000
        nanosleep(&ts, NULL)
    return -1 if part == p.fail_part else 0


def parallel_probe(Py_ssize_t parts, double sleep_s=0.0, Py_ssize_t fail_part=-1,
                   bint late_wake=False, bint in_turn=False):
    """Run ``parts`` parts that each sleep ``sleep_s`` through nnc_parallel_for (without the
    GIL); returns (status, [thread id that ran each part, 0 if skipped]). ``late_wake``: post
    the job as if a spinning pool thread had taken every wake-up (whether one spins or not),
    so only the late wake-up brings helpers when none joins. ``in_turn``: through
    nnc_parallel_for_in_turn. For tests of the pool's intra-op parallelism; nothing else calls
    it (the setting is process-wide while it runs)."""
    global _probe_late
    cdef _probe_t p
    cdef int rc
    if parts < 0:
        raise NNCError("parallel_probe: parts must be >= 0")
    parallel_ready()
    p.ran_by = <unsigned long*>calloc(max(parts, 1), sizeof(unsigned long))
    if p.ran_by == NULL:
        raise MemoryError()
    p.sleep_ns = <long>(sleep_s * 1e9)
    p.fail_part = fail_part
    _probe_late = late_wake
    with nogil:
        rc = _parallel_for(parts, _probe_part, &p, NULL, in_turn)
    _probe_late = False
    out = [p.ran_by[i] for i in range(parts)]
    free(p.ran_by)
    return rc, out


# -- scratch memory: a context's workspace (NNC: ccv_nnc_stream_context_get_workspace) ---------
cdef extern from "<stdlib.h>" nogil:
    void* aligned_alloc(size_t alignment, size_t size)


cdef void* nnc_workspace(void* context, size_t size) noexcept nogil:
    cdef nnc_stream_context_t* c = <nnc_stream_context_t*>context
    cdef size_t rounded
    if c == NULL:
        return NULL
    if size <= c.workspace_size and c.workspace != NULL:
        return c.workspace
    # Round up to 64 bytes (aligned_alloc wants a multiple of the alignment) and grow by half
    # again, so a backend asking for slightly more each run does not reallocate every run.
    rounded = ((size + size // 2 + 63) // 64) * 64
    free(c.workspace)
    c.workspace = aligned_alloc(64, rounded)
    c.workspace_size = rounded if c.workspace != NULL else 0
    return c.workspace


cdef void nnc_context_free(nnc_stream_context_t* context) noexcept nogil:
    free(context.workspace)
    context.workspace = NULL
    context.workspace_size = 0


cdef class _ThreadContext:
    """The calling thread's context for synchronous calls (cmd_exec): kept in a
    threading.local, so repeated calls reuse one workspace, freed when the thread ends."""
    cdef nnc_stream_context_t c

    def __dealloc__(self):
        nnc_context_free(&self.c)


_local = threading.local()


cdef nnc_stream_context_t* thread_context() except NULL:
    cdef _ThreadContext holder
    try:
        holder = _local.context
    except AttributeError:
        holder = _ThreadContext()
        _local.context = holder
    return &holder.c
