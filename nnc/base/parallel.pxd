# A C backend's context, and what it gives the backend: scratch memory reused run after run (NNC
# keeps BLAS and cuDNN workspaces per stream context: ccv_nnc_stream_context_get_workspace), and
# parts of one command that idle pool threads take (NNC's CPU_OPT backends split their loops
# across threads with parallel_for; nnc's pool plays that role, so streams and the parts of one
# command share one set of threads). One module because a part runs with the context of the
# thread that takes it: the caller's for its own parts, a helper's private one otherwise. The
# lowest layer: every runner owns contexts (a stream, a graph's sequential runs, a synchronous
# cmd_exec) and C backends of any layer use them; the pool (nnc.stream.worker) registers how
# idle threads are woken and lets them take parts; nothing here imports nnc.

# What a C backend gets as its ``context``. Owned by a stream (nnc.stream.worker's stream_t), a
# graph (its sequential runs), one synchronous cmd_exec, or a pool thread helping with parts; only
# the thread running the backend touches it, and only through nnc_workspace. Freed with its owner
# (nnc_context_free).
ctypedef struct nnc_stream_context_t:
    void* workspace                     # aligned to 64 bytes; NULL until first asked for
    size_t workspace_size               # bytes usable at workspace


# ``size`` bytes of context's scratch memory (grown as needed, never shrunk; contents are not
# kept across a growth), or NULL if out of memory or context is NULL.
cdef void* nnc_workspace(void* context, size_t size) noexcept nogil
cdef void nnc_context_free(nnc_stream_context_t* context) noexcept nogil

# The calling thread's own context (with the GIL), for synchronous calls such as cmd_exec: one
# per thread, reused call after call, freed when the thread ends. A backend runs to completion
# before the thread's next call, so calls never share it at once.
cdef nnc_stream_context_t* thread_context() except NULL

# One part of a command: ``part`` in [0, parts); ``context`` is the running thread's own
# (nnc_stream_context_t: the caller's for parts the caller runs, a pool thread's private one for
# parts it helps with), so a part may take scratch memory from it with nnc_workspace. Returns 0
# or a negative nnc_status_e. Must not touch Python and must not wait for other work.
ctypedef int (*nnc_part_f)(void* arg, Py_ssize_t part, void* context) noexcept nogil

# Run fn(arg, p, context) for every p in [0, parts), on the calling thread and on up to
# ``intra_op_threads - 1`` idle pool threads; returns once every part has run: 0, or the first
# failure's status (parts not yet started are then skipped). The caller's ``context`` runs its
# own parts, so the caller must not hold memory of its workspace across this call. Parts are
# taken from both ends: the caller runs 0, 1, 2, ..., helpers parts - 1, parts - 2, ..., so
# where parts are ranges of rows in order, the caller keeps the first rows of one command
# after another (those it wrote last stay in its core's cache) and a helper the last ones.
cdef int nnc_parallel_for(Py_ssize_t parts, nnc_part_f fn, void* arg,
                          void* context) noexcept nogil
# The same with parts taken in turn, lowest first, by every thread: for parts meant to be
# taken at about the same time by different threads (a convolution's blocks of rows of one
# weight panel, adjacent, read while the panel is in cache).
cdef int nnc_parallel_for_in_turn(Py_ssize_t parts, nnc_part_f fn, void* arg,
                                  void* context) noexcept nogil

# Around a pool thread's work (serving a stream, running a job; helping with parts counts
# itself): counted as working on its CPU, after moving off it if another nnc thread works there
# and a CPU where none does is allowed (docs/threading.md). Nested calls count once.
cdef void parallel_busy_enter() noexcept nogil
cdef void parallel_busy_leave() noexcept nogil
# A pool thread about to spin: off a CPU where an nnc thread works, as above.
cdef void parallel_spin_apart() noexcept nogil

# With the GIL, before a synchronous run: start the pool once, so idle threads can help.
cdef int parallel_ready() except -1

# Around a synchronous run (g.run()) whose commands may split: while one is in progress, idle pool
# threads spin for parts instead of sleeping between commands (as ONNX Runtime's workers spin
# through a Run): a thread that sleeps is woken too late for the next command where the OS or a
# VM takes a while to wake an idle core. begin wakes the helpers at once (their wake-up overlaps
# the run's first nodes) and says whether it counted; end takes what begin returned. A counted
# run's caller is counted as working on its CPU meanwhile (parallel_busy_enter, without moving).
cdef bint parallel_run_begin() noexcept nogil
cdef void parallel_run_end(bint counted) noexcept nogil
# Some synchronous run that may split commands is in progress (a racy read: a hint to spin).
cdef bint parallel_runs_active() noexcept nogil
# The same around a run enqueued on a CPU stream (counted from its enqueue to the end of its last
# task), with one difference: pool threads spin through such a run only for a bounded time past
# their last work (nnc.stream.worker_state.pool_spin), since a stream run may wait long for a
# signal another stream, a GPU or the host emits, where a synchronous run keeps its caller busy.
cdef bint parallel_stream_run_begin() noexcept nogil
cdef void parallel_stream_run_end() noexcept nogil
cdef bint parallel_stream_runs_active() noexcept nogil

# Threads one command may use (the caller included): 1 means parts run on the caller. Whether
# helpers come depends on whether pool threads are free while the parts last.
cdef int parallel_threads() noexcept nogil

# How many ways a backend cuts a command worth splitting where its size does not ask for more:
# the pool's size (set_num_threads), never the intra-op setting nor how many threads are idle,
# so a command gives the same bits sequentially or scheduled, at any intra-op setting (a part
# is the same BLAS call whichever thread makes it; a different cut would not be). A pool of
# another size may differ in the last bits (docs/threading.md, "Same bits ...").
cdef int parallel_width() noexcept nogil

# For nnc.stream.worker's pool threads. parallel_pending: some job has parts and room for a helper
# (read under the pool's lock before a thread sleeps). parallel_help: take parts of one open
# job with the thread's private context until it has none left; True if there was one.
cdef bint parallel_pending() noexcept nogil
cdef bint parallel_help(void* context) noexcept nogil

# The pool registers these (nnc.stream.worker, when it loads): wake up to n sleeping pool threads
# (with spinner_first, none while a pool thread spins: it takes the first part; returns how many
# wake-ups it left to the caller, n or 0), and how many threads may help one command (the pool's
# size - 1; 0 before it starts).
ctypedef int (*parallel_wake_f)(int n, bint spinner_first) noexcept nogil
ctypedef int (*parallel_helpers_f)() noexcept nogil
cdef void parallel_install(parallel_wake_f wake, parallel_helpers_f helpers) noexcept nogil
# The pool tells parallel_width its size whenever it is set (nnc.stream.worker).
cdef void parallel_set_width(int width) noexcept nogil
# ... and its spin time (NNC_SPIN_US): how long a caller whose parts are done spins for its
# helpers' last ones before it sleeps.
cdef void parallel_set_spin(double seconds) noexcept nogil
cdef void parallel_after_fork() noexcept nogil
