/* nnc's float32 LAYER_NORM / RMSNORM row and GROUP_NORM image block: the hot paths of the
 * normalisation family on CPU.
 *
 * One row of m contiguous floats: LAYER_NORM's mean and variance in one pass, as the sums of
 * x - x[0] and its square (nnc_norm_moments: shifted by one of the row's own values, never
 * E[x^2] - E[x]^2, so a row with a large offset keeps its digits and a constant row's variance
 * is exactly 0), RMSNORM's sum of squares, in double over independent partial sums halved in a
 * fixed order at the end (a single chain would wait on every add's latency; the fixed order
 * makes every variant and every thread setting give the same statistics), then
 * y = (x - mean) * inv_std (* scale) (+ bias) in double, rounded once. A row of 96 (ConvNeXt)
 * is short: the second pass over it and its halving cost as much as the adds.
 *
 * The arithmetic is plain C, written once (nnc_norm_row_body, always inlined) and compiled for
 * each variant under its target attribute, so the compiler vectorises the same code with each
 * ISA's widths (nnc/base/isa.pxd: baseline SSE2 on x86-64, AVX2 + FMA, AVX-512); the extension
 * stays baseline x86-64. FMA contraction may change the last bit of y between variants, never
 * the statistics' order of summation. */
#ifndef NNC_NORM_KERNEL_H
#define NNC_NORM_KERNEL_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#define NNC_NORM_LANES 32

/* The lanes as eight vectors of 4 doubles (GCC vector types: one AVX2 register each, two SSE2
 * ones; under AVX-512 too, where 256-bit operations run as fast on the machines measured),
 * halved by whole vectors and then by vector halves: the same sums in the same order as 32
 * scalar lanes halved pairwise (lane l += lane l + w for w = 16, 8, ..., 1), kept in
 * registers. The array form went through the stack, and its stores and narrower reloads cost
 * a row of 96 more than its adds. */
typedef float nnc_norm_f32x4 __attribute__((vector_size(16)));
typedef double nnc_norm_f64x4 __attribute__((vector_size(32)));
typedef double nnc_norm_f64x2 __attribute__((vector_size(16)));

#define NNC_NORM_LOAD4(p) __extension__({                                                      \
        nnc_norm_f32x4 v_;                                                                     \
        memcpy(&v_, (p), sizeof v_);                                                           \
        __builtin_convertvector(v_, nnc_norm_f64x4);                                           \
    })

static inline __attribute__((always_inline)) double nnc_norm_sum(const float* x, ptrdiff_t m,
                                                                 double mean, int square) {
    nnc_norm_f64x4 a[8];
    nnc_norm_f64x2 q0, q1;
    double total;
    ptrdiff_t j = 0;
    for (int k = 0; k < 8; k++)
        a[k] = (nnc_norm_f64x4){0, 0, 0, 0};
    if (square) {
        for (; j + NNC_NORM_LANES <= m; j += NNC_NORM_LANES)
            for (int k = 0; k < 8; k++) {
                nnc_norm_f64x4 v = NNC_NORM_LOAD4(x + j + 4 * k) - mean;
                a[k] += v * v;
            }
    } else {
        for (; j + NNC_NORM_LANES <= m; j += NNC_NORM_LANES)
            for (int k = 0; k < 8; k++)
                a[k] += NNC_NORM_LOAD4(x + j + 4 * k);
    }
    /* w = 16, 8, 4 (whole vectors), 2, 1 (halves), then the tail in order. */
    for (int w = 4; w >= 1; w /= 2)
        for (int k = 0; k < w; k++)
            a[k] += a[k + w];
    memcpy(&q0, &a[0], sizeof q0);
    memcpy(&q1, (const char*)&a[0] + sizeof q0, sizeof q1);
    q0 += q1;
    total = q0[0] + q0[1];
    for (; j < m; j++) {
        double v = (double)x[j] - mean;
        total += square ? v * v : (double)x[j];
    }
    return total;
}

/* LAYER_NORM's statistics in one pass: the sums of d = x - x[0] and of d^2 in double (16 lanes
 * as four vectors of 4 doubles, halved in a fixed order like nnc_norm_sum), then
 * mean = x[0] + S1 / m and var = (S2 - S1^2 / m) / m. Shifting by one of the row's own values
 * is what makes one pass safe: d is exact in double, a constant row gives S1 = S2 = 0 and a
 * variance of exactly 0, and since (x[0] - mean)^2 <= m var the cancellation in
 * S2 - S1^2 / m costs at most about m double ulps of the variance (x^2 sums without the shift
 * lose everything to a large offset). Rounding can still leave a variance of -0.0-something:
 * it is clamped at 0. */
static inline __attribute__((always_inline)) void nnc_norm_moments(const float* x, ptrdiff_t m,
                                                                   double* mean, double* var) {
    nnc_norm_f64x4 a[4], b[4];
    nnc_norm_f64x2 q0, q1;
    const double k = (double)x[0];
    double s1, s2;
    ptrdiff_t j = 0;
    for (int l = 0; l < 4; l++) {
        a[l] = (nnc_norm_f64x4){0, 0, 0, 0};
        b[l] = (nnc_norm_f64x4){0, 0, 0, 0};
    }
    for (; j + 16 <= m; j += 16)
        for (int l = 0; l < 4; l++) {
            nnc_norm_f64x4 d = NNC_NORM_LOAD4(x + j + 4 * l) - k;
            a[l] += d;
            b[l] += d * d;
        }
    for (int w = 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) {
            a[l] += a[l + w];
            b[l] += b[l + w];
        }
    memcpy(&q0, &a[0], sizeof q0);
    memcpy(&q1, (const char*)&a[0] + sizeof q0, sizeof q1);
    q0 += q1;
    s1 = q0[0] + q0[1];
    memcpy(&q0, &b[0], sizeof q0);
    memcpy(&q1, (const char*)&b[0] + sizeof q0, sizeof q1);
    q0 += q1;
    s2 = q0[0] + q0[1];
    for (; j < m; j++) {
        double d = (double)x[j] - k;
        s1 += d;
        s2 += d * d;
    }
    *mean = k + s1 / (double)m;
    s2 = (s2 - s1 * (s1 / (double)m)) / (double)m;
    *var = s2 > 0.0 ? s2 : 0.0;
}

/* Row x (m >= 1 floats) into y (may not overlap x); scale and bias: m floats or NULL. The row's
 * mean (0 with rms) and inv_std are returned through *mean_out and *inv_std_out. */
static inline __attribute__((always_inline)) void nnc_norm_row_body(
        const float* x, float* y, ptrdiff_t m, const float* scale, const float* bias, double eps,
        int rms, double* mean_out, double* inv_std_out) {
    double mean = 0.0, var;
    if (rms)
        var = nnc_norm_sum(x, m, 0.0, 1) / (double)m;
    else
        nnc_norm_moments(x, m, &mean, &var);
    double inv_std = 1.0 / sqrt(var + eps);
    ptrdiff_t j;
    *mean_out = mean;
    *inv_std_out = inv_std;
    if (scale && bias)
        for (j = 0; j < m; j++)
            y[j] = (float)(((double)x[j] - mean) * inv_std * (double)scale[j] + (double)bias[j]);
    else if (scale)
        for (j = 0; j < m; j++)
            y[j] = (float)(((double)x[j] - mean) * inv_std * (double)scale[j]);
    else
        for (j = 0; j < m; j++)
            y[j] = (float)(((double)x[j] - mean) * inv_std);
}

static void nnc_norm_row_base(const float* x, float* y, ptrdiff_t m, const float* scale,
                              const float* bias, double eps, int rms, double* mean_out,
                              double* inv_std_out) {
    nnc_norm_row_body(x, y, m, scale, bias, eps, rms, mean_out, inv_std_out);
}


/* GROUP_NORM of one NHWC image (s pixels of c channels, c = groups * cg), groups g0 .. g1 - 1
 * (at most NNC_NORM_GROUP_CHUNK): each pass walks the pixels over NNC_NORM_CHAN_BLOCK channels
 * at a time, one double per channel (contiguous in every pixel, so the channel loop vectorises
 * whatever the group width, one channel per group included), then adds the block's channels
 * into their groups in channel order. mean_out and inv_std_out get g1 - g0 values. */
#define NNC_NORM_GROUP_CHUNK 64
#define NNC_NORM_CHAN_BLOCK 256

static inline __attribute__((always_inline)) void nnc_norm_groups_body(
        const float* x, float* y, ptrdiff_t s, ptrdiff_t c, ptrdiff_t cg, ptrdiff_t g0,
        ptrdiff_t g1, const float* scale, const float* bias, double eps, double* mean,
        double* inv_std) {
    double acc[NNC_NORM_GROUP_CHUNK];
    double cacc[NNC_NORM_CHAN_BLOCK], cm[NNC_NORM_CHAN_BLOCK], ck[NNC_NORM_CHAN_BLOCK],
        cb[NNC_NORM_CHAN_BLOCK];
    const ptrdiff_t c_lo = g0 * cg, c_hi = g1 * cg;
    const double n = (double)(s * cg);
    ptrdiff_t c0, nc, i, q, g;
    for (g = 0; g < g1 - g0; g++)
        acc[g] = 0;
    for (c0 = c_lo; c0 < c_hi; c0 += nc) {
        nc = c_hi - c0 < NNC_NORM_CHAN_BLOCK ? c_hi - c0 : NNC_NORM_CHAN_BLOCK;
        for (q = 0; q < nc; q++)
            cacc[q] = 0;
        for (i = 0; i < s; i++) {
            const float* xp = x + i * c + c0;
            for (q = 0; q < nc; q++)
                cacc[q] += (double)xp[q];
        }
        for (q = 0; q < nc; q++)
            acc[(c0 + q) / cg - g0] += cacc[q];
    }
    for (g = 0; g < g1 - g0; g++) {
        mean[g] = acc[g] / n;
        acc[g] = 0;
    }
    for (c0 = c_lo; c0 < c_hi; c0 += nc) {
        nc = c_hi - c0 < NNC_NORM_CHAN_BLOCK ? c_hi - c0 : NNC_NORM_CHAN_BLOCK;
        for (q = 0; q < nc; q++) {
            cm[q] = mean[(c0 + q) / cg - g0];
            cacc[q] = 0;
        }
        for (i = 0; i < s; i++) {
            const float* xp = x + i * c + c0;
            for (q = 0; q < nc; q++) {
                double v = (double)xp[q] - cm[q];
                cacc[q] += v * v;
            }
        }
        for (q = 0; q < nc; q++)
            acc[(c0 + q) / cg - g0] += cacc[q];
    }
    for (g = 0; g < g1 - g0; g++)
        inv_std[g] = 1.0 / sqrt(acc[g] / n + eps);
    for (c0 = c_lo; c0 < c_hi; c0 += nc) {
        nc = c_hi - c0 < NNC_NORM_CHAN_BLOCK ? c_hi - c0 : NNC_NORM_CHAN_BLOCK;
        /* y = (x - mean) * (inv_std * scale) + bias, per channel of the block. */
        for (q = 0; q < nc; q++) {
            g = (c0 + q) / cg - g0;
            cm[q] = mean[g];
            ck[q] = inv_std[g] * (scale ? (double)scale[c0 + q] : 1.0);
            cb[q] = bias ? (double)bias[c0 + q] : 0.0;
        }
        for (i = 0; i < s; i++) {
            const float* xp = x + i * c + c0;
            float* yp = y + i * c + c0;
            for (q = 0; q < nc; q++)
                yp[q] = (float)(((double)xp[q] - cm[q]) * ck[q] + cb[q]);
        }
    }
}

#define NNC_NORM_GROUPS_ARGS                                                                    \
    const float *x, float *y, ptrdiff_t s, ptrdiff_t c, ptrdiff_t cg, ptrdiff_t g0, ptrdiff_t g1, \
        const float *scale, const float *bias, double eps, double *mean, double *inv_std
#define NNC_NORM_GROUPS_PASS x, y, s, c, cg, g0, g1, scale, bias, eps, mean, inv_std

static void nnc_norm_groups_base(NNC_NORM_GROUPS_ARGS) {
    nnc_norm_groups_body(NNC_NORM_GROUPS_PASS);
}

#if defined(__x86_64__) || defined(__i386__)
#define NNC_NORM_X86 1

static __attribute__((target("avx2,fma"))) void nnc_norm_groups_avx2(NNC_NORM_GROUPS_ARGS) {
    nnc_norm_groups_body(NNC_NORM_GROUPS_PASS);
}

static __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"))) void
nnc_norm_groups_avx512(NNC_NORM_GROUPS_ARGS) {
    nnc_norm_groups_body(NNC_NORM_GROUPS_PASS);
}

static __attribute__((target("avx2,fma"))) void nnc_norm_row_avx2(
        const float* x, float* y, ptrdiff_t m, const float* scale, const float* bias, double eps,
        int rms, double* mean_out, double* inv_std_out) {
    nnc_norm_row_body(x, y, m, scale, bias, eps, rms, mean_out, inv_std_out);
}

static __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"))) void nnc_norm_row_avx512(
        const float* x, float* y, ptrdiff_t m, const float* scale, const float* bias, double eps,
        int rms, double* mean_out, double* inv_std_out) {
    nnc_norm_row_body(x, y, m, scale, bias, eps, rms, mean_out, inv_std_out);
}
#endif

/* The variant of isa (ISA_BASELINE 0, ISA_AVX2 1, ISA_AVX512 2). */
static void nnc_norm_row_f32(int isa, const float* x, float* y, ptrdiff_t m, const float* scale,
                             const float* bias, double eps, int rms, double* mean_out,
                             double* inv_std_out) {
#ifdef NNC_NORM_X86
    if (isa >= 2) {
        nnc_norm_row_avx512(x, y, m, scale, bias, eps, rms, mean_out, inv_std_out);
        return;
    }
    if (isa == 1) {
        nnc_norm_row_avx2(x, y, m, scale, bias, eps, rms, mean_out, inv_std_out);
        return;
    }
#endif
    (void)isa;
    nnc_norm_row_base(x, y, m, scale, bias, eps, rms, mean_out, inv_std_out);
}

static void nnc_norm_groups_f32(int isa, NNC_NORM_GROUPS_ARGS) {
#ifdef NNC_NORM_X86
    if (isa >= 2) {
        nnc_norm_groups_avx512(NNC_NORM_GROUPS_PASS);
        return;
    }
    if (isa == 1) {
        nnc_norm_groups_avx2(NNC_NORM_GROUPS_PASS);
        return;
    }
#endif
    (void)isa;
    nnc_norm_groups_base(NNC_NORM_GROUPS_PASS);
}

#endif /* NNC_NORM_KERNEL_H */
