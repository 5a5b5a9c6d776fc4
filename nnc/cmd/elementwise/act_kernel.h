/* The activations of the element-wise family, one element at a time: SWISH (SiLU), GELU (erf
 * and tanh forms), HARD_SWISH, HARD_SIGMOID, ERF, in float32 and float64, and the loops of their
 * CPU_OPT backends (cpu_opt_act.pyx). The per-element functions are static inline so a kernel
 * that applies one as an epilogue (a convolution's tile still in registers) can include this
 * header and call them on each value.
 *
 * Definitions (CPU_REF, nnc/cmd/elementwise/activation.py, computes them in float64):
 *   SWISH(x)        = x * sigmoid(x)
 *   GELU(x)         = x / 2 * (1 + erf(x / sqrt 2))                       (erf form, NNC's default)
 *                   = x / 2 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (tanh=True)
 *   HARD_SIGMOID(x) = min(max(alpha x + beta, 0), 1)                      (ONNX's HardSigmoid)
 *   HARD_SWISH(x)   = x * min(max(x + 3, 0), 6) / 6                       (PyTorch's hardswish)
 *   ERF(x)          = erf(x)
 * At -inf SWISH, GELU and HARD_SWISH take their limit, -0 (the formulas give -inf * 0 = NaN); at
 * +inf they are +inf. NaN stays NaN everywhere.
 *
 * How, and why so:
 * - 1 + tanh(u) = 2 sigmoid(2u) and 1 + erf(z) = erfc(-z): for negative x both forms would
 *   subtract two numbers near 1 and lose every digit of a small result, so GELU is computed as
 *   x sigmoid(2u) and x / 2 erfc(-x / sqrt 2), which keep full relative precision.
 * - SWISH and GELU's tanh form use exp_kernel.h's sigmoid (arithmetic only), so their loops
 *   vectorise; they are built for each ISA level (nnc/base/isa.pxd) under its target attribute
 *   and chosen by the caller's cpu_isa(). HARD_* are arithmetic and selects and vectorise too.
 * - float32 erf and erfc are the fits below, evaluated in double (arithmetic and selects, so the
 *   loops vectorise at each ISA level) and rounded once; float64 ones are libm's (scalar calls).
 * Accuracy against CPU_REF: HARD_* within 1 ulp of the result (2 ulp of beta near a clamp
 * edge); SWISH within 3 ulp; GELU's tanh form within (3 + 4 |2u|) ulp, as the argument
 * 2u = 2 sqrt(2/pi) (x + 0.044715 x^3), rounded in its few steps, carries its relative error
 * times |2u| into exp (the function's own conditioning: any float evaluation has it); erf form
 * and ERF 1 ulp in float32 (the fits' error, < 1e-9 relative, stays far below the final
 * rounding: tests/cmd/elementwise/test_activation.py sweeps [-16, 16] at 2^-12 and random bit
 * patterns at each ISA level), and the float64 erf form as CPU_REF to the bit. */
#ifndef NNC_ACT_KERNEL_H
#define NNC_ACT_KERNEL_H

#include <math.h>
#include <stddef.h>

#include "cmd/elementwise/exp_kernel.h"

#define NNC_GELU_TANH_C 0.7978845608028654      /* sqrt(2 / pi) */
#define NNC_GELU_TANH_K 0.044715

/* float32 erf, erfc, log1p, evaluated in double with arithmetic and selects only, so the loops
 * calling them vectorise (libm's are scalar calls; erfc in double one element at a time made
 * GELU 15x onnxruntime's). Double leaves their approximation error (below 1e-9 relative, far
 * under float32's 6e-8 ulp) out of the float32 result, which is then rounded once: within 1 ulp
 * of the correctly rounded value. Least-squares fits to Python's math.erf/erfc/log1p on dense
 * sweeps of their intervals, relative error at most:
 *   erf(a)  = a P(a^2)                          0 <= a < 1       3.7e-11
 *   erfc(a) = exp(-a^2) Q(1 / (1 + a / 2))      1 <= a <= 10.5   8.4e-10 (Q's a clamped there:
 *             beyond, exp(-a^2) < 1e-47 makes any float32 result 0)
 *   log1p(e) = e L(e)                           0 <= e <= 1      2.2e-11 */
static inline double nnc_erf_small_f64(double a)
{
    double z = a * a;
    double p = -9.68974699118853e-06;
    p = p * z + 0.0001127473996275219;
    p = p * z + -0.0008485439187874416;
    p = p * z + 0.005221138713873793;
    p = p * z + -0.026865475520694015;
    p = p * z + 0.11283783443967343;
    p = p * z + -0.3761263855283134;
    p = p * z + 1.1283791670801047;
    return a * p;
}

/* erfc(a) for a >= 1 (NaN for NaN). */
static inline double nnc_erfc_large_f64(double a)
{
    double ac = a > 10.5 ? 10.5 : a;
    double v = 1.0 / (1.0 + 0.5 * ac);
    double q = -0.05959702631126317;
    q = q * v + 0.2976195267584137;
    q = q * v + -0.5268993602872882;
    q = q * v + 0.33157875813350735;
    q = q * v + -0.06657082501405162;
    q = q * v + 0.22050477524468498;
    q = q * v + 0.2382806412666455;
    q = q * v + 0.2831439038567445;
    q = q * v + 0.28202088487337523;
    q = q * v + 2.27488343304718e-06;
    return nnc_exp_f64(-(a * a)) * q;
}

/* log1p(e) for e in [0, 1] (NaN for NaN). */
static inline double nnc_log1p_unit_f64(double e)
{
    double p = 0.0007922858467123196;
    p = p * e + -0.006037895268580479;
    p = p * e + 0.021579145108212194;
    p = p * e + -0.04903602943331087;
    p = p * e + 0.0820640445475837;
    p = p * e + -0.11266025735581357;
    p = p * e + 0.1390811223681539;
    p = p * e + -0.16586603312061807;
    p = p * e + 0.1998884676901155;
    p = p * e + -0.2499905925307419;
    p = p * e + 0.33333291535747867;
    p = p * e + -0.4999999926164341;
    p = p * e + 0.9999999999781448;
    return e * p;
}

static inline float nnc_swish_f32(float x)
{
    float y = x * nnc_sigmoid_f32(x);
    return x == -INFINITY ? -0.0f : y;
}

static inline double nnc_swish_f64(double x)
{
    double y = x * nnc_sigmoid_f64(x);
    return x == -INFINITY ? -0.0 : y;
}

static inline float nnc_gelu_tanh_f32(float x)
{
    float u2 = (float)(2 * NNC_GELU_TANH_C) * (x + (float)NNC_GELU_TANH_K * (x * x * x));
    float y = x * nnc_sigmoid_f32(u2);
    return x == -INFINITY ? -0.0f : y;
}

static inline double nnc_gelu_tanh_f64(double x)
{
    double u2 = 2 * NNC_GELU_TANH_C * (x + NNC_GELU_TANH_K * (x * x * x));
    double y = x * nnc_sigmoid_f64(u2);
    return x == -INFINITY ? -0.0 : y;
}

static inline double nnc_gelu_erf_f64(double x)
{
    double y = 0.5 * x * erfc(-x * 0.70710678118654752440);
    return x == -INFINITY ? -0.0 : y;
}

/* erfc(t) at t = -x / sqrt 2: erfc(|t|) for t >= 0, 2 - erfc(|t|) = 1 + erf(|t|) below. */
static inline float nnc_gelu_erf_f32(float x)
{
    double t = -(double)x * 0.70710678118654752440;
    double a = fabs(t);
    double small = nnc_erf_small_f64(a);
    double large = nnc_erfc_large_f64(a);
    double c = t >= 0.0 ? (a < 1.0 ? 1.0 - small : large) : (a < 1.0 ? 1.0 + small : 2.0 - large);
    float y = (float)(0.5 * (double)x * c);
    return x == -INFINITY ? -0.0f : y;
}

static inline float nnc_hard_sigmoid_f32(float x, float alpha, float beta)
{
    /* "v < 0 ? 0 : v" keeps a NaN NaN, as CPU_REF's np.maximum does. */
    float v = alpha * x + beta;
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
}

static inline double nnc_hard_sigmoid_f64(double x, double alpha, double beta)
{
    double v = alpha * x + beta;
    v = v < 0.0 ? 0.0 : v;
    return v > 1.0 ? 1.0 : v;
}

static inline float nnc_hard_swish_f32(float x)
{
    float r = x + 3.0f;
    r = r < 0.0f ? 0.0f : r;
    r = r > 6.0f ? 6.0f : r;
    /* x <= -3 gives x * 0 = -0 for finite x; -inf gets the same (not -inf * 0 = NaN). */
    return x <= -3.0f ? -0.0f : x * r / 6.0f;
}

static inline double nnc_hard_swish_f64(double x)
{
    double r = x + 3.0;
    r = r < 0.0 ? 0.0 : r;
    r = r > 6.0 ? 6.0 : r;
    return x <= -3.0 ? -0.0 : x * r / 6.0;
}

static inline float nnc_erf_f32(float x)
{
    double a = fabs((double)x);
    double y = a < 1.0 ? nnc_erf_small_f64(a) : 1.0 - nnc_erfc_large_f64(a);
    return copysignf((float)y, x);
}
static inline double nnc_erf_f64(double x) { return erf(x); }

/* The parameterised rectifiers and the smooth ones (ONNX's LeakyRelu, Elu, Selu, Celu, Softplus,
 * Softsign, Mish, ThresholdedRelu). Each is computed in double and, for float32, rounded once,
 * as CPU_REF does (float32 SOFTPLUS and MISH with exp_kernel.h's exp and the log1p fit above,
 * vectorised; the others' libm calls stay scalar): a float32 product with a parameter rounded
 * to float32 first (alpha = 0.01) would differ from CPU_REF by an ulp. a and b are the
 * command's parameters (struct fields).
 *   LEAKY_RELU(x)       = x < 0 ? a x : x                          (a: negative_slope)
 *   ELU(x)              = x < 0 ? a (e^x - 1) : x                  (a: alpha)
 *   SELU(x)             = b (x < 0 ? a (e^x - 1) : x)              (a: alpha, b: gamma)
 *   CELU(x)             = x < 0 ? a (e^(x/a) - 1) : x              (a: alpha, nonzero)
 *   SOFTPLUS(x)         = log(1 + e^x) = max(x, 0) + log1p(e^-|x|) (never overflows)
 *   SOFTSIGN(x)         = x / (1 + |x|), +-1 at +-inf (the limit, not inf / inf)
 *   MISH(x)             = x tanh(SOFTPLUS(x)), -0 at -inf (the limit, not -inf * 0)
 *   THRESHOLDED_RELU(x) = x > a ? x : 0                            (a: alpha)
 * e^x - 1 is libm's expm1 (no cancellation near 0). NaN stays NaN in all of them. Accuracy:
 * float32 within 1 ulp of CPU_REF (correctly rounded but for double-rounding ties and, for
 * SOFTPLUS and MISH, the fits' < 1e-9 relative error); float64 within 4 ulp of CPU_REF
 * (glibc's expm1, log1p and tanh against NumPy's SIMD ones). */
static inline double nnc_leaky_relu_f64(double x, double a) { return x < 0.0 ? a * x : x; }
static inline double nnc_elu_f64(double x, double a) { return x < 0.0 ? a * expm1(x) : x; }
static inline double nnc_selu_f64(double x, double a, double b)
{
    return b * (x < 0.0 ? a * expm1(x) : x);
}
static inline double nnc_celu_f64(double x, double a) { return x < 0.0 ? a * expm1(x / a) : x; }
static inline double nnc_softplus_f64(double x)
{
    return (x > 0.0 ? x : 0.0) + log1p(exp(-fabs(x)));
}
static inline double nnc_softsign_f64(double x)
{
    return fabs(x) == INFINITY ? copysign(1.0, x) : x / (1.0 + fabs(x));
}
static inline double nnc_mish_f64(double x)
{
    return x == -INFINITY ? -0.0 : x * tanh(nnc_softplus_f64(x));
}
/* float32 SOFTPLUS and MISH in double with exp_kernel.h's exp and the log1p above (vectorised).
   MISH: with e = e^-|x|, tanh(log(1 + e^x)) = w / (w + 2), w = e (e + 2), for x <= 0 and
   (1 + 2e) / (1 + 2e + 2e^2) above: sums of positive terms, no cancellation. */
static inline float nnc_softplus_f32(float x)
{
    double e = nnc_exp_f64(-fabs((double)x));
    return (float)((x > 0.0f ? (double)x : 0.0) + nnc_log1p_unit_f64(e));
}
static inline float nnc_mish_f32(float x)
{
    double e = nnc_exp_f64(-fabs((double)x));
    double w = e * (e + 2.0);
    double num = x > 0.0f ? 1.0 + 2.0 * e : w;
    double den = x > 0.0f ? 1.0 + 2.0 * e + 2.0 * e * e : w + 2.0;
    float y = (float)((double)x * (num / den));
    return x == -INFINITY ? -0.0f : y;
}
static inline double nnc_thresholded_relu_f64(double x, double a)
{
    /* "x <= a" is false for NaN, so NaN passes through (as CPU_REF keeps it). */
    return x <= a ? 0.0 : x;
}

/* ---- CPU_OPT loops: y[i] = f(x[i]) for i < n (y may be x). */

enum { NNC_ACT_SWISH, NNC_ACT_GELU, NNC_ACT_GELU_TANH, NNC_ACT_HARD_SWISH, NNC_ACT_HARD_SIGMOID,
       NNC_ACT_ERF, NNC_ACT_LEAKY_RELU, NNC_ACT_ELU, NNC_ACT_SELU, NNC_ACT_CELU, NNC_ACT_SOFTPLUS,
       NNC_ACT_SOFTSIGN, NNC_ACT_MISH, NNC_ACT_THRESHOLDED_RELU };

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define NNC_ACT_X86 1
#define NNC_ACT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#define NNC_ACT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

/* One loop per function and ISA, so each vectorises on its own (a switch inside would not). */
#define NNC_ACT_LOOPS(T, SFX, ISA, TARGET)                                                      \
    TARGET static void nnc_act_swish_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)              \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_swish_##SFX(x[i]); }                        \
    TARGET static void nnc_act_gelu_tanh_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)          \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_gelu_tanh_##SFX(x[i]); }                    \
    TARGET static void nnc_act_hard_swish_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)         \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_hard_swish_##SFX(x[i]); }                   \
    TARGET static void nnc_act_hard_sigmoid_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n,       \
                                                         T alpha, T beta)                      \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_hard_sigmoid_##SFX(x[i], alpha, beta); }    \
    TARGET static void nnc_act_leaky_relu_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n, double a) \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = (T)nnc_leaky_relu_f64(x[i], a); }               \
    TARGET static void nnc_act_thresholded_relu_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n,   \
                                                             double a)                         \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = (T)nnc_thresholded_relu_f64(x[i], a); }         \
    TARGET static void nnc_act_softsign_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)           \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = (T)nnc_softsign_f64(x[i]); }                    \
    TARGET static void nnc_act_gelu_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)               \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_gelu_erf_##SFX(x[i]); }                     \
    TARGET static void nnc_act_erf_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)                \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_erf_##SFX(x[i]); }                          \
    TARGET static void nnc_act_softplus_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)           \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_softplus_##SFX(x[i]); }                     \
    TARGET static void nnc_act_mish_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)               \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_mish_##SFX(x[i]); }                         \
    static void nnc_act_##SFX##_##ISA(int op, T* y, const T* x, ptrdiff_t n, double a, double b) \
    {                                                                                          \
        ptrdiff_t i;                                                                           \
        switch (op) {                                                                          \
        case NNC_ACT_SWISH: nnc_act_swish_##SFX##_##ISA(y, x, n); break;                       \
        case NNC_ACT_GELU_TANH: nnc_act_gelu_tanh_##SFX##_##ISA(y, x, n); break;               \
        case NNC_ACT_HARD_SWISH: nnc_act_hard_swish_##SFX##_##ISA(y, x, n); break;             \
        case NNC_ACT_HARD_SIGMOID: nnc_act_hard_sigmoid_##SFX##_##ISA(y, x, n, (T)a, (T)b);    \
            break;                                                                             \
        case NNC_ACT_GELU: nnc_act_gelu_##SFX##_##ISA(y, x, n); break;                         \
        case NNC_ACT_LEAKY_RELU: nnc_act_leaky_relu_##SFX##_##ISA(y, x, n, a); break;          \
        case NNC_ACT_THRESHOLDED_RELU: nnc_act_thresholded_relu_##SFX##_##ISA(y, x, n, a);     \
            break;                                                                             \
        case NNC_ACT_SOFTSIGN: nnc_act_softsign_##SFX##_##ISA(y, x, n); break;                 \
        /* libm's expm1: scalar calls, one loop each. */                                       \
        case NNC_ACT_ELU: for (i = 0; i < n; i++) y[i] = (T)nnc_elu_f64(x[i], a); break;       \
        case NNC_ACT_SELU: for (i = 0; i < n; i++) y[i] = (T)nnc_selu_f64(x[i], a, b); break;  \
        case NNC_ACT_CELU: for (i = 0; i < n; i++) y[i] = (T)nnc_celu_f64(x[i], a); break;     \
        case NNC_ACT_SOFTPLUS: nnc_act_softplus_##SFX##_##ISA(y, x, n); break;                 \
        case NNC_ACT_MISH: nnc_act_mish_##SFX##_##ISA(y, x, n); break;                         \
        default: nnc_act_erf_##SFX##_##ISA(y, x, n); break;                                    \
        }                                                                                      \
    }

NNC_ACT_LOOPS(float, f32, base, )
NNC_ACT_LOOPS(double, f64, base, )
#ifdef NNC_ACT_X86
NNC_ACT_LOOPS(float, f32, avx2, NNC_ACT_TARGET_AVX2)
NNC_ACT_LOOPS(double, f64, avx2, NNC_ACT_TARGET_AVX2)
NNC_ACT_LOOPS(float, f32, avx512, NNC_ACT_TARGET_AVX512)
NNC_ACT_LOOPS(double, f64, avx512, NNC_ACT_TARGET_AVX512)
#endif

/* y[i] = op(x[i]) for i < n at ISA level isa (0 baseline, 1 AVX2, 2 AVX-512: nnc/base/isa.pxd);
 * a, b: the command's parameters (HARD_SIGMOID's alpha and beta, LEAKY_RELU's slope, ...). */
static void nnc_act_f32(int op, int isa, float* y, const float* x, ptrdiff_t n, double a,
                        double b)
{
#ifdef NNC_ACT_X86
    if (isa >= 2) { nnc_act_f32_avx512(op, y, x, n, a, b); return; }
    if (isa == 1) { nnc_act_f32_avx2(op, y, x, n, a, b); return; }
#endif
    (void)isa;
    nnc_act_f32_base(op, y, x, n, a, b);
}

static void nnc_act_f64(int op, int isa, double* y, const double* x, ptrdiff_t n, double a,
                        double b)
{
#ifdef NNC_ACT_X86
    if (isa >= 2) { nnc_act_f64_avx512(op, y, x, n, a, b); return; }
    if (isa == 1) { nnc_act_f64_avx2(op, y, x, n, a, b); return; }
#endif
    (void)isa;
    nnc_act_f64_base(op, y, x, n, a, b);
}

#endif
