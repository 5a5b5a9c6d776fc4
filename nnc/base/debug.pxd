# Debug mode's live-object counters (docs/dev.md, "Debug mode"). The C globals live in
# nnc/base/debug.pyx; other modules cimport debug_count and call it next to their allocations and
# frees. With NNC_DEBUG unset, debug_count is one load and one untaken branch.

cdef enum debug_counter_e:
    DEBUG_STREAMS = 0                   # stream_t structs allocated and not yet freed
    DEBUG_WORKERS = 1                   # pool threads serving a stream right now
    DEBUG_TASKS = 2                     # tasks pushed onto a stream and not yet run
    DEBUG_RECORDS = 3                   # signal records allocated and not yet freed
    DEBUG_GRAPHS = 4                    # Graph objects alive
    DEBUG_TENSORS = 5                   # Tensor objects (and MultiViews) alive
    DEBUG_COUNTER_COUNT = 6


cdef extern from *:
    # GCC/Clang builtins: no prototype is emitted, the compiler knows them.
    long __atomic_add_fetch(long* ptr, long delta, int order) nogil
    long __atomic_load_n(long* ptr, int order) nogil
    int __ATOMIC_RELAXED


# Set once, when nnc.base.debug is imported (before any counted object exists), from
# nnc.base.core.DEBUG; never changed after, so every module sees the same value for the whole
# process.
cdef bint debug_on
# Live objects per debug_counter_e, changed only through debug_count (atomically: workers
# count tasks and records without the GIL). Stays all zero while debug_on is false.
cdef long debug_counts[DEBUG_COUNTER_COUNT]


cdef inline void debug_count(int which, long delta) noexcept nogil:
    """Add ``delta`` to counter ``which`` when debug mode is on; any thread, GIL or not."""
    if debug_on:
        __atomic_add_fetch(&debug_counts[which], delta, __ATOMIC_RELAXED)
