# The checks every CPU_OPT C backend (nnc/ops/cpu_opt*.pyx) makes before it touches memory: a
# backend may be called directly (tests, the C API) with any tensors, so it re-checks what its
# loop relies on and returns NNC_INVALID instead. Inline only: nothing to build or import.

from nnc._core cimport NNC_32F, NNC_64F
from nnc.tensor cimport Tensor, nnc_tensor_t


cdef inline bint tensor_plain(nnc_tensor_t* t) noexcept nogil:
    """t is present, in CPU memory and C-contiguous."""
    return t != NULL and t.contiguous and t.device < 0


cdef inline bint tensor_like(nnc_tensor_t* t, nnc_tensor_t* like) noexcept nogil:
    """t is plain (above) and matches like's datatype and element count."""
    return tensor_plain(t) and t.datatype == like.datatype and t.count == like.count


cdef inline bint tensors_like(nnc_tensor_t** inputs, int n_in, nnc_tensor_t** outputs,
                              int n_out) noexcept nogil:
    """Every input and output is like outputs[0], a plain float32/float64 tensor."""
    cdef int i
    cdef nnc_tensor_t* like
    if n_out < 1 or outputs[0] == NULL:
        return False
    like = outputs[0]
    if not (like.datatype & (NNC_32F | NNC_64F)) or not tensor_like(like, like):
        return False
    for i in range(n_in):
        if not tensor_like(inputs[i], like):
            return False
    for i in range(1, n_out):
        if not tensor_like(outputs[i], like):
            return False
    return True


cdef inline int tensor_views(list tensors, nnc_tensor_t** out, int cap) except -2:
    """out[i] = the C view of tensors[i] (NULL for None): for an ``accept`` that asks the C
    backend's own checks whether it would take these tensors. Their count, or -1 past cap."""
    cdef int i
    cdef Py_ssize_t n = len(tensors)
    if n > cap:
        return -1
    for i in range(n):
        x = tensors[i]
        out[i] = NULL if x is None else &(<Tensor>x).t
    return <int>n
