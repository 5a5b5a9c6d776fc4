/* SOFTMAX's CPU_OPT rows: y = exp(x - max) / sum(exp(x - max)) over each row of n elements
 * (nnc/cmd/softmax/cpu_opt.pyx says what a row is), float32 and float64, at each ISA level.
 *
 * - exp is exp_kernel.h's (arithmetic only, within 2 ulp), so the exp loop vectorises; libm's
 *   expf is a scalar call, which made a row of attention scores (197 wide) ten times slower
 *   than onnxruntime's. float32 values below 2^-126 / sum are flushed to 0 (nnc_softmax_exp_f32).
 * - The max and the sum are reductions, which gcc does not vectorise without reassociating
 *   (-ffast-math). The float32 max is written with intrinsics, one vector of lanes (maxps is
 *   exactly "a > b ? a : b", the scalar rule) folded by halves; the float32 sum adds float32
 *   lanes over blocks of 8 vectors and the blocks in double (nnc_softmax_sum_f32 below: at
 *   most 5e-7 of the sum however long the row). float64 rows (not on a model's hot path) take
 *   the max one element at a time and the sum in 8 partial sums.
 * - A row is read whole (its max) before it is written, and each later loop reads element i
 *   before writing element i: y may be x (in place).
 * - NaN: a NaN anywhere makes the sum, so the whole row, NaN, whichever element the max keeps.
 *
 * Static functions only: compiled into the extension that includes the header. */
#ifndef NNC_SOFTMAX_KERNEL_H
#define NNC_SOFTMAX_KERNEL_H

#include <math.h>
#include <stddef.h>
#include <string.h>

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

/* The same with W lanes of V (max(v, lane) = v > lane ? v : lane), the lanes folded by halves
 * (HMAX) rather than one at a time: a row of 197 spent as long on a 16-step fold as on its
 * loads. Without NaN the max is the same whatever the order; with one the row is NaN anyway
 * (the NaN reaches the sum), whichever element the fold keeps. */
#define NNC_SOFTMAX_MAX_VEC(V, W, SET1, LOADU, MAX, HMAX, ISA, TARGET)                         \
    TARGET static inline float nnc_softmax_max_f32_##ISA(const float* x, ptrdiff_t n)          \
    {                                                                                          \
        V lane = SET1(x[0]);                                                                   \
        ptrdiff_t i = 0;                                                                       \
        for (; i + W <= n; i += W) lane = MAX(LOADU(x + i), lane);                             \
        float m = HMAX(lane);                                                                  \
        for (; i < n; i++) m = x[i] > m ? x[i] : m;                                            \
        return m;                                                                              \
    }

#ifdef NNC_SOFTMAX_X86
static inline float nnc_softmax_hmax_base(__m128 v)
{
    v = _mm_max_ps(v, _mm_movehl_ps(v, v));
    v = _mm_max_ss(v, _mm_shuffle_ps(v, v, 1));
    return _mm_cvtss_f32(v);
}
NNC_SOFTMAX_TARGET_AVX2 static inline float nnc_softmax_hmax_avx2(__m256 v)
{
    return nnc_softmax_hmax_base(_mm_max_ps(_mm256_castps256_ps128(v),
                                            _mm256_extractf128_ps(v, 1)));
}
NNC_SOFTMAX_TARGET_AVX512 static inline float nnc_softmax_hmax_avx512(__m512 v)
{
    return nnc_softmax_hmax_avx2(_mm256_max_ps(_mm512_castps512_ps256(v),
                                               _mm512_extractf32x8_ps(v, 1)));
}
NNC_SOFTMAX_MAX_VEC(__m128, 4, _mm_set1_ps, _mm_loadu_ps, _mm_max_ps, nnc_softmax_hmax_base,
                    base, )
NNC_SOFTMAX_MAX_VEC(__m256, 8, _mm256_set1_ps, _mm256_loadu_ps, _mm256_max_ps,
                    nnc_softmax_hmax_avx2, avx2, NNC_SOFTMAX_TARGET_AVX2)
NNC_SOFTMAX_MAX_VEC(__m512, 16, _mm512_set1_ps, _mm512_loadu_ps, _mm512_max_ps,
                    nnc_softmax_hmax_avx512, avx512, NNC_SOFTMAX_TARGET_AVX512)
NNC_SOFTMAX_MAX_SCALAR(double, f64, avx2, NNC_SOFTMAX_TARGET_AVX2)
NNC_SOFTMAX_MAX_SCALAR(double, f64, avx512, NNC_SOFTMAX_TARGET_AVX512)
#else
NNC_SOFTMAX_MAX_SCALAR(float, f32, base, )
#endif
NNC_SOFTMAX_MAX_SCALAR(double, f64, base, )

/* The sum of y[0..n): float32 in W lanes (one register of the ISA level, GCC vector types)
 * for blocks of 8 W elements, each lane adding at most 8 values (4 ulp, 5e-7 of the block's
 * sum), the blocks added into W double lanes, so long rows lose nothing more; then the lanes
 * and the last n % W elements in double. The old loop converted each element to double and
 * added it to one vector of 8 double lanes, a dependency chain 25 adds long on a row of 197.
 * float64 rows keep 8 double partial sums, as before (not on a model's hot path). */
typedef float nnc_softmax_f32x4 __attribute__((vector_size(16)));
typedef float nnc_softmax_f32x8 __attribute__((vector_size(32)));
typedef float nnc_softmax_f32x16 __attribute__((vector_size(64)));
typedef double nnc_softmax_f64x4 __attribute__((vector_size(32)));
typedef double nnc_softmax_f64x8 __attribute__((vector_size(64)));
typedef double nnc_softmax_f64x16 __attribute__((vector_size(128)));

#define NNC_SOFTMAX_SUM_F32(W, ISA, TARGET)                                                    \
    TARGET static inline double nnc_softmax_sum_f32_##ISA(const float* y, ptrdiff_t n)        \
    {                                                                                          \
        nnc_softmax_f64x##W total = {0};                                                       \
        ptrdiff_t i = 0;                                                                       \
        while (i + W <= n) {                                                                   \
            nnc_softmax_f32x##W acc = {0}, v;                                                  \
            ptrdiff_t end = n - i > 8 * W ? i + 8 * W : n;                                     \
            for (; i + W <= end; i += W) {                                                     \
                memcpy(&v, y + i, sizeof v);                                                   \
                acc += v;                                                                      \
            }                                                                                  \
            total += __builtin_convertvector(acc, nnc_softmax_f64x##W);                        \
        }                                                                                      \
        double s = 0.0;                                                                        \
        for (int j = 0; j < W; j++) s += total[j];                                             \
        for (; i < n; i++) s += (double)y[i];                                                  \
        return s;                                                                              \
    }                                                                                          \
    TARGET static inline double nnc_softmax_sum_f64_##ISA(const double* y, ptrdiff_t n)       \
    {                                                                                          \
        double acc[8], s = 0.0;                                                                \
        ptrdiff_t i;                                                                           \
        for (int j = 0; j < 8; j++) acc[j] = 0.0;                                              \
        for (i = 0; i + 8 <= n; i += 8) {                                                      \
            _Pragma("GCC unroll 8")                                                            \
            for (int j = 0; j < 8; j++) acc[j] += y[i + j];                                    \
        }                                                                                      \
        for (int j = 0; j < 8; j++) s += acc[j];                                               \
        for (; i < n; i++) s += y[i];                                                          \
        return s;                                                                              \
    }

/* exp(d) for d = x - max <= 0 (or NaN): exp_kernel.h's exp without its clamps and with one
 * scale factor, 0 below d = -87, where the result would be under 2^-126: a softmax value the
 * row's sum (>= 1) divides, so flushing it moves the output by less than 1.2e-38. NaN passes
 * (it fails the compare and stays NaN through the polynomial). */
static inline float nnc_softmax_exp_f32(float d)
{
    return d < -87.0f ? 0.0f : nnc_exp_bounded_f32(d);
}
static inline double nnc_softmax_exp_f64(double d) { return nnc_exp_f64(d); }

/* Two passes over a row: its max, then exp(x - max) written to y, summed, and y scaled in
 * place (the sum and the scale read what the exp loop just wrote, still in L1). */
#define NNC_SOFTMAX_ROWS(T, SFX, ISA, TARGET)                                               \
    TARGET static void nnc_softmax_##SFX##_##ISA(T* y, const T* x, ptrdiff_t rows, ptrdiff_t n) \
    {                                                                                          \
        for (ptrdiff_t r = 0; r < rows; r++) {                                                 \
            const T* xr = x + r * n;                                                           \
            T* yr = y + r * n;                                                                 \
            ptrdiff_t i;                                                                       \
            T m = nnc_softmax_max_##SFX##_##ISA(xr, n);                                        \
            for (i = 0; i < n; i++) yr[i] = nnc_softmax_exp_##SFX(xr[i] - m);                  \
            T inv = (T)(1.0 / nnc_softmax_sum_##SFX##_##ISA(yr, n));                           \
            for (i = 0; i < n; i++) yr[i] = yr[i] * inv;                                       \
        }                                                                                      \
    }

NNC_SOFTMAX_SUM_F32(4, base, )
#ifdef NNC_SOFTMAX_X86
NNC_SOFTMAX_SUM_F32(8, avx2, NNC_SOFTMAX_TARGET_AVX2)
NNC_SOFTMAX_SUM_F32(16, avx512, NNC_SOFTMAX_TARGET_AVX512)
#endif

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
