"""CPU_OPT: C loops for element-wise commands, run without touching Python (NNC: cmd/*_cpu_opt).

Each backend is an ``nnc_cmd_exec_f``: it re-checks what it relies on (non-NULL, contiguous,
equal element counts, one datatype) and returns NNC_INVALID instead of trusting its caller, so
calling it directly (tests, the C API) can never read or write out of bounds. Loops are written
once over a fused float type; gcc -O3 vectorises them.
"""

from libc.math cimport exp, expf, log, logf
from libc.string cimport memcpy

from nnc._core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.cmd cimport nnc_cmd_param_t, register_c_backend
from nnc.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef int FLOAT_MASK = NNC_32F | NNC_64F


cdef inline bint _ok(nnc_tensor_t* t, nnc_tensor_t* like) noexcept nogil:
    """t is present, contiguous and matches like's datatype and element count."""
    return (t != NULL and t.contiguous and t.device < 0 and t.datatype == like.datatype
            and t.count == like.count)


cdef inline bint _all_ok(nnc_tensor_t** inputs, int n_in, nnc_tensor_t** outputs,
                         int n_out) noexcept nogil:
    cdef int i
    cdef nnc_tensor_t* like
    if n_out < 1 or outputs[0] == NULL:
        return False
    like = outputs[0]
    if not (like.datatype & FLOAT_MASK) or not _ok(like, like):
        return False
    for i in range(n_in):
        if not _ok(inputs[i], like):
            return False
    for i in range(1, n_out):
        if not _ok(outputs[i], like):
            return False
    return True


# ---- SCALAR_MUL: y = a * x

cdef void _scale(real* y, const real* x, real a, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = a * x[i]


cdef int scalar_mul_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                        nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    if n_in != 1 or n_out != 1 or not _all_ok(inputs, n_in, outputs, n_out):
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
    if n_in < 1 or n_out != 1 or not _all_ok(inputs, n_in, outputs, n_out):
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


def register():
    """Register every CPU_OPT C backend (called once by nnc.ops.register_builtins)."""
    register_c_backend("SCALAR_MUL", "CPU_OPT", scalar_mul_opt, FLOAT_MASK, True, None, None, True)
    register_c_backend("EWSUM", "CPU_OPT", ewsum_opt, FLOAT_MASK, True, None, None, True)
    register_c_backend("EWPROD", "CPU_OPT", ewprod_opt, FLOAT_MASK, True, None, None, True)
