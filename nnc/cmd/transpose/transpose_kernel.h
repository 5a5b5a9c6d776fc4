/* TRANSPOSE's float32 tile loop: y[b, c, r] = x[b, r, c] for `batch` row-major [rows, cols]
 * matrices (cpu_opt.pyx reduces NCHW <-> NHWC and every other batched 2-D permutation to this).
 *
 * How, and why so:
 * - A transpose moves every element once: it should run at memory speed. An element-by-element
 *   loop does not (a scalar load and a scalar store per element, the stores strided), so the
 *   matrix is cut into 8 x 8 blocks (AVX2: eight 8-float rows, transposed in registers with
 *   unpack / shuffle / permute2f128, the classic 24-instruction sequence) or 4 x 4 blocks
 *   (baseline SSE2's _MM_TRANSPOSE4_PS), each block read as whole rows and written as whole
 *   rows of y.
 * - Blocks are visited in tiles of 256 rows x 16 columns of x: a tile reads 256 pieces of
 *   64 bytes (one line each) and writes 16 rows of y, each a sequential run of 1 KiB, so a tile
 *   is 32 KiB (Zen 4's and recent Intel cores' L1D) and y is written as 16 sequential streams.
 *   Square 32 x 32 tiles wrote 32 rows of y in 128-byte pieces, which for some strides share a
 *   few L1 sets (NHWC -> NCHW of 112 x 112 x 64: a stride of 50,176 bytes is 1 KiB past a
 *   multiple of 4 KiB, so the 32 rows fall in 8 sets): 1.5-2x slower on the Resize shapes.
 * - The AVX-512 level runs the AVX2 blocks: a 16 x 16 block needs twice the shuffles for the
 *   same bytes and AVX-512 shuffles are no wider in throughput on double-pumped cores; a tile of
 *   32 is memory-bound either way.
 * - Edges (rows or cols not a multiple of the block) are copied element by element.
 * - At AVX2 and above, a matrix of 2-7 rows or 2-7 columns (NCHW <-> NHWC of an image's
 *   colours) is moved 8 columns (rows) at a time through the same 8 x 8 register transpose,
 *   the missing rows zeros, instead of element by element (nnc_tr_few_rows_avx2).
 * Only values are moved, so every level gives the same bits (NaN payloads included). */
#ifndef NNC_TRANSPOSE_KERNEL_H
#define NNC_TRANSPOSE_KERNEL_H

#include <stddef.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define NNC_TR_X86 1
#define NNC_TR_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

#define NNC_TR_TILE_R 256                 /* rows of x per tile: a multiple of every block */
#define NNC_TR_TILE_C 16                  /* columns of x per tile */

/* y[c, r] = x[r, c] for r in [r0, r1), c in [c0, c1): the element-by-element edge. */
static inline void nnc_tr_edge_f32(float* y, const float* x, ptrdiff_t rows, ptrdiff_t cols,
                                   ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t c0, ptrdiff_t c1)
{
    for (ptrdiff_t c = c0; c < c1; c++)
        for (ptrdiff_t r = r0; r < r1; r++)
            y[c * rows + r] = x[r * cols + c];
}

#ifdef NNC_TR_X86
/* Transpose eight 8-float rows in registers: r[i][j] becomes r[j][i]. */
NNC_TR_TARGET_AVX2 static inline void nnc_tr_8x8_regs(__m256* r)
{
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* One 8 x 8 block: rows x[0..7][0..7] (row stride ldx) to y[0..7][0..7] (row stride ldy). */
NNC_TR_TARGET_AVX2 static inline void nnc_tr_8x8(float* y, ptrdiff_t ldy, const float* x,
                                                 ptrdiff_t ldx)
{
    __m256 r[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(x + i * ldx);
    nnc_tr_8x8_regs(r);
    for (int i = 0; i < 8; i++)
        _mm256_storeu_ps(y + i * ldy, r[i]);
}

/* Fewer than 8 rows (2-7: an image's colours to NHWC, a channel shuffle's groups): 8 columns
 * at a time, the rows' 8-float pieces (zeros for the missing rows) transposed as one 8 x 8
 * block, each column's `rows` values stored as a whole vector whose tail the next column's
 * store overwrites (columns go in increasing order; the last one or two blocks, whose tails
 * would pass the end of y, are left to the element loop). The element loop alone moved
 * 224 x 224 x 3 in 100 us. */
NNC_TR_TARGET_AVX2 static void nnc_tr_few_rows_avx2(float* y, const float* x, ptrdiff_t rows,
                                                   ptrdiff_t cols, ptrdiff_t c_lo,
                                                   ptrdiff_t c_hi)
{
    ptrdiff_t c = c_lo;
    for (; c + 8 <= c_hi && (c + 7) * rows + 8 <= rows * c_hi; c += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; i++)
            r[i] = i < rows ? _mm256_loadu_ps(x + i * cols + c) : _mm256_setzero_ps();
        nnc_tr_8x8_regs(r);
        for (int j = 0; j < 8; j++)
            _mm256_storeu_ps(y + (c + j) * rows, r[j]);
    }
    nnc_tr_edge_f32(y, x, rows, cols, 0, rows, c, c_hi);
}

/* Fewer than 8 columns (2-7: NHWC to NCHW of a few channels): 8 rows at a time, each read as
 * a whole vector past its row's end (into the next row; the last one or two blocks, whose
 * reads would pass the end of x, are left to the element loop), transposed as one 8 x 8
 * block, and the first `cols` rows of the result stored whole. */
NNC_TR_TARGET_AVX2 static void nnc_tr_few_cols_avx2(float* y, const float* x, ptrdiff_t rows,
                                                   ptrdiff_t cols, ptrdiff_t r_lo,
                                                   ptrdiff_t r_hi)
{
    ptrdiff_t r0 = r_lo;
    for (; r0 + 8 <= r_hi && (r0 + 7) * cols + 8 <= rows * cols; r0 += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; i++)
            r[i] = _mm256_loadu_ps(x + (r0 + i) * cols);
        nnc_tr_8x8_regs(r);
        for (int j = 0; j < cols; j++)
            _mm256_storeu_ps(y + j * rows + r0, r[j]);
    }
    nnc_tr_edge_f32(y, x, rows, cols, r0, r_hi, 0, cols);
}
#endif

#if defined(__x86_64__)
/* One 4 x 4 block (SSE2, the x86-64 baseline). */
static inline void nnc_tr_4x4(float* y, ptrdiff_t ldy, const float* x, ptrdiff_t ldx)
{
    __m128 r0 = _mm_loadu_ps(x), r1 = _mm_loadu_ps(x + ldx);
    __m128 r2 = _mm_loadu_ps(x + 2 * ldx), r3 = _mm_loadu_ps(x + 3 * ldx);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_storeu_ps(y, r0);
    _mm_storeu_ps(y + ldy, r1);
    _mm_storeu_ps(y + 2 * ldy, r2);
    _mm_storeu_ps(y + 3 * ldy, r3);
}
#endif

/* Columns [c_lo, c_hi) of one matrix (rows c_lo..c_hi-1 of y), every row, in tiles of blocks
 * of B x B (B = 8: AVX2, 4: SSE2), BLOCK(y, ldy, x, ldx) moving one block; the edges element by
 * element. */
#define NNC_TR_MATRIX(NAME, TARGET, B, BLOCK)                                                  \
    TARGET static void NAME(float* y, const float* x, ptrdiff_t rows, ptrdiff_t cols,        \
                            ptrdiff_t c_lo, ptrdiff_t c_hi)                                  \
    {                                                                                        \
        ptrdiff_t rb = rows - rows % (B), cb = c_hi - (c_hi - c_lo) % (B);                  \
        for (ptrdiff_t r0 = 0; r0 < rb; r0 += NNC_TR_TILE_R) {                               \
            ptrdiff_t r1 = r0 + NNC_TR_TILE_R < rb ? r0 + NNC_TR_TILE_R : rb;                \
            for (ptrdiff_t c0 = c_lo; c0 < cb; c0 += NNC_TR_TILE_C) {                        \
                ptrdiff_t c1 = c0 + NNC_TR_TILE_C < cb ? c0 + NNC_TR_TILE_C : cb;            \
                for (ptrdiff_t r = r0; r < r1; r += (B))                                     \
                    for (ptrdiff_t c = c0; c < c1; c += (B))                                 \
                        BLOCK(y + c * rows + r, rows, x + r * cols + c, cols);              \
            }                                                                                \
        }                                                                                    \
        nnc_tr_edge_f32(y, x, rows, cols, 0, rb, cb, c_hi);                                  \
        nnc_tr_edge_f32(y, x, rows, cols, rb, rows, c_lo, c_hi);                             \
    }

#ifdef NNC_TR_X86
NNC_TR_MATRIX(nnc_tr_matrix_avx2, NNC_TR_TARGET_AVX2, 8, nnc_tr_8x8)
#endif
#if defined(__x86_64__)
NNC_TR_MATRIX(nnc_tr_matrix_sse2, , 4, nnc_tr_4x4)
#endif

/* Whether nnc_transpose_f32_range cuts a matrix of rows x cols by rows of x (2-7 columns at
 * AVX2 and above), else by columns of x. */
static inline int nnc_transpose_by_rows(int isa, ptrdiff_t rows, ptrdiff_t cols)
{
    return isa >= 1 && cols >= 2 && cols < 8 && rows >= 8;
}

/* One [rows, cols] matrix, y[c, r] = x[r, c], for x's rows [lo, hi) (every column) if
 * nnc_transpose_by_rows, else for x's columns [lo, hi) (every row): ranges that do not overlap
 * write disjoint parts of y, so they may run at once. isa is nnc/base/isa.pxd's level (0
 * baseline, 1 AVX2, 2 AVX-512). */
static void nnc_transpose_f32_range(int isa, float* y, const float* x, ptrdiff_t rows,
                                    ptrdiff_t cols, ptrdiff_t lo, ptrdiff_t hi)
{
#ifdef NNC_TR_X86
    if (nnc_transpose_by_rows(isa, rows, cols)) {
        nnc_tr_few_cols_avx2(y, x, rows, cols, lo, hi);
        return;
    }
    if (isa >= 1 && rows >= 2 && rows < 8 && cols >= 8) {
        nnc_tr_few_rows_avx2(y, x, rows, cols, lo, hi);
        return;
    }
    if (isa >= 1) {
        nnc_tr_matrix_avx2(y, x, rows, cols, lo, hi);
        return;
    }
#endif
#if defined(__x86_64__)
    nnc_tr_matrix_sse2(y, x, rows, cols, lo, hi);
#else
    (void)isa;
    nnc_tr_edge_f32(y, x, rows, cols, 0, rows, lo, hi);
#endif
}

/* y[b, c, r] = x[b, r, c] for `batch` matrices, whole. */
static void nnc_transpose_f32(int isa, float* y, const float* x, ptrdiff_t batch,
                              ptrdiff_t rows, ptrdiff_t cols)
{
    ptrdiff_t n = nnc_transpose_by_rows(isa, rows, cols) ? rows : cols;
    for (ptrdiff_t b = 0; b < batch; b++)
        nnc_transpose_f32_range(isa, y + b * rows * cols, x + b * rows * cols, rows, cols, 0, n);
}

#endif
