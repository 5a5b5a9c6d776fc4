/* nnc's float32 GEMM over packed weights: C[m, n] = act(sum_k A[m, k] * B[k, n] + bias[n]
 * + residual[m, n]), the hot path of CONVOLUTION and GEMM on CPU.
 *
 * Why by hand (docs/kernels.md): OpenBLAS re-packs B on every call (for a convolution B is
 * the weights, constant run after run, so that cost never needs to recur) and reaches ~80 % of
 * the FMA peak on the thin products convolutions make (N = 32-448); a register-blocked tile
 * over B packed once reaches ~90-98 % on the same shapes, takes A rows by pointer (a pixel of
 * an NHWC input, or a row of an im2col patch: no copy for 1x1 convolutions), and applies
 * bias, residual add and the activation (ReLU, clamp, HardSwish, SiLU) while the tile is
 * still in registers.
 *
 * Layout. B is packed in panels of NR columns: panel p holds, for k = 0..K-1, the NR values
 * B[k, p*NR .. p*NR+NR-1] (zero past N), so one tile step loads NR consecutive outputs'
 * weights with aligned-size vector loads. NR and the tile's row count MR depend on the ISA
 * (nnc/base/isa.pxd): AVX-512 12x32 (24 of 32 zmm accumulate), AVX2+FMA 6x16 (12 of 16 ymm),
 * baseline 4x8 in GCC vector extensions (SSE2 on x86-64, NEON on arm64). A packed copy is
 * only valid for the NR it was packed with (nnc_sgemm_nr).
 *
 * Loop order: blocks of rows (MC, or all of them where the weights outweigh A:
 * nnc_sgemm_block_rows); in each, every panel; in each panel, every MR-row tile over the whole
 * K (measured: no K blocking is fastest for these K <= ~4k, as the panel, K*NR*4 bytes, stays
 * in L2 while a block's rows of A pass through L1/L2).
 *
 * Static functions only: the header is compiled into each extension that uses it, each kernel
 * variant under its own target attribute, so the extension stays baseline x86-64. */
#ifndef NNC_SGEMM_KERNEL_H
#define NNC_SGEMM_KERNEL_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "cmd/elementwise/act_kernel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NNC_SGEMM_X86 1
#endif

/* The epilogue's activation. HSWISH and SILU are the element-wise commands' own per-element
 * functions (act_kernel.h), so a fused convolution gives the bits the convolution followed by
 * HARD_SWISH or SWISH gives at the same ISA level. */
enum {
    NNC_ACT_NONE = 0,
    NNC_ACT_RELU = 1,                   /* max(0, v); NaN stays NaN */
    NNC_ACT_CLAMP = 2,                  /* min(max(v, lo), hi) (ReLU6: 0, 6); NaN stays NaN */
    NNC_ACT_HSWISH = 3,                 /* HARD_SWISH: nnc_hard_swish_f32 (-inf: -0) */
    NNC_ACT_SILU = 4,                   /* SWISH: x * sigmoid(x), nnc_swish_f32 (-inf: -0) */
};

/* What is applied to each tile before it is stored, in this order: + bias[n], + residual[m, n],
 * the activation. Fields are read-only during a call. */
typedef struct {
    const float* bias;                  /* N values, or NULL */
    const float* residual;              /* row m at residual + m * ldr, or NULL; may be C itself */
    ptrdiff_t ldr;
    int act;                            /* NNC_ACT_* */
    float lo, hi;                       /* NNC_ACT_CLAMP bounds (-INFINITY / INFINITY: none) */
} nnc_epilogue_t;

/* Rows of A per call, each K floats, by pointer: a[m] is row m. */
typedef const float* const* nnc_rows_t;

enum { NNC_SGEMM_MC = 48 };             /* rows per block: 4 AVX-512 tiles, 8 AVX2, 12 base */

/* Loops over a tile's rows are unrolled whole, so each accumulator is a register: left to
 * itself gcc may turn the zeroing loop into a memset, which puts the arrays in memory and
 * stores every accumulator at every k step (half the AVX2 kernel's speed). */
#define NNC_UNROLL _Pragma("GCC unroll 16")

static inline int nnc_sgemm_nr(int isa) { return isa >= 2 ? 32 : isa == 1 ? 16 : 8; }
static inline int nnc_sgemm_mr(int isa) { return isa >= 2 ? 12 : isa == 1 ? 6 : 4; }

/* Columns panel p packs for N columns: NR, or NR / 2 for a last panel of at most that many
 * (N = 48 on AVX-512: a 32 and a 16, not two 32s of which 16 columns are zeros). */
static inline ptrdiff_t nnc_sgemm_panel_width(int isa, ptrdiff_t n, ptrdiff_t p) {
    ptrdiff_t nr = nnc_sgemm_nr(isa), left = n - p * nr;
    return left >= nr ? nr : left > nr / 2 ? nr : nr / 2;
}

/* Floats a packed B of N columns and K rows takes. */
static inline size_t nnc_sgemm_packed_floats(int isa, ptrdiff_t n, ptrdiff_t k) {
    ptrdiff_t nr = nnc_sgemm_nr(isa), full = n / nr;
    return ((size_t)full * (size_t)nr
            + (n > full * nr ? (size_t)nnc_sgemm_panel_width(isa, n, full) : 0)) * (size_t)k;
}

/* Pack B[k, n] = b[k * sk + n * sn] (k < K, n < N) for isa into packed
 * (nnc_sgemm_packed_floats(isa, N, K) floats). Weights [O, K] row-major are sk = 1, sn = K.
 * Panel p starts at packed + p * NR * K (only the last may be narrower). */
static void nnc_sgemm_pack(int isa, const float* b, ptrdiff_t sk, ptrdiff_t sn, ptrdiff_t n,
                           ptrdiff_t k, float* packed) {
    ptrdiff_t nr = nnc_sgemm_nr(isa), p, kk, j, w, pw;
    for (p = 0; p < n; p += nr) {
        w = n - p < nr ? n - p : nr;
        pw = nnc_sgemm_panel_width(isa, n, p / nr);
        if (sn == 1) {
            for (kk = 0; kk < k; kk++) {
                memcpy(packed + kk * pw, b + kk * sk + p, (size_t)w * sizeof(float));
                for (j = w; j < pw; j++)
                    packed[kk * pw + j] = 0.0f;
            }
        } else {
            /* Column by column: each column of b is a contiguous run when sk == 1. */
            for (j = 0; j < pw; j++) {
                const float* col = b + (p + j) * sn;
                if (j < w) {
                    for (kk = 0; kk < k; kk++)
                        packed[kk * pw + j] = col[kk * sk];
                } else {
                    for (kk = 0; kk < k; kk++)
                        packed[kk * pw + j] = 0.0f;
                }
            }
        }
        packed += pw * k;
    }
}

/* A grouped convolution's weights: `groups` [N, K] row-major matrices one after another (group
 * g's start g * N * K floats in), each packed as nnc_sgemm_pack packs one, group g's at
 * packed + g * nnc_sgemm_packed_floats(isa, N, K). */
static void nnc_sgemm_pack_groups(int isa, const float* w, ptrdiff_t groups, ptrdiff_t n,
                                  ptrdiff_t k, float* packed) {
    size_t floats = nnc_sgemm_packed_floats(isa, n, k);
    for (ptrdiff_t g = 0; g < groups; g++)
        nnc_sgemm_pack(isa, w + g * n * k, 1, k, n, k, packed + (size_t)g * floats);
}

/* The activation on one value (scalar tails of every kernel that takes an nnc_epilogue_t). A
 * NaN v fails every compare, so it stays NaN, as the vector max/min keep it. */
static inline float nnc_act_one(const nnc_epilogue_t* ep, float v) {
    if (ep->act == NNC_ACT_RELU)
        v = v < 0.0f ? 0.0f : v;
    else if (ep->act == NNC_ACT_CLAMP) {
        v = v < ep->lo ? ep->lo : v;
        v = v > ep->hi ? ep->hi : v;
    } else if (ep->act == NNC_ACT_HSWISH)
        v = nnc_hard_swish_f32(v);
    else if (ep->act == NNC_ACT_SILU)
        v = nnc_swish_f32(v);
    return v;
}

/* NNC_ACT_HSWISH or NNC_ACT_SILU on the n values at v (a vector stored there by the caller; n
 * a constant after inlining). Inlined into a kernel, the loop is compiled for that kernel's ISA
 * and vectorised whole, as the element-wise loops of act_kernel.h are: the same operations on
 * each value, so the same bits. Not unrolled: gcc would otherwise peel a short loop into
 * scalar copies before it vectorises (measured: HardSwish 5x slower on AVX2). */
static inline __attribute__((always_inline)) void nnc_act_vec(int act, float* v, const int n) {
    int j;
    if (act == NNC_ACT_HSWISH) {
        _Pragma("GCC unroll 1")
        for (j = 0; j < n; j++)
            v[j] = nnc_hard_swish_f32(v[j]);
    } else {
        _Pragma("GCC unroll 1")
        for (j = 0; j < n; j++)
            v[j] = nnc_swish_f32(v[j]);
    }
}

/* The epilogue's sums on one value of output (m, n): + bias, + residual. */
static inline float nnc_epilogue_sum(const nnc_epilogue_t* ep, float v, ptrdiff_t m,
                                     ptrdiff_t n) {
    if (ep->bias != NULL)
        v += ep->bias[n];
    if (ep->residual != NULL)
        v += ep->residual[m * ep->ldr + n];
    return v;
}

/* Apply the epilogue to one value of output (m, n). */
static inline float nnc_epilogue_one(const nnc_epilogue_t* ep, float v, ptrdiff_t m,
                                     ptrdiff_t n) {
    if (ep == NULL)
        return v;
    return nnc_act_one(ep, nnc_epilogue_sum(ep, v, m, n));
}

/* Fetch the lines of a tile's output (and of its residual) into L1 before its sums run: rows
 * are ldc apart, a pattern the hardware prefetchers do not follow, and with a short K (the
 * expand 1x1 layers of ResNet: K = 64, 128) the sums alone do not hide a miss per line
 * (measured: 56x56x64 -> 256 with a residual, 82 -> 90 GFLOP/s on AVX-512). width floats a
 * row; its first and last one name every line it touches. A prefetch never faults. */
static inline __attribute__((always_inline)) void nnc_tile_prefetch(
        const int MR, const int width, const float* c, ptrdiff_t ldc, ptrdiff_t m0,
        ptrdiff_t n0, int mr, const nnc_epilogue_t* ep) {
    const float* res = ep != NULL ? ep->residual : NULL;
    int i;
    NNC_UNROLL
    for (i = 0; i < MR; i++) {
        if (i < mr) {
            __builtin_prefetch(c + i * ldc, 1, 3);
            __builtin_prefetch(c + i * ldc + width - 1, 1, 3);
            if (res != NULL) {
                __builtin_prefetch(res + (m0 + i) * ep->ldr + n0, 0, 3);
                __builtin_prefetch(res + (m0 + i) * ep->ldr + n0 + width - 1, 0, 3);
            }
        }
    }
}

/* The zeros an indirect convolution's taps in the padding point at, when they may be skipped: a
 * tap whose every row points here adds only 0 * w products. With finite weights those are +0
 * or -0, and adding them leaves the sum's bits as they are (it starts at +0, so it is never
 * -0, and x + (+-0) = x for every other x, infinities and NaN included), so a tile skips such
 * a tap, and its weights are never read: a 3x3 convolution over a 1x1 map (Inception-V3's
 * last blocks at 75x75) reads 1/9 of them. A caller whose weights may be infinite or NaN
 * (0 * inf is NaN) points at zeros of its own instead, which are multiplied like any input. */
enum { NNC_SGEMM_ZEROS = 4096 };
static const float nnc_sgemm_zeros[NNC_SGEMM_ZEROS] = {0};

/* A tile's parameters: K per tap and taps (the sum runs over taps * K values, tap by tap);
 * a[t * ts + i], row i's A values for tap t (K floats: a pixel's channels for an indirect
 * convolution, or a whole row with taps = 1; rows i >= mr repeat row mr - 1, whose sums are
 * not stored); the panel at bp; C at c (leading dimension ldc); (m0, n0) the tile's first
 * output, which the epilogue's bias and residual are indexed by; mr rows and nr columns of
 * the tile stored; pfn cache lines from pf fetched towards L2, one a k step (see
 * nnc_sgemm_packed_taps: the next panel's weights). */
#define NNC_TILE_PARAMS                                                                        \
    ptrdiff_t k, ptrdiff_t taps, const float* const* a, ptrdiff_t ts, const float* bp,         \
    float* c, ptrdiff_t ldc, ptrdiff_t m0, ptrdiff_t n0, int mr, int nr,                      \
    const nnc_epilogue_t* ep, const char* pf, ptrdiff_t pfn

/* One line of the tiles' fetch ahead (NNC_TILE_PARAMS' pf, pfn) towards L2, a k step's share:
 * a hint, it never faults. */
static inline __attribute__((always_inline)) void nnc_tile_fetch(const char** pf,
                                                                 ptrdiff_t* pfn) {
    if (*pfn > 0) {
        __builtin_prefetch(*pf, 0, 2);
        *pf += 64;
        (*pfn)--;
    }
}

/* A tile's row pointers for one tap (rows past mr repeat row mr - 1); whether every one is
 * nnc_sgemm_zeros, so the tap can be skipped. */
static inline __attribute__((always_inline)) int nnc_tap_rows(
        const int MR, const float* const* a, int mr, const float** row) {
    int i, pad = 1;
    NNC_UNROLL
    for (i = 0; i < MR; i++) {
        row[i] = a[i < mr ? i : mr - 1];
        pad &= row[i] == nnc_sgemm_zeros;
    }
    return pad;
}

/* Each tile is a template over MR (rows) and NV (vectors per row: 2 for a full panel, 1 for
 * a half one), instantiated below for the row counts a block's last tile may need. */

/* ---- baseline: 4 x 8 in GCC vector extensions (two 4-float vectors per row) ---- */

typedef float nnc_v4f __attribute__((vector_size(16)));

/* nnc_act_vec on one vector (NNC_ACT_HSWISH or NNC_ACT_SILU). */
static inline __attribute__((always_inline)) nnc_v4f nnc_act_v4(int act, nnc_v4f v) {
    float t[4];
    memcpy(t, &v, 16);
    nnc_act_vec(act, t, 4);
    memcpy(&v, t, 16);
    return v;
}

static inline __attribute__((always_inline)) void nnc_tile_base(
        const int MR, const int NV, ptrdiff_t k, ptrdiff_t taps, const float* const* a,
        ptrdiff_t ts, const float* bp, float* c, ptrdiff_t ldc, ptrdiff_t m0, ptrdiff_t n0,
        int mr, int nr, const nnc_epilogue_t* ep, const char* pf, ptrdiff_t pfn) {
    nnc_v4f acc0[4], acc1[4], out0[4], out1[4];
    const float* row[4];
    float out[8];
    ptrdiff_t kk, t;
    int i, j;
    NNC_UNROLL
    for (i = 0; i < MR; i++) {
        acc0[i] = (nnc_v4f){0, 0, 0, 0};
        acc1[i] = (nnc_v4f){0, 0, 0, 0};
    }
    for (t = 0; t < taps; t++) {
        if (nnc_tap_rows(MR, a + t * ts, mr, row)) {
            bp += k * 4 * NV;                    /* a tap in the padding for every row */
            continue;
        }
        for (kk = 0; kk < k; kk++) {
            nnc_v4f b0, b1 = {0, 0, 0, 0};
            memcpy(&b0, bp, 16);
            if (NV == 2)
                memcpy(&b1, bp + 4, 16);
            bp += 4 * NV;
            nnc_tile_fetch(&pf, &pfn);
            NNC_UNROLL
            for (i = 0; i < MR; i++) {
                float x = row[i][kk];
                acc0[i] += x * b0;
                if (NV == 2)
                    acc1[i] += x * b1;
            }
        }
    }
    NNC_UNROLL
    for (i = 0; i < MR; i++) {                   /* see nnc_tile_avx2 */
        out0[i] = acc0[i];
        out1[i] = acc1[i];
    }
    for (i = 0; i < mr; i++) {
        memcpy(out, &out0[i], 16);
        memcpy(out + 4, &out1[i], 16);
        if (ep != NULL && ep->act >= NNC_ACT_HSWISH) {
            /* A whole row of the tile at once: the loop vectorises, one value at a time not. */
            for (j = 0; j < 8; j++)
                out[j] = j < nr ? nnc_epilogue_sum(ep, out[j], m0 + i, n0 + j) : 0.0f;
            nnc_act_vec(ep->act, out, 8);
            for (j = 0; j < nr; j++)
                c[i * ldc + j] = out[j];
        } else {
            for (j = 0; j < nr; j++)
                c[i * ldc + j] = nnc_epilogue_one(ep, out[j], m0 + i, n0 + j);
        }
    }
}

#define NNC_TILE_BASE(R, V)                                                                   \
    static void nnc_tile_base_##R##x##V(NNC_TILE_PARAMS) {                                   \
        nnc_tile_base(R, V, k, taps, a, ts, bp, c, ldc, m0, n0, mr, nr, ep, pf, pfn);         \
    }
NNC_TILE_BASE(4, 2)
NNC_TILE_BASE(1, 2)
NNC_TILE_BASE(4, 1)
NNC_TILE_BASE(1, 1)

#ifdef NNC_SGEMM_X86

/* ---- AVX2 + FMA: 6 x 16 (two ymm per row) ---- */

#define NNC_AVX2 __attribute__((target("avx2,fma")))

/* nnc_act_vec on one vector (NNC_ACT_HSWISH or NNC_ACT_SILU). */
static inline __attribute__((always_inline)) NNC_AVX2 __m256 nnc_act_v8(int act, __m256 v) {
    float t[8] __attribute__((aligned(32)));
    _mm256_store_ps(t, v);
    nnc_act_vec(act, t, 8);
    return _mm256_load_ps(t);
}

static inline __attribute__((always_inline)) NNC_AVX2 __m256 nnc_ep_avx2(
        const nnc_epilogue_t* ep, __m256 v, ptrdiff_t m, ptrdiff_t n, __m256i mask, int full) {
    if (ep->bias != NULL)
        v = _mm256_add_ps(v, full ? _mm256_loadu_ps(ep->bias + n)
                                  : _mm256_maskload_ps(ep->bias + n, mask));
    if (ep->residual != NULL) {
        const float* r = ep->residual + m * ep->ldr + n;
        v = _mm256_add_ps(v, full ? _mm256_loadu_ps(r) : _mm256_maskload_ps(r, mask));
    }
    /* max/min with v as the second operand: a NaN v comes out as itself (NaN stays NaN). */
    if (ep->act == NNC_ACT_RELU)
        v = _mm256_max_ps(_mm256_setzero_ps(), v);
    else if (ep->act == NNC_ACT_CLAMP)
        v = _mm256_min_ps(_mm256_set1_ps(ep->hi), _mm256_max_ps(_mm256_set1_ps(ep->lo), v));
    else if (ep->act >= NNC_ACT_HSWISH)
        v = nnc_act_v8(ep->act, v);
    return v;
}

static inline __attribute__((always_inline)) NNC_AVX2 void nnc_tile_avx2(
        const int MR, const int NV, ptrdiff_t k, ptrdiff_t taps, const float* const* a,
        ptrdiff_t ts, const float* bp, float* c, ptrdiff_t ldc, ptrdiff_t m0, ptrdiff_t n0,
        int mr, int nr, const nnc_epilogue_t* ep, const char* pf, ptrdiff_t pfn) {
    __m256 acc0[6], acc1[6], out0[6], out1[6];
    const float* row[6];
    ptrdiff_t kk, t;
    int i;
    NNC_UNROLL
    for (i = 0; i < MR; i++) {
        acc0[i] = _mm256_setzero_ps();
        acc1[i] = _mm256_setzero_ps();
    }
    for (t = 0; t < taps; t++) {
        if (nnc_tap_rows(MR, a + t * ts, mr, row)) {
            bp += k * 8 * NV;                    /* a tap in the padding for every row */
            continue;
        }
        for (kk = 0; kk < k; kk++) {
            __m256 b0 = _mm256_loadu_ps(bp), b1 = NV == 2 ? _mm256_loadu_ps(bp + 8)
                                                         : _mm256_setzero_ps();
            bp += 8 * NV;
            nnc_tile_fetch(&pf, &pfn);
            NNC_UNROLL
            for (i = 0; i < MR; i++) {
                __m256 x = _mm256_broadcast_ss(row[i] + kk);
                acc0[i] = _mm256_fmadd_ps(x, b0, acc0[i]);
                if (NV == 2)
                    acc1[i] = _mm256_fmadd_ps(x, b1, acc1[i]);
            }
        }
    }
    /* The accumulators go through memory once, here, by constant index: indexing them by the
     * run-time mr would make gcc keep them in memory, storing them every k step. */
    NNC_UNROLL
    for (i = 0; i < MR; i++) {
        out0[i] = acc0[i];
        out1[i] = acc1[i];
    }
    {
        int full0 = nr >= 8, full1 = nr >= 16;
        int w1 = nr - 8;
        __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i mask0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane);
        __m256i mask1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(w1), lane);
        for (i = 0; i < mr; i++) {
            float* ci = c + i * ldc;
            __m256 v0 = out0[i], v1 = out1[i];
            if (ep != NULL) {
                v0 = nnc_ep_avx2(ep, v0, m0 + i, n0, mask0, full0);
                if (w1 > 0)
                    v1 = nnc_ep_avx2(ep, v1, m0 + i, n0 + 8, mask1, full1);
            }
            if (full0)
                _mm256_storeu_ps(ci, v0);
            else
                _mm256_maskstore_ps(ci, mask0, v0);
            if (full1)
                _mm256_storeu_ps(ci + 8, v1);
            else if (w1 > 0)
                _mm256_maskstore_ps(ci + 8, mask1, v1);
        }
    }
}

#define NNC_TILE_AVX2(R, V)                                                                   \
    static NNC_AVX2 void nnc_tile_avx2_##R##x##V(NNC_TILE_PARAMS) {                          \
        nnc_tile_avx2(R, V, k, taps, a, ts, bp, c, ldc, m0, n0, mr, nr, ep, pf, pfn);         \
    }
NNC_TILE_AVX2(6, 2)
NNC_TILE_AVX2(4, 2)
NNC_TILE_AVX2(2, 2)
NNC_TILE_AVX2(1, 2)
NNC_TILE_AVX2(6, 1)
NNC_TILE_AVX2(4, 1)
NNC_TILE_AVX2(2, 1)
NNC_TILE_AVX2(1, 1)

/* ---- AVX-512: 12 x 32 (two zmm per row), masked edges ---- */

#define NNC_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

static inline __attribute__((always_inline)) NNC_AVX512 __m512 nnc_act_v16(int act, __m512 v) {
    float t[16] __attribute__((aligned(64)));
    _mm512_store_ps(t, v);
    nnc_act_vec(act, t, 16);
    return _mm512_load_ps(t);
}

static inline __attribute__((always_inline)) NNC_AVX512 __m512 nnc_ep_avx512(
        const nnc_epilogue_t* ep, __m512 v, ptrdiff_t m, ptrdiff_t n, __mmask16 mask) {
    if (ep->bias != NULL)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, ep->bias + n));
    if (ep->residual != NULL)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, ep->residual + m * ep->ldr + n));
    if (ep->act == NNC_ACT_RELU)
        v = _mm512_max_ps(_mm512_setzero_ps(), v);
    else if (ep->act == NNC_ACT_CLAMP)
        v = _mm512_min_ps(_mm512_set1_ps(ep->hi), _mm512_max_ps(_mm512_set1_ps(ep->lo), v));
    else if (ep->act >= NNC_ACT_HSWISH)
        v = nnc_act_v16(ep->act, v);
    return v;
}

static inline __attribute__((always_inline)) NNC_AVX512 void nnc_tile_avx512(
        const int MR, const int NV, ptrdiff_t k, ptrdiff_t taps, const float* const* a,
        ptrdiff_t ts, const float* bp, float* c, ptrdiff_t ldc, ptrdiff_t m0, ptrdiff_t n0,
        int mr, int nr, const nnc_epilogue_t* ep, const char* pf, ptrdiff_t pfn) {
    __m512 acc0[12], acc1[12], out0[12], out1[12];
    const float* row[12];
    ptrdiff_t kk, t;
    int i;
    NNC_UNROLL
    for (i = 0; i < MR; i++) {
        acc0[i] = _mm512_setzero_ps();
        acc1[i] = _mm512_setzero_ps();
    }
    nnc_tile_prefetch(MR, NV == 2 ? 32 : 16, c, ldc, m0, n0, mr, ep);
    for (t = 0; t < taps; t++) {
        if (nnc_tap_rows(MR, a + t * ts, mr, row)) {
            bp += k * 16 * NV;                   /* a tap in the padding for every row */
            continue;
        }
        for (kk = 0; kk < k; kk++) {
            __m512 b0 = _mm512_loadu_ps(bp), b1 = NV == 2 ? _mm512_loadu_ps(bp + 16)
                                                         : _mm512_setzero_ps();
            bp += 16 * NV;
            nnc_tile_fetch(&pf, &pfn);
            NNC_UNROLL
            for (i = 0; i < MR; i++) {
                __m512 x = _mm512_set1_ps(row[i][kk]);
                acc0[i] = _mm512_fmadd_ps(x, b0, acc0[i]);
                if (NV == 2)
                    acc1[i] = _mm512_fmadd_ps(x, b1, acc1[i]);
            }
        }
    }
    {
        __mmask16 mask0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1u);
        __mmask16 mask1 = nr >= 32 ? (__mmask16)0xFFFF
                          : nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1u);
        if (mr == MR) {
            /* A whole tile (most of them): the epilogue straight from the registers. */
            NNC_UNROLL
            for (i = 0; i < MR; i++) {
                float* ci = c + i * ldc;
                __m512 v0 = acc0[i], v1 = acc1[i];
                if (ep != NULL) {
                    v0 = nnc_ep_avx512(ep, v0, m0 + i, n0, mask0);
                    if (NV == 2)
                        v1 = nnc_ep_avx512(ep, v1, m0 + i, n0 + 16, mask1);
                }
                _mm512_mask_storeu_ps(ci, mask0, v0);
                if (NV == 2)
                    _mm512_mask_storeu_ps(ci + 16, mask1, v1);
            }
            return;
        }
        NNC_UNROLL
        for (i = 0; i < MR; i++) {               /* see nnc_tile_avx2 */
            out0[i] = acc0[i];
            out1[i] = acc1[i];
        }
        for (i = 0; i < mr; i++) {
            float* ci = c + i * ldc;
            __m512 v0 = out0[i], v1 = out1[i];
            if (ep != NULL) {
                v0 = nnc_ep_avx512(ep, v0, m0 + i, n0, mask0);
                if (mask1)
                    v1 = nnc_ep_avx512(ep, v1, m0 + i, n0 + 16, mask1);
            }
            _mm512_mask_storeu_ps(ci, mask0, v0);
            if (mask1)
                _mm512_mask_storeu_ps(ci + 16, mask1, v1);
        }
    }
}

#define NNC_TILE_AVX512(R, V)                                                                 \
    static NNC_AVX512 void nnc_tile_avx512_##R##x##V(NNC_TILE_PARAMS) {                      \
        nnc_tile_avx512(R, V, k, taps, a, ts, bp, c, ldc, m0, n0, mr, nr, ep, pf, pfn);       \
    }
/* 9 rows: a 3x3 map's pixels in one tile (Inception-V3's Mixed_6 layers for a 75x75 input,
 * which compute little and stream their weights). As a 12-row tile a quarter of the
 * multiply-adds were on rows never stored: those layers ran at 14-15 GB/s of weights, one
 * thread, and at 20-22 with 9 rows (the network's node times summed: 5.4-5.6 -> 4.8 ms). */
NNC_TILE_AVX512(12, 2)
NNC_TILE_AVX512(9, 2)
NNC_TILE_AVX512(8, 2)
NNC_TILE_AVX512(4, 2)
NNC_TILE_AVX512(2, 2)
NNC_TILE_AVX512(1, 2)
NNC_TILE_AVX512(12, 1)
NNC_TILE_AVX512(9, 1)
NNC_TILE_AVX512(8, 1)
NNC_TILE_AVX512(4, 1)
NNC_TILE_AVX512(2, 1)
NNC_TILE_AVX512(1, 1)

#endif /* NNC_SGEMM_X86 */

typedef void (*nnc_tile_f)(NNC_TILE_PARAMS);

/* The tile for rem (1..MR) rows of a full panel (half = 0) or a half one (half = 1): the
 * smallest instance with at least that many rows (the rows past rem repeat the last one and
 * are not stored). */
static inline nnc_tile_f nnc_sgemm_tile(int isa, int rem, int half) {
#ifdef NNC_SGEMM_X86
    if (isa >= 2 && !half)
        return rem > 9 ? nnc_tile_avx512_12x2 : rem > 8 ? nnc_tile_avx512_9x2
               : rem > 4 ? nnc_tile_avx512_8x2 : rem > 2 ? nnc_tile_avx512_4x2
               : rem > 1 ? nnc_tile_avx512_2x2 : nnc_tile_avx512_1x2;
    if (isa >= 2)
        return rem > 9 ? nnc_tile_avx512_12x1 : rem > 8 ? nnc_tile_avx512_9x1
               : rem > 4 ? nnc_tile_avx512_8x1 : rem > 2 ? nnc_tile_avx512_4x1
               : rem > 1 ? nnc_tile_avx512_2x1 : nnc_tile_avx512_1x1;
    if (isa == 1 && !half)
        return rem > 4 ? nnc_tile_avx2_6x2 : rem > 2 ? nnc_tile_avx2_4x2
               : rem > 1 ? nnc_tile_avx2_2x2 : nnc_tile_avx2_1x2;
    if (isa == 1)
        return rem > 4 ? nnc_tile_avx2_6x1 : rem > 2 ? nnc_tile_avx2_4x1
               : rem > 1 ? nnc_tile_avx2_2x1 : nnc_tile_avx2_1x1;
#endif
    (void)isa;
    if (!half)
        return rem > 1 ? nnc_tile_base_4x2 : nnc_tile_base_1x2;
    return rem > 1 ? nnc_tile_base_4x1 : nnc_tile_base_1x1;
}

/* How a call's rows are blocked (nnc_sgemm_packed_ahead): each block of rows runs over every
 * panel of the call's columns, so every block after the first reads the weights again. With
 * blocks of NNC_SGEMM_MC rows, a 7x7 map's 49 pixels were a block of 48 and one of 1 whose
 * single-row tiles re-read every panel from memory (weights cold, 1 thread, AVX-512, Xeon:
 * 49 x 512 x 2048 at 114 GFLOP/s, 133 as one block; ResNet-50 at 1 thread 5 % faster with
 * both rules below, each alone 3 and 5 %; 2 threads, whose parts are one panel, unchanged).
 * So:
 * - a call whose weights outweigh its A rows (columns >= 2 x rows) and whose A rows fit in
 *   about half an L2 (1 MiB) runs as one block: the weights stream once and A stays in L2
 *   (ResNet-50's 14x14 and 7x7 layers at one thread; the few-pixel layers);
 * - else blocks of NNC_SGEMM_MC rows (A's block stays in L1/L2 while the panels, small next to
 *   A, pass: 56x56 maps lost 20 % as one block), a short last block (under half of one)
 *   joined to the one before.
 * The blocking changes which rows share a pass over a panel, never a sum's order: the bits do
 * not depend on it. 0: blocks of NNC_SGEMM_MC as before (A/B runs, tests). */
static int nnc_sgemm_row_blocks = 1;

/* Set nnc_sgemm_row_blocks (this extension's copy); returns the previous setting. */
static inline int nnc_sgemm_set_row_blocks(int on) {
    int old = nnc_sgemm_row_blocks;
    nnc_sgemm_row_blocks = on != 0;
    return old;
}

static inline ptrdiff_t nnc_sgemm_block_rows(ptrdiff_t rows, ptrdiff_t cols, ptrdiff_t k) {
    if (nnc_sgemm_row_blocks && cols >= 2 * rows && rows > 0
            && rows * k * (ptrdiff_t)sizeof(float) <= (1 << 20))
        return rows;
    return NNC_SGEMM_MC;
}

/* C rows m0..m1 (row m at c + m * ldc), columns n0..n1, of A times the packed B of N columns
 * and taps * kt rows (all of it: panel p at packed + p * NR * taps * kt), through the epilogue
 * ep (NULL: none; its bias and residual are indexed by absolute m and n). A is given by
 * pointer: row m's values for tap t are the kt floats at a[t * ts + (m - m0)], so taps = 1 is
 * a plain GEMM over rows of K = kt floats, and taps > 1 an indirect convolution (each tap's
 * pointer is an input pixel's channels, or zeros in the padding), whose sums run in the same
 * order as over the tap-major patch an im2col would copy: the same bits, without the copy.
 * n0 is a multiple of NR; n1 is one too, or N. isa must be the one B was packed for.
 * Disjoint (rows, columns) ranges may run at once. While the first block of rows runs over a
 * panel, its tiles fetch the next one towards L2, past n1 too (a caller cutting the columns
 * into parts runs the next part's next): ahead 1; 0 fetches nothing. */
static void nnc_sgemm_packed_ahead(int isa, ptrdiff_t m0, ptrdiff_t m1, ptrdiff_t n0,
                                   ptrdiff_t n1, ptrdiff_t n, ptrdiff_t kt, ptrdiff_t taps,
                                   nnc_rows_t a, ptrdiff_t ts, const float* packed, float* c,
                                   ptrdiff_t ldc, const nnc_epilogue_t* ep, int ahead) {
    const ptrdiff_t nr = nnc_sgemm_nr(isa), mr = nnc_sgemm_mr(isa), k = kt * taps;
    const ptrdiff_t mc = nnc_sgemm_block_rows(m1 - m0, n1 - n0, k);
    ptrdiff_t b0, b1, col, m;
#ifndef NNC_SGEMM_X86
    isa = 0;
#endif
    for (b0 = m0; b0 < m1; b0 = b1) {
        b1 = b0 + mc < m1 ? b0 + mc : m1;
        if (nnc_sgemm_row_blocks && m1 - b1 < mc / 2)
            b1 = m1;                     /* a short last block joins this one */
        for (col = n0; col < n1; col += nr) {
            const float* panel = packed + (col / nr) * nr * k;
            int w = (int)(n1 - col < nr ? n1 - col : nr);
            int half = nnc_sgemm_panel_width(isa, n, col / nr) < nr;
            /* Read once, a panel comes from memory, and a miss per line stalls the tile that
             * meets it: ResNet-50's 7x7 1x1 layers, weights cold, went from 83 to 91 GFLOP/s
             * (huge pages), 75 to 83 (small pages) on AVX-512, 84 to 92 on AVX2. Later row
             * blocks find the panel in L2 already. */
            ptrdiff_t lines = 0, tiles = (b1 - b0 + mr - 1) / mr, j = 0;
            const char* next = (const char*)(panel + nr * k);
            if (b0 == m0 && ahead && col + nr < n)
                lines = (nnc_sgemm_panel_width(isa, n, col / nr + 1) * k * 4 + 63) / 64;
            for (m = b0; m < b1; m += mr, j++) {
                int rem = (int)(b1 - m < mr ? b1 - m : mr);
                ptrdiff_t l0 = lines * j / tiles, l1 = lines * (j + 1) / tiles;
                nnc_sgemm_tile(isa, rem, half)(kt, taps, a + (m - m0), ts, panel,
                                               c + m * ldc + col, ldc, m, col, rem, w, ep,
                                               next + l0 * 64, l1 - l0);
            }
        }
    }
}

/* nnc_sgemm_packed_ahead fetching each next panel. */
static inline void nnc_sgemm_packed_taps(int isa, ptrdiff_t m0, ptrdiff_t m1, ptrdiff_t n0,
                                         ptrdiff_t n1, ptrdiff_t n, ptrdiff_t kt,
                                         ptrdiff_t taps, nnc_rows_t a, ptrdiff_t ts,
                                         const float* packed, float* c, ptrdiff_t ldc,
                                         const nnc_epilogue_t* ep) {
    nnc_sgemm_packed_ahead(isa, m0, m1, n0, n1, n, kt, taps, a, ts, packed, c, ldc, ep, 1);
}

/* nnc_sgemm_packed_taps with one tap: C = A . B over rows of K floats, row m at a[m - m0]. */
static inline void nnc_sgemm_packed(int isa, ptrdiff_t m0, ptrdiff_t m1, ptrdiff_t n0,
                                    ptrdiff_t n1, ptrdiff_t n, ptrdiff_t k, nnc_rows_t a,
                                    const float* packed, float* c, ptrdiff_t ldc,
                                    const nnc_epilogue_t* ep) {
    nnc_sgemm_packed_taps(isa, m0, m1, n0, n1, n, k, 1, a, 0, packed, c, ldc, ep);
}

#endif /* NNC_SGEMM_KERNEL_H */
