"""CPU_OPT of SET and DATA_TRANSFER: C loops (NNC: cmd/util/cpu_opt).

Each backend is an ``nnc_cmd_exec_f``: it re-checks what it relies on (non-NULL, contiguous,
equal sizes) and returns NNC_INVALID instead of trusting its caller, so calling it directly
(tests, the C API) can never read or write out of bounds. All checks come before the first write,
so a refused call leaves its outputs untouched.
"""

from libc.string cimport memmove

from nnc.base.core cimport (
    NNC_8U,
    NNC_16F,
    NNC_32F,
    NNC_32S,
    NNC_64F,
    NNC_64S,
    NNC_INVALID,
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

cdef int data_transfer_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                           nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef int k
    if n_in < 1 or n_in != n_out:
        return NNC_INVALID
    for k in range(n_in):
        if not tensor_plain(inputs[k]) or not tensor_plain(outputs[k]):
            return NNC_INVALID
        if inputs[k].count * inputs[k].itemsize != outputs[k].count * outputs[k].itemsize:
            return NNC_INVALID
    for k in range(n_in):
        if inputs[k].data != outputs[k].data:
            # memmove: a direct call skips the overlap check, and overlap must not be UB.
            memmove(outputs[k].data, inputs[k].data, inputs[k].count * inputs[k].itemsize)
    return NNC_SUCCESS


def register():
    """Register SET's and DATA_TRANSFER's CPU_OPT (called once by register_builtins)."""
    register_c_backend("SET", "CPU_OPT", set_opt, FLOAT_MASK, True, None, None, True)
    register_c_backend("DATA_TRANSFER", "CPU_OPT", data_transfer_opt, ANY_MASK, True, None, None,
                       True)
