/* SOFTMAX's CPU_OPT rows: y = exp(x - max) / sum(exp(x - max)) over each row of n elements
 * (nnc/cmd/softmax/cpu_opt.pyx says what a row is), float32 and float64, at each ISA level.
 *
 * - exp is exp_kernel.h's (arithmetic only, within 2 ulp), so the exp loop vectorises; libm's
 *   expf is a scalar call, which made a row of attention scores (197 wide) ten times slower
 *   than onnxruntime's.
 * - The max and the sum are reductions, which gcc does not vectorise without reassociating
 *   (-ffast-math). The float32 max is written with intrinsics, one vector of lanes (maxps is
 *   exactly "a > b ? a : b", the scalar rule); the sum keeps 8 double partial sums, combined at
 *   the end, which gcc vectorises as it is written. float64 rows (not on a model's hot path)
 *   take the max one element at a time.
 * - The sum is taken in double, also for float32, so long rows lose nothing to rounding.
 * - A row is read whole (its max) before it is written, and each later loop reads element i
 *   before writing element i: y may be x (in place).
 * - NaN: the max keeps the first element unless a later one compares greater, as the scalar
 *   loop did; a NaN anywhere makes the sum, so the whole row, NaN.
 *
 * Static functions only: compiled into the extension that includes the header. */
#ifndef NNC_SOFTMAX_KERNEL_H
#define NNC_SOFTMAX_KERNEL_H

#include <stddef.h>

#include "cmd/elementwise/exp_kernel.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define NNC_SOFTMAX_X86 1
#define NNC_SOFTMAX_TARGET_AVX512 \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#define NNC_SOFTMAX_TARGET_AVX2 __attribute__((target("avx2,fma")))
#include <immintrin.h>
#endif

/* The max of x[0..n), n >= 1: the first element unless a later one compares greater. */
#define NNC_SOFTMAX_MAX_SCALAR(T, SFX, ISA, TARGET)                                            \
    TARGET static inline T nnc_softmax_max_##SFX##_##ISA(const T* x, ptrdiff_t n)              \
    {                                                                                          \
        T m = x[0];                                                                            \
        for (ptrdiff_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;                             \
        return m;                                                                              \
    }

/* The same with W lanes of V (max(v, lane) = v > lane ? v : lane), lanes folded in order. */
#define NNC_SOFTMAX_MAX_VEC(V, W, SET1, LOADU, MAX, STOREU, ISA, TARGET)                       \
    TARGET static inline float nnc_softmax_max_f32_##ISA(const float* x, ptrdiff_t n)          \
    {                                                                                          \
        V lane = SET1(x[0]);                                                                   \
        float t[W];                                                                            \
        ptrdiff_t i = 0;                                                                       \
        for (; i + W <= n; i += W) lane = MAX(LOADU(x + i), lane);                             \
        STOREU(t, lane);                                                                       \
        float m = x[0];                                                                        \
        for (int j = 0; j < W; j++) m = t[j] > m ? t[j] : m;                                   \
        for (; i < n; i++) m = x[i] > m ? x[i] : m;                                            \
        return m;                                                                              \
    }

#ifdef NNC_SOFTMAX_X86
NNC_SOFTMAX_MAX_VEC(__m128, 4, _mm_set1_ps, _mm_loadu_ps, _mm_max_ps, _mm_storeu_ps, base, )
NNC_SOFTMAX_MAX_VEC(__m256, 8, _mm256_set1_ps, _mm256_loadu_ps, _mm256_max_ps, _mm256_storeu_ps,
                    avx2, NNC_SOFTMAX_TARGET_AVX2)
NNC_SOFTMAX_MAX_VEC(__m512, 16, _mm512_set1_ps, _mm512_loadu_ps, _mm512_max_ps,
                    _mm512_storeu_ps, avx512, NNC_SOFTMAX_TARGET_AVX512)
NNC_SOFTMAX_MAX_SCALAR(double, f64, avx2, NNC_SOFTMAX_TARGET_AVX2)
NNC_SOFTMAX_MAX_SCALAR(double, f64, avx512, NNC_SOFTMAX_TARGET_AVX512)
#else
NNC_SOFTMAX_MAX_SCALAR(float, f32, base, )
#endif
NNC_SOFTMAX_MAX_SCALAR(double, f64, base, )

/* 8 double lanes for the sum. */
#define NNC_SOFTMAX_ROWS(T, SFX, ISA, TARGET)                                               \
    TARGET static void nnc_softmax_##SFX##_##ISA(T* y, const T* x, ptrdiff_t rows, ptrdiff_t n) \
    {                                                                                          \
        for (ptrdiff_t r = 0; r < rows; r++) {                                                 \
            const T* xr = x + r * n;                                                           \
            T* yr = y + r * n;                                                                 \
            double acc[8];                                                                     \
            ptrdiff_t i;                                                                       \
            T m = nnc_softmax_max_##SFX##_##ISA(xr, n);                                        \
            for (i = 0; i < n; i++) yr[i] = nnc_exp_##SFX(xr[i] - m);                          \
            for (int j = 0; j < 8; j++) acc[j] = 0.0;                                          \
            for (i = 0; i + 8 <= n; i += 8) {                                                  \
                _Pragma("GCC unroll 8")                                                        \
                for (int j = 0; j < 8; j++) acc[j] += (double)yr[i + j];                       \
            }                                                                                  \
            double total = 0.0;                                                                \
            for (int j = 0; j < 8; j++) total += acc[j];                                       \
            for (; i < n; i++) total += (double)yr[i];                                         \
            T inv = (T)(1.0 / total);                                                          \
            for (i = 0; i < n; i++) yr[i] = yr[i] * inv;                                       \
        }                                                                                      \
    }

NNC_SOFTMAX_ROWS(float, f32, base, )
NNC_SOFTMAX_ROWS(double, f64, base, )
#ifdef NNC_SOFTMAX_X86
NNC_SOFTMAX_ROWS(float, f32, avx2, NNC_SOFTMAX_TARGET_AVX2)
NNC_SOFTMAX_ROWS(double, f64, avx2, NNC_SOFTMAX_TARGET_AVX2)
NNC_SOFTMAX_ROWS(float, f32, avx512, NNC_SOFTMAX_TARGET_AVX512)
NNC_SOFTMAX_ROWS(double, f64, avx512, NNC_SOFTMAX_TARGET_AVX512)
#endif

/* SOFTMAX of rows x n elements at ISA level isa (0 baseline, 1 AVX2, 2 AVX-512:
 * nnc/base/isa.pxd). */
static void nnc_softmax_f32(int isa, float* y, const float* x, ptrdiff_t rows, ptrdiff_t n)
{
#ifdef NNC_SOFTMAX_X86
    if (isa >= 2) { nnc_softmax_f32_avx512(y, x, rows, n); return; }
    if (isa == 1) { nnc_softmax_f32_avx2(y, x, rows, n); return; }
#endif
    (void)isa;
    nnc_softmax_f32_base(y, x, rows, n);
}

static void nnc_softmax_f64(int isa, double* y, const double* x, ptrdiff_t rows, ptrdiff_t n)
{
#ifdef NNC_SOFTMAX_X86
    if (isa >= 2) { nnc_softmax_f64_avx512(y, x, rows, n); return; }
    if (isa == 1) { nnc_softmax_f64_avx2(y, x, rows, n); return; }
#endif
    (void)isa;
    nnc_softmax_f64_base(y, x, rows, n);
}

#endif
