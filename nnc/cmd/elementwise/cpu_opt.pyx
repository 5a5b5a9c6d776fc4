"""CPU_OPT of the element-wise commands SCALAR_MUL, EWSUM, EWPROD and RELU: C loops
(NNC: cmd/ew/cpu_opt, cmd/scalar_mul).

Each backend is an ``nnc_cmd_exec_f``: it re-checks what it relies on (non-NULL, contiguous,
equal element counts, one datatype) and returns NNC_INVALID instead of trusting its caller, so
calling it directly (tests, the C API) can never read or write out of bounds. All checks come
before the first write, so a refused call leaves its outputs untouched. Every loop reads element
i of each input before writing element i of the output, so an output that is exactly an input
(in place) is safe. Loops are written once over a fused float type; gcc -O3 vectorises the
arithmetic ones. EWEXP, EWLOG and the other transcendental ones are in cpu_opt_unary.pyx beside
this module, EWDIV (which broadcasts) in cpu_opt_binary.pyx.
"""

from libc.string cimport memcpy

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.cmd.command cimport nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensors_like
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef int FLOAT_MASK = NNC_32F | NNC_64F


# ---- SCALAR_MUL: y = a * x

cdef void _scale(real* y, const real* x, real a, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = a * x[i]


cdef int scalar_mul_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                        nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    if n_in != 1 or n_out != 1 or not tensors_like(inputs, n_in, outputs, n_out):
        return NNC_INVALID
    if outputs[0].datatype == NNC_32F:
        _scale(<float*>outputs[0].data, <const float*>inputs[0].data, <float>p.a,
               outputs[0].count)
    else:
        _scale(<double*>outputs[0].data, <const double*>inputs[0].data, p.a, outputs[0].count)
    return NNC_SUCCESS


# ---- EWSUM / EWPROD: y = x0 (+|*) x1 (+|*) ...; y may be any of the xs (in place)

cdef void _fold(real* y, nnc_tensor_t** xs, int n, bint prod) noexcept nogil:
    cdef Py_ssize_t i, count = xs[0].count
    cdef int k
    cdef bint aliased = False
    cdef const real* x
    cdef const real* x0 = <const real*>xs[0].data
    cdef real v
    for k in range(1, n):
        aliased = aliased or <real*>xs[k].data == y
    if aliased:
        # y is some later input: read every input at an element before writing it.
        for i in range(count):
            v = x0[i]
            for k in range(1, n):
                x = <const real*>xs[k].data
                v = v * x[i] if prod else v + x[i]
            y[i] = v
        return
    if n == 1:
        if <const real*>y != x0:
            memcpy(y, x0, count * sizeof(real))
        return
    # y is not an input after the first, so it may take partial results pass by pass.
    x = <const real*>xs[1].data
    if prod:
        for i in range(count):
            y[i] = x0[i] * x[i]
    else:
        for i in range(count):
            y[i] = x0[i] + x[i]
    for k in range(2, n):
        x = <const real*>xs[k].data
        if prod:
            for i in range(count):
                y[i] = y[i] * x[i]
        else:
            for i in range(count):
                y[i] = y[i] + x[i]


cdef int _fold_exec(nnc_tensor_t** inputs, int n_in, nnc_tensor_t** outputs, int n_out,
                    bint prod) noexcept nogil:
    if n_in < 1 or n_out != 1 or not tensors_like(inputs, n_in, outputs, n_out):
        return NNC_INVALID
    if outputs[0].datatype == NNC_32F:
        _fold(<float*>outputs[0].data, inputs, n_in, prod)
    else:
        _fold(<double*>outputs[0].data, inputs, n_in, prod)
    return NNC_SUCCESS


cdef int ewsum_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _fold_exec(inputs, n_in, outputs, n_out, False)


cdef int ewprod_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                    nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _fold_exec(inputs, n_in, outputs, n_out, True)


# ---- RELU: y = max(x, 0)

cdef void _relu(real* y, const real* x, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    # "x < 0 ? 0 : x" keeps NaN as NaN, as np.maximum(x, 0) does.
    for i in range(n):
        y[i] = 0 if x[i] < 0 else x[i]


cdef int relu_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    if n_in != 1 or n_out != 1 or not tensors_like(inputs, n_in, outputs, n_out):
        return NNC_INVALID
    if outputs[0].datatype == NNC_32F:
        _relu(<float*>outputs[0].data, <const float*>inputs[0].data, outputs[0].count)
    else:
        _relu(<double*>outputs[0].data, <const double*>inputs[0].data, outputs[0].count)
    return NNC_SUCCESS


def register():
    """Register the CPU_OPT C backends of this module (called once by register_builtins)."""
    register_c_backend("SCALAR_MUL", "CPU_OPT", scalar_mul_opt, FLOAT_MASK, True, None, None, True)
    register_c_backend("EWSUM", "CPU_OPT", ewsum_opt, FLOAT_MASK, True, None, None, True)
    register_c_backend("EWPROD", "CPU_OPT", ewprod_opt, FLOAT_MASK, True, None, None, True)
    register_c_backend("RELU", "CPU_OPT", relu_opt, FLOAT_MASK, True, None, None, True)
