# The driver calls a GPU stream makes for every node, as C function pointers (nnc/cuda/_ccall.pyx).
ctypedef int (*launch_kernel_t)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned shared, void* stream,
                                void** params, void** extra) noexcept nogil
ctypedef int (*event_record_t)(void* event, void* stream) noexcept nogil
ctypedef int (*stream_wait_event_t)(void* stream, void* event, unsigned flags) noexcept nogil
ctypedef int (*graph_launch_t)(void* graph_exec, void* stream) noexcept nogil


cdef class CCalls:
    # Filled once by calls_of() and never changed: GpuStreams read them without a lock.
    cdef launch_kernel_t launch_kernel
    cdef event_record_t event_record
    cdef stream_wait_event_t stream_wait_event
    cdef graph_launch_t graph_launch    # NULL where the driver offers no cuGraphLaunch
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


cdef class NodeGraph:
    # A prepared library node (GPU_OPT) on one GPU stream, replayed as a CUDA graph per key.
    # Touched only by that stream's enqueues, which nnc.cuda.gpu_stream serialises.
    cdef list ops                       # the node's prepared ops, each op(cuda_stream)
    cdef object by_precision            # ops[0] when it is a ByPrecision, else None
    # key (the float32 precision for by_precision, else None) -> its CudaGraph, or the reason
    # (str) it is not captured: refused once, never retried.
    cdef dict execs
    cdef object last_key                # the key of last: compared by identity
    cdef void* last                     # the CUgraphExec of execs[last_key]; NULL: none yet

    cdef int fire(self, CCalls c, void* stream, object cuda, object gate) except -1
    cdef int _slow(self, CCalls c, void* stream, object cuda, object gate, object key) except -1


cpdef object calls_of(object device)
