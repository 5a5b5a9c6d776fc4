/* nnc's vectorisable exp, log, sigmoid and tanh, one element at a time (float32 and float64),
 * written only with arithmetic, selects and integer bit operations on the float representation,
 * so a loop calling them vectorises at -O3 (libm's expf/logf are scalar calls, which do not).
 * Used by the element-wise family's CPU_OPT loops (cpu_opt_unary.pyx: EWEXP, EWLOG, SIGMOID,
 * TANH; act_kernel.h: SWISH, GELU) and by whatever kernel applies them as an epilogue.
 *
 * exp: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 split in two so n * ln2_hi is exact), then
 * exp(x) = 2^n (1 + q) where q = expm1(r) is a polynomial in r, and 2^n is made from its exponent
 * bits as two factors 2^(n/2) 2^(n - n/2) so subnormal results and overflow round once. log: x =
 * 2^k m with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with s = (m - 1)/(m + 1), an odd series
 * in s, and log x = k ln2 + log m. Special values (inf, NaN, 0, negative, subnormal inputs) are
 * fixed up with selects at the end, as NumPy gives them. Accuracy (tests/cmd/test_cmd_ops.py
 * checks it against float64 NumPy over the whole range): float32 within 2 ulp, float64 within
 * 2 ulp.
 *
 * Static functions only: compiled into each extension that includes the header, under the
 * caller's target attributes. */
#ifndef NNC_EXP_KERNEL_H
#define NNC_EXP_KERNEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t nnc_f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float nnc_u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static inline uint64_t nnc_d2u(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
static inline double nnc_u2d(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }

/* The one reduction of float32 exp: x = n ln2 + r (|r| <= ln2 / 2), returns expm1(r) and sets
   *n. Valid while x / ln2 rounds within int32 (every caller bounds or clamps x). NaN gives a NaN
   result. */
static inline float nnc_exp_reduce_f32(float x, int32_t* n)
{
    const float magic = 12582912.0f;                 /* 1.5 * 2^23: adding it rounds */
    float t = x * 1.44269504088896341f + magic;
    float nf = t - magic;                            /* round(x / ln2), exactly */
    float r = (x - nf * 0.693359375f) - nf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;                      /* minimax expm1(r) = r + r^2 p(r) */
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    *n = (int32_t)(nnc_f2u(t) - nnc_f2u(magic));
    return r + (r * r) * p;
}

/* 2^n as a float, for n of a normal float (-126..127). */
static inline float nnc_exp2i_f32(int32_t n) { return nnc_u2f((uint32_t)(n + 127) << 23); }

/* exp(x) = s1 * s2 * (1 + *q) with *q = expm1(r); returns nothing, fills the parts so that
   callers wanting expm1 (tanh) avoid the cancellation in exp(x) - 1. NaN gives a NaN *q. */
static inline void nnc_exp_parts_f32(float x, float* q, float* s1, float* s2)
{
    float xc = x < -104.0f ? -104.0f : x;            /* exp(-104) < 2^-150: rounds to 0 */
    xc = xc > 89.0f ? 89.0f : xc;                    /* exp(89) > FLT_MAX: inf */
    int32_t ni;
    *q = nnc_exp_reduce_f32(xc, &ni);
    int32_t n1 = ni >> 1;
    int32_t n2 = ni - n1;
    *s1 = nnc_exp2i_f32(n1);
    *s2 = nnc_exp2i_f32(n2);
}

static inline float nnc_exp_f32(float x)
{
    float q, s1, s2;
    nnc_exp_parts_f32(x, &q, &s1, &s2);
    return ((1.0f + q) * s1) * s2;
}

/* exp(x) for -87 <= x <= 88 only, where 2^n and the result are normal floats: the steps of
   nnc_exp_f32 without its clamps and with one scale factor, a quarter fewer operations for
   callers that bound their argument (act_kernel.h's erf: exp(-a^2) for a in [1, 4];
   softmax_kernel.h's exp(x - max) above -87). NaN gives NaN (through the polynomial). */
static inline float nnc_exp_bounded_f32(float x)
{
    int32_t ni;
    float q = nnc_exp_reduce_f32(x, &ni);
    return (1.0f + q) * nnc_exp2i_f32(ni);
}

/* exp(x) for -170 <= x <= 88 only: nnc_exp_f32 without its clamps, for callers whose argument
   is bounded (GELU's exp(-x^2 / 2) with x clamped at +-15). Both halves of n stay within the
   normal exponents there, so subnormal results still round once. NaN gives NaN. */
static inline float nnc_exp_unclamped_f32(float x)
{
    int32_t ni;
    float q = nnc_exp_reduce_f32(x, &ni);
    int32_t n1 = ni >> 1;
    int32_t n2 = ni - n1;
    return ((1.0f + q) * nnc_exp2i_f32(n1)) * nnc_exp2i_f32(n2);
}

static inline void nnc_exp_parts_f64(double x, double* q, double* s1, double* s2)
{
    const double magic = 6755399441055744.0;         /* 1.5 * 2^52 */
    double xc = x < -746.0 ? -746.0 : x;
    xc = xc > 710.0 ? 710.0 : xc;
    double t = xc * 1.4426950408889634 + magic;
    double n = t - magic;
    double r = (xc - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
    /* Taylor series of expm1 to r^13: the first dropped term is < 2^-58 for |r| <= ln2/2. */
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    *q = r + (r * r) * p;
    /* Halve n in floating point too: 64-bit arithmetic shifts have no SSE2/AVX2 form. */
    double h1 = (n * 0.5 + magic) - magic;
    double h2 = n - h1;
    uint64_t m = nnc_d2u(magic);
    *s1 = nnc_u2d((nnc_d2u(h1 + magic) - m + 1023u) << 52);
    *s2 = nnc_u2d((nnc_d2u(h2 + magic) - m + 1023u) << 52);
}

static inline double nnc_exp_f64(double x)
{
    double q, s1, s2;
    nnc_exp_parts_f64(x, &q, &s1, &s2);
    return ((1.0 + q) * s1) * s2;
}

static inline float nnc_log_f32(float x)
{
    int tiny = x < 1.17549435e-38f;                  /* FLT_MIN: scale subnormals up */
    float xs = tiny ? x * 8388608.0f : x;            /* 2^23, exact */
    uint32_t u = nnc_f2u(xs);
    /* k = exponent of x / sqrt(1/2); m = x / 2^k in [sqrt(1/2), sqrt(2)). */
    uint32_t ix = u - 0x3f3504f3u;
    int32_t k = (int32_t)ix >> 23;
    float m = nnc_u2f(u - (ix & 0xff800000u));
    float kf = (float)k - (tiny ? 23.0f : 0.0f);
    float f = m - 1.0f;                              /* exact */
    float s = f / (2.0f + f);
    float z = s * s;
    float p = 1.0f / 9.0f;
    p = p * z + 1.0f / 7.0f;
    p = p * z + 1.0f / 5.0f;
    p = p * z + 1.0f / 3.0f;
    float logm = 2.0f * s + (2.0f * s) * (z * p);
    float y = kf * 0.693359375f + (logm + kf * -2.12194440e-4f);
    y = x == INFINITY ? x : y;
    y = x == 0.0f ? -INFINITY : y;
    y = x < 0.0f ? NAN : y;
    return x != x ? x : y;
}

static inline double nnc_log_f64(double x)
{
    int tiny = x < 2.2250738585072014e-308;          /* DBL_MIN */
    double xs = tiny ? x * 18014398509481984.0 : x;  /* 2^54 */
    uint64_t u = nnc_d2u(xs);
    /* As for float, with the exponent biased by 1024 so a logical shift does (no 64-bit
       arithmetic shift or int64 -> double conversion before AVX-512). */
    uint64_t ix = u - 0x3fe6a09e667f3bcdu + (1024ull << 52);
    uint64_t kb = ix >> 52;
    double m = nnc_u2d(u - ((ix & 0xfff0000000000000u) - (1024ull << 52)));
    double kf = (nnc_u2d(0x4330000000000000u | kb) - (4503599627370496.0 + 1024.0))
                - (tiny ? 54.0 : 0.0);
    double f = m - 1.0;
    double s = f / (2.0 + f);
    double z = s * s;
    double p = 1.0 / 21.0;
    p = p * z + 1.0 / 19.0;
    p = p * z + 1.0 / 17.0;
    p = p * z + 1.0 / 15.0;
    p = p * z + 1.0 / 13.0;
    p = p * z + 1.0 / 11.0;
    p = p * z + 1.0 / 9.0;
    p = p * z + 1.0 / 7.0;
    p = p * z + 1.0 / 5.0;
    p = p * z + 1.0 / 3.0;
    double logm = 2.0 * s + (2.0 * s) * (z * p);
    double y = kf * 6.93147180369123816490e-01 + (logm + kf * 1.90821492927058770002e-10);
    y = x == INFINITY ? x : y;
    y = x == 0.0 ? -INFINITY : y;
    y = x < 0.0 ? NAN : y;
    return x != x ? x : y;
}

/* sigmoid: e = exp(-|x|) never overflows; 1 / (1 + e) for x >= 0, e / (1 + e) below. */
static inline float nnc_sigmoid_f32(float x)
{
    float e = nnc_exp_f32(-fabsf(x));
    float s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;
}

static inline double nnc_sigmoid_f64(double x)
{
    double e = nnc_exp_f64(-fabs(x));
    double s = 1.0 / (1.0 + e);
    return x >= 0.0 ? s : e * s;
}

/* tanh |x| = -u / (2 + u) with u = expm1(-2|x|) in (-1, 0]: no overflow, and accurate near 0
   because expm1 is formed as (2^n - 1) + 2^n q, never as exp - 1. The sign is x's. */
static inline float nnc_tanh_f32(float x)
{
    float q, s1, s2;
    nnc_exp_parts_f32(-2.0f * fabsf(x), &q, &s1, &s2);
    float s = s1 * s2;
    float u = (s - 1.0f) + s * q;
    float t = -u / (2.0f + u);
    return copysignf(t, x);
}

static inline double nnc_tanh_f64(double x)
{
    double q, s1, s2;
    nnc_exp_parts_f64(-2.0 * fabs(x), &q, &s1, &s2);
    double s = s1 * s2;
    double u = (s - 1.0) + s * q;
    double t = -u / (2.0 + u);
    return copysign(t, x);
}

#endif
