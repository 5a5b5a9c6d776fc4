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
 * - float32 erf and erfc are the fits below, evaluated in float32 (arithmetic and selects, so
 *   the loops vectorise sixteen lanes a vector under AVX-512); float64 ones are libm's (scalar
 *   calls).
 * Accuracy against CPU_REF: HARD_* within 1 ulp of the result (2 ulp of beta near a clamp
 * edge); SWISH within 3 ulp; GELU's tanh form within (3 + 4 |2u|) ulp, as the argument
 * 2u = 2 sqrt(2/pi) (x + 0.044715 x^3), rounded in its few steps, carries its relative error
 * times |2u| into exp (the function's own conditioning: any float evaluation has it); float32
 * ERF within 1 ulp and the float32 erf form within 8 ulp of the result, negative tail and
 * subnormal results included (measured over every float32 of [-6, 6] for ERF, beyond which it
 * is exactly +-1, and of [-16, 16] for GELU, beyond which it is x or -0, at each ISA level:
 * 1 and 7 ulp; tests/cmd/elementwise/test_activation.py sweeps [-16, 16] at 2^-12 and random bit
 * patterns at each ISA level), and the float64 erf form as CPU_REF to the bit. */
#ifndef NNC_ACT_KERNEL_H
#define NNC_ACT_KERNEL_H

#include <math.h>
#include <stddef.h>

#include "cmd/elementwise/exp_kernel.h"

#define NNC_GELU_TANH_C 0.7978845608028654      /* sqrt(2 / pi) */
#define NNC_GELU_TANH_K 0.044715

/* float32 erf and erfc in float32 arithmetic, selects and integer bit operations only, so the
 * loops calling them vectorise sixteen lanes a vector under AVX-512 (libm's are scalar calls;
 * evaluating in double halved the lanes and cost 3x onnxruntime). Fits with float32
 * coefficients (Lawson's minimax, each coefficient rounded and the rest refitted) to Python's
 * math.erf/erfc, relative error at most:
 *   erf(a)  = a + a P(a^2)                      0 <= a <= 1      1.5e-9  (a + a P, not a Q(a^2):
 *             Q's leading 2/sqrt(pi) would carry its own float rounding, 5e-8, into every result)
 *   erfc(a) = exp(-a^2) Q(1 / (1 + a / 2))      0 <= a <= 10.5   7.1e-9  (beyond, exp(-a^2) is
 *             below float32's smallest subnormal and any result is 0)
 * a^2 is formed exactly as hi + lo (an FMA where the ISA level has one, Dekker's product
 * otherwise) and exp(-a^2) as exp(-hi) (1 - lo): a rounded a^2 would carry a^2 ulp of error
 * (100 ulp at a = 10) into the result. What remains is the float evaluation: exp_kernel.h's exp
 * (2 ulp), Horner's roundings and the final products. Measured over every float32 of [-6, 6]
 * and GELU's every float of [-16, 16] against libm's erf/erfc in double at each ISA level
 * (docs/commands.md has the numbers; tests/cmd/elementwise/test_activation.py checks them). */
static inline float nnc_erf_small_f32(float a)
{
    float z = a * a;
    float p = 7.806903158780187e-05f;
    p = p * z + -0.0007997853099368513f;
    p = p * z + 0.005187162198126316f;
    p = p * z + -0.026853347197175026f;
    p = p * z + 0.11283578723669052f;
    p = p * z + -0.3761262595653534f;
    p = p * z + 0.12837916612625122f;
    return a + a * p;
}

/* Q(a) of erfc(a) = exp(-a^2) Q(a), for a >= 0 (a clamped at 10.5; NaN stays NaN). */
static inline float nnc_erfc_q_f32(float a)
{
    float ac = a > 10.5f ? 10.5f : a;
    float v = 1.0f / (1.0f + 0.5f * ac);
    float q = 0.026341676712036133f;
    q = q * v + -0.20184658467769623f;
    q = q * v + 0.6205275058746338f;
    q = q * v + -0.9375567436218262f;
    q = q * v + 0.6575831770896912f;
    q = q * v + -0.23591174185276031f;
    q = q * v + 0.2788902223110199f;
    q = q * v + 0.22507499158382416f;
    q = q * v + 0.28502047061920166f;
    q = q * v + 0.28186947107315063f;
    return q * v + 7.548555004177615e-06f;
}

/* hi = a * a rounded, *lo = a * a - hi exactly. fma is a constant at each call (1 in the loops
 * built for AVX2 and AVX-512, where fmaf is one instruction; 0 in the baseline loops, where it
 * would be a libm call): Dekker's product with Veltkamp's 12-bit split there, exact while
 * 4097 a is finite. Without an FMA unit gcc cannot contract those steps, which would break
 * them. */
static inline float nnc_square_f32(float a, float* lo, int fma)
{
    float hi = a * a;
    if (fma) {
        *lo = fmaf(a, a, -hi);
    } else {
        float c = 4097.0f * a;
        float ah = c - (c - a);
        float al = a - ah;
        *lo = ((ah * ah - hi) + 2.0f * ah * al) + al * al;
    }
    return hi;
}

/* log1p(e) = e L(e) for e in [0, 1] (NaN for NaN), evaluated in double so the fit's error
 * (2.2e-11 relative, a least-squares fit to Python's math.log1p) stays far under float32's ulp
 * and SOFTPLUS and MISH round once: arithmetic only, so their loops vectorise. */
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

/* Always inlined: sgemm_kernel.h's tiles apply it in their epilogue, and gcc's growth limits
 * once left it out of line in CONVOLUTION's extension, a copy compiled for the baseline ISA
 * (no FMA) whose bits differ from the SWISH command's (tests/cmd/test_conv_swish.py). */
static inline __attribute__((always_inline)) float nnc_swish_f32(float x)
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

static inline double nnc_gelu_erf_f64(double x, int fma)
{
    (void)fma;
    double y = 0.5 * x * erfc(-x * 0.70710678118654752440);
    return x == -INFINITY ? -0.0 : y;
}

/* x / 2 erfc(t) at t = -x / sqrt 2, a = |t|, with erfc(a) = exp(-a^2) Q(a) on both sides: for
 * x < 0 (t > 0) erfc(a) directly, as (x / 2 Q(a) (1 - lo)) exp(-hi) with the exponential last,
 * so a subnormal result rounds once; for x >= 0 1 + erf(a) = 2 - erfc(a), which cancels
 * nothing (erfc(a) <= 1). No erf(a) is needed, and no select between fits. t^2 = x^2 / 2 comes
 * exactly from x^2 (a rounded a would carry 2 t^2 half-ulps into exp). x is clamped at +-15 for
 * the square: beyond, exp(-t^2) is 0 in float32 (and +-inf would give inf - inf in lo). NaN
 * stays NaN (it passes the clamps and makes q NaN). */
static inline float nnc_gelu_erf_f32(float x, int fma)
{
    float xc = x < -15.0f ? -15.0f : x;
    xc = xc > 15.0f ? 15.0f : xc;
    float lo;
    float hi = 0.5f * nnc_square_f32(xc, &lo, fma);
    lo *= 0.5f;
    float q = nnc_erfc_q_f32(fabsf(x) * 0.70710678118654752f);
    q = q - q * lo;
    float e = nnc_exp_unclamped_f32(-hi);
    /* The negative side from xc: below -15 (-inf included) it is (-7.5 q) 0 = -0, the limit,
       where x would give -inf * 0 = NaN. */
    return x < 0.0f ? ((0.5f * xc) * q) * e : (0.5f * x) * (2.0f - q * e);
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

/* Always inlined, as nnc_swish_f32 (above) and for its reason. */
static inline __attribute__((always_inline)) float nnc_hard_swish_f32(float x)
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

/* erf(|x|) = |x| + |x| P(x^2) below 1; from 1 on 1 - exp(-x^2) R(|x| - 5/2), R a fit of
 * degree 7 (float32 coefficients, minimax) to erfc's absolute error on [1, 4], 1.4e-8, a
 * quarter of an ulp of the result: no division and no exact square (a^2's rounding moves
 * erfc by at most 5e-9 there). |x| is clamped at 4: erfc(3.92) < 2^-25, so 1 - erfc rounds to
 * 1 from there on (and inf gives 1). The sign is x's; NaN stays NaN (it fails every compare and
 * passes through the clamp). */
static inline float nnc_erf_f32(float x)
{
    float a = fabsf(x);
    float ac = a > 4.0f ? 4.0f : a;
    float d = ac - 2.5f;
    float r = -0.0003888728970196098f;
    r = r * d + -0.0008002808899618685f;
    r = r * d + -0.0019621725659817457f;
    r = r * d + 0.001966246170923114f;
    r = r * d + -0.00780428946018219f;
    r = r * d + 0.02515777386724949f;
    r = r * d + -0.07429973036050797f;
    r = r * d + 0.21080654859542847f;
    float large = 1.0f - nnc_exp_bounded_f32(-(ac * ac)) * r;
    float y = a < 1.0f ? nnc_erf_small_f32(a) : large;
    return copysignf(y, x);
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
#define NNC_ACT_LOOPS(T, SFX, ISA, TARGET, FMA)                                                   \
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
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_gelu_erf_##SFX(x[i], FMA); }                \
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

/* The last argument: whether fmaf is an instruction at that level (nnc_square_f32). */
NNC_ACT_LOOPS(float, f32, base, , 0)
NNC_ACT_LOOPS(double, f64, base, , 0)
#ifdef NNC_ACT_X86
NNC_ACT_LOOPS(float, f32, avx2, NNC_ACT_TARGET_AVX2, 1)
NNC_ACT_LOOPS(double, f64, avx2, NNC_ACT_TARGET_AVX2, 1)
NNC_ACT_LOOPS(float, f32, avx512, NNC_ACT_TARGET_AVX512, 1)
NNC_ACT_LOOPS(double, f64, avx512, NNC_ACT_TARGET_AVX512, 1)
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
