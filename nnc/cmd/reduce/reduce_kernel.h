/* REDUCE_MAX's and REDUCE_MIN's loops (cpu_opt.pyx): a row reduced into one value, and a row
 * folded element by element into a row of the output (the reduced axis is an outer one).
 * Definitions: reduce/__init__.py (CPU_REF, np.max / np.min): exact, and a NaN anywhere in a
 * reduction makes its result NaN.
 *
 * How, and why so:
 * - float32 rows run in vectors at the level cpu_isa() names (nnc/base/isa.pxd): AVX-512F
 *   (16 lanes), AVX2 (8) or SSE2 (4, the x86-64 baseline), each under its own target attribute
 *   so the extension stays baseline x86-64. A row keeps two vector accumulators (independent
 *   max/min chains the CPU overlaps) and a NaN flag per lane (an unordered compare, OR-ed);
 *   a flagged row is rescanned for its first NaN, which is returned (NaN wins, and its payload
 *   is the first one's, as the scalar loop gives).
 * - Folding a row (m[j] = max(m[j], p[j])) is one vector op and one blend per vector: the
 *   hardware max returns its second operand when either is NaN, so max(m, p) is p for a NaN p,
 *   and the blend keeps m where m is already NaN.
 * - float64 and targets other than x86-64 run the scalar loops below (the same semantics).
 * Which of +0 and -0 an extreme of zeros of both signs gives is not specified (as in NumPy). */
#ifndef NNC_REDUCE_KERNEL_H
#define NNC_REDUCE_KERNEL_H

#include <stddef.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define NNC_RED_X86 1
#define NNC_RED_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define NNC_RED_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

/* The scalar loops: CMP is > for max, < for min; NaN wins (it fails both compares, so the
 * explicit test), and once m is NaN nothing replaces it. */
#define NNC_RED_SCALAR(OP, T, SFX, CMP)                                                     \
    static T nnc_red_row_##OP##_##SFX##_scalar(const T* p, ptrdiff_t n, T m)               \
    {                                                                                       \
        for (ptrdiff_t i = 0; i < n && m == m; i++)                                         \
            if (p[i] CMP m || p[i] != p[i])                                                 \
                m = p[i];                                                                   \
        return m;                                                                           \
    }                                                                                       \
    static void nnc_red_col_##OP##_##SFX##_scalar(T* m, const T* p, ptrdiff_t n)           \
    {                                                                                       \
        for (ptrdiff_t j = 0; j < n; j++)                                                   \
            if ((p[j] CMP m[j] || p[j] != p[j]) && m[j] == m[j])                            \
                m[j] = p[j];                                                                \
    }

NNC_RED_SCALAR(max, float, f32, >)
NNC_RED_SCALAR(min, float, f32, <)
NNC_RED_SCALAR(max, double, f64, >)
NNC_RED_SCALAR(min, double, f64, <)

#if defined(__x86_64__)
/* One vector ISA's float32 loops. V: the vector type, W its lanes, M the NaN-flag type (a
 * vector, or AVX-512's mask); LOAD/STORE unaligned; VOP the max/min instruction; UNORD(v) the
 * lanes where v is NaN; MOR, MZERO, MANY on flags; BLEND(a, b, m): b where m, else a. */
#define NNC_RED_VEC(OP, ISA, TARGET, V, W, M, LOAD, STORE, SET1, VOP, UNORD, MOR, MZERO, MANY,   \
                    BLEND, CMP)                                                             \
    TARGET static float nnc_red_row_##OP##_f32_##ISA(const float* p, ptrdiff_t n, float m)  \
    {                                                                                       \
        ptrdiff_t i = 0;                                                                    \
        if (m != m || n < (W))                                                              \
            return nnc_red_row_##OP##_f32_scalar(p, n, m);                                  \
        V a0 = SET1(m), a1 = a0;                                                            \
        M f0 = MZERO, f1 = MZERO;                                                           \
        for (; i + 2 * (W) <= n; i += 2 * (W)) {                                            \
            V v0 = LOAD(p + i), v1 = LOAD(p + i + (W));                                     \
            a0 = VOP(a0, v0);                                                               \
            a1 = VOP(a1, v1);                                                               \
            f0 = MOR(f0, UNORD(v0));                                                        \
            f1 = MOR(f1, UNORD(v1));                                                        \
        }                                                                                   \
        for (; i + (W) <= n; i += (W)) {                                                    \
            V v0 = LOAD(p + i);                                                             \
            a0 = VOP(a0, v0);                                                               \
            f0 = MOR(f0, UNORD(v0));                                                        \
        }                                                                                   \
        if (MANY(MOR(f0, f1)))                                                              \
            return nnc_red_row_##OP##_f32_scalar(p, i, m);  /* the first NaN */            \
        float lanes[W];                                                                     \
        STORE(lanes, VOP(a0, a1));                                                          \
        for (int k = 0; k < (W); k++)                                                       \
            if (lanes[k] CMP m)                                                             \
                m = lanes[k];                                                               \
        return nnc_red_row_##OP##_f32_scalar(p + i, n - i, m);                              \
    }                                                                                       \
    TARGET static void nnc_red_col_##OP##_f32_##ISA(float* m, const float* p, ptrdiff_t n)  \
    {                                                                                       \
        ptrdiff_t j = 0;                                                                    \
        for (; j + (W) <= n; j += (W)) {                                                    \
            V a = LOAD(m + j);                                                              \
            STORE(m + j, BLEND(VOP(a, LOAD(p + j)), a, UNORD(a)));                          \
        }                                                                                   \
        nnc_red_col_##OP##_f32_scalar(m + j, p + j, n - j);                                 \
    }

#define NNC_RED_SSE_UNORD(v) _mm_cmpunord_ps(v, v)
#define NNC_RED_SSE_ANY(f) (_mm_movemask_ps(f) != 0)
#define NNC_RED_SSE_BLEND(a, b, m) _mm_or_ps(_mm_and_ps(m, b), _mm_andnot_ps(m, a))
NNC_RED_VEC(max, sse2, , __m128, 4, __m128, _mm_loadu_ps, _mm_storeu_ps, _mm_set1_ps, _mm_max_ps,
            NNC_RED_SSE_UNORD, _mm_or_ps, _mm_setzero_ps(), NNC_RED_SSE_ANY, NNC_RED_SSE_BLEND, >)
NNC_RED_VEC(min, sse2, , __m128, 4, __m128, _mm_loadu_ps, _mm_storeu_ps, _mm_set1_ps, _mm_min_ps,
            NNC_RED_SSE_UNORD, _mm_or_ps, _mm_setzero_ps(), NNC_RED_SSE_ANY, NNC_RED_SSE_BLEND, <)
#endif

#ifdef NNC_RED_X86
#define NNC_RED_AVX2_UNORD(v) _mm256_cmp_ps(v, v, _CMP_UNORD_Q)
#define NNC_RED_AVX2_ANY(f) (_mm256_movemask_ps(f) != 0)
NNC_RED_VEC(max, avx2, NNC_RED_TARGET_AVX2, __m256, 8, __m256, _mm256_loadu_ps, _mm256_storeu_ps,
            _mm256_set1_ps, _mm256_max_ps, NNC_RED_AVX2_UNORD, _mm256_or_ps, _mm256_setzero_ps(),
            NNC_RED_AVX2_ANY, _mm256_blendv_ps, >)
NNC_RED_VEC(min, avx2, NNC_RED_TARGET_AVX2, __m256, 8, __m256, _mm256_loadu_ps, _mm256_storeu_ps,
            _mm256_set1_ps, _mm256_min_ps, NNC_RED_AVX2_UNORD, _mm256_or_ps, _mm256_setzero_ps(),
            NNC_RED_AVX2_ANY, _mm256_blendv_ps, <)

#define NNC_RED_512_UNORD(v) _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)
#define NNC_RED_512_OR(a, b) ((__mmask16)((a) | (b)))
#define NNC_RED_512_ANY(f) ((f) != 0)
#define NNC_RED_512_BLEND(a, b, m) _mm512_mask_blend_ps(m, a, b)
NNC_RED_VEC(max, avx512, NNC_RED_TARGET_AVX512, __m512, 16, __mmask16, _mm512_loadu_ps,
            _mm512_storeu_ps, _mm512_set1_ps, _mm512_max_ps, NNC_RED_512_UNORD, NNC_RED_512_OR,
            (__mmask16)0, NNC_RED_512_ANY, NNC_RED_512_BLEND, >)
NNC_RED_VEC(min, avx512, NNC_RED_TARGET_AVX512, __m512, 16, __mmask16, _mm512_loadu_ps,
            _mm512_storeu_ps, _mm512_set1_ps, _mm512_min_ps, NNC_RED_512_UNORD, NNC_RED_512_OR,
            (__mmask16)0, NNC_RED_512_ANY, NNC_RED_512_BLEND, <)
#endif

/* The entry points: isa is nnc/base/isa.pxd's level (0 baseline, 1 AVX2, 2 AVX-512); is_max
 * picks max (1) or min (0). */
static float nnc_red_row_f32(int isa, int is_max, const float* p, ptrdiff_t n, float m)
{
#ifdef NNC_RED_X86
    if (isa >= 2)
        return is_max ? nnc_red_row_max_f32_avx512(p, n, m) : nnc_red_row_min_f32_avx512(p, n, m);
    if (isa == 1)
        return is_max ? nnc_red_row_max_f32_avx2(p, n, m) : nnc_red_row_min_f32_avx2(p, n, m);
#endif
#if defined(__x86_64__)
    (void)isa;
    return is_max ? nnc_red_row_max_f32_sse2(p, n, m) : nnc_red_row_min_f32_sse2(p, n, m);
#else
    (void)isa;
    return is_max ? nnc_red_row_max_f32_scalar(p, n, m) : nnc_red_row_min_f32_scalar(p, n, m);
#endif
}

static void nnc_red_col_f32(int isa, int is_max, float* m, const float* p, ptrdiff_t n)
{
#ifdef NNC_RED_X86
    if (isa >= 2) {
        if (is_max) nnc_red_col_max_f32_avx512(m, p, n); else nnc_red_col_min_f32_avx512(m, p, n);
        return;
    }
    if (isa == 1) {
        if (is_max) nnc_red_col_max_f32_avx2(m, p, n); else nnc_red_col_min_f32_avx2(m, p, n);
        return;
    }
#endif
    (void)isa;
#if defined(__x86_64__)
    if (is_max) nnc_red_col_max_f32_sse2(m, p, n); else nnc_red_col_min_f32_sse2(m, p, n);
#else
    if (is_max) nnc_red_col_max_f32_scalar(m, p, n); else nnc_red_col_min_f32_scalar(m, p, n);
#endif
}

/* a[j] += p[j] for j < n: a float32 row added into double accumulators (REDUCE_SUM and
 * REDUCE_MEAN over an outer axis: an NHWC image's global average pool, the squeeze of a
 * squeeze-and-excitation block). Each float converts to double exactly and is added once, in
 * the scalar loop's order, so every level gives the scalar loop's bits; the baseline build
 * converts two floats an instruction (SSE2), which held a pool to 10-14 GB/s. */
#ifdef NNC_RED_X86
/* One ISA's loop: W floats a step, converted half by half (HALF floats to a double vector DV). */
#define NNC_RED_COLSUM(ISA, TARGET, W, HALF, DV, CVT, LDF, LDD, STD, ADD)                       \
    TARGET static void nnc_red_colsum_f32_##ISA(double* a, const float* p, ptrdiff_t n)     \
    {                                                                                       \
        ptrdiff_t j = 0;                                                                    \
        for (; j + W <= n; j += W) {                                                        \
            DV lo = CVT(LDF(p + j)), hi = CVT(LDF(p + j + HALF));                           \
            STD(a + j, ADD(LDD(a + j), lo));                                                \
            STD(a + j + HALF, ADD(LDD(a + j + HALF), hi));                                  \
        }                                                                                   \
        for (; j < n; j++)                                                                  \
            a[j] += p[j];                                                                   \
    }
NNC_RED_COLSUM(avx512, NNC_RED_TARGET_AVX512, 16, 8, __m512d, _mm512_cvtps_pd, _mm256_loadu_ps,
               _mm512_loadu_pd, _mm512_storeu_pd, _mm512_add_pd)
NNC_RED_COLSUM(avx2, NNC_RED_TARGET_AVX2, 8, 4, __m256d, _mm256_cvtps_pd, _mm_loadu_ps,
               _mm256_loadu_pd, _mm256_storeu_pd, _mm256_add_pd)
#undef NNC_RED_COLSUM
#endif

static void nnc_red_colsum_f32(int isa, double* a, const float* p, ptrdiff_t n)
{
#ifdef NNC_RED_X86
    if (isa >= 2) {
        nnc_red_colsum_f32_avx512(a, p, n);
        return;
    }
    if (isa == 1) {
        nnc_red_colsum_f32_avx2(a, p, n);
        return;
    }
#endif
    (void)isa;
    for (ptrdiff_t j = 0; j < n; j++)
        a[j] += p[j];
}

static double nnc_red_row_f64(int is_max, const double* p, ptrdiff_t n, double m)
{
    return is_max ? nnc_red_row_max_f64_scalar(p, n, m) : nnc_red_row_min_f64_scalar(p, n, m);
}

static void nnc_red_col_f64(int is_max, double* m, const double* p, ptrdiff_t n)
{
    if (is_max) nnc_red_col_max_f64_scalar(m, p, n); else nnc_red_col_min_f64_scalar(m, p, n);
}

#endif
