from nnc.base.sync cimport CLOCK_MONOTONIC, clock_gettime, timespec

# 1 while an nnc.trace records, else 0. Set and cleared with the GIL by nnc.trace (through
# tracing_begin / tracing_end); read by the runners once per run, so a run that is not traced
# pays one load of this int, not a check per node.
cdef int trace_on


cdef inline double trace_now() noexcept nogil:
    """CLOCK_MONOTONIC seconds: the clock of time.perf_counter and of the stream workers."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef int trace_host(str name, str cat, double t0, double t1, object args) except -1
cdef int trace_label(str text) except -1
