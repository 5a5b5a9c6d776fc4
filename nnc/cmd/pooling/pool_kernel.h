/* nnc's float32 MAX_POOL and AVG_POOL over NHWC rows: the hot path of the pools on CPU.
 *
 * Why by hand: the Cython loop this replaces kept its running max / sum in the output (one load
 * and one store of it per window tap), ran one short loop per tap (versioned at run time, as
 * the compiler cannot tell the output from the input apart) and stayed at SSE's 4 lanes:
 * 10-16 GB/s on Inception-V3's pools (benchmarks/pool.py). Here each output pixel's window is
 * clipped to the real input once, then U vectors of channels accumulate in registers over the
 * whole window (no bounds check per tap or per element) and are stored once: the loads of the
 * window are all that is left.
 *
 * Semantics (pool.py): padding never wins a max (a window is its real pixels only); the taps
 * are combined in the window's row-major order, starting from the first tap's value, so:
 * - MAX keeps the first of equal values (-0.0 before 0.0 stays -0.0) and returns the first NaN
 *   of the window, bit for bit (a NaN in a window wins, as CPU_REF's max);
 * - AVG adds in float32 in that order, then multiplies once by 1 / count (count: the real
 *   taps, or with count_include_pad the taps inside the padded input: kh * kw, less for a
 *   ceil_mode window that runs past the bottom or right padding).
 * Every ISA variant gives the same bits, which are those of the Cython loop it replaces.
 *
 * MAX without NaNs is one vmaxps per tap: max(v, acc) = v > acc ? v : acc keeps acc on ties
 * and when acc is NaN, but drops a NaN v. A second accumulator sums the taps (one vaddps, as
 * cheap): a NaN tap makes it NaN for good, and then the block is redone with the exact
 * select (v > acc || v != v ? v : acc) of the baseline loop. A sum that overflows to inf and
 * meets -inf is NaN too: the block is redone for nothing, with the same result.
 *
 * Variants (nnc/base/isa.pxd): AVX-512 (4 x 16 channels a block, masked tail), AVX2 (4 x 8,
 * maskload tail), baseline (4 x 4 in GCC vector extensions: SSE2 on x86-64, NEON on arm64;
 * the last channels one at a time), which always takes the exact select. Static functions
 * only, each variant under its own target attribute, so the extension stays baseline x86-64. */
#ifndef NNC_POOL_KERNEL_H
#define NNC_POOL_KERNEL_H

#include <stddef.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NNC_POOL_X86 1
#endif

/* One call's geometry, shared read-only by its parts. Strides in floats; channels are
 * contiguous (stride 1) in the input and the output. Each padding is smaller than the window
 * and (ceil_mode) no window starts past the input and its top / left padding, so every window
 * holds a real pixel. */
typedef struct {
    ptrdiff_t h, w, c;                  /* one input image [h, w, c] */
    ptrdiff_t xs_h, xs_w;               /* its row and pixel strides */
    ptrdiff_t ho, wo;                   /* one output image [ho, wo, c] */
    ptrdiff_t ys_h, ys_w;               /* its row and pixel strides */
    int kh, kw, sh, sw, pt, pl;         /* window, stride, top and left padding */
    int is_max;                         /* MAX_POOL, else AVG_POOL */
    int include_pad;                    /* AVG_POOL: divide by the taps inside the padded input
                                           (h + bottom, w + right), not the real taps */
    ptrdiff_t hp, wp;                   /* h + bottom padding, w + right padding */
} nnc_pool_geom_t;

/* The window of one output pixel, clipped to the real input: taps (i, j), i < ni, j < nj, at
 * p + i * xs_h + j * xs_w (channel 0 of the block). */
typedef struct {
    const float* p;
    ptrdiff_t ni, nj, xs_h, xs_w;
} nnc_pool_win_t;

/* Loops over a block's vectors are unrolled whole, so each accumulator is a register. */
#define NNC_POOL_UNROLL _Pragma("GCC unroll 4")

/* ---- baseline: GCC vector extensions (SSE2 on x86-64, NEON on arm64), exact select ---- */

typedef float nnc_pool_v4f __attribute__((vector_size(16)));
typedef int nnc_pool_v4i __attribute__((vector_size(16)));
/* The same vector at any float-aligned address: loads and stores of a pixel's channels. */
typedef float nnc_pool_v4f_u __attribute__((vector_size(16), aligned(4), may_alias));

/* max's step, v > acc or v is NaN: v, else acc. Bitwise, so it is a few vector instructions
 * (with || gcc keeps a branch per element, which random data mispredicts). */
static inline __attribute__((always_inline)) nnc_pool_v4f nnc_pool_base_max(nnc_pool_v4f acc,
                                                                            nnc_pool_v4f v) {
    nnc_pool_v4i take = (v > acc) | (v != v);
    return (nnc_pool_v4f)(((nnc_pool_v4i)v & take) | ((nnc_pool_v4i)acc & ~take));
}

/* U (1..4) vectors of 4 channels at wn->p into y. */
static inline __attribute__((always_inline)) void nnc_pool_base_block(
        const int U, const nnc_pool_win_t* wn, float* y, int is_max, float scale) {
    nnc_pool_v4f acc[4];
    ptrdiff_t i, j;
    int u;
    NNC_POOL_UNROLL
    for (u = 0; u < U; u++)
        acc[u] = *(const nnc_pool_v4f_u*)(wn->p + 4 * u);
    for (i = 0; i < wn->ni; i++) {
        const float* row = wn->p + i * wn->xs_h;
        for (j = i == 0; j < wn->nj; j++) {
            const float* src = row + j * wn->xs_w;
            NNC_POOL_UNROLL
            for (u = 0; u < U; u++) {
                nnc_pool_v4f v = *(const nnc_pool_v4f_u*)(src + 4 * u);
                acc[u] = is_max ? nnc_pool_base_max(acc[u], v) : acc[u] + v;
            }
        }
    }
    NNC_POOL_UNROLL
    for (u = 0; u < U; u++)
        *(nnc_pool_v4f_u*)(y + 4 * u) = is_max ? acc[u] : acc[u] * scale;
}

/* Fewer than 4 channels, one at a time. */
static void nnc_pool_base_tail(const nnc_pool_win_t* wn, float* y, int n, int is_max,
                               float scale) {
    ptrdiff_t i, j;
    int ch;
    for (ch = 0; ch < n; ch++) {
        float acc = wn->p[ch];
        for (i = 0; i < wn->ni; i++) {
            const float* row = wn->p + i * wn->xs_h + ch;
            for (j = i == 0; j < wn->nj; j++) {
                float v = row[j * wn->xs_w];
                if (is_max)
                    acc = (v > acc) | (v != v) ? v : acc;
                else
                    acc = acc + v;
            }
        }
        y[ch] = is_max ? acc : acc * scale;
    }
}

/* Channels 0..nc-1 of one output pixel: the exact definition (the AVX variants redo a block
 * with it when a NaN reached the block's window). */
static void nnc_pool_base_pixel(const nnc_pool_win_t* wn, float* y, ptrdiff_t nc, int is_max,
                                float scale) {
    nnc_pool_win_t b = *wn;
    ptrdiff_t c = 0;
    for (; c + 16 <= nc; c += 16) {
        b.p = wn->p + c;
        nnc_pool_base_block(4, &b, y + c, is_max, scale);
    }
    for (; c + 4 <= nc; c += 4) {
        b.p = wn->p + c;
        nnc_pool_base_block(1, &b, y + c, is_max, scale);
    }
    if (c < nc) {
        b.p = wn->p + c;
        nnc_pool_base_tail(&b, y + c, (int)(nc - c), is_max, scale);
    }
}

/* The clipped window of output pixel (oh, q) at channel c0 of image x, and 1 / count. */
static inline void nnc_pool_window(const nnc_pool_geom_t* g, const float* x, ptrdiff_t oh,
                                   ptrdiff_t q, ptrdiff_t c0, nnc_pool_win_t* wn, float* scale) {
    ptrdiff_t i0 = oh * g->sh - g->pt, i1 = i0 + g->kh;
    ptrdiff_t j0 = q * g->sw - g->pl, j1 = j0 + g->kw;
    i0 = i0 < 0 ? 0 : i0;
    i1 = i1 > g->h ? g->h : i1;
    j0 = j0 < 0 ? 0 : j0;
    j1 = j1 > g->w ? g->w : j1;
    wn->p = x + i0 * g->xs_h + j0 * g->xs_w + c0;
    wn->ni = i1 - i0;
    wn->nj = j1 - j0;
    wn->xs_h = g->xs_h;
    wn->xs_w = g->xs_w;
    /* As the loop this replaces: a float division, then one multiply per channel. Once a
     * pixel: the divisor's clipping costs nothing per element. */
    if (g->include_pad) {
        ptrdiff_t r0 = oh * g->sh - g->pt, q0 = q * g->sw - g->pl;
        ptrdiff_t rows = (r0 + g->kh < g->hp ? r0 + g->kh : g->hp) - r0;
        ptrdiff_t cols = (q0 + g->kw < g->wp ? q0 + g->kw : g->wp) - q0;
        *scale = 1 / (float)(rows * cols);
    } else {
        *scale = 1 / (float)(wn->ni * wn->nj);
    }
}

static void nnc_pool_row_base(const nnc_pool_geom_t* g, const float* x, float* y, ptrdiff_t oh,
                              ptrdiff_t c0, ptrdiff_t c1) {
    nnc_pool_win_t wn;
    float scale;
    ptrdiff_t q;
    for (q = 0; q < g->wo; q++) {
        nnc_pool_window(g, x, oh, q, c0, &wn, &scale);
        nnc_pool_base_pixel(&wn, y + q * g->ys_w + c0, c1 - c0, g->is_max, scale);
    }
}

#ifdef NNC_POOL_X86

/* ---- AVX2: blocks of 4 x 8 channels, the tail with maskload / maskstore ---- */

#define NNC_POOL_AVX2 __attribute__((target("avx2,fma")))

/* U (1..4) vectors of 8 channels at wn->p; full: all 8 x U channels, else the first `left`
 * (< 8, U == 1) through mask. */
static inline __attribute__((always_inline)) NNC_POOL_AVX2 void nnc_pool_block_avx2(
        const int U, const int full, const nnc_pool_win_t* wn, float* y, int left, int is_max,
        float scale) {
    __m256 acc[4], sum[4];
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lane);
    ptrdiff_t i, j;
    int u;
    NNC_POOL_UNROLL
    for (u = 0; u < U; u++) {
        acc[u] = full ? _mm256_loadu_ps(wn->p + 8 * u) : _mm256_maskload_ps(wn->p, mask);
        sum[u] = acc[u];
    }
    for (i = 0; i < wn->ni; i++) {
        const float* row = wn->p + i * wn->xs_h;
        for (j = i == 0; j < wn->nj; j++) {
            const float* src = row + j * wn->xs_w;
            NNC_POOL_UNROLL
            for (u = 0; u < U; u++) {
                __m256 v = full ? _mm256_loadu_ps(src + 8 * u) : _mm256_maskload_ps(src, mask);
                if (is_max) {
                    acc[u] = _mm256_max_ps(v, acc[u]);
                    sum[u] = _mm256_add_ps(sum[u], v);
                } else {
                    acc[u] = _mm256_add_ps(acc[u], v);
                }
            }
        }
    }
    if (is_max) {
        __m256 bad = _mm256_setzero_ps();
        NNC_POOL_UNROLL
        for (u = 0; u < U; u++)
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(sum[u], sum[u], _CMP_UNORD_Q));
        if (__builtin_expect(_mm256_movemask_ps(bad) != 0, 0)) {
            nnc_pool_base_pixel(wn, y, full ? 8 * U : left, 1, scale);
            return;
        }
    } else {
        NNC_POOL_UNROLL
        for (u = 0; u < U; u++)
            acc[u] = _mm256_mul_ps(acc[u], _mm256_set1_ps(scale));
    }
    NNC_POOL_UNROLL
    for (u = 0; u < U; u++) {
        if (full)
            _mm256_storeu_ps(y + 8 * u, acc[u]);
        else
            _mm256_maskstore_ps(y, mask, acc[u]);
    }
}

/* Bytes of one window's channels (kh * kw * channels * 4) above which a row is walked one
 * channel block at a time: a window wider than L1 (32 KiB on the x86 cores nnc targets) would
 * otherwise be evicted between neighbouring output pixels, which share most of their taps
 * (Inception's 8x8x1280 and 8x8x2048 pools: 10-15 % faster). Below it, pixel by pixel reads
 * each tap's channels in one sequential run (35x35 and 17x17 pools: 20-30 % faster). */
#define NNC_POOL_L1_BYTES 32768

/* Output row oh, channels c0..c1-1, through BLOCK (nnc_pool_block_avx2 / _avx512) with VL
 * floats a vector: blocks of 4 vectors, then single vectors, then one masked. */
#define NNC_POOL_ROW(BLOCK, VL, g, x, y, oh, c0, c1)                                             \
    do {                                                                                        \
        nnc_pool_win_t wn_;                                                                     \
        float scale_;                                                                           \
        ptrdiff_t q_, c_, ce_;                                                                  \
        const int blockwise_ = (ptrdiff_t)(g)->kh * (g)->kw * ((c1) - (c0)) * 4                 \
                               > NNC_POOL_L1_BYTES;                                             \
        /* pixel by pixel: one pass, c_ over all channels; blockwise: one pass a block. */      \
        for (ptrdiff_t b_ = (c0); b_ < (c1); b_ = ce_) {                                        \
            ce_ = blockwise_ ? (b_ + 4 * (VL) <= (c1) ? b_ + 4 * (VL)                           \
                                : b_ + (VL) <= (c1) ? b_ + (VL) : (c1))                         \
                             : (c1);                                                            \
            for (q_ = 0; q_ < (g)->wo; q_++) {                                                  \
                float* yq_ = (y) + q_ * (g)->ys_w;                                              \
                nnc_pool_window((g), (x), (oh), q_, 0, &wn_, &scale_);                          \
                const float* p_ = wn_.p;                                                        \
                for (c_ = b_; c_ + 4 * (VL) <= ce_; c_ += 4 * (VL)) {                           \
                    wn_.p = p_ + c_;                                                            \
                    BLOCK(4, 1, &wn_, yq_ + c_, (VL), (g)->is_max, scale_);                     \
                }                                                                               \
                for (; c_ + (VL) <= ce_; c_ += (VL)) {                                          \
                    wn_.p = p_ + c_;                                                            \
                    BLOCK(1, 1, &wn_, yq_ + c_, (VL), (g)->is_max, scale_);                     \
                }                                                                               \
                if (c_ < ce_) {                                                                 \
                    wn_.p = p_ + c_;                                                            \
                    BLOCK(1, 0, &wn_, yq_ + c_, (int)(ce_ - c_), (g)->is_max, scale_);          \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
    } while (0)

static NNC_POOL_AVX2 void nnc_pool_row_avx2(const nnc_pool_geom_t* g, const float* x, float* y,
                                            ptrdiff_t oh, ptrdiff_t c0, ptrdiff_t c1) {
    NNC_POOL_ROW(nnc_pool_block_avx2, 8, g, x, y, oh, c0, c1);
}

/* ---- AVX-512: blocks of 4 x 16 channels, the tail under a lane mask ---- */

#define NNC_POOL_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

static inline __attribute__((always_inline)) NNC_POOL_AVX512 void nnc_pool_block_avx512(
        const int U, const int full, const nnc_pool_win_t* wn, float* y, int left, int is_max,
        float scale) {
    __m512 acc[4], sum[4];
    const __mmask16 mask = (__mmask16)((1u << left) - 1u);
    ptrdiff_t i, j;
    int u;
    NNC_POOL_UNROLL
    for (u = 0; u < U; u++) {
        acc[u] = full ? _mm512_loadu_ps(wn->p + 16 * u) : _mm512_maskz_loadu_ps(mask, wn->p);
        sum[u] = acc[u];
    }
    for (i = 0; i < wn->ni; i++) {
        const float* row = wn->p + i * wn->xs_h;
        for (j = i == 0; j < wn->nj; j++) {
            const float* src = row + j * wn->xs_w;
            NNC_POOL_UNROLL
            for (u = 0; u < U; u++) {
                __m512 v = full ? _mm512_loadu_ps(src + 16 * u) : _mm512_maskz_loadu_ps(mask, src);
                if (is_max) {
                    acc[u] = _mm512_max_ps(v, acc[u]);
                    sum[u] = _mm512_add_ps(sum[u], v);
                } else {
                    acc[u] = _mm512_add_ps(acc[u], v);
                }
            }
        }
    }
    if (is_max) {
        __mmask16 bad = 0;
        NNC_POOL_UNROLL
        for (u = 0; u < U; u++)
            bad |= _mm512_cmp_ps_mask(sum[u], sum[u], _CMP_UNORD_Q);
        if (__builtin_expect(bad != 0, 0)) {
            nnc_pool_base_pixel(wn, y, full ? 16 * U : left, 1, scale);
            return;
        }
    } else {
        NNC_POOL_UNROLL
        for (u = 0; u < U; u++)
            acc[u] = _mm512_mul_ps(acc[u], _mm512_set1_ps(scale));
    }
    NNC_POOL_UNROLL
    for (u = 0; u < U; u++) {
        if (full)
            _mm512_storeu_ps(y + 16 * u, acc[u]);
        else
            _mm512_mask_storeu_ps(y, mask, acc[u]);
    }
}

static NNC_POOL_AVX512 void nnc_pool_row_avx512(const nnc_pool_geom_t* g, const float* x,
                                                float* y, ptrdiff_t oh, ptrdiff_t c0,
                                                ptrdiff_t c1) {
    NNC_POOL_ROW(nnc_pool_block_avx512, 16, g, x, y, oh, c0, c1);
}

#endif /* NNC_POOL_X86 */

/* Output row oh of one image, channels c0..c1-1: x is the image (channel 0 of pixel (0, 0)),
 * y the output row (channel 0 of its pixel 0). Disjoint (row, channel) ranges may run at once;
 * x is only read. */
static void nnc_pool_row_f32(int isa, const nnc_pool_geom_t* g, const float* x, float* y,
                             ptrdiff_t oh, ptrdiff_t c0, ptrdiff_t c1) {
#ifdef NNC_POOL_X86
    if (isa >= 2) {
        nnc_pool_row_avx512(g, x, y, oh, c0, c1);
        return;
    }
    if (isa == 1) {
        nnc_pool_row_avx2(g, x, y, oh, c0, c1);
        return;
    }
#endif
    (void)isa;
    nnc_pool_row_base(g, x, y, oh, c0, c1);
}

#endif /* NNC_POOL_KERNEL_H */
