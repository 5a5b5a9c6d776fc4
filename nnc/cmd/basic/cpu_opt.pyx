"""CPU_OPT of SET and DATA_TRANSFER: C loops (NNC: cmd/util/cpu_opt).

Each backend is an ``nnc_cmd_exec_f``: it re-checks what it relies on (non-NULL, contiguous or,
for DATA_TRANSFER, strided views of one shape that do not overlap, equal sizes) and returns
NNC_INVALID instead of trusting its caller, so calling it directly (tests, the C API) can never
read or write out of bounds. All checks come before the first write,
so a refused call leaves its outputs untouched.
"""

from libc.string cimport memcpy, memmove

from nnc.base.core cimport (
    NNC_8U,
    NNC_16F,
    NNC_32F,
    NNC_32S,
    NNC_64F,
    NNC_64S,
    NNC_INVALID,
    NNC_MAX_DIM,
    NNC_SUCCESS,
)
from nnc.cmd.command cimport nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensor_plain
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef int FLOAT_MASK = NNC_32F | NNC_64F
cdef int ANY_MASK = NNC_8U | NNC_32S | NNC_32F | NNC_64S | NNC_64F | NNC_16F


# ---- SET: every output = value (each output may have its own float dtype)

cdef void _fill(real* y, real v, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = v


cdef int set_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef int k
    if n_out < 1:
        return NNC_INVALID
    for k in range(n_out):
        if not tensor_plain(outputs[k]) or not (outputs[k].datatype & FLOAT_MASK):
            return NNC_INVALID
    for k in range(n_out):
        if outputs[k].datatype == NNC_32F:
            _fill(<float*>outputs[k].data, <float>p.a, outputs[k].count)
        else:
            _fill(<double*>outputs[k].data, p.a, outputs[k].count)
    return NNC_SUCCESS


# ---- DATA_TRANSFER: output k = input k, byte for byte (any datatype)

cdef void _extent(nnc_tensor_t* t, char** lo, char** hi) noexcept nogil:
    """[lo, hi): the bytes a non-empty tensor's elements lie in (strides may be negative)."""
    cdef Py_ssize_t k, a = 0, b = 0
    for k in range(t.ndim):
        if t.stride[k] > 0:
            b += (t.dim[k] - 1) * t.stride[k]
        else:
            a += (t.dim[k] - 1) * t.stride[k]
    lo[0] = <char*>t.data + a * t.itemsize
    hi[0] = <char*>t.data + (b + 1) * t.itemsize


cdef bint _same_view(nnc_tensor_t* x, nnc_tensor_t* y) noexcept nogil:
    cdef int k
    if x.data != y.data:
        return False
    for k in range(x.ndim):
        if x.stride[k] != y.stride[k]:
            return False
    return True


cdef void _copy_strided(nnc_tensor_t* x, nnc_tensor_t* y) noexcept nogil:
    """y = x for two non-empty views of one shape that do not overlap: a memcpy per run of the
    last axis when it is contiguous in both (a channel slice of an NHWC Concat buffer), else
    per element."""
    cdef Py_ssize_t idx[NNC_MAX_DIM]
    cdef Py_ssize_t _r, i, k, ox, oy, rows, inner, isz = x.itemsize
    cdef int nd = x.ndim
    cdef char* xd = <char*>x.data
    cdef char* yd = <char*>y.data
    if nd == 0:
        memcpy(yd, xd, isz)
        return
    inner = x.dim[nd - 1]
    rows = x.count // inner
    for k in range(nd):
        idx[k] = 0
    for _r in range(rows):
        ox, oy = 0, 0
        for k in range(nd - 1):
            ox += idx[k] * x.stride[k]
            oy += idx[k] * y.stride[k]
        if x.stride[nd - 1] == 1 and y.stride[nd - 1] == 1:
            memcpy(yd + oy * isz, xd + ox * isz, inner * isz)
        else:
            for i in range(inner):
                memcpy(yd + (oy + i * y.stride[nd - 1]) * isz,
                       xd + (ox + i * x.stride[nd - 1]) * isz, isz)
        k = nd - 2
        while k >= 0:
            idx[k] += 1
            if idx[k] < x.dim[k]:
                break
            idx[k] = 0
            k -= 1


cdef int data_transfer_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                           nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef int k, d
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    cdef char* xlo
    cdef char* xhi
    cdef char* ylo
    cdef char* yhi
    if n_in < 1 or n_in != n_out:
        return NNC_INVALID
    for k in range(n_in):
        x, y = inputs[k], outputs[k]
        if x == NULL or y == NULL or x.device >= 0 or y.device >= 0:
            return NNC_INVALID
        if x.count * x.itemsize != y.count * y.itemsize:
            return NNC_INVALID
        if x.contiguous and y.contiguous:
            continue
        # Strided: one shape and element size, and no overlap but an identical view (NumPy's
        # copy, CPU_REF, buffers overlapping ones; _transfer_accept sends them there).
        if x.ndim != y.ndim or x.itemsize != y.itemsize:
            return NNC_INVALID
        for d in range(x.ndim):
            if x.dim[d] != y.dim[d]:
                return NNC_INVALID
        if x.count and not _same_view(x, y):
            _extent(x, &xlo, &xhi)
            _extent(y, &ylo, &yhi)
            if xlo < yhi and ylo < xhi:
                return NNC_INVALID
    for k in range(n_in):
        x, y = inputs[k], outputs[k]
        if x.data == y.data and (x.contiguous and y.contiguous or _same_view(x, y)):
            continue
        if x.contiguous and y.contiguous:
            # memmove: a direct call skips the overlap check, and overlap must not be UB.
            memmove(y.data, x.data, x.count * x.itemsize)
        elif x.count:
            _copy_strided(x, y)
    return NNC_SUCCESS


def _transfer_accept(cmd, inputs, outputs):
    """DATA_TRANSFER's CPU_OPT copies strided views run by run: not between two that overlap
    and differ (CPU_REF's NumPy copy buffers those)."""
    import numpy as np

    for x, y in zip(inputs, outputs):
        if x.is_contiguous and y.is_contiguous:
            continue
        a, b = x.numpy(), y.numpy()
        same = (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                and a.strides == b.strides)
        if not same and np.may_share_memory(a, b):
            return False
    return True


def register():
    """Register SET's and DATA_TRANSFER's CPU_OPT (called once by register_builtins)."""
    register_c_backend("SET", "CPU_OPT", set_opt, FLOAT_MASK, True, None, None, True)
    register_c_backend("DATA_TRANSFER", "CPU_OPT", data_transfer_opt, ANY_MASK, False,
                       _transfer_accept, None, True)
