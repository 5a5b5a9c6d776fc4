"""CPU_OPT for SWISH, GELU, HARD_SWISH, HARD_SIGMOID, ERF, LEAKY_RELU, ELU, SELU, CELU, SOFTPLUS,
SOFTSIGN, MISH, THRESHOLDED_RELU (act_kernel.h) and EWABS: C loops (NNC: cmd/swish, cmd/gelu,
cmd/leaky_relu, cmd/ew).

The per-element functions, how each is computed and its accuracy against CPU_REF are in
act_kernel.h beside this module; a convolution epilogue can include the same header. Loops run
at the ISA level cpu_isa() names (nnc/base/isa.pxd), so set_cpu_isa moves them as it moves the
GEMM tiles. GELU's parameter ``tanh`` is the C struct's ``a``; HARD_SIGMOID's alpha and beta, and
SELU's alpha and gamma, are ``a`` and ``b``; LEAKY_RELU's negative_slope and the alpha of ELU,
CELU and THRESHOLDED_RELU are ``a`` (nnc/cmd/command.pyx fills them).

Each backend re-checks what it relies on (non-NULL, contiguous, CPU, one float datatype, equal
element counts) and returns NNC_INVALID before writing anything. Big tensors are cut into parts
of PART_ELEMENTS that idle pool threads take (nnc.base.parallel). Every loop reads element i
before writing element i, so the output may be exactly the input (in place).
"""

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.base.isa cimport cpu_isa
from nnc.base.parallel cimport nnc_parallel_for
from nnc.cmd.command cimport nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensors_like
from nnc.tensor.tensor cimport nnc_tensor_t

cdef extern from "cmd/elementwise/act_kernel.h":
    enum:
        NNC_ACT_SWISH
        NNC_ACT_GELU
        NNC_ACT_GELU_TANH
        NNC_ACT_HARD_SWISH
        NNC_ACT_HARD_SIGMOID
        NNC_ACT_ERF
        NNC_ACT_LEAKY_RELU
        NNC_ACT_ELU
        NNC_ACT_SELU
        NNC_ACT_CELU
        NNC_ACT_SOFTPLUS
        NNC_ACT_SOFTSIGN
        NNC_ACT_MISH
        NNC_ACT_THRESHOLDED_RELU
    void nnc_act_f32(int op, int isa, float* y, const float* x, Py_ssize_t n, double a,
                     double b) noexcept nogil
    void nnc_act_f64(int op, int isa, double* y, const double* x, Py_ssize_t n, double a,
                     double b) noexcept nogil

cdef extern from "<math.h>" nogil:
    float fabsf(float x)
    double fabs(double x)

cdef enum:
    # Elements per part: enough that waking a helper thread costs little beside the loop.
    PART_ELEMENTS = 1 << 15
    OP_ABS = -1                         # EWABS, beside act_kernel.h's NNC_ACT_* (all >= 0)


# One call, shared read-only by its parts.
ctypedef struct act_t:
    int op                              # NNC_ACT_* or OP_ABS
    int isa                             # cpu_isa() when the call began: every part uses it
    int dtype                           # NNC_32F or NNC_64F
    void* y
    const void* x
    double a, b                         # the command's parameters (param.a, param.b)
    Py_ssize_t count


cdef void _abs_f32(float* y, const float* x, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = fabsf(x[i])


cdef void _abs_f64(double* y, const double* x, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = fabs(x[i])


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const act_t* e = <const act_t*>arg
    cdef Py_ssize_t i0 = part * PART_ELEMENTS
    cdef Py_ssize_t n = min(i0 + PART_ELEMENTS, e.count) - i0
    if e.dtype == NNC_32F:
        if e.op == OP_ABS:
            _abs_f32(<float*>e.y + i0, <const float*>e.x + i0, n)
        else:
            nnc_act_f32(e.op, e.isa, <float*>e.y + i0, <const float*>e.x + i0, n, e.a, e.b)
    else:
        if e.op == OP_ABS:
            _abs_f64(<double*>e.y + i0, <const double*>e.x + i0, n)
        else:
            nnc_act_f64(e.op, e.isa, <double*>e.y + i0, <const double*>e.x + i0, n, e.a, e.b)
    return NNC_SUCCESS


cdef int _act_exec(int op, const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef act_t e
    if n_in != 1 or n_out != 1 or not tensors_like(inputs, 1, outputs, 1):
        return NNC_INVALID
    e.op, e.isa, e.dtype = op, cpu_isa(), outputs[0].datatype
    e.y, e.x, e.count = outputs[0].data, inputs[0].data, outputs[0].count
    e.a, e.b = p.a, p.b
    if e.count == 0:
        return NNC_SUCCESS
    return nnc_parallel_for((e.count + PART_ELEMENTS - 1) // PART_ELEMENTS, _part, &e, ctx)


cdef int swish_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_SWISH, p, inputs, n_in, outputs, n_out, ctx)


cdef int gelu_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_GELU_TANH if p.a != 0 else NNC_ACT_GELU, p, inputs, n_in, outputs,
                     n_out, ctx)


cdef int hard_swish_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                        nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_HARD_SWISH, p, inputs, n_in, outputs, n_out, ctx)


cdef int hard_sigmoid_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                          nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_HARD_SIGMOID, p, inputs, n_in, outputs, n_out, ctx)


cdef int erf_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_ERF, p, inputs, n_in, outputs, n_out, ctx)


cdef int ewabs_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(OP_ABS, p, inputs, n_in, outputs, n_out, ctx)


cdef int leaky_relu_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                        nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_LEAKY_RELU, p, inputs, n_in, outputs, n_out, ctx)


cdef int elu_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_ELU, p, inputs, n_in, outputs, n_out, ctx)


cdef int selu_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_SELU, p, inputs, n_in, outputs, n_out, ctx)


cdef int celu_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    if p.a == 0:                        # x / alpha: normalize refuses 0; a direct caller too
        return NNC_INVALID
    return _act_exec(NNC_ACT_CELU, p, inputs, n_in, outputs, n_out, ctx)


cdef int softplus_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                      nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_SOFTPLUS, p, inputs, n_in, outputs, n_out, ctx)


cdef int softsign_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                      nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_SOFTSIGN, p, inputs, n_in, outputs, n_out, ctx)


cdef int mish_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_MISH, p, inputs, n_in, outputs, n_out, ctx)


cdef int thresholded_relu_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                              nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _act_exec(NNC_ACT_THRESHOLDED_RELU, p, inputs, n_in, outputs, n_out, ctx)


def register():
    """Register the CPU_OPT C backends of this module (called once by register_builtins)."""
    cdef int mask = NNC_32F | NNC_64F
    register_c_backend("LEAKY_RELU", "CPU_OPT", leaky_relu_opt, mask, True, None, None, True)
    register_c_backend("ELU", "CPU_OPT", elu_opt, mask, True, None, None, True)
    register_c_backend("SELU", "CPU_OPT", selu_opt, mask, True, None, None, True)
    register_c_backend("CELU", "CPU_OPT", celu_opt, mask, True, None, None, True)
    register_c_backend("SOFTPLUS", "CPU_OPT", softplus_opt, mask, True, None, None, True)
    register_c_backend("SOFTSIGN", "CPU_OPT", softsign_opt, mask, True, None, None, True)
    register_c_backend("MISH", "CPU_OPT", mish_opt, mask, True, None, None, True)
    register_c_backend("THRESHOLDED_RELU", "CPU_OPT", thresholded_relu_opt, mask, True, None,
                       None, True)
    register_c_backend("SWISH", "CPU_OPT", swish_opt, mask, True, None, None, True)
    register_c_backend("GELU", "CPU_OPT", gelu_opt, mask, True, None, None, True)
    register_c_backend("HARD_SWISH", "CPU_OPT", hard_swish_opt, mask, True, None, None, True)
    register_c_backend("HARD_SIGMOID", "CPU_OPT", hard_sigmoid_opt, mask, True, None, None, True)
    register_c_backend("ERF", "CPU_OPT", erf_opt, mask, True, None, None, True)
    register_c_backend("EWABS", "CPU_OPT", ewabs_opt, mask, True, None, None, True)
