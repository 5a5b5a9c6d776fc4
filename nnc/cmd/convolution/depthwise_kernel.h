/* nnc's float32 depthwise convolution (groups = C = O, MobileNet's 3x3 layers), NHWC:
 * y[b, oh, ow, c] = act(sum over taps (i, j) of x[b, oh*sh - pt + i, ow*sw - pl + j, c] * w[c, i, j]
 * + bias[c]), taps in the padding left out of the sum.
 *
 * Why by hand (docs/kernels.md): a depthwise layer does 9 multiply-adds per 8 bytes it must
 * move, so it runs at memory (or L2) speed or not at all. As a GEMM it would be C one-column
 * products; a loop over taps that loads each weight again for each pixel, and checks each tap
 * against the image's edges, runs at a quarter of that. As XNNPACK and MLAS do, the kernel is
 * vectorised over channels (NHWC keeps a pixel's channels contiguous) and, for 3-wide windows,
 * keeps the 3 x 3 weight vectors of a channel block in registers while it walks a run of
 * output pixels; bias and activation are applied in registers before the one store.
 *
 * Layout. The weights [C, kh, kw] (NNC's [O, kh, kw, 1]) are re-laid once per call tap by tap
 * with channels innermost (nnc_dw_taps: [kh*kw, C] floats, tiny), so a tap's weights for a
 * channel block are one vector load. Input and output may be any views whose channels are
 * contiguous (pixel, row and image strides in floats).
 *
 * Edges. Each output row is cut into the interior pixels, whose whole window lies inside the
 * image's columns (no bounds checks: row pointers advance by the stride), and the edge pixels
 * left and right of it. A window's taps inside the image always form a rectangle, rows
 * [i0, i1) by columns [j0, j1): edge pixels and rows near the top and bottom sum exactly those
 * taps (nnc_dw_pixel_*). The padding is zeros, and a zero times a finite weight adds nothing,
 * so leaving those taps out gives the sum CPU_REF and the im2col path compute; a zero times an
 * infinite or NaN weight is NaN, though, so when some weight is not finite (nnc_dw_taps says)
 * every pixel sums every tap, padding included, in scalar code (nnc_dw_pixel_padded).
 *
 * Variants. AVX-512 (16 channels per vector, channel tails masked), AVX2+FMA (8) and baseline
 * (4, GCC vector extensions: SSE2 on x86-64, NEON on arm64; tails of fewer than a vector in
 * scalar code), each under its own target attribute so the extension stays baseline x86-64;
 * nnc_dw_rows picks one by the isa the caller read once per call (nnc/base/isa.pxd). The order
 * of the sums depends only on the isa and the pixel's position, never on how rows are split
 * into parts, so every split gives the same bits.
 *
 * The epilogue is nnc_epilogue_t of cmd/gemm/sgemm_kernel.h, indexed by channel: bias, then
 * NNC_ACT_RELU or NNC_ACT_CLAMP (max/min with the value as the second operand: NaN stays NaN),
 * NNC_ACT_HSWISH or NNC_ACT_SILU (the element-wise commands' functions, as the GEMM tiles
 * apply them).
 * Its residual is not read (it must be NULL: a depthwise layer has no shortcut of its own in
 * the networks nnc fuses).
 *
 * Static functions only, as sgemm_kernel.h. One file of ~820 lines because every ISA variant
 * is one set of macros instantiated under that ISA's definitions, and nnc_dw_rows picks among
 * them: split, each part would need the same macro vocabulary. */
#ifndef NNC_DEPTHWISE_KERNEL_H
#define NNC_DEPTHWISE_KERNEL_H

#include "cmd/gemm/sgemm_kernel.h"

/* One call's geometry, read-only while rows run (any rows may run at once). Strides in floats. */
typedef struct {
    const float* x;                     /* input [n, h, w, c]: x + b*xs_n + i*xs_h + j*xs_w */
    ptrdiff_t xs_n, xs_h, xs_w;
    ptrdiff_t h, w, c;
    float* y;                           /* output [n, ho, wo, c], likewise with ys_* */
    ptrdiff_t ys_n, ys_h, ys_w;
    ptrdiff_t ho, wo;
    int kh, kw, sh, sw, pt, pl;         /* window, strides (>= 1), top and left padding */
    const float* taps;                  /* [kh * kw, c]: nnc_dw_taps of the weights */
    int finite;                         /* every weight finite (what nnc_dw_taps returned) */
} nnc_dw_t;

/* Output pixels per block of a 3-wide run: a block's input rows stay in L1/L2 while each
 * channel block walks them, and the weight vectors are loaded once per channel block. */
enum { NNC_DW_BLOCK = 32 };

/* out[t * c + ch] = w[ch * taps + t]: the weights [c, taps] tap by tap. Returns whether every
 * weight is finite (nnc_dw_t.finite). */
static int nnc_dw_taps(const float* w, ptrdiff_t c, ptrdiff_t taps, float* out) {
    ptrdiff_t ch, t;
    int finite = 1;
    for (ch = 0; ch < c; ch++)
        for (t = 0; t < taps; t++) {
            float v = w[ch * taps + t];
            finite &= isfinite(v) != 0;
            out[t * c + ch] = v;
        }
    return finite;
}

/* The epilogue on one value of channel ch (scalar tails), as the vector code applies it. */
static inline float nnc_dw_ep1(const nnc_epilogue_t* ep, float v, ptrdiff_t ch) {
    if (ep->bias != NULL)
        v += ep->bias[ch];
    return nnc_act_one(ep, v);
}

/* Scalar: every channel of one pixel, every tap in order, the padding's zeros times their
 * weights included (for weights that are not all finite: 0 * inf is NaN). */
static void nnc_dw_pixel_padded(const nnc_dw_t* d, const float* xb, ptrdiff_t ih0,
                                ptrdiff_t iw0, float* y, const nnc_epilogue_t* ep) {
    const ptrdiff_t c = d->c, kh = d->kh, kw = d->kw;
    ptrdiff_t ch, i, j;
    for (ch = 0; ch < c; ch++) {
        float acc = 0.0f;
        for (i = 0; i < kh; i++)
            for (j = 0; j < kw; j++) {
                const ptrdiff_t ih = ih0 + i, iw = iw0 + j;
                const float x = ih >= 0 && ih < d->h && iw >= 0 && iw < d->w
                                ? xb[ih * d->xs_h + iw * d->xs_w + ch] : 0.0f;
                acc += x * d->taps[(i * kw + j) * c + ch];
            }
        y[ch] = nnc_dw_ep1(ep, acc, ch);
    }
}

/* Scalar: channels [ch0, c) of one pixel, taps [i0, i1) x [j0, j1); x at the window's tap (0, 0)
 * is xb + ih0 * xs_h + iw0 * xs_w (only taps inside the image are formed). */
static inline __attribute__((always_inline)) void nnc_dw_pixel_tail(
        const nnc_dw_t* d, const float* xb, ptrdiff_t ih0, ptrdiff_t iw0, int i0, int i1,
        int j0, int j1, ptrdiff_t ch0, float* y, const nnc_epilogue_t* ep) {
    const ptrdiff_t c = d->c, xs_h = d->xs_h, xs_w = d->xs_w, kw = d->kw;
    ptrdiff_t ch;
    int i, j;
    for (ch = ch0; ch < c; ch++) {
        float acc = 0.0f;
        for (i = i0; i < i1; i++) {
            const float* p = xb + (ih0 + i) * xs_h + (iw0 + j0) * xs_w + ch;
            const float* wt = d->taps + (i * kw + j0) * c + ch;
            for (j = j0; j < j1; j++, p += xs_w, wt += c)
                acc += *p * *wt;
        }
        y[ch] = nnc_dw_ep1(ep, acc, ch);
    }
}

/* Scalar: channels [ch0, c) of n pixels of a 3-wide run over NR input rows (see the vector
 * runs below), summed in their order. */
static inline __attribute__((always_inline)) void nnc_dw_run3_tail(
        const int NR, const float* const* rows, ptrdiff_t xs_w, ptrdiff_t step, ptrdiff_t n,
        const float* taps, ptrdiff_t c, ptrdiff_t ch0, float* y, ptrdiff_t ys_w,
        const nnc_epilogue_t* ep) {
    ptrdiff_t q, ch;
    int k;
    for (q = 0; q < n; q++) {
        for (ch = ch0; ch < c; ch++) {
            float a[3], v;
            NNC_UNROLL
            for (k = 0; k < NR; k++) {
                const float* p = rows[k] + q * step + ch;
                const float* wt = taps + 3 * k * c + ch;
                a[k] = p[0] * wt[0];
                a[k] += p[xs_w] * wt[c];
                a[k] += p[2 * xs_w] * wt[2 * c];
            }
            v = a[0];
            if (NR > 1)
                v += a[1];
            if (NR > 2)
                v += a[2];
            y[q * ys_w + ch] = nnc_dw_ep1(ep, v, ch);
        }
    }
}

/* The vector kernels, once per ISA. Each ISA defines V (the vector type), W (floats in it),
 * NNC_DW_ATTR (its target attribute) and these operations on V: LD(p) / ST(p, v) unaligned,
 * MUL, ADD, FMA(a, b, c) = a * b + c, SET1(f), ZERO, MAX(a, v) / MIN(a, v) returning v when
 * either is NaN, ACT(act, v) for NNC_ACT_HSWISH and NNC_ACT_SILU, and TAIL_PIXEL / TAIL_RUN3
 * for the channels past the last whole vector. */

/* A pixel: channels of taps [i0, i1) x [j0, j1), one accumulator per channel vector, NV
 * vectors at once (independent chains: one alone would wait on each FMA's latency). */
#define NNC_DW_PIXEL(S)                                                                       \
    /* Bias (channels [ch, ch + W)) and activation on a, stored at y. */                      \
    static inline __attribute__((always_inline)) NNC_DW_ATTR void nnc_dw_out_##S(            \
            const nnc_epilogue_t* ep, V a, ptrdiff_t ch, float* y) {                          \
        const int act = ep->act;                                                              \
        if (ep->bias != NULL)                                                                 \
            a = ADD(a, LD(ep->bias + ch));                                                    \
        if (act == NNC_ACT_RELU)                                                              \
            a = MAX(ZERO, a);                                                                 \
        else if (act == NNC_ACT_CLAMP)                                                        \
            a = MIN(SET1(ep->hi), MAX(SET1(ep->lo), a));                                      \
        else if (act >= NNC_ACT_HSWISH)                                                       \
            a = ACT(act, a);                                                                  \
        ST(y, a);                                                                             \
    }                                                                                         \
    static inline __attribute__((always_inline)) NNC_DW_ATTR void nnc_dw_pixel_body_##S(     \
            const int NV, const nnc_dw_t* d, const float* xb, ptrdiff_t ih0, ptrdiff_t iw0,   \
            int i0, int i1, int j0, int j1, ptrdiff_t ch, float* y,                           \
            const nnc_epilogue_t* ep) {                                                       \
        const ptrdiff_t c = d->c, xs_h = d->xs_h, xs_w = d->xs_w, kw = d->kw;                 \
        V acc[4];                                                                             \
        int i, j, v;                                                                          \
        NNC_UNROLL                                                                            \
        for (v = 0; v < NV; v++)                                                              \
            acc[v] = ZERO;                                                                    \
        for (i = i0; i < i1; i++) {                                                           \
            const float* p = xb + (ih0 + i) * xs_h + (iw0 + j0) * xs_w + ch;                  \
            const float* wt = d->taps + (i * kw + j0) * c + ch;                               \
            for (j = j0; j < j1; j++, p += xs_w, wt += c) {                                   \
                NNC_UNROLL                                                                    \
                for (v = 0; v < NV; v++)                                                      \
                    acc[v] = FMA(LD(p + v * W), LD(wt + v * W), acc[v]);                      \
            }                                                                                 \
        }                                                                                     \
        NNC_UNROLL                                                                            \
        for (v = 0; v < NV; v++)                                                              \
            nnc_dw_out_##S(ep, acc[v], ch + v * W, y + ch + v * W);                           \
    }                                                                                         \
    static NNC_DW_ATTR void nnc_dw_pixel_##S(                                                 \
            const nnc_dw_t* d, const float* xb, ptrdiff_t ih0, ptrdiff_t iw0, int i0, int i1, \
            int j0, int j1, float* y, const nnc_epilogue_t* ep) {                              \
        const ptrdiff_t c = d->c;                                                             \
        ptrdiff_t ch = 0;                                                                     \
        for (; ch + 4 * W <= c; ch += 4 * W)                                                  \
            nnc_dw_pixel_body_##S(4, d, xb, ih0, iw0, i0, i1, j0, j1, ch, y, ep);             \
        for (; ch + W <= c; ch += W)                                                          \
            nnc_dw_pixel_body_##S(1, d, xb, ih0, iw0, i0, i1, j0, j1, ch, y, ep);             \
        if (ch < c)                                                                           \
            TAIL_PIXEL(d, xb, ih0, iw0, i0, i1, j0, j1, ch, y, ep);                           \
    }

/* A run of n output pixels of a 3-wide window over NR (1..3) input rows: rows[k] is row k's
 * input at the run's first pixel's tap (k, 0), each next pixel step floats on; taps holds the
 * rows' weights ([3 * NR, c]); pixel q's output at y + q * ys_w. For each block of pixels,
 * each channel vector loads its 3 * NR weight vectors once and keeps them in registers while
 * it walks the block; row k's three taps sum into their own accumulator (short dependency
 * chains), the rows are added in order, then bias and activation. */
#define NNC_DW_RUN3(S)                                                                        \
    static inline __attribute__((always_inline)) NNC_DW_ATTR void nnc_dw_run3_body_##S(      \
            const int NR, const float* const* rows, ptrdiff_t xs_w, ptrdiff_t step,           \
            ptrdiff_t n, const float* taps, ptrdiff_t c, float* y, ptrdiff_t ys_w,            \
            const nnc_epilogue_t* ep) {                                                       \
        const int act = ep->act;                                                              \
        const V lo = SET1(ep->lo), hi = SET1(ep->hi);                                         \
        const float* bias = ep->bias;                                                         \
        ptrdiff_t b0, bn, ch, q;                                                              \
        int k;                                                                                \
        for (b0 = 0; b0 < n; b0 += NNC_DW_BLOCK) {                                            \
            const float* blk[3];                                                              \
            bn = n - b0 < NNC_DW_BLOCK ? n - b0 : NNC_DW_BLOCK;                               \
            NNC_UNROLL                                                                        \
            for (k = 0; k < NR; k++)                                                          \
                blk[k] = rows[k] + b0 * step;                                                 \
            for (ch = 0; ch + W <= c; ch += W) {                                              \
                V w0[3], w1[3], w2[3], bv = ZERO;                                             \
                const float* p[3];                                                            \
                float* o = y + b0 * ys_w + ch;                                                \
                NNC_UNROLL                                                                    \
                for (k = 0; k < NR; k++) {                                                    \
                    w0[k] = LD(taps + (3 * k) * c + ch);                                      \
                    w1[k] = LD(taps + (3 * k + 1) * c + ch);                                  \
                    w2[k] = LD(taps + (3 * k + 2) * c + ch);                                  \
                    p[k] = blk[k] + ch;                                                       \
                }                                                                             \
                if (bias != NULL)                                                             \
                    bv = LD(bias + ch);                                                       \
                for (q = 0; q < bn; q++) {                                                    \
                    V a[3], v;                                                                \
                    NNC_UNROLL                                                                \
                    for (k = 0; k < NR; k++) {                                                \
                        a[k] = MUL(LD(p[k]), w0[k]);                                          \
                        a[k] = FMA(LD(p[k] + xs_w), w1[k], a[k]);                             \
                        a[k] = FMA(LD(p[k] + 2 * xs_w), w2[k], a[k]);                         \
                        p[k] += step;                                                         \
                    }                                                                         \
                    v = a[0];                                                                 \
                    if (NR > 1)                                                               \
                        v = ADD(v, a[1]);                                                     \
                    if (NR > 2)                                                               \
                        v = ADD(v, a[2]);                                                     \
                    if (bias != NULL)                                                         \
                        v = ADD(v, bv);                                                       \
                    if (act == NNC_ACT_RELU)                                                  \
                        v = MAX(ZERO, v);                                                     \
                    else if (act == NNC_ACT_CLAMP)                                            \
                        v = MIN(hi, MAX(lo, v));                                              \
                    else if (act >= NNC_ACT_HSWISH)                                           \
                        v = ACT(act, v);                                                      \
                    ST(o, v);                                                                 \
                    o += ys_w;                                                                \
                }                                                                             \
            }                                                                                 \
            if (ch < c)                                                                       \
                TAIL_RUN3(NR, blk, xs_w, step, bn, taps, c, ch, y + b0 * ys_w, ys_w, ep);     \
        }                                                                                     \
    }                                                                                         \
    static NNC_DW_ATTR void nnc_dw_run3_##S(                                                  \
            int nr, const float* const* rows, ptrdiff_t xs_w, ptrdiff_t step, ptrdiff_t n,    \
            const float* taps, ptrdiff_t c, float* y, ptrdiff_t ys_w,                         \
            const nnc_epilogue_t* ep) {                                                       \
        if (nr == 3)                                                                          \
            nnc_dw_run3_body_##S(3, rows, xs_w, step, n, taps, c, y, ys_w, ep);               \
        else if (nr == 2)                                                                     \
            nnc_dw_run3_body_##S(2, rows, xs_w, step, n, taps, c, y, ys_w, ep);               \
        else                                                                                  \
            nnc_dw_run3_body_##S(1, rows, xs_w, step, n, taps, c, y, ys_w, ep);               \
    }

/* The interior of a row of a KW-wide window (5 or 7) at stride SW (1 or 2), where the weights
 * do not all fit in registers (a 7x7 window anywhere; a 5x5 one on AVX2's 16 registers and the
 * baseline's): pixels [q0, q1) in groups of four, the input under a group loaded once per
 * window row and multiplied into every pixel whose window holds it, with that row's KW weight
 * vectors in registers (at stride 1, 10 input and 7 weight loads for 28 multiply-adds, where
 * the pixel path makes two loads a multiply-add: ConvNeXt's 7x7 layers, EfficientNet's 5x5).
 * Each pixel sums its taps row by row, left to right, into one accumulator per channel vector,
 * as nnc_dw_pixel_* does, so the bits are the pixel path's; channels past the last whole
 * vector, and the pixels left over after the groups, take that path. */
#define NNC_DW_RUNK(S)                                                                        \
    static inline __attribute__((always_inline)) NNC_DW_ATTR void nnc_dw_groupk_##S(         \
            const int SW, const int KW, const int G, const nnc_dw_t* d, const float* x,       \
            int nr, const float* wt, float* y, const nnc_epilogue_t* ep, ptrdiff_t ch) {      \
        const ptrdiff_t c = d->c, xs_h = d->xs_h, xs_w = d->xs_w, ys_w = d->ys_w;            \
        V acc[8];                                                                             \
        int k, col, i;                                                                        \
        NNC_UNROLL                                                                            \
        for (i = 0; i < G; i++)                                                               \
            acc[i] = ZERO;                                                                    \
        for (k = 0; k < nr; k++, x += xs_h, wt += KW * c) {                                   \
            V wv[7];                                                                          \
            NNC_UNROLL                                                                        \
            for (i = 0; i < KW; i++)                                                          \
                wv[i] = LD(wt + i * c);                                                       \
            NNC_UNROLL                                                                        \
            for (col = 0; col < SW * (G - 1) + KW; col++) {                                   \
                const V v = LD(x + col * xs_w);                                               \
                NNC_UNROLL                                                                    \
                for (i = 0; i < G; i++) {                                                     \
                    const int j = col - SW * i;                                               \
                    if (j >= 0 && j < KW)                                                     \
                        acc[i] = FMA(v, wv[j], acc[i]);                                       \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        NNC_UNROLL                                                                            \
        for (i = 0; i < G; i++)                                                               \
            nnc_dw_out_##S(ep, acc[i], ch, y + i * ys_w + ch);                                \
    }                                                                                         \
    static inline __attribute__((always_inline)) NNC_DW_ATTR void nnc_dw_runk_body_##S(      \
            const int SW, const int KW, const nnc_dw_t* d, const float* xb, ptrdiff_t ih0,    \
            int i0, int i1, ptrdiff_t q0, ptrdiff_t q1, float* yr, const nnc_epilogue_t* ep) { \
        const ptrdiff_t c = d->c, xs_w = d->xs_w, ys_w = d->ys_w, pl = d->pl;                 \
        const ptrdiff_t cv = c / W * W, n = (q1 - q0) / 4 * 4;                                \
        const float* x0 = xb + (ih0 + i0) * d->xs_h;                                          \
        const float* wt = d->taps + i0 * KW * c;                                              \
        ptrdiff_t b0, b1, q, ch;                                                              \
        for (b0 = q0; b0 < q0 + n; b0 = b1) {                                                 \
            b1 = b0 + NNC_DW_BLOCK < q0 + n ? b0 + NNC_DW_BLOCK : q0 + n;                     \
            for (ch = 0; ch < cv; ch += W) {                                                  \
                /* Eight pixels a group where the registers hold their accumulators (more     \
                 * chains in flight, fewer loads per multiply-add), then four. */             \
                for (q = b0; NNC_DW_GROUP8 && q + 8 <= b1; q += 8)                            \
                    nnc_dw_groupk_##S(SW, KW, 8, d, x0 + (q * SW - pl) * xs_w + ch, i1 - i0,  \
                                      wt + ch, yr + q * ys_w, ep, ch);                        \
                for (; q < b1; q += 4)                                                        \
                    nnc_dw_groupk_##S(SW, KW, 4, d, x0 + (q * SW - pl) * xs_w + ch, i1 - i0,  \
                                      wt + ch, yr + q * ys_w, ep, ch);                        \
            }                                                                                 \
            if (cv < c)                                                                       \
                for (q = b0; q < b1; q++)                                                     \
                    TAIL_PIXEL(d, xb, ih0, q * SW - pl, i0, i1, 0, KW, cv, yr + q * ys_w, ep); \
        }                                                                                     \
        for (q = q0 + n; q < q1; q++)                                                         \
            nnc_dw_pixel_##S(d, xb, ih0, q * SW - pl, i0, i1, 0, KW, yr + q * ys_w, ep);      \
    }                                                                                         \
    /* d->kw 5 or 7, d->sw 1 or 2. */                                                         \
    static NNC_DW_ATTR void nnc_dw_runk_##S(const nnc_dw_t* d, const float* xb, ptrdiff_t ih0, \
                                            int i0, int i1, ptrdiff_t q0, ptrdiff_t q1,       \
                                            float* yr, const nnc_epilogue_t* ep) {            \
        if (d->kw == 5 && d->sw == 1)                                                         \
            nnc_dw_runk_body_##S(1, 5, d, xb, ih0, i0, i1, q0, q1, yr, ep);                   \
        else if (d->kw == 5)                                                                  \
            nnc_dw_runk_body_##S(2, 5, d, xb, ih0, i0, i1, q0, q1, yr, ep);                   \
        else if (d->sw == 1)                                                                  \
            nnc_dw_runk_body_##S(1, 7, d, xb, ih0, i0, i1, q0, q1, yr, ep);                   \
        else                                                                                  \
            nnc_dw_runk_body_##S(2, 7, d, xb, ih0, i0, i1, q0, q1, yr, ep);                   \
    }

/* ---- baseline: 4 floats in GCC vector extensions ---- */

typedef float nnc_dw_v4f __attribute__((vector_size(16)));
typedef int nnc_dw_v4i __attribute__((vector_size(16)));

static inline nnc_dw_v4f nnc_dw_ld4(const float* p) {
    nnc_dw_v4f v;
    memcpy(&v, p, 16);
    return v;
}

static inline void nnc_dw_st4(float* p, nnc_dw_v4f v) { memcpy(p, &v, 16); }

/* a where v < a (resp. v > a), else v: v wins when either is NaN, as maxps/minps do. */
static inline nnc_dw_v4f nnc_dw_max4(nnc_dw_v4f a, nnc_dw_v4f v) {
    nnc_dw_v4i m = v < a;
    return (nnc_dw_v4f)(((nnc_dw_v4i)a & m) | ((nnc_dw_v4i)v & ~m));
}

static inline nnc_dw_v4f nnc_dw_min4(nnc_dw_v4f a, nnc_dw_v4f v) {
    nnc_dw_v4i m = v > a;
    return (nnc_dw_v4f)(((nnc_dw_v4i)a & m) | ((nnc_dw_v4i)v & ~m));
}

#define NNC_DW_ATTR
#define V nnc_dw_v4f
#define W 4
#define LD(p) nnc_dw_ld4(p)
#define ST(p, v) nnc_dw_st4(p, v)
#define MUL(a, b) ((a) * (b))
#define ADD(a, b) ((a) + (b))
#define FMA(a, b, c) ((a) * (b) + (c))
#define SET1(f) ((nnc_dw_v4f){(f), (f), (f), (f)})
#define ZERO ((nnc_dw_v4f){0, 0, 0, 0})
#define MAX(a, v) nnc_dw_max4(a, v)
#define MIN(a, v) nnc_dw_min4(a, v)
#define ACT(act, v) nnc_act_v4(act, v)
#define TAIL_PIXEL nnc_dw_pixel_tail
#define TAIL_RUN3 nnc_dw_run3_tail
#define NNC_DW_GROUP8 0
NNC_DW_PIXEL(base)
NNC_DW_RUN3(base)
NNC_DW_RUNK(base)
#undef NNC_DW_ATTR
#undef V
#undef W
#undef LD
#undef ST
#undef MUL
#undef ADD
#undef FMA
#undef SET1
#undef ZERO
#undef MAX
#undef MIN
#undef ACT
#undef TAIL_PIXEL
#undef TAIL_RUN3

#ifdef NNC_SGEMM_X86

/* ---- AVX2 + FMA: 8 floats; tails in scalar code ---- */

#define NNC_DW_ATTR __attribute__((target("avx2,fma")))
#define V __m256
#define W 8
#define LD(p) _mm256_loadu_ps(p)
#define ST(p, v) _mm256_storeu_ps(p, v)
#define MUL(a, b) _mm256_mul_ps(a, b)
#define ADD(a, b) _mm256_add_ps(a, b)
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SET1(f) _mm256_set1_ps(f)
#define ZERO _mm256_setzero_ps()
#define MAX(a, v) _mm256_max_ps(a, v)
#define MIN(a, v) _mm256_min_ps(a, v)
#define ACT(act, v) nnc_act_v8(act, v)
#define TAIL_PIXEL nnc_dw_pixel_tail
#define TAIL_RUN3 nnc_dw_run3_tail
NNC_DW_PIXEL(avx2)
NNC_DW_RUN3(avx2)
NNC_DW_RUNK(avx2)
#undef NNC_DW_ATTR
#undef V
#undef W
#undef LD
#undef ST
#undef MUL
#undef ADD
#undef FMA
#undef SET1
#undef ZERO
#undef MAX
#undef MIN
#undef ACT
#undef TAIL_PIXEL
#undef TAIL_RUN3

/* ---- AVX-512: 16 floats; the channel tail is one masked vector ---- */

#define NNC_DW_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

/* A vector of channels [ch, ch + 16) at x, under mask m where masked (the channel tail). */
static inline __attribute__((always_inline)) NNC_DW_AVX512 __m512 nnc_dw_ld512(
        const float* x, __mmask16 m, const int masked) {
    return masked ? _mm512_maskz_loadu_ps(m, x) : _mm512_loadu_ps(x);
}

/* Bias and activation on v, channels [ch, ch + 16), stored at o (masked: the channel tail;
 * m is all ones otherwise). The GEMM tiles' epilogue: a depthwise call's residual is NULL. */
static inline __attribute__((always_inline)) NNC_DW_AVX512 void nnc_dw_store512(
        __m512 v, ptrdiff_t ch, float* o, const nnc_epilogue_t* ep, __mmask16 m,
        const int masked) {
    v = nnc_ep_avx512(ep, v, 0, ch, m);
    if (masked)
        _mm512_mask_storeu_ps(o, m, v);
    else
        _mm512_storeu_ps(o, v);
}

/* The last c - ch0 (< 16) channels of a pixel, masked, summed as the whole vectors are. */
static inline __attribute__((always_inline)) NNC_DW_AVX512 void nnc_dw_pixel_tail512(
        const nnc_dw_t* d, const float* xb, ptrdiff_t ih0, ptrdiff_t iw0, int i0, int i1,
        int j0, int j1, ptrdiff_t ch0, float* y, const nnc_epilogue_t* ep) {
    const ptrdiff_t c = d->c, xs_h = d->xs_h, xs_w = d->xs_w, kw = d->kw;
    const __mmask16 m = (__mmask16)((1u << (c - ch0)) - 1u);
    __m512 acc = _mm512_setzero_ps();
    int i, j;
    for (i = i0; i < i1; i++) {
        const float* p = xb + (ih0 + i) * xs_h + (iw0 + j0) * xs_w + ch0;
        const float* wt = d->taps + (i * kw + j0) * c + ch0;
        for (j = j0; j < j1; j++, p += xs_w, wt += c)
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, p), _mm512_maskz_loadu_ps(m, wt),
                                  acc);
    }
    nnc_dw_store512(acc, ch0, y + ch0, ep, m, 1);
}

static inline __attribute__((always_inline)) NNC_DW_AVX512 void nnc_dw_run3_tail512(
        const int NR, const float* const* rows, ptrdiff_t xs_w, ptrdiff_t step, ptrdiff_t n,
        const float* taps, ptrdiff_t c, ptrdiff_t ch0, float* y, ptrdiff_t ys_w,
        const nnc_epilogue_t* ep) {
    const __mmask16 m = (__mmask16)((1u << (c - ch0)) - 1u);
    __m512 w0[3], w1[3], w2[3];
    const float* p[3];
    ptrdiff_t q;
    int k;
    NNC_UNROLL
    for (k = 0; k < NR; k++) {
        w0[k] = _mm512_maskz_loadu_ps(m, taps + (3 * k) * c + ch0);
        w1[k] = _mm512_maskz_loadu_ps(m, taps + (3 * k + 1) * c + ch0);
        w2[k] = _mm512_maskz_loadu_ps(m, taps + (3 * k + 2) * c + ch0);
        p[k] = rows[k] + ch0;
    }
    for (q = 0; q < n; q++) {
        __m512 a[3], v;
        NNC_UNROLL
        for (k = 0; k < NR; k++) {
            a[k] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p[k]), w0[k]);
            a[k] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, p[k] + xs_w), w1[k], a[k]);
            a[k] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, p[k] + 2 * xs_w), w2[k], a[k]);
            p[k] += step;
        }
        v = a[0];
        if (NR > 1)
            v = _mm512_add_ps(v, a[1]);
        if (NR > 2)
            v = _mm512_add_ps(v, a[2]);
        nnc_dw_store512(v, ch0, y + q * ys_w + ch0, ep, m, 1);
    }
}

#define NNC_DW_ATTR NNC_DW_AVX512
#define V __m512
#define W 16
#define LD(p) _mm512_loadu_ps(p)
#define ST(p, v) _mm512_storeu_ps(p, v)
#define MUL(a, b) _mm512_mul_ps(a, b)
#define ADD(a, b) _mm512_add_ps(a, b)
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SET1(f) _mm512_set1_ps(f)
#define ZERO _mm512_setzero_ps()
#define MAX(a, v) _mm512_max_ps(a, v)
#define MIN(a, v) _mm512_min_ps(a, v)
#define ACT(act, v) nnc_act_v16(act, v)
#define TAIL_PIXEL nnc_dw_pixel_tail512
#define TAIL_RUN3 nnc_dw_run3_tail512
#undef NNC_DW_GROUP8
#define NNC_DW_GROUP8 1                 /* 32 registers: 7 weights and 8 accumulators fit */
NNC_DW_PIXEL(avx512)
NNC_DW_RUN3(avx512)
NNC_DW_RUNK(avx512)
#undef NNC_DW_ATTR
#undef V
#undef W
#undef LD
#undef ST
#undef MUL
#undef ADD
#undef FMA
#undef SET1
#undef ZERO
#undef MAX
#undef MIN
#undef ACT
#undef TAIL_PIXEL
#undef TAIL_RUN3

/* One output row of a 5-wide window over NR (1..5) input rows, AVX-512 only: x0 is row 0's
 * input at image column 0, rows xs_h floats apart, columns xs_w apart; output pixel q's window
 * starts at column q * SW - pl (SW: 1 or 2); taps holds the rows' weights ([5 * NR, c]); pixel
 * q's output at y + q * ys_w, for q in [0, wo). Its 32 registers hold a channel vector's 5 * NR
 * weight vectors for the whole row. Where four pixels' windows lie inside the image (columns
 * [q0, q1)), they go at once: each input under them is loaded once and multiplied into every
 * pixel whose window holds it (8 loads for 20 multiply-adds a row at stride 1, 11 at stride
 * 2), where the pixel path loads a weight and an input per tap and is bound by loads (2.3x
 * onnxruntime's time on EfficientNet's 28x28 5x5 layers). Other groups (edges, a row's last
 * pixels) load their columns outside the image as zeros (a masked load), whose products add
 * nothing: the
 * weights are finite here (nnc_dw_rows sends other weights to nnc_dw_pixel_padded), and a sum
 * that starts at +0 is never -0, so adding +-0 leaves it as leaving the tap out would. Every
 * pixel sums its taps column by column, each column's rows top to bottom, wherever it lies:
 * every split gives the same bits. Channels past the last whole vector run the same code under
 * a mask. */
/* Four pixels whose windows lie inside the image, from x (the first's tap (0, 0)). One column
 * pointer walks the columns; the rows are fixed offsets from it. */
static inline __attribute__((always_inline)) NNC_DW_AVX512 void nnc_dw_run5_four(
        const int NR, const int SW, const __m512* w, const float* x, ptrdiff_t xs_h,
        ptrdiff_t xs_w, __m512* acc, __mmask16 m, const int masked) {
    int k, col, i;
    NNC_UNROLL
    for (i = 0; i < 4; i++)
        acc[i] = _mm512_setzero_ps();
    NNC_UNROLL
    for (col = 0; col < SW * 3 + 5; col++, x += xs_w) {
        /* Opaque to the optimiser: otherwise gcc keeps a base address per column and row (40
         * of them), spills them and reloads one per load. */
        __asm__("" : "+r"(x));
        NNC_UNROLL
        for (k = 0; k < NR; k++) {
            const __m512 v = nnc_dw_ld512(x + k * xs_h, m, masked);
            NNC_UNROLL
            for (i = 0; i < 4; i++) {
                const int j = col - SW * i;
                if (j >= 0 && j < 5)
                    acc[i] = _mm512_fmadd_ps(v, w[5 * k + j], acc[i]);
            }
        }
    }
}

/* P (1..4) pixels, the first's window starting at column iw0, columns outside [0, wimg) read
 * as zeros: the edges, and a row's last pixels. As nnc_dw_run5_four, with a mask per column. */
static inline __attribute__((always_inline)) NNC_DW_AVX512 void nnc_dw_run5_edge(
        const int NR, const int SW, const int P, const __m512* w, const float* x0,
        ptrdiff_t iw0, ptrdiff_t wimg, ptrdiff_t xs_h, ptrdiff_t xs_w, __m512* acc,
        __mmask16 m) {
    int k, col, i;
    NNC_UNROLL
    for (i = 0; i < P; i++)
        acc[i] = _mm512_setzero_ps();
    NNC_UNROLL
    for (col = 0; col < SW * (P - 1) + 5; col++) {
        const ptrdiff_t iw = iw0 + col;
        const int inside = iw >= 0 && iw < wimg;
        const __mmask16 mc = inside ? m : (__mmask16)0;
        const float* x = x0 + (inside ? iw : 0) * xs_w;
        NNC_UNROLL
        for (k = 0; k < NR; k++) {
            const __m512 v = _mm512_maskz_loadu_ps(mc, x + k * xs_h);
            NNC_UNROLL
            for (i = 0; i < P; i++) {
                const int j = col - SW * i;
                if (j >= 0 && j < 5)
                    acc[i] = _mm512_fmadd_ps(v, w[5 * k + j], acc[i]);
            }
        }
    }
}

static inline __attribute__((always_inline)) NNC_DW_AVX512 void nnc_dw_run5_vec(
        const int NR, const int SW, const float* x0, ptrdiff_t xs_h, ptrdiff_t xs_w,
        ptrdiff_t wimg, ptrdiff_t pl, ptrdiff_t qa, ptrdiff_t qb, ptrdiff_t q0, ptrdiff_t q1,
        const float* taps, ptrdiff_t c, ptrdiff_t ch, float* y, ptrdiff_t ys_w,
        const nnc_epilogue_t* ep, __mmask16 m, const int masked) {
    __m512 w[25], acc[4];
    ptrdiff_t q = qa;
    int t, i;
    NNC_UNROLL
    for (t = 0; t < 5 * NR; t++)
        w[t] = nnc_dw_ld512(taps + t * c + ch, m, masked);
    x0 += ch;
    while (q < qb) {
        const int p = qb - q < 4 ? (int)(qb - q) : 4;
        if (p == 4 && q >= q0 && q + 4 <= q1)
            nnc_dw_run5_four(NR, SW, w, x0 + (q * SW - pl) * xs_w, xs_h, xs_w, acc, m, masked);
        else if (p == 4)
            nnc_dw_run5_edge(NR, SW, 4, w, x0, q * SW - pl, wimg, xs_h, xs_w, acc, m);
        else if (p == 3)
            nnc_dw_run5_edge(NR, SW, 3, w, x0, q * SW - pl, wimg, xs_h, xs_w, acc, m);
        else if (p == 2)
            nnc_dw_run5_edge(NR, SW, 2, w, x0, q * SW - pl, wimg, xs_h, xs_w, acc, m);
        else
            nnc_dw_run5_edge(NR, SW, 1, w, x0, q * SW - pl, wimg, xs_h, xs_w, acc, m);
        for (i = 0; i < p; i++)
            nnc_dw_store512(acc[i], ch, y + (q + i) * ys_w + ch, ep, m, masked);
        q += p;
    }
}

static inline __attribute__((always_inline)) NNC_DW_AVX512 void nnc_dw_run5_body(
        const int NR, const int SW, const float* x0, ptrdiff_t xs_h, ptrdiff_t xs_w,
        ptrdiff_t wimg, ptrdiff_t pl, ptrdiff_t wo, ptrdiff_t q0, ptrdiff_t q1,
        const float* taps, ptrdiff_t c, float* y, ptrdiff_t ys_w, const nnc_epilogue_t* ep) {
    ptrdiff_t qa, qb, ch;
    /* Blocks of pixels, as the 3-wide run: the block's input columns stay in L1 while each
     * channel vector walks them. */
    for (qa = 0; qa < wo; qa = qb) {
        qb = wo - qa < NNC_DW_BLOCK ? wo : qa + NNC_DW_BLOCK;
        for (ch = 0; ch + 16 <= c; ch += 16)
            nnc_dw_run5_vec(NR, SW, x0, xs_h, xs_w, wimg, pl, qa, qb, q0, q1, taps, c, ch, y,
                            ys_w, ep, (__mmask16)0xffff, 0);
        if (ch < c)
            nnc_dw_run5_vec(NR, SW, x0, xs_h, xs_w, wimg, pl, qa, qb, q0, q1, taps, c, ch, y,
                            ys_w, ep, (__mmask16)((1u << (c - ch)) - 1u), 1);
    }
}

#define NNC_DW_RUN5_CASE(NR)                                                                  \
    case NR:                                                                                  \
        if (sw == 1)                                                                          \
            nnc_dw_run5_body(NR, 1, x0, xs_h, xs_w, wimg, pl, wo, q0, q1, taps, c, y, ys_w,   \
                             ep);                                                             \
        else                                                                                  \
            nnc_dw_run5_body(NR, 2, x0, xs_h, xs_w, wimg, pl, wo, q0, q1, taps, c, y, ys_w,   \
                             ep);                                                             \
        break;

/* nr window rows inside the image (1..5), column stride sw (1 or 2: nnc_dw_rows runs other
 * strides on the pixel path); [q0, q1) the pixels whose windows lie inside the image's
 * columns (nnc_dw_rows's interior). */
static NNC_DW_AVX512 void nnc_dw_run5_avx512(
        int nr, int sw, const float* x0, ptrdiff_t xs_h, ptrdiff_t xs_w, ptrdiff_t wimg,
        ptrdiff_t pl, ptrdiff_t wo, ptrdiff_t q0, ptrdiff_t q1, const float* taps, ptrdiff_t c,
        float* y, ptrdiff_t ys_w, const nnc_epilogue_t* ep) {
    switch (nr) {
    NNC_DW_RUN5_CASE(5)
    NNC_DW_RUN5_CASE(4)
    NNC_DW_RUN5_CASE(3)
    NNC_DW_RUN5_CASE(2)
    default:
        NNC_DW_RUN5_CASE(1)
    }
}
#undef NNC_DW_RUN5_CASE

#endif /* NNC_SGEMM_X86 */
#undef NNC_DW_GROUP8

typedef void (*nnc_dw_pixel_f)(const nnc_dw_t* d, const float* xb, ptrdiff_t ih0,
                               ptrdiff_t iw0, int i0, int i1, int j0, int j1, float* y,
                               const nnc_epilogue_t* ep);
typedef void (*nnc_dw_runk_f)(const nnc_dw_t* d, const float* xb, ptrdiff_t ih0, int i0,
                              int i1, ptrdiff_t q0, ptrdiff_t q1, float* yr,
                              const nnc_epilogue_t* ep);
typedef void (*nnc_dw_run3_f)(int nr, const float* const* rows, ptrdiff_t xs_w,
                              ptrdiff_t step, ptrdiff_t n, const float* taps, ptrdiff_t c,
                              float* y, ptrdiff_t ys_w, const nnc_epilogue_t* ep);

static inline ptrdiff_t nnc_dw_clamp(ptrdiff_t v, ptrdiff_t lo, ptrdiff_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* Output pixel q of a row whose window rows inside the image are [i0, i1): only the columns
 * inside the image. */
static inline void nnc_dw_edge(nnc_dw_pixel_f pixel, const nnc_dw_t* d, const float* xb,
                               ptrdiff_t ih0, int i0, int i1, ptrdiff_t q, float* y,
                               const nnc_epilogue_t* ep) {
    const ptrdiff_t iw0 = q * d->sw - d->pl;
    const int j0 = (int)nnc_dw_clamp(-iw0, 0, d->kw);
    const int j1 = (int)nnc_dw_clamp(d->w - iw0, j0, d->kw);
    pixel(d, xb, ih0, iw0, i0, i1, j0, j1, y, ep);
}

/* Output rows r0..r1 (row r: image r / ho, row r % ho) of d, through ep (NULL: none; its
 * residual must be NULL), with the kernels of isa. Rows do not overlap in the output, so
 * disjoint row ranges may run at once. */
static void nnc_dw_rows(int isa, const nnc_dw_t* d, ptrdiff_t r0, ptrdiff_t r1,
                        const nnc_epilogue_t* ep) {
    static const nnc_epilogue_t none = {NULL, NULL, 0, NNC_ACT_NONE, 0.0f, 0.0f};
    nnc_dw_pixel_f pixel = nnc_dw_pixel_base;
    nnc_dw_run3_f run3 = nnc_dw_run3_base;
    nnc_dw_runk_f runk = nnc_dw_runk_base;
    const ptrdiff_t kh = d->kh, kw = d->kw, sh = d->sh, sw = d->sw, pt = d->pt, pl = d->pl;
    const ptrdiff_t h = d->h, w = d->w, c = d->c, ho = d->ho, wo = d->wo;
    const ptrdiff_t xs_h = d->xs_h, xs_w = d->xs_w, ys_w = d->ys_w;
    ptrdiff_t r, q, q0, q1;
#ifdef NNC_SGEMM_X86
    if (isa >= 2) {
        pixel = nnc_dw_pixel_avx512;
        run3 = nnc_dw_run3_avx512;
        runk = nnc_dw_runk_avx512;      /* 5x5: nnc_dw_run5_avx512 first, below */
    } else if (isa == 1) {
        pixel = nnc_dw_pixel_avx2;
        run3 = nnc_dw_run3_avx2;
        runk = nnc_dw_runk_avx2;
    }
#else
    (void)isa;
#endif
    if (ep == NULL)
        ep = &none;
    /* Interior columns [q0, q1): the window's columns q*sw - pl .. q*sw - pl + kw - 1 all lie
     * in [0, w). The same for every row. */
    q0 = nnc_dw_clamp((pl + sw - 1) / sw, 0, wo);
    q1 = w - kw + pl >= 0 ? nnc_dw_clamp((w - kw + pl) / sw + 1, q0, wo) : q0;
    if (!d->finite) {
        for (r = r0; r < r1; r++) {
            const ptrdiff_t b = r / ho, oh = r % ho;
            for (q = 0; q < wo; q++)
                nnc_dw_pixel_padded(d, d->x + b * d->xs_n, oh * sh - pt, q * sw - pl,
                                    d->y + b * d->ys_n + oh * d->ys_h + q * ys_w, ep);
        }
        return;
    }
    for (r = r0; r < r1; r++) {
        const ptrdiff_t b = r / ho, oh = r % ho, ih0 = oh * sh - pt;
        const float* xb = d->x + b * d->xs_n;
        float* yr = d->y + b * d->ys_n + oh * d->ys_h;
        /* The window's rows inside the image: [i0, i1), possibly none. */
        const int i0 = (int)nnc_dw_clamp(-ih0, 0, kh);
        const int i1 = (int)nnc_dw_clamp(h - ih0, i0, kh);
#ifdef NNC_SGEMM_X86
        if (isa >= 2 && kw == 5 && sw <= 2 && i1 > i0 && i1 - i0 <= 5) {
            nnc_dw_run5_avx512(i1 - i0, (int)sw, xb + (ih0 + i0) * xs_h, xs_h, xs_w, w, pl, wo,
                               q0, q1, d->taps + i0 * 5 * c, c, yr, ys_w, ep);
            continue;
        }
#endif
        for (q = 0; q < q0; q++)
            nnc_dw_edge(pixel, d, xb, ih0, i0, i1, q, yr + q * ys_w, ep);
        if (kw == 3 && i1 > i0 && i1 - i0 <= 3 && q1 > q0) {
            const float* rows[3];
            int k;
            for (k = 0; k < i1 - i0; k++)
                rows[k] = xb + (ih0 + i0 + k) * xs_h + (q0 * sw - pl) * xs_w;
            run3(i1 - i0, rows, xs_w, sw * xs_w, q1 - q0, d->taps + i0 * 3 * c, c,
                 yr + q0 * ys_w, ys_w, ep);
        } else if ((kw == 5 || kw == 7) && sw <= 2 && i1 > i0) {
            runk(d, xb, ih0, i0, i1, q0, q1, yr, ep);
        } else {
            for (q = q0; q < q1; q++)
                pixel(d, xb, ih0, q * sw - pl, i0, i1, 0, (int)kw, yr + q * ys_w, ep);
        }
        for (q = q1; q < wo; q++)
            nnc_dw_edge(pixel, d, xb, ih0, i0, i1, q, yr + q * ys_w, ep);
    }
}

#endif /* NNC_DEPTHWISE_KERNEL_H */
