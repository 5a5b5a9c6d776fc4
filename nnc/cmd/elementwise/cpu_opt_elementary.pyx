"""CPU_OPT for the elementary functions EWFLOOR, EWCEIL, EWROUND, EWSIGN, EWSIN, EWCOS, EWTAN,
EWASIN, EWACOS, EWATAN, EWSINH, EWCOSH, EWASINH, EWACOSH and EWATANH: C loops (elementary_kernel.h,
which states how each is computed and its accuracy against CPU_REF).

Loops run at the ISA level cpu_isa() names (nnc/base/isa.pxd). Each backend re-checks what it
relies on (non-NULL, contiguous, CPU, one float datatype, equal element counts) and returns
NNC_INVALID before writing anything. Big tensors are cut into parts of PART_ELEMENTS that idle
pool threads take (nnc.base.parallel). Every loop reads element i before writing element i, so
the output may be exactly the input (in place).
"""

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.base.isa cimport cpu_isa
from nnc.base.parallel cimport nnc_parallel_for
from nnc.cmd.command cimport nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensors_like
from nnc.tensor.tensor cimport nnc_tensor_t

cdef extern from "cmd/elementwise/elementary_kernel.h":
    enum:
        NNC_EL_FLOOR
        NNC_EL_CEIL
        NNC_EL_ROUND
        NNC_EL_SIGN
        NNC_EL_SIN
        NNC_EL_COS
        NNC_EL_TAN
        NNC_EL_ASIN
        NNC_EL_ACOS
        NNC_EL_ATAN
        NNC_EL_SINH
        NNC_EL_COSH
        NNC_EL_ASINH
        NNC_EL_ACOSH
        NNC_EL_ATANH
    void nnc_elementary_f32(int op, int isa, float* y, const float* x,
                            Py_ssize_t n) noexcept nogil
    void nnc_elementary_f64(int op, int isa, double* y, const double* x,
                            Py_ssize_t n) noexcept nogil

cdef enum:
    # Elements per part: enough that waking a helper thread costs little beside the loop.
    PART_ELEMENTS = 1 << 15


# One call, shared read-only by its parts.
ctypedef struct elementary_t:
    int op                              # NNC_EL_*
    int isa                             # cpu_isa() when the call began: every part uses it
    int dtype                           # NNC_32F or NNC_64F
    void* y
    const void* x
    Py_ssize_t count


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const elementary_t* e = <const elementary_t*>arg
    cdef Py_ssize_t i0 = part * PART_ELEMENTS
    cdef Py_ssize_t n = min(i0 + PART_ELEMENTS, e.count) - i0
    if e.dtype == NNC_32F:
        nnc_elementary_f32(e.op, e.isa, <float*>e.y + i0, <const float*>e.x + i0, n)
    else:
        nnc_elementary_f64(e.op, e.isa, <double*>e.y + i0, <const double*>e.x + i0, n)
    return NNC_SUCCESS


cdef int _exec(int op, nnc_tensor_t** inputs, int n_in, nnc_tensor_t** outputs, int n_out,
               void* ctx) noexcept nogil:
    cdef elementary_t e
    if n_in != 1 or n_out != 1 or not tensors_like(inputs, 1, outputs, 1):
        return NNC_INVALID
    e.op, e.isa, e.dtype = op, cpu_isa(), outputs[0].datatype
    e.y, e.x, e.count = outputs[0].data, inputs[0].data, outputs[0].count
    if e.count == 0:
        return NNC_SUCCESS
    return nnc_parallel_for((e.count + PART_ELEMENTS - 1) // PART_ELEMENTS, _part, &e, ctx)


cdef int floor_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_FLOOR, inputs, n_in, outputs, n_out, ctx)


cdef int ceil_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_CEIL, inputs, n_in, outputs, n_out, ctx)


cdef int round_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_ROUND, inputs, n_in, outputs, n_out, ctx)


cdef int sign_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_SIGN, inputs, n_in, outputs, n_out, ctx)


cdef int sin_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_SIN, inputs, n_in, outputs, n_out, ctx)


cdef int cos_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_COS, inputs, n_in, outputs, n_out, ctx)


cdef int tan_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_TAN, inputs, n_in, outputs, n_out, ctx)


cdef int asin_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_ASIN, inputs, n_in, outputs, n_out, ctx)


cdef int acos_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_ACOS, inputs, n_in, outputs, n_out, ctx)


cdef int atan_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_ATAN, inputs, n_in, outputs, n_out, ctx)


cdef int sinh_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_SINH, inputs, n_in, outputs, n_out, ctx)


cdef int cosh_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_COSH, inputs, n_in, outputs, n_out, ctx)


cdef int asinh_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_ASINH, inputs, n_in, outputs, n_out, ctx)


cdef int acosh_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_ACOSH, inputs, n_in, outputs, n_out, ctx)


cdef int atanh_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _exec(NNC_EL_ATANH, inputs, n_in, outputs, n_out, ctx)


def register():
    """Register the CPU_OPT C backends of this module (called once by register_builtins)."""
    cdef int mask = NNC_32F | NNC_64F
    register_c_backend("EWFLOOR", "CPU_OPT", floor_opt, mask, True, None, None, True)
    register_c_backend("EWCEIL", "CPU_OPT", ceil_opt, mask, True, None, None, True)
    register_c_backend("EWROUND", "CPU_OPT", round_opt, mask, True, None, None, True)
    register_c_backend("EWSIGN", "CPU_OPT", sign_opt, mask, True, None, None, True)
    register_c_backend("EWSIN", "CPU_OPT", sin_opt, mask, True, None, None, True)
    register_c_backend("EWCOS", "CPU_OPT", cos_opt, mask, True, None, None, True)
    register_c_backend("EWTAN", "CPU_OPT", tan_opt, mask, True, None, None, True)
    register_c_backend("EWASIN", "CPU_OPT", asin_opt, mask, True, None, None, True)
    register_c_backend("EWACOS", "CPU_OPT", acos_opt, mask, True, None, None, True)
    register_c_backend("EWATAN", "CPU_OPT", atan_opt, mask, True, None, None, True)
    register_c_backend("EWSINH", "CPU_OPT", sinh_opt, mask, True, None, None, True)
    register_c_backend("EWCOSH", "CPU_OPT", cosh_opt, mask, True, None, None, True)
    register_c_backend("EWASINH", "CPU_OPT", asinh_opt, mask, True, None, None, True)
    register_c_backend("EWACOSH", "CPU_OPT", acosh_opt, mask, True, None, None, True)
    register_c_backend("EWATANH", "CPU_OPT", atanh_opt, mask, True, None, None, True)
