"""CPU_OPT for EWEXP, EWLOG, EWSQRT, SIGMOID and TANH: vectorised C loops (NNC: cmd/ew, cmd/sigmoid,
cmd/tanh).

libm's expf/logf are scalar calls, so a loop over them cannot be vectorised and ran 5x slower
than NumPy's SIMD exp/log on large arrays. The loops here use their own exp and log written only
with arithmetic, comparisons turned into selects, and integer bit operations on the float
representation, so gcc -O3 vectorises them (check with CFLAGS=-fopt-info-vec). On x86-64 with gcc
and glibc each loop is built three times (AVX-512F, AVX2, baseline SSE2) and the loader picks the
widest the CPU has (target_clones); elsewhere the one portable version is built.

The functions themselves (exp, log, sigmoid, tanh; how each is computed and how accurate
it is) are in exp_kernel.h beside this module, shared with act_kernel.h (SWISH, GELU).

Each backend re-checks what it relies on (non-NULL, contiguous, CPU, one float datatype, equal
element counts) and returns NNC_INVALID before writing anything. Every loop reads element i
before writing element i, so the output may be exactly the input (in place).
"""

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.cmd.command cimport nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensors_like
from nnc.tensor.tensor cimport nnc_tensor_t

cdef extern from *:
    """
    #include "cmd/elementwise/exp_kernel.h"

    /* ifunc-based multiversioning needs gcc's target_clones, x86-64 and glibc's loader. */
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
    #define NNC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
    #else
    #define NNC_CLONES
    #endif

    enum { NNC_UN_EXP, NNC_UN_LOG, NNC_UN_SQRT, NNC_UN_SIGMOID, NNC_UN_TANH };

    /* One loop per function, so each vectorises on its own (a switch inside would not). */
    #define NNC_UNARY_LOOPS(T, SFX, SQRT)                                                  \\
        NNC_CLONES static void nnc_loop_exp_##SFX(T* y, const T* x, ptrdiff_t n)           \\
        { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_exp_##SFX(x[i]); }                  \\
        NNC_CLONES static void nnc_loop_log_##SFX(T* y, const T* x, ptrdiff_t n)           \\
        { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_log_##SFX(x[i]); }                  \\
        NNC_CLONES static void nnc_loop_sqrt_##SFX(T* y, const T* x, ptrdiff_t n)          \\
        { for (ptrdiff_t i = 0; i < n; i++) y[i] = SQRT(x[i]); }                           \\
        NNC_CLONES static void nnc_loop_sigmoid_##SFX(T* y, const T* x, ptrdiff_t n)       \\
        { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_sigmoid_##SFX(x[i]); }              \\
        NNC_CLONES static void nnc_loop_tanh_##SFX(T* y, const T* x, ptrdiff_t n)          \\
        { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_tanh_##SFX(x[i]); }                 \\
        static void nnc_unary_##SFX(T* y, const T* x, ptrdiff_t n, int op)                 \\
        {                                                                                  \\
            switch (op) {                                                                  \\
            case NNC_UN_EXP: nnc_loop_exp_##SFX(y, x, n); break;                           \\
            case NNC_UN_LOG: nnc_loop_log_##SFX(y, x, n); break;                           \\
            case NNC_UN_SQRT: nnc_loop_sqrt_##SFX(y, x, n); break;                         \\
            case NNC_UN_SIGMOID: nnc_loop_sigmoid_##SFX(y, x, n); break;                   \\
            default: nnc_loop_tanh_##SFX(y, x, n); break;                                  \\
            }                                                                              \\
        }

    /* sqrt is IEEE-exact in hardware; built with -fno-math-errno (setup.py) it vectorises. */
    NNC_UNARY_LOOPS(float, f32, sqrtf)
    NNC_UNARY_LOOPS(double, f64, sqrt)
    """
    enum:
        NNC_UN_EXP
        NNC_UN_LOG
        NNC_UN_SQRT
        NNC_UN_SIGMOID
        NNC_UN_TANH
    void nnc_unary_f32(float* y, const float* x, Py_ssize_t n, int op) noexcept nogil
    void nnc_unary_f64(double* y, const double* x, Py_ssize_t n, int op) noexcept nogil
    float nnc_exp_f32(float x) noexcept nogil
    double nnc_exp_f64(double x) noexcept nogil


cdef int _unary_exec(nnc_tensor_t** inputs, int n_in, nnc_tensor_t** outputs, int n_out,
                     int op) noexcept nogil:
    cdef nnc_tensor_t* y
    if n_in != 1 or n_out != 1 or not tensors_like(inputs, 1, outputs, 1):
        return NNC_INVALID
    y = outputs[0]
    if y.datatype == NNC_32F:
        nnc_unary_f32(<float*>y.data, <const float*>inputs[0].data, y.count, op)
    else:
        nnc_unary_f64(<double*>y.data, <const double*>inputs[0].data, y.count, op)
    return NNC_SUCCESS


cdef int ewexp_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _unary_exec(inputs, n_in, outputs, n_out, NNC_UN_EXP)


cdef int ewlog_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _unary_exec(inputs, n_in, outputs, n_out, NNC_UN_LOG)


cdef int ewsqrt_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                    nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _unary_exec(inputs, n_in, outputs, n_out, NNC_UN_SQRT)


cdef int sigmoid_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                     nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _unary_exec(inputs, n_in, outputs, n_out, NNC_UN_SIGMOID)


cdef int tanh_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _unary_exec(inputs, n_in, outputs, n_out, NNC_UN_TANH)


def register():
    """Register the CPU_OPT C backends of this module (called once by register_builtins)."""
    cdef int mask = NNC_32F | NNC_64F
    register_c_backend("EWEXP", "CPU_OPT", ewexp_opt, mask, True, None, None, True)
    register_c_backend("EWLOG", "CPU_OPT", ewlog_opt, mask, True, None, None, True)
    register_c_backend("EWSQRT", "CPU_OPT", ewsqrt_opt, mask, True, None, None, True)
    register_c_backend("SIGMOID", "CPU_OPT", sigmoid_opt, mask, True, None, None, True)
    register_c_backend("TANH", "CPU_OPT", tanh_opt, mask, True, None, None, True)
