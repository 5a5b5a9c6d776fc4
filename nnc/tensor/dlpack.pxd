# The DLPack C structures (dlpack.h, DLPack 1.x ABI), declared here rather than included so that
# nnc needs no DLPack header to build. Layouts follow the header field for field: consumers
# anywhere (NumPy, PyTorch, CuPy, JAX) read these bytes.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef enum:
    DL_CPU = 1                          # kDLCPU
    DL_CUDA = 2                         # kDLCUDA
    DL_CUDA_HOST = 3                    # kDLCUDAHost: pinned host memory, readable by the CPU

cdef enum:
    DL_INT = 0                          # kDLInt
    DL_UINT = 1                         # kDLUInt
    DL_FLOAT = 2                        # kDLFloat

cdef enum:
    DL_FLAG_READ_ONLY = 1               # DLPACK_FLAG_BITMASK_READ_ONLY
    DL_FLAG_IS_COPIED = 2               # DLPACK_FLAG_BITMASK_IS_COPIED

ctypedef struct DLPackVersion:
    uint32_t major
    uint32_t minor

ctypedef struct DLDevice:
    int32_t device_type                 # a C enum in dlpack.h: int-sized on every ABI we build for
    int32_t device_id

ctypedef struct DLDataType:
    uint8_t code
    uint8_t bits
    uint16_t lanes

ctypedef struct DLTensor:
    void* data
    DLDevice device
    int32_t ndim
    DLDataType dtype
    int64_t* shape
    int64_t* strides                    # in elements; NULL (legacy only) means C-contiguous
    uint64_t byte_offset

cdef struct DLManagedTensor:
    DLTensor dl_tensor
    void* manager_ctx
    void (*deleter)(DLManagedTensor*) noexcept nogil

cdef struct DLManagedTensorVersioned:
    DLPackVersion version
    void* manager_ctx
    void (*deleter)(DLManagedTensorVersioned*) noexcept nogil
    uint64_t flags
    DLTensor dl_tensor
