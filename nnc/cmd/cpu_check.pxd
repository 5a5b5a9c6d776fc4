# The checks every CPU_OPT C backend (nnc/cmd/<family>/*.pyx) makes before it touches memory: a
# backend may be called directly (tests, the C API) with any tensors, so it re-checks what its
# loop relies on and returns NNC_INVALID instead. Inline only: nothing to build or import.

from nnc.base.core cimport NNC_32F, NNC_64F
from nnc.tensor.tensor cimport Tensor, nnc_tensor_t


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


cdef inline bint fits_int(Py_ssize_t v) noexcept nogil:
    """v can be passed to BLAS as an int (a dimension or a leading dimension)."""
    return 0 <= v <= 2147483647


cdef inline bint conv_operands_ok(nnc_tensor_t** inputs, int n_in, nnc_tensor_t** outputs,
                                  int n_out) noexcept nogil:
    """A convolution's operands as its C backends need them: (x, w), (x, w, bias) or (x, w,
    bias, residual) -> y, all in CPU memory and of y's float dtype; x, y and the residual
    [n, h, w, c] or [h, w, c] (same rank) with contiguous channels, the residual of y's shape;
    w [O, kh, kw, C/groups] and bias [O] contiguous. A residual at y's address is y itself
    (same strides), and only float32 convolutions that are not depthwise take it: their tiles
    read each residual value before storing over it, where float64 and depthwise ones store
    the convolution first and add the residual in a later pass."""
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* w
    cdef nnc_tensor_t* b
    cdef nnc_tensor_t* r
    cdef nnc_tensor_t* y
    cdef int dtype, i
    if n_in < 2 or n_in > 4 or n_out != 1 or inputs[0] == NULL or outputs[0] == NULL:
        return False
    x, w, y = inputs[0], inputs[1], outputs[0]
    b = inputs[2] if n_in >= 3 else NULL
    r = inputs[3] if n_in == 4 else NULL
    dtype = y.datatype
    if not (dtype == NNC_32F or dtype == NNC_64F):
        return False
    if not (_channels_last(x, dtype) and _channels_last(y, dtype)) or y.ndim != x.ndim:
        return False
    if w == NULL or w.device >= 0 or w.datatype != dtype or not w.contiguous or w.ndim != 4:
        return False
    if r != NULL:
        if not _channels_last(r, dtype) or r.ndim != y.ndim:
            return False
        for i in range(y.ndim):
            if r.dim[i] != y.dim[i] or (r.data == y.data and r.stride[i] != y.stride[i]):
                return False
        if r.data == y.data and (dtype != NNC_32F or (
                w.dim[3] == 1 and w.dim[0] == x.dim[x.ndim - 1] and w.dim[0] > 1)):
            return False
    return b == NULL or (b.device < 0 and b.datatype == dtype and b.contiguous
                         and b.count == w.dim[0])


cdef inline bint _channels_last(const nnc_tensor_t* t, int dtype) noexcept nogil:
    return (t != NULL and t.device < 0 and t.datatype == dtype and 3 <= t.ndim <= 4
            and (t.dim[t.ndim - 1] <= 1 or t.stride[t.ndim - 1] == 1))
