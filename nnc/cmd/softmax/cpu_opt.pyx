"""CPU_OPT of SOFTMAX: a C loop row by row (softmax_kernel.h, at the ISA level cpu_isa() names),
a row being one batch entry (all axes after the first; a vector is one row), as
nnc/cmd/softmax/__init__.py defines it (NNC: cmd/softmax).

The backend is an ``nnc_cmd_exec_f``: it re-checks what it relies on (non-NULL, contiguous,
equal element counts, one datatype) and returns NNC_INVALID instead of trusting its caller, so
calling it directly (tests, the C API) can never read or write out of bounds. A row is read
whole (its max) before it is written, so an output that is exactly the input (in place) is safe.
"""

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.base.isa cimport cpu_isa
from nnc.cmd.command cimport nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensors_like
from nnc.tensor.tensor cimport nnc_tensor_t

cdef extern from "cmd/softmax/softmax_kernel.h":
    void nnc_softmax_f32(int isa, float* y, const float* x, Py_ssize_t rows,
                         Py_ssize_t n) noexcept nogil
    void nnc_softmax_f64(int isa, double* y, const double* x, Py_ssize_t rows,
                         Py_ssize_t n) noexcept nogil

cdef int FLOAT_MASK = NNC_32F | NNC_64F


cdef int softmax_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                     nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    cdef Py_ssize_t n
    if n_in != 1 or n_out != 1 or not tensors_like(inputs, n_in, outputs, n_out):
        return NNC_INVALID
    x, y = inputs[0], outputs[0]
    if x.ndim < 1 or y.ndim != x.ndim or x.dim[0] != y.dim[0]:
        return NNC_INVALID
    if y.count == 0:
        return NNC_SUCCESS
    n = y.count // y.dim[0] if y.ndim >= 2 else y.count
    if y.datatype == NNC_32F:
        nnc_softmax_f32(cpu_isa(), <float*>y.data, <const float*>x.data, y.count // n, n)
    else:
        nnc_softmax_f64(cpu_isa(), <double*>y.data, <const double*>x.data, y.count // n, n)
    return NNC_SUCCESS


def register():
    """Register SOFTMAX's CPU_OPT (called once by register_builtins)."""
    register_c_backend("SOFTMAX", "CPU_OPT", softmax_opt, FLOAT_MASK, True, None, None, True)
