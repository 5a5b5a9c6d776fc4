/* The element-wise elementary functions (EWFLOOR, EWCEIL, EWROUND, EWSIGN, the trigonometric
 * and hyperbolic functions and their inverses) in float32 and float64: the loops of their CPU_OPT
 * backends (cpu_opt_elementary.pyx). Definitions: nnc/cmd/elementwise/elementary.py (CPU_REF,
 * NumPy in float64).
 *
 * How, and why so:
 * - floor, ceil and rint (round half to even in the default rounding mode, ONNX's Round) are
 *   exact in every dtype; with -fno-math-errno -fno-trapping-math (setup.py) gcc makes them one
 *   rounding instruction where the ISA has one (SSE4.1 and up), so their loops are built for each
 *   ISA level (nnc/base/isa.pxd) under its target attribute and vectorise, as does sign.
 * - The trigonometric and hyperbolic functions are libm's (scalar calls). float32 ones are
 *   evaluated in double and rounded once, as CPU_REF does: correctly rounded but for rare
 *   double-rounding ties (1 ulp). float64 ones are within 2 ulp of CPU_REF (glibc's against
 *   NumPy's; both are within 1 ulp of the true value on the tests' ranges, and tan near its
 *   poles is as conditioned as the function itself).
 * Outside a domain the result is NaN, at a pole +-inf, an overflow inf (C's and NumPy's rules);
 * NaN stays NaN. */
#ifndef NNC_ELEMENTARY_KERNEL_H
#define NNC_ELEMENTARY_KERNEL_H

#include <math.h>
#include <stddef.h>

enum { NNC_EL_FLOOR, NNC_EL_CEIL, NNC_EL_ROUND, NNC_EL_SIGN, NNC_EL_SIN, NNC_EL_COS, NNC_EL_TAN,
       NNC_EL_ASIN, NNC_EL_ACOS, NNC_EL_ATAN, NNC_EL_SINH, NNC_EL_COSH, NNC_EL_ASINH,
       NNC_EL_ACOSH, NNC_EL_ATANH };

/* -1, 0 or 1; both zeros give +0 (NumPy's sign) and NaN stays NaN (it fails both compares). */
static inline float nnc_sign_f32(float x) { return x > 0 ? 1.0f : x < 0 ? -1.0f : x == x ? 0.0f : x; }
static inline double nnc_sign_f64(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x == x ? 0.0 : x; }

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define NNC_EL_X86 1
#define NNC_EL_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#define NNC_EL_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

/* The exact functions: one loop each per ISA, so each vectorises on its own. */
#define NNC_EL_EXACT_LOOPS(T, SFX, ISA, TARGET, FLOOR, CEIL, RINT)                           \
    TARGET static void nnc_el_floor_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)            \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = FLOOR(x[i]); }                               \
    TARGET static void nnc_el_ceil_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)             \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = CEIL(x[i]); }                                \
    TARGET static void nnc_el_round_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)            \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = RINT(x[i]); }                                \
    TARGET static void nnc_el_sign_##SFX##_##ISA(T* y, const T* x, ptrdiff_t n)             \
    { for (ptrdiff_t i = 0; i < n; i++) y[i] = nnc_sign_##SFX(x[i]); }                      \
    static int nnc_el_exact_##SFX##_##ISA(int op, T* y, const T* x, ptrdiff_t n)            \
    {                                                                                       \
        switch (op) {                                                                       \
        case NNC_EL_FLOOR: nnc_el_floor_##SFX##_##ISA(y, x, n); return 1;                   \
        case NNC_EL_CEIL: nnc_el_ceil_##SFX##_##ISA(y, x, n); return 1;                     \
        case NNC_EL_ROUND: nnc_el_round_##SFX##_##ISA(y, x, n); return 1;                   \
        case NNC_EL_SIGN: nnc_el_sign_##SFX##_##ISA(y, x, n); return 1;                     \
        }                                                                                   \
        return 0;                                                                           \
    }

NNC_EL_EXACT_LOOPS(float, f32, base, , floorf, ceilf, rintf)
NNC_EL_EXACT_LOOPS(double, f64, base, , floor, ceil, rint)
#ifdef NNC_EL_X86
NNC_EL_EXACT_LOOPS(float, f32, avx2, NNC_EL_TARGET_AVX2, floorf, ceilf, rintf)
NNC_EL_EXACT_LOOPS(double, f64, avx2, NNC_EL_TARGET_AVX2, floor, ceil, rint)
NNC_EL_EXACT_LOOPS(float, f32, avx512, NNC_EL_TARGET_AVX512, floorf, ceilf, rintf)
NNC_EL_EXACT_LOOPS(double, f64, avx512, NNC_EL_TARGET_AVX512, floor, ceil, rint)
#endif

/* The libm functions, one loop per function (the switch outside the loop). */
#define NNC_EL_LIBM_LOOP(T, FN) for (i = 0; i < n; i++) y[i] = (T)FN((double)x[i]); break;
#define NNC_EL_LIBM(T, SFX)                                                                 \
    static void nnc_el_libm_##SFX(int op, T* y, const T* x, ptrdiff_t n)                    \
    {                                                                                       \
        ptrdiff_t i;                                                                        \
        switch (op) {                                                                       \
        case NNC_EL_SIN: NNC_EL_LIBM_LOOP(T, sin)                                           \
        case NNC_EL_COS: NNC_EL_LIBM_LOOP(T, cos)                                           \
        case NNC_EL_TAN: NNC_EL_LIBM_LOOP(T, tan)                                           \
        case NNC_EL_ASIN: NNC_EL_LIBM_LOOP(T, asin)                                         \
        case NNC_EL_ACOS: NNC_EL_LIBM_LOOP(T, acos)                                         \
        case NNC_EL_ATAN: NNC_EL_LIBM_LOOP(T, atan)                                         \
        case NNC_EL_SINH: NNC_EL_LIBM_LOOP(T, sinh)                                         \
        case NNC_EL_COSH: NNC_EL_LIBM_LOOP(T, cosh)                                         \
        case NNC_EL_ASINH: NNC_EL_LIBM_LOOP(T, asinh)                                       \
        case NNC_EL_ACOSH: NNC_EL_LIBM_LOOP(T, acosh)                                       \
        default: NNC_EL_LIBM_LOOP(T, atanh)                                                 \
        }                                                                                   \
    }

NNC_EL_LIBM(float, f32)
NNC_EL_LIBM(double, f64)

/* y[i] = op(x[i]) for i < n at ISA level isa (0 baseline, 1 AVX2, 2 AVX-512). */
static void nnc_elementary_f32(int op, int isa, float* y, const float* x, ptrdiff_t n)
{
#ifdef NNC_EL_X86
    if (isa >= 2 && nnc_el_exact_f32_avx512(op, y, x, n)) return;
    if (isa == 1 && nnc_el_exact_f32_avx2(op, y, x, n)) return;
#endif
    (void)isa;
    if (!nnc_el_exact_f32_base(op, y, x, n))
        nnc_el_libm_f32(op, y, x, n);
}

static void nnc_elementary_f64(int op, int isa, double* y, const double* x, ptrdiff_t n)
{
#ifdef NNC_EL_X86
    if (isa >= 2 && nnc_el_exact_f64_avx512(op, y, x, n)) return;
    if (isa == 1 && nnc_el_exact_f64_avx2(op, y, x, n)) return;
#endif
    (void)isa;
    if (!nnc_el_exact_f64_base(op, y, x, n))
        nnc_el_libm_f64(op, y, x, n);
}

#endif
