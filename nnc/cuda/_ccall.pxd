# The driver calls a GPU stream makes for every node, as C function pointers (nnc/cuda/_ccall.pyx).
ctypedef int (*launch_kernel_t)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned shared, void* stream,
                                void** params, void** extra) noexcept nogil
ctypedef int (*event_record_t)(void* event, void* stream) noexcept nogil
ctypedef int (*stream_wait_event_t)(void* stream, void* event, unsigned flags) noexcept nogil


cdef class CCalls:
    # Filled once by calls_of() and never changed: GpuStreams read them without a lock.
    cdef launch_kernel_t launch_kernel
    cdef event_record_t event_record
    cdef stream_wait_event_t stream_wait_event
    cdef object cu                      # the driver these entry points belong to
    cdef object keep                    # what keeps a fake's entry points alive

    cdef int record(self, void* event, void* stream) except -1
    cdef int wait_event(self, void* stream, void* event) except -1


cdef class CLaunch:
    # A prepared kernel launch (nnc.cuda.runner.Launch) in C fields; immutable once made.
    cdef void* f                        # CUfunction
    cdef unsigned dims[6]               # grid x, y, z, block x, y, z
    cdef void** params                  # the _Launch's packed parameter array
    cdef object launch                  # the _Launch: owns params (and what they point to)

    cdef int fire(self, CCalls c, void* stream) except -1


cpdef object calls_of(object device)
