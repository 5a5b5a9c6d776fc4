# The bottom layer: constants every other module shares. Values follow NNC's ccv_nnc_tfb.h so that
# bit masks of datatypes work the same way (a backend accepts a datatype when its mask has the bit).

cdef enum:
    NNC_MAX_DIM = 12          # NNC's CCV_NNC_MAX_DIM_ALLOC

cdef enum nnc_datatype_e:
    NNC_8U = 0x1000
    NNC_32S = 0x2000
    NNC_32F = 0x4000
    NNC_64S = 0x8000
    NNC_64F = 0x10000
    NNC_16F = 0x20000

cdef enum nnc_memory_e:
    NNC_CPU_MEMORY = 0x1
    NNC_GPU_MEMORY = 0x2

# Return codes of C command backends (NNC's CCV_NNC_EXEC_*).
cdef enum nnc_status_e:
    NNC_SUCCESS = 0
    NNC_INVALID = -1
    NNC_NO_KERNEL = -2
    NNC_OOM = -3

# repr(obj) for an error message; never raises (user objects' reprs may): nnc/base/core.pyx.
cpdef str error_repr(object obj)

# The check of every wait's timeout= (nnc.stream.stream, nnc.stream.waiting, nnc.engine.engine
# cimport it; the pure-Python modules call it): -1 forever, else seconds >= 0.
cpdef double timeout_seconds(object timeout, object error=*) except? -2
