"""CONVOLUTION's CPU_OPT_WINOGRAD backend: 3x3 stride-1 convolutions by Winograd's F(4x4, 3x3).

NNC: cmd/convolution/cpu_opt/_ccv_nnc_conv_cpu_4x4_3x3_winograd.c, one of CPU_OPT's algorithms
(CCV_NNC_CMD_OPT_CONV_ALGO_WINOGRAD) that NNC's autotune chooses among; nnc has no algorithm
field, so it is a backend of its own, below CPU_OPT in priority, that autotune keeps where it is
faster. A 4x4 block of outputs needs a 6x6 block (a *tile*) of input; in the
transformed domain the 3x3 window becomes an elementwise product of 6x6 blocks:

    Y = A^T [(G g G^T) * (B^T d B)] A       (g: 3x3 weights, d: 6x6 input tile, Y: 4x4 output)

and summed over input channels, each of the 36 elements of the 6x6 block is one matrix product
[tiles, C] x [C, O]: 36 GEMMs with K = C, against im2col's one GEMM with K = 9 C and four times
as many rows (2.25 multiplications per output and channel instead of 9). The price is rounding:
B^T and A^T hold entries up to 5 and 8, so results are a few times less exact than a direct sum
(docs/commands.md, "CPU_OPT_WINOGRAD", gives the tolerance the tests hold it to).

Here, per run:

1. The weights are transformed (U = G g G^T: 36 matrices [O, C]; in float32 written straight
   into the panels nnc's GEMM tiles read, cmd/gemm/sgemm_kernel.h, at the call's ISA level)
   into the calling thread's workspace, in parts of output channels over the pool. Done on
   every run, so weights a user overwrote between runs are always the ones used; it costs O *
   C * ~150 flops, small next to the convolution except on tiny images (measured in
   benchmarks/winograd.py). Frozen
   weights (``Graph.freeze``; nnc.tensor.constant) cannot be overwritten: their U is made on the
   first run and kept with them.
2. The tiles (all images' 4x4 output blocks, row by row) are cut into parts sized so that a
   part's transformed input V (36 matrices [tiles, C]) and products M (36 x [tiles, O]) stay in
   L2. Each part transforms its tiles' input (V = B^T d B, zeros outside the image), runs the
   36 GEMMs (float32: nnc's tiles over the packed U, rows by pointer; float64: single-threaded
   OpenBLAS) and transforms back (A^T M A) into the output, adding the bias and dropping the
   rows and columns past the output's edge. The products are thin (a part's tiles by O), where
   OpenBLAS re-packed each U_xi on every call and ran at ~80 % of the peak; the tiles read U
   as packed once (for frozen weights, once for good).
3. Parts run through nnc_parallel_for in the running thread's own workspace. The caller's
   workspace already holds U, so the caller's own parts use the memory after it (it was sized
   for both before step 1: no growth, so U stays where it is).

The transforms work on channel chunks of CHUNK elements in stack arrays, innermost over
channels, which are contiguous in x, the output, U, V and M: each inner loop is a few streams
of loads and stores that the compiler vectorises. Repeated runs allocate nothing.
"""

from libc.string cimport memcpy, memset

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_OOM, NNC_SUCCESS
from nnc.cmd.command cimport ACTIVATION_RELU, Cmd, nnc_cmd_param_t, register_c_backend
from nnc.tensor.constant cimport constant_pack
from nnc.cmd.cpu_check cimport conv_operands_ok, fits_int, tensor_views
from nnc.base.isa cimport cpu_isa
from nnc.base.openblas cimport BLAS_NO_TRANS, BLAS_TRANS, nnc_dgemm
from nnc.cmd.gemm.sgemm_kernel cimport (nnc_sgemm_nr, nnc_sgemm_packed, nnc_sgemm_packed_floats,
                                        nnc_sgemm_panel_width)
from nnc.base.parallel cimport nnc_parallel_for, nnc_workspace, parallel_threads
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef enum:
    # Bytes of V and M per part: within a 1-2 MB L2, so the GEMMs read what the input
    # transform just wrote, and the output transform reads what they wrote.
    PART_BYTES = 1 << 20
    # Fewer tiles per part than this make the GEMMs too thin to run at speed (each part
    # reads all of U once; 2 * tiles flops per element of U read).
    MIN_TILES = 16
    CHUNK = 64                          # channels per pass of a transform (stack arrays)
    # float32 with helpers that may join: at least this many parts per thread, across output
    # channels too when the tiles are few (a 14x14 map has 16 tiles: one part of tiles).
    PARTS_PER_THREAD = 2
    OUT_CHANNELS_PER_PART = 32          # of the weight transform: whole packed panels at every
    #                                     ISA level (panels are 32, 16 or 8 columns wide)
    U_FORMAT = 4                        # U's layout version in frozen weights' cache key

# CHUNK zeros of either type: the input outside the image (C globals start zeroed).
cdef double _zeros[CHUNK]


ctypedef struct wino_t:
    int dtype                           # NNC_32F or NNC_64F
    const char* x
    const char* w                       # [O, 3, 3, C]
    const char* bias                    # NULL: none
    int relu                            # activation="relu": max(0, .) after the bias
    char* out
    Py_ssize_t n, h, wd, c              # input [n, h, wd, c]
    Py_ssize_t xs_n, xs_h, xs_w         # input strides (channel stride is 1)
    Py_ssize_t ho, wo, o                # output [n, ho, wo, o]
    Py_ssize_t os_n, os_h, os_w         # output strides (channel stride is 1)
    Py_ssize_t pt, pl
    Py_ssize_t th, tw                   # tile rows and columns per image: ceil(ho / 4) ...
    Py_ssize_t tiles                    # n * th * tw
    Py_ssize_t tiles_per_part
    Py_ssize_t o_chunk, o_parts         # output channels per part (float32, few tiles: a
    #                                     multiple of the panels' width), and parts across O
    char* u                             # the transformed weights: in the caller's workspace,
    #                                     or frozen weights' kept copy. float64: [36, O, C];
    #                                     float32: 36 matrices [C, O] packed for nnc's GEMM
    #                                     tiles at isa, matrix xi at u + xi * ufloats floats
    size_t u_bytes                      # U's size rounded up to 64 bytes
    int isa                             # float32: cpu_isa() at the call's start
    Py_ssize_t ufloats                  # float32: floats of one packed matrix
    size_t part_bytes                   # V and M of a full part
    void* caller                        # the caller's context (its parts skip U); NULL when
    #                                     U is the kept copy (no part skips anything)


cdef inline void _scatter(const real* r, real* dst, Py_ssize_t plane,
                          Py_ssize_t n) noexcept nogil:
    """dst + k * plane <- r's row k (n elements), k < 6. The rows are computed into the
    stack array r first: stores to six arbitrary rows in the loop that computes them would
    keep the compiler from vectorising it (the rows might overlap)."""
    cdef Py_ssize_t k
    for k in range(6):
        memcpy(dst + k * plane, r + k * CHUNK, n * sizeof(real))


cdef void _weights_typed(const wino_t* wv, real* u, Py_ssize_t o0,
                         Py_ssize_t o1) noexcept nogil:
    """U[k*6 + l][o][c] = (G g G^T)[k][l] for g = w[o, :, :, c], o in [o0, o1) (float32:
    into the packed panels, the last one's columns past O zeroed by the part that ends there)."""
    cdef real t[18 * CHUNK]             # G g: [6 rows][3 columns][chunk]
    cdef real r[6 * CHUNK]              # a row of U: [6 columns][chunk]
    cdef const real* g
    cdef const real* g0
    cdef const real* g1
    cdef const real* g2
    cdef real* e
    cdef real a, b, d
    cdef Py_ssize_t o, q, c0, cl, c, j, k, C = wv.c, plane = wv.o * wv.c
    for o in range(o0, o1):
        g = <const real*>wv.w + o * 9 * C
        for q in range((C + CHUNK - 1) // CHUNK):
            c0 = q * CHUNK
            cl = min(<Py_ssize_t>CHUNK, C - c0)
            for j in range(3):          # down each kernel column: G [g0 g1 g2]^T
                g0, g1, g2 = g + j * C + c0, g + (3 + j) * C + c0, g + (6 + j) * C + c0
                for c in range(cl):
                    a, b, d = g0[c], g1[c], g2[c]
                    t[(0 * 3 + j) * CHUNK + c] = a * <real>0.25
                    t[(1 * 3 + j) * CHUNK + c] = (a + b + d) * <real>(-1.0 / 6.0)
                    t[(2 * 3 + j) * CHUNK + c] = (a - b + d) * <real>(-1.0 / 6.0)
                    t[(3 * 3 + j) * CHUNK + c] = (a * <real>(1.0 / 24.0) + b * <real>(1.0 / 12.0)
                                                  + d * <real>(1.0 / 6.0))
                    t[(4 * 3 + j) * CHUNK + c] = (a * <real>(1.0 / 24.0) - b * <real>(1.0 / 12.0)
                                                  + d * <real>(1.0 / 6.0))
                    t[(5 * 3 + j) * CHUNK + c] = d
            for k in range(6):          # along each row: [t0 t1 t2] G^T
                e = t + k * 3 * CHUNK
                for c in range(cl):
                    a, b, d = e[c], e[CHUNK + c], e[2 * CHUNK + c]
                    r[c] = a * <real>0.25
                    r[CHUNK + c] = (a + b + d) * <real>(-1.0 / 6.0)
                    r[2 * CHUNK + c] = (a - b + d) * <real>(-1.0 / 6.0)
                    r[3 * CHUNK + c] = (a * <real>(1.0 / 24.0) + b * <real>(1.0 / 12.0)
                                        + d * <real>(1.0 / 6.0))
                    r[4 * CHUNK + c] = (a * <real>(1.0 / 24.0) - b * <real>(1.0 / 12.0)
                                        + d * <real>(1.0 / 6.0))
                    r[5 * CHUNK + c] = d
                if real is float:
                    _scatter_packed(wv, r, k * 6, o, c0, cl)
                else:
                    _scatter(r, u + (k * 6) * plane + o * C + c0, plane, cl)
    if real is float and o1 == wv.o:
        _zero_past_o(wv)


cdef inline void _scatter_packed(const wino_t* wv, const float* r, Py_ssize_t xi0,
                                 Py_ssize_t o, Py_ssize_t c0, Py_ssize_t cl) noexcept nogil:
    """Packed U_xi[c, o] <- r's row j (c0 <= c < c0 + cl), xi = xi0 + j, j < 6: column o of
    its panel (nnc_sgemm_pack's layout: for each c, the panel's columns side by side)."""
    cdef Py_ssize_t nr = nnc_sgemm_nr(wv.isa), p = o // nr, C = wv.c
    cdef Py_ssize_t pw = nnc_sgemm_panel_width(wv.isa, wv.o, p), j, c
    cdef float* dst
    for j in range(6):
        dst = <float*>wv.u + (xi0 + j) * wv.ufloats + p * nr * C + c0 * pw + o % nr
        for c in range(cl):
            dst[c * pw] = r[j * CHUNK + c]


cdef void _zero_past_o(const wino_t* wv) noexcept nogil:
    """The packed U's columns past O (the last panel's padding) are zeros, as nnc_sgemm_pack
    leaves them: the tiles multiply them (their sums are never stored), and leftover memory
    there could hold subnormals, which slow the FMAs down on some CPUs."""
    cdef Py_ssize_t nr = nnc_sgemm_nr(wv.isa), p = (wv.o - 1) // nr, C = wv.c
    cdef Py_ssize_t pw = nnc_sgemm_panel_width(wv.isa, wv.o, p), used = wv.o - p * nr
    cdef Py_ssize_t xi, c, j
    cdef float* panel
    if used >= pw:
        return
    for xi in range(36):
        panel = <float*>wv.u + xi * wv.ufloats + p * nr * C
        for c in range(C):
            for j in range(used, pw):
                panel[c * pw + j] = 0


cdef void _weights_all(void* arg, void* dst) noexcept nogil:
    """Every output channel's U into dst (frozen weights' kept copy, made once)."""
    cdef wino_t wv = (<const wino_t*>arg)[0]
    wv.u = <char*>dst
    if wv.dtype == NNC_32F:
        _weights_typed(&wv, <float*>dst, 0, wv.o)
    else:
        _weights_typed(&wv, <double*>dst, 0, wv.o)


cdef unsigned long long _u_key(const wino_t* wv) noexcept nogil:
    """What U depends on besides the weights' address, as exact bit fields: the format, the
    dtype, O and C (0: too large for the fields; U is then made per call)."""
    if wv.o >= (1 << 24) or wv.c >= (1 << 24):
        return 0
    cdef unsigned long long wide = wv.dtype == NNC_64F
    cdef unsigned long long level = 0 if wide else <unsigned long long>wv.isa
    return ((<unsigned long long>U_FORMAT << 60) | (wide << 59) | (level << 57)
            | (<unsigned long long>wv.o << 24) | <unsigned long long>wv.c)


cdef int _weights_part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const wino_t* wv = <const wino_t*>arg
    cdef Py_ssize_t o0 = part * OUT_CHANNELS_PER_PART
    cdef Py_ssize_t o1 = min(o0 + OUT_CHANNELS_PER_PART, wv.o)
    if wv.dtype == NNC_32F:
        _weights_typed(wv, <float*>wv.u, o0, o1)
    else:
        _weights_typed(wv, <double*>wv.u, o0, o1)
    return NNC_SUCCESS


cdef void _input_tile(const wino_t* wv, real* v, Py_ssize_t m, Py_ssize_t row,
                      Py_ssize_t tile) noexcept nogil:
    """V[k*6 + l][row][:] = (B^T d B)[k][l] for the 6x6 input tile ``tile``; V's matrices are
    [m, C]."""
    cdef real t[36 * CHUNK]             # B^T d: [6 rows][6 columns][chunk]
    cdef real r[6 * CHUNK]              # a row of B^T d B: [6 columns][chunk]
    cdef const real* p[36]
    cdef const real* x
    cdef const real* zeros = <const real*>_zeros
    cdef const real* d0
    cdef const real* d1
    cdef const real* d2
    cdef const real* d3
    cdef const real* d4
    cdef const real* d5
    cdef real* e
    cdef real a0, a1, a2, a3, a4, a5
    cdef Py_ssize_t C = wv.c, plane = m * wv.c, per_image = wv.th * wv.tw
    cdef Py_ssize_t img = tile // per_image, ty = (tile % per_image) // wv.tw, tx = tile % wv.tw
    cdef Py_ssize_t i, j, k, q, ih, iw, c0, cl, c
    x = <const real*>wv.x + img * wv.xs_n
    for i in range(6):
        ih = ty * 4 - wv.pt + i
        for j in range(6):
            iw = tx * 4 - wv.pl + j
            if 0 <= ih < wv.h and 0 <= iw < wv.wd:
                p[i * 6 + j] = x + ih * wv.xs_h + iw * wv.xs_w
            else:
                p[i * 6 + j] = NULL
    for q in range((C + CHUNK - 1) // CHUNK):
        c0 = q * CHUNK
        cl = min(<Py_ssize_t>CHUNK, C - c0)
        for j in range(6):              # down each column: B^T [d0 .. d5]^T
            d0 = p[j] + c0 if p[j] != NULL else zeros
            d1 = p[6 + j] + c0 if p[6 + j] != NULL else zeros
            d2 = p[12 + j] + c0 if p[12 + j] != NULL else zeros
            d3 = p[18 + j] + c0 if p[18 + j] != NULL else zeros
            d4 = p[24 + j] + c0 if p[24 + j] != NULL else zeros
            d5 = p[30 + j] + c0 if p[30 + j] != NULL else zeros
            for c in range(cl):
                a0, a1, a2, a3, a4, a5 = d0[c], d1[c], d2[c], d3[c], d4[c], d5[c]
                t[(0 * 6 + j) * CHUNK + c] = 4 * a0 - 5 * a2 + a4
                t[(1 * 6 + j) * CHUNK + c] = -4 * (a1 + a2) + a3 + a4
                t[(2 * 6 + j) * CHUNK + c] = 4 * (a1 - a2) - a3 + a4
                t[(3 * 6 + j) * CHUNK + c] = 2 * (a3 - a1) - a2 + a4
                t[(4 * 6 + j) * CHUNK + c] = 2 * (a1 - a3) - a2 + a4
                t[(5 * 6 + j) * CHUNK + c] = 4 * a1 - 5 * a3 + a5
        for k in range(6):              # along each row: [t0 .. t5] B
            e = t + k * 6 * CHUNK
            for c in range(cl):
                a0, a1, a2 = e[c], e[CHUNK + c], e[2 * CHUNK + c]
                a3, a4, a5 = e[3 * CHUNK + c], e[4 * CHUNK + c], e[5 * CHUNK + c]
                r[c] = 4 * a0 - 5 * a2 + a4
                r[CHUNK + c] = -4 * (a1 + a2) + a3 + a4
                r[2 * CHUNK + c] = 4 * (a1 - a2) - a3 + a4
                r[3 * CHUNK + c] = 2 * (a3 - a1) - a2 + a4
                r[4 * CHUNK + c] = 2 * (a1 - a3) - a2 + a4
                r[5 * CHUNK + c] = 4 * a1 - 5 * a3 + a5
            _scatter(r, v + (k * 6) * plane + row * C + c0, plane, cl)


cdef void _output_tile(const wino_t* wv, const real* mm, Py_ssize_t m, Py_ssize_t row,
                       Py_ssize_t tile, Py_ssize_t oa, Py_ssize_t ob) noexcept nogil:
    """out[4x4 block of ``tile``, channels oa..ob] = A^T M A (+ bias), M[k*6 + l] = mm's
    matrix k*6 + l ([m, ob - oa]), row ``row``; the block's rows and columns past the output's
    edge are dropped."""
    cdef real t[24 * CHUNK]             # A^T M: [4 rows][6 columns][chunk]
    cdef real r[4 * CHUNK]              # one output row of the block: [4 columns][chunk]
    cdef const real* m0
    cdef const real* m1
    cdef const real* m2
    cdef const real* m3
    cdef const real* m4
    cdef const real* m5
    cdef const real* b = <const real*>wv.bias
    cdef real* e
    cdef real* y
    cdef real a0, a1, a2, a3, a4, a5
    cdef Py_ssize_t oc = ob - oa, plane = m * (ob - oa), per_image = wv.th * wv.tw
    cdef Py_ssize_t img = tile // per_image, ty = (tile % per_image) // wv.tw, tx = tile % wv.tw
    cdef Py_ssize_t rows = min(<Py_ssize_t>4, wv.ho - ty * 4), cols = min(<Py_ssize_t>4,
                                                                          wv.wo - tx * 4)
    cdef Py_ssize_t i, j, s, q, o0, cl, c
    cdef real* y0 = (<real*>wv.out + img * wv.os_n + ty * 4 * wv.os_h + tx * 4 * wv.os_w
                     + oa)
    cdef const real* src = mm + row * oc
    for q in range((oc + CHUNK - 1) // CHUNK):
        o0 = q * CHUNK
        cl = min(<Py_ssize_t>CHUNK, oc - o0)
        for j in range(6):              # down each column: A^T [m0 .. m5]^T
            m0, m1, m2 = src + j * plane + o0, src + (6 + j) * plane + o0, \
                src + (12 + j) * plane + o0
            m3, m4, m5 = src + (18 + j) * plane + o0, src + (24 + j) * plane + o0, \
                src + (30 + j) * plane + o0
            for c in range(cl):
                a0, a1, a2, a3, a4, a5 = m0[c], m1[c], m2[c], m3[c], m4[c], m5[c]
                t[(0 * 6 + j) * CHUNK + c] = a0 + (a1 + a2) + (a3 + a4)
                t[(1 * 6 + j) * CHUNK + c] = (a1 - a2) + 2 * (a3 - a4)
                t[(2 * 6 + j) * CHUNK + c] = (a1 + a2) + 4 * (a3 + a4)
                t[(3 * 6 + j) * CHUNK + c] = (a1 - a2) + 8 * (a3 - a4) + a5
        for i in range(rows):           # along each row: [t0 .. t5] A
            e = t + i * 6 * CHUNK
            for c in range(cl):
                a0, a1, a2 = e[c], e[CHUNK + c], e[2 * CHUNK + c]
                a3, a4, a5 = e[3 * CHUNK + c], e[4 * CHUNK + c], e[5 * CHUNK + c]
                r[c] = a0 + (a1 + a2) + (a3 + a4)
                r[CHUNK + c] = (a1 - a2) + 2 * (a3 - a4)
                r[2 * CHUNK + c] = (a1 + a2) + 4 * (a3 + a4)
                r[3 * CHUNK + c] = (a1 - a2) + 8 * (a3 - a4) + a5
            if b != NULL:
                for s in range(4):
                    for c in range(cl):
                        r[s * CHUNK + c] = r[s * CHUNK + c] + b[oa + o0 + c]
            if wv.relu:
                for s in range(4):
                    for c in range(cl):
                        a0 = r[s * CHUNK + c]
                        r[s * CHUNK + c] = 0 if a0 < 0 else a0   # NaN stays NaN, as RELU
            for s in range(cols):
                y = y0 + i * wv.os_h + s * wv.os_w + o0
                for c in range(cl):
                    y[c] = r[s * CHUNK + c]


cdef void _tiles_out(const wino_t* wv, const real* mm, Py_ssize_t m, Py_ssize_t t0,
                     Py_ssize_t t1, Py_ssize_t oa, Py_ssize_t ob) noexcept nogil:
    cdef Py_ssize_t tile
    for tile in range(t0, t1):
        _output_tile(wv, mm, m, tile - t0, tile, oa, ob)


cdef void _tiles_typed(const wino_t* wv, real* v, Py_ssize_t t0, Py_ssize_t t1,
                       Py_ssize_t oa, Py_ssize_t ob) noexcept nogil:
    """Tiles t0..t1, output channels oa..ob (oa a multiple of the packed panels' width; all of
    them in float64): V, the 36 products M_xi[m, ob - oa], and the output transform."""
    cdef Py_ssize_t m = t1 - t0, ow = ob - oa, xi, tile, r
    cdef real* mm = v + 36 * m * wv.c           # M after V
    cdef const real* u = <const real*>wv.u
    cdef const float** rows = <const float**>(mm + 36 * m * ow)     # float32: after M
    for tile in range(t0, t1):
        _input_tile(wv, v, m, tile - t0, tile)
    if wv.c == 0:                               # no channels: BLAS refuses lda = 0
        memset(mm, 0, 36 * m * ow * sizeof(real))
        _tiles_out(wv, mm, m, t0, t1, oa, ob)
        return
    for xi in range(36):                        # M_xi[m, O] = V_xi[m, C] . U_xi[O, C]^T
        if real is float:
            # nnc's GEMM tiles over U packed once (for frozen weights, once for good): the
            # products are thin (m tiles by O), where OpenBLAS re-packed U_xi every call.
            # Columns oa..ob land at M_xi's columns 0..ow: the tiles index C by absolute
            # column, so C is passed as M_xi - oa.
            for r in range(m):
                rows[r] = v + xi * m * wv.c + r * wv.c
            nnc_sgemm_packed(wv.isa, 0, m, oa, ob, wv.o, wv.c, rows,
                             <const float*>wv.u + xi * wv.ufloats, mm + xi * m * ow - oa, ow,
                             NULL)
        else:
            nnc_dgemm(BLAS_NO_TRANS, BLAS_TRANS, <int>m, <int>wv.o, <int>wv.c, 1.0,
                      v + xi * m * wv.c, <int>wv.c, u + xi * wv.o * wv.c, <int>wv.c, 0.0,
                      mm + xi * m * wv.o, <int>wv.o)
    _tiles_out(wv, mm, m, t0, t1, oa, ob)


cdef int _tiles_part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const wino_t* wv = <const wino_t*>arg
    cdef Py_ssize_t t0 = (part // wv.o_parts) * wv.tiles_per_part
    cdef Py_ssize_t t1 = min(t0 + wv.tiles_per_part, wv.tiles)
    cdef Py_ssize_t oa = (part % wv.o_parts) * wv.o_chunk
    cdef Py_ssize_t ob = min(oa + wv.o_chunk, wv.o)
    cdef char* base
    if wv.caller != NULL and context == wv.caller:
        # Sized for U and a part before the weights were transformed: no growth, U stays.
        base = <char*>nnc_workspace(context, wv.u_bytes + wv.part_bytes)
        if base == NULL or base != wv.u:
            return NNC_OOM
        base += wv.u_bytes
    else:
        base = <char*>nnc_workspace(context, wv.part_bytes)
        if base == NULL:
            return NNC_OOM
    if wv.dtype == NNC_32F:
        _tiles_typed(wv, <float*>base, t0, t1, oa, ob)
    else:
        _tiles_typed(wv, <double*>base, t0, t1, oa, ob)
    return NNC_SUCCESS


cdef inline bint _winograd_shape(const nnc_cmd_param_t* p,
                                 const nnc_tensor_t* w) noexcept nogil:
    """Only what F(4x4, 3x3) computes: a 3x3 window, stride 1, one group."""
    return (w.dim[1] == 3 and w.dim[2] == 3 and p.stride[0] == 1 and p.stride[1] == 1
            and p.groups == 1)


cdef int conv_winograd(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                       nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef wino_t wv
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* w
    cdef nnc_tensor_t* b
    cdef nnc_tensor_t* y
    cdef int d, dtype, itemsize, rc
    cdef Py_ssize_t per_tile, tile_parts, want, nr
    cdef int threads
    cdef unsigned long long key
    cdef const void* cached
    if not conv_operands_ok(inputs, n_in, outputs, n_out):
        return NNC_INVALID
    x, w, y = inputs[0], inputs[1], outputs[0]
    b = inputs[2] if n_in >= 3 else NULL
    dtype = y.datatype
    # Its epilogue has the bias and ReLU only: a residual or a clamp is CPU_OPT's.
    if (n_in == 4 and inputs[3] != NULL) or p.activation > ACTIVATION_RELU:
        return NNC_INVALID
    if not _winograd_shape(p, w):
        return NNC_INVALID
    d = x.ndim - 3                      # 1 with a batch axis, 0 without
    wv.dtype = dtype
    wv.x, wv.w, wv.out = <const char*>x.data, <const char*>w.data, <char*>y.data
    wv.bias = <const char*>b.data if b != NULL else NULL
    wv.relu = p.activation == ACTIVATION_RELU
    wv.n = x.dim[0] if d else 1
    wv.xs_n = x.stride[0] if d else 0
    wv.h, wv.wd, wv.c = x.dim[d], x.dim[d + 1], x.dim[d + 2]
    wv.xs_h, wv.xs_w = x.stride[d], x.stride[d + 1]
    wv.os_n = y.stride[0] if d else 0
    wv.ho, wv.wo, wv.o = y.dim[d], y.dim[d + 1], y.dim[d + 2]
    wv.os_h, wv.os_w = y.stride[d], y.stride[d + 1]
    wv.pt, wv.pl = p.pad[0], p.pad[1]
    # Re-check what the loops rely on (a C backend may be called without the command's check).
    if w.dim[0] != wv.o or w.dim[3] != wv.c or (d and y.dim[0] != wv.n):
        return NNC_INVALID
    if (wv.pt < 0 or wv.pl < 0 or p.pad[2] < 0 or p.pad[3] < 0
            or wv.ho != wv.h + wv.pt + p.pad[2] - 2 or wv.wo != wv.wd + wv.pl + p.pad[3] - 2):
        return NNC_INVALID
    if not (fits_int(wv.c) and fits_int(wv.o) and fits_int(36 * wv.o * wv.c)):
        return NNC_INVALID
    if wv.n == 0 or wv.ho <= 0 or wv.wo <= 0 or wv.o == 0:
        return NNC_SUCCESS
    wv.th, wv.tw = (wv.ho + 3) // 4, (wv.wo + 3) // 4
    wv.tiles = wv.n * wv.th * wv.tw
    itemsize = 4 if dtype == NNC_32F else 8
    wv.isa = cpu_isa()                  # one level for the packing and every part
    # V and M, and in float32 a row pointer a tile for the GEMM tiles.
    per_tile = 36 * (wv.c + wv.o) * itemsize + (sizeof(float*) if dtype == NNC_32F else 0)
    wv.tiles_per_part = max(<Py_ssize_t>MIN_TILES, PART_BYTES // per_tile)
    wv.tiles_per_part = min(wv.tiles_per_part, wv.tiles)
    if not fits_int(wv.tiles_per_part * max(wv.c, wv.o)):
        return NNC_INVALID
    # Few parts of tiles and helpers that may join: parts across output channels too, each
    # with the V of its tiles (made again per part: O(C) a tile against the products'
    # O(C * O)). Each output is the same sum whichever part makes it, so the bits do not
    # depend on the cut.
    wv.o_chunk, wv.o_parts = wv.o, 1
    tile_parts = (wv.tiles + wv.tiles_per_part - 1) // wv.tiles_per_part
    threads = parallel_threads()
    if dtype == NNC_32F and threads > 1 and tile_parts < PARTS_PER_THREAD * threads:
        nr = nnc_sgemm_nr(wv.isa)
        want = (PARTS_PER_THREAD * threads + tile_parts - 1) // tile_parts
        wv.o_chunk = max(nr, ((wv.o + want - 1) // want + nr - 1) // nr * nr)
        wv.o_parts = (wv.o + wv.o_chunk - 1) // wv.o_chunk
        per_tile = 36 * (wv.c + wv.o_chunk) * itemsize + sizeof(float*)
    wv.part_bytes = <size_t>(wv.tiles_per_part * per_tile)
    wv.ufloats = <Py_ssize_t>nnc_sgemm_packed_floats(wv.isa, wv.o, wv.c)
    wv.u_bytes = <size_t>(((36 * wv.ufloats * 4 if dtype == NNC_32F
                            else 36 * wv.o * wv.c * itemsize) + 63) // 64 * 64)
    # Frozen weights can never change: their U is made once and kept with them.
    key = _u_key(&wv)
    cached = constant_pack(wv.w, key, wv.u_bytes, _weights_all, &wv) if key != 0 else NULL
    if cached != NULL:
        wv.u = <char*>cached            # read-only from here on
        wv.caller = NULL                # every part's scratch starts at its workspace's start
        return nnc_parallel_for(tile_parts * wv.o_parts, _tiles_part, &wv, ctx)
    wv.caller = ctx
    wv.u = <char*>nnc_workspace(ctx, wv.u_bytes + wv.part_bytes)
    if wv.u == NULL:
        return NNC_OOM
    rc = nnc_parallel_for((wv.o + OUT_CHANNELS_PER_PART - 1) // OUT_CHANNELS_PER_PART,
                          _weights_part, &wv, ctx)
    if rc != NNC_SUCCESS:
        return rc
    return nnc_parallel_for(tile_parts * wv.o_parts, _tiles_part, &wv, ctx)


def _accept(Cmd cmd, list inputs, list outputs):
    """3x3 kernels, stride 1, groups 1; channels contiguous in x and the output, w and bias
    contiguous"""
    cdef nnc_tensor_t* io[4]
    cdef int n_in = tensor_views(inputs, io, 3)
    cdef int n_out = tensor_views(outputs, io + 3, 1)
    # The backend's own checks, on the Tensors' C views: the two cannot disagree.
    return (n_in >= 0 and n_out >= 0 and conv_operands_ok(io, n_in, io + 3, n_out)
            and cmd.param.activation <= ACTIVATION_RELU and _winograd_shape(&cmd.param, io[1]))


def register():
    # Priority 12: below CPU_OPT (20), so default selection keeps im2col; autotune measures
    # both and keeps this one where it is faster (docs/commands.md).
    register_c_backend("CONVOLUTION", "CPU_OPT_WINOGRAD", conv_winograd, NNC_32F | NNC_64F,
                       False, _accept, 12, True)
