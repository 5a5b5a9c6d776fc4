# Frozen memory and the packed copies kept for it (nnc/tensor/constant.pyx). C kernels cimport
# constant_pack; the tensor layer cimports frozen_array and constant_contains.

# Fills dst (the packed copy, 64-byte aligned, of the nbytes asked for) from what arg says.
# Runs without the GIL on the thread that asked first; must not touch Python.
ctypedef void (*constant_pack_f)(void* arg, void* dst) noexcept nogil

# The packed copy of the frozen memory at `data` for format `key` (the caller's hash of the
# layout, ISA and shape) of `nbytes` bytes, made by fn(arg, dst) on first use (once, even when
# threads ask at once) and kept until the frozen memory is freed; NULL when `data` does not
# lie in frozen memory (the caller packs into scratch per call) or out of memory.
cdef const void* constant_pack(const void* data, unsigned long long key, size_t nbytes,
                               constant_pack_f fn, void* arg) noexcept nogil

# True if p lies in live frozen memory (its contents can never change while it lives).
cdef bint constant_contains(const void* p) noexcept nogil

# A read-only, C-contiguous ndarray in new frozen memory holding a copy of array (cast to
# dtype when given): the one copy a weight makes to become constant.
cdef object frozen_array(object array, object dtype=*)


# The owner of one block of frozen memory: exports it as a read-only buffer (the base of
# every ndarray over it, so none can be made writable) and frees it, with its packed copies,
# when the last array or tensor using it goes.
cdef class FrozenMemory:
    cdef void* _range                   # its frozen_t in the registry; NULL once freed
    cdef char* _lo                      # first byte (64-byte aligned)
    cdef Py_ssize_t _nbytes             # bytes exported (the allocation may be larger)
    # What owned the memory the tensors frozen into this block left (Tensor.freeze): kept as
    # long as the block, so a kernel already running on the old memory (a run in flight on a
    # stream) never reads freed memory. None when the block was made frozen (onnx, models).
    cdef public object _left
