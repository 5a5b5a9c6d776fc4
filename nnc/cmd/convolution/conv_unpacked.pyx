"""The CONVOLUTION CPU_OPT paths that compute the sums and then apply the epilogue in a pass
over the rows still in cache: float64 (patches times one single-threaded BLAS GEMM per group and
part, none for pointwise; with too few rows, output channels split over patches made once) and
depthwise (float32 on nnc's own kernel, cmd/convolution/depthwise_kernel.h, which fuses the
epilogue but for a residual; float64 a direct loop over taps). Also the call whose sums are all
empty (no input channels). cpu_opt.pyx plans the call and hands it here."""

from nnc.base.core cimport NNC_32F, NNC_OOM, NNC_SUCCESS
from nnc.base.openblas cimport BLAS_NO_TRANS, BLAS_TRANS, nnc_dgemm, nnc_sgemm
from nnc.base.parallel cimport nnc_parallel_for, nnc_workspace
from nnc.cmd.convolution.conv_geometry cimport conv_t, out_row, real, rows_even
from nnc.cmd.convolution.conv_patches cimport im2col
from nnc.cmd.gemm.sgemm_kernel cimport (NNC_ACT_CLAMP, NNC_ACT_HSWISH, NNC_ACT_NONE,
                                        NNC_ACT_RELU, nnc_epilogue_t)
from nnc.tensor.constant cimport constant_pack

cdef extern from "cmd/convolution/depthwise_kernel.h" nogil:
    ctypedef struct nnc_dw_t:
        const float* x
        Py_ssize_t xs_n, xs_h, xs_w, h, w, c
        float* y
        Py_ssize_t ys_n, ys_h, ys_w, ho, wo
        int kh, kw, sh, sw, pt, pl
        const float* taps
        int finite
    int nnc_dw_taps(const float* w, Py_ssize_t c, Py_ssize_t taps, float* out)
    void nnc_dw_rows(int isa, const nnc_dw_t* d, Py_ssize_t r0, Py_ssize_t r1,
                     const nnc_epilogue_t* ep)

cdef enum:
    # The tap-by-tap weights' layout version in frozen weights' cache key (nnc.tensor.constant):
    # each family that keeps copies has its own, so two layouts never share a key (the
    # convolution's packed panels are 2, GEMM's 3, Winograd's U 4).
    TAPS_FORMAT = 5


# The element-wise commands' own loops (HARD_SWISH, SWISH at an ISA level): the epilogue pass
# (float64, and float32 where the kernel did not fuse it) runs them on each pixel's channels, so
# its values are the commands' bits.
cdef extern from "cmd/elementwise/act_kernel.h" nogil:
    enum:
        NNC_ACT_SWISH                   # act_kernel.h's operation codes, not NNC_ACT_SILU's
        NNC_ACT_HARD_SWISH
    void nnc_act_f32(int op, int isa, float* y, const float* x, Py_ssize_t n, double a,
                     double b)
    void nnc_act_f64(int op, int isa, double* y, const double* x, Py_ssize_t n, double a,
                     double b)


cdef void _gemm_cols(const conv_t* cv, const real* a, Py_ssize_t lda, Py_ssize_t m,
                     Py_ssize_t c0, Py_ssize_t n, real* c, Py_ssize_t ldc) noexcept nogil:
    """c[m, c0:c0+n] = a[m, K] . w[c0:c0+n, K]^T (output channels c0.. of the weights)."""
    cdef const real* w = <const real*>cv.w + c0 * cv.k
    if real is float:
        nnc_sgemm(BLAS_NO_TRANS, BLAS_TRANS, <int>m, <int>n, <int>cv.k, 1.0, a, <int>lda,
                  w, <int>cv.k, 0.0, c + c0, <int>ldc)
    else:
        nnc_dgemm(BLAS_NO_TRANS, BLAS_TRANS, <int>m, <int>n, <int>cv.k, 1.0, a, <int>lda,
                  w, <int>cv.k, 0.0, c + c0, <int>ldc)


cdef inline void _gemm(const conv_t* cv, const real* a, Py_ssize_t lda, Py_ssize_t m,
                       Py_ssize_t g, real* c, Py_ssize_t ldc) noexcept nogil:
    """c[m, og] = a[m, K] . w_g[og, K]^T (group g's weights, its output channels at c)."""
    _gemm_cols(cv, a, lda, m, g * cv.og, cv.og, c, ldc)


cdef inline bint _has_epilogue(const conv_t* cv) noexcept nogil:
    return cv.bias != NULL or cv.residual != NULL or cv.act != NNC_ACT_NONE


cdef void _epilogue(const conv_t* cv, real* y0, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t c0,
                    Py_ssize_t c1) noexcept nogil:
    """Add the bias and the residual and apply the activation to rows r0..r1, channels
    c0..c1, while they are still in cache. max/min keep a NaN (v is the operand tested);
    HARD_SWISH and SWISH are the element-wise commands' loops at cv.isa, on each pixel."""
    cdef Py_ssize_t r, _q, j, o = c1 - c0, wo = cv.wo, os_w = cv.os_w, rs_w = cv.rs_w
    cdef int op = NNC_ACT_HARD_SWISH if cv.act == NNC_ACT_HSWISH else NNC_ACT_SWISH
    cdef real* y
    cdef const real* res = NULL
    cdef real v
    cdef const real* b = <const real*>cv.bias + c0 if cv.bias != NULL else NULL
    cdef int act = cv.act
    cdef real lo = cv.lo, hi = cv.hi
    for r in range(r0, r1):
        y = out_row(cv, y0, r) + c0
        if cv.residual != NULL:
            res = (<const real*>cv.residual + (r // cv.ho) * cv.rs_n + (r % cv.ho) * cv.rs_h
                   + c0)
        for _q in range(wo):
            for j in range(o):
                v = y[j]
                if b != NULL:
                    v = v + b[j]
                if res != NULL:
                    v = v + res[j]
                if act == NNC_ACT_RELU:
                    v = 0 if v < 0 else v
                elif act == NNC_ACT_CLAMP:
                    v = lo if v < lo else v
                    v = hi if v > hi else v
                y[j] = v
            if act >= NNC_ACT_HSWISH:
                if real is float:
                    nnc_act_f32(op, cv.isa, y, y, o, 0.0, 0.0)
                else:
                    nnc_act_f64(op, cv.isa, y, y, o, 0.0, 0.0)
            y += os_w
            if res != NULL:
                res += rs_w

cdef int _part_im2col(const conv_t* cv, real* y0, Py_ssize_t r0, Py_ssize_t r1,
                      void* context) noexcept nogil:
    cdef Py_ssize_t m = (r1 - r0) * cv.wo, r, g
    cdef real* patch = <real*>nnc_workspace(context, m * cv.k * sizeof(real))
    cdef bint even = rows_even(r0, r1, cv.ho, cv.wo, cv.os_n, cv.os_h, cv.os_w)
    if patch == NULL:
        return NNC_OOM
    for g in range(cv.groups):
        im2col(cv, patch, r0, r1, g)
        if even:
            _gemm(cv, patch, cv.k, m, g, out_row(cv, y0, r0), cv.os_w)
        else:
            for r in range(r0, r1):
                _gemm(cv, patch + (r - r0) * cv.wo * cv.k, cv.k, cv.wo, g,
                      out_row(cv, y0, r), cv.os_w)
    return NNC_SUCCESS


cdef void _part_pointwise(const conv_t* cv, real* y0, Py_ssize_t r0,
                          Py_ssize_t r1) noexcept nogil:
    cdef Py_ssize_t r, g
    cdef real* x
    cdef bint even = (rows_even(r0, r1, cv.ho, cv.wo, cv.os_n, cv.os_h, cv.os_w)
                      and rows_even(r0, r1, cv.ho, cv.wo, cv.xs_n, cv.xs_h, cv.xs_w))
    for g in range(cv.groups):
        if even:
            x = <real*>cv.x + (r0 // cv.ho) * cv.xs_n + (r0 % cv.ho) * cv.xs_h + g * cv.cg
            _gemm(cv, x, cv.xs_w, (r1 - r0) * cv.wo, g, out_row(cv, y0, r0), cv.os_w)
            continue
        for r in range(r0, r1):
            x = <real*>cv.x + (r // cv.ho) * cv.xs_n + (r % cv.ho) * cv.xs_h + g * cv.cg
            _gemm(cv, x, cv.xs_w, cv.wo, g, out_row(cv, y0, r), cv.os_w)


cdef void _part_depthwise(const conv_t* cv, real* y0, Py_ssize_t r0,
                          Py_ssize_t r1) noexcept nogil:
    """out[n, oh, q, c] = sum over taps of x[n, ih, iw, c] * w[c, i, j, 0]: a direct loop,
    innermost over channels, contiguous in x, out and the weights, which the caller laid out
    tap by tap ([kh * kw, C], in cv.patch) so that loop vectorises. Locals, not fields, in the
    loops (the build's -fno-strict-aliasing would reload every field after each store)."""
    cdef Py_ssize_t r, q, i, j, ih, iw, oh, ch, c = cv.c, kw = cv.kw, kh = cv.kh
    cdef Py_ssize_t sh = cv.sh, sw = cv.sw, pt = cv.pt, pl = cv.pl, h = cv.h, wd = cv.wd
    cdef Py_ssize_t ho = cv.ho, wo = cv.wo, os_w = cv.os_w, xs_h = cv.xs_h, xs_w = cv.xs_w
    cdef real* y
    cdef const real* src
    cdef const real* row
    cdef const real* wt
    cdef const real* taps = <const real*>cv.patch
    for r in range(r0, r1):
        oh = r % ho
        row = <const real*>cv.x + (r // ho) * cv.xs_n
        y = out_row(cv, y0, r)
        for q in range(wo):
            for ch in range(c):
                y[ch] = 0
            for i in range(kh):
                ih = oh * sh - pt + i
                if ih < 0 or ih >= h:
                    continue
                for j in range(kw):
                    iw = q * sw - pl + j
                    if iw < 0 or iw >= wd:
                        continue
                    src = row + ih * xs_h + iw * xs_w
                    wt = taps + (i * kw + j) * c
                    for ch in range(c):
                        y[ch] = y[ch] + src[ch] * wt[ch]
            y += os_w


cdef void _part_depthwise_f32(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1,
                              bint epilogue) noexcept nogil:
    """Rows r0..r1 of a float32 depthwise convolution through nnc's own kernel
    (cmd/convolution/depthwise_kernel.h): vectorised over channels at the ISA the call chose,
    the 3x3 weights in registers, with ``epilogue`` the bias and activation applied before the
    store (no second pass)."""
    cdef nnc_dw_t d
    cdef nnc_epilogue_t ep
    d.x, d.xs_n, d.xs_h, d.xs_w = <const float*>cv.x, cv.xs_n, cv.xs_h, cv.xs_w
    d.h, d.w, d.c = cv.h, cv.wd, cv.c
    d.y, d.ys_n, d.ys_h, d.ys_w = <float*>cv.out, cv.os_n, cv.os_h, cv.os_w
    d.ho, d.wo = cv.ho, cv.wo
    d.kh, d.kw, d.sh, d.sw, d.pt, d.pl = cv.kh, cv.kw, cv.sh, cv.sw, cv.pt, cv.pl
    d.taps, d.finite = <const float*>cv.patch, cv.finite
    ep.bias = <const float*>cv.bias if epilogue else NULL
    ep.residual, ep.ldr = NULL, 0
    ep.act = cv.act if epilogue else NNC_ACT_NONE
    ep.lo, ep.hi = cv.lo, cv.hi
    nnc_dw_rows(cv.isa, &d, r0, r1, &ep)


cdef void _taps_first(const conv_t* cv, real* out) noexcept nogil:
    """out[tap, c] = w[c, tap]: a depthwise convolution's weights, tap by tap."""
    cdef Py_ssize_t ch, t, taps = cv.kh * cv.kw
    cdef const real* w = <const real*>cv.w
    for ch in range(cv.c):
        for t in range(taps):
            out[t * cv.c + ch] = w[ch * taps + t]


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const conv_t* cv = <const conv_t*>arg
    cdef Py_ssize_t r0 = part * cv.rows_per_part
    cdef Py_ssize_t r1 = min(r0 + cv.rows_per_part, cv.rows)
    cdef int rc = NNC_SUCCESS
    if cv.dtype == NNC_32F:
        rc = _part_typed(cv, <float*>cv.out, r0, r1, context)
    else:
        rc = _part_typed(cv, <double*>cv.out, r0, r1, context)
    return rc


cdef int _part_typed(const conv_t* cv, real* y0, Py_ssize_t r0, Py_ssize_t r1,
                     void* context) noexcept nogil:
    cdef int rc = NNC_SUCCESS
    cdef bint fused = False             # the whole epilogue already applied
    if cv.depthwise:
        if real is float:
            # The kernel's epilogue has no residual: with one, the whole epilogue (bias,
            # residual, activation, in that order) is the separate pass below.
            fused = cv.residual == NULL
            _part_depthwise_f32(cv, r0, r1, fused)
        else:
            _part_depthwise(cv, y0, r0, r1)
    elif cv.pointwise:
        _part_pointwise(cv, y0, r0, r1)
    else:
        rc = _part_im2col(cv, y0, r0, r1, context)
    if rc == NNC_SUCCESS and not fused and _has_epilogue(cv):
        _epilogue(cv, y0, r0, r1, 0, cv.o)
    return rc


cdef int _channel_part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    """Output channels [part * chunk, ...) of every pixel: for convolutions with too few
    output rows to split (17x17 and 8x8 layers), the caller made all the patches once."""
    cdef const conv_t* cv = <const conv_t*>arg
    cdef Py_ssize_t c0 = part * cv.chunk
    cdef Py_ssize_t c1 = min(c0 + cv.chunk, cv.o)
    if cv.dtype == NNC_32F:
        _channels_typed(cv, <float*>cv.out, c0, c1)
    else:
        _channels_typed(cv, <double*>cv.out, c0, c1)
    return NNC_SUCCESS


cdef void _channels_typed(const conv_t* cv, real* y0, Py_ssize_t c0,
                          Py_ssize_t c1) noexcept nogil:
    cdef Py_ssize_t r
    cdef const real* a
    cdef bint even = rows_even(0, cv.rows, cv.ho, cv.wo, cv.os_n, cv.os_h, cv.os_w)
    if cv.patch != NULL:
        if even:
            _gemm_cols(cv, <const real*>cv.patch, cv.k, cv.rows * cv.wo, c0, c1 - c0, y0,
                       cv.os_w)
        else:
            for r in range(cv.rows):
                _gemm_cols(cv, <const real*>cv.patch + r * cv.wo * cv.k, cv.k, cv.wo, c0,
                           c1 - c0, out_row(cv, y0, r), cv.os_w)
    else:
        even = even and rows_even(0, cv.rows, cv.ho, cv.wo, cv.xs_n, cv.xs_h, cv.xs_w)
        for r in range(cv.rows if not even else 1):
            a = <const real*>cv.x + (r // cv.ho) * cv.xs_n + (r % cv.ho) * cv.xs_h
            _gemm_cols(cv, a, cv.xs_w, cv.rows * cv.wo if even else cv.wo, c0, c1 - c0,
                       out_row(cv, y0, r), cv.os_w)
    if _has_epilogue(cv):
        _epilogue(cv, y0, 0, cv.rows, c0, c1)


cdef int split_channels(conv_t* cv, int width, Py_ssize_t itemsize, void* ctx) noexcept nogil:
    """Too few output rows for ``width`` parts: copy every patch once (on the caller, into its
    workspace, which no part touches), then split the output channels."""
    cdef Py_ssize_t m = cv.rows * cv.wo
    cv.patch = NULL
    if not cv.pointwise:
        cv.patch = <const char*>nnc_workspace(ctx, m * cv.k * itemsize)
        if cv.patch == NULL:
            return NNC_OOM
        if cv.dtype == NNC_32F:
            im2col(cv, <float*>cv.patch, 0, cv.rows, 0)
        else:
            im2col(cv, <double*>cv.patch, 0, cv.rows, 0)
    # Chunks of whole 16-channel blocks (full vectors in the epilogue, aligned GEMM panels).
    cv.chunk = ((cv.o + width - 1) // width + 15) // 16 * 16
    return nnc_parallel_for((cv.o + cv.chunk - 1) // cv.chunk, _channel_part, cv, ctx)


cdef void empty_sums(const conv_t* cv, real* y0) noexcept nogil:
    """Every sum empty: y = act(0 + bias + residual). With the residual y itself, y's value
    is the residual: 0 + bias is added to it in place (the same additions, in the epilogue's
    order), then the activation."""
    cdef Py_ssize_t r, q, j
    cdef real* y
    cdef conv_t act_only
    cdef bint aliased = cv.residual == <const char*>cv.out
    for r in range(cv.rows):
        for q in range(cv.wo):
            y = out_row(cv, y0, r) + q * cv.os_w
            for j in range(cv.o):
                if not aliased:
                    y[j] = 0
                elif cv.bias != NULL:
                    y[j] = (0 + (<const real*>cv.bias)[j]) + y[j]
                else:
                    y[j] = 0 + y[j]
    if aliased:
        act_only = cv[0]
        act_only.bias = act_only.residual = NULL
        if _has_epilogue(&act_only):
            _epilogue(&act_only, y0, 0, cv.rows, 0, cv.o)
    elif _has_epilogue(cv):
        _epilogue(cv, y0, 0, cv.rows, 0, cv.o)


cdef void _keep_taps(void* arg, void* dst) noexcept nogil:
    """Frozen float32 depthwise weights tap by tap (nnc_dw_taps), then a float flag: 1 when
    every weight is finite, else 0 (nnc.tensor.constant's callback)."""
    cdef const conv_t* cv = <const conv_t*>arg
    cdef Py_ssize_t n = cv.kh * cv.kw * cv.c
    (<float*>dst)[n] = 1.0 if nnc_dw_taps(<const float*>cv.w, cv.c, cv.kh * cv.kw,
                                          <float*>dst) else 0.0


cdef int conv_unpacked(conv_t* cv, Py_ssize_t parts, Py_ssize_t itemsize,
                       void* ctx) noexcept nogil:
    """Parts of cv.rows_per_part output rows on the pool: float64 through BLAS, or a depthwise
    convolution."""
    cdef Py_ssize_t n = cv.kh * cv.kw * cv.c
    cdef const float* kept = NULL
    if cv.depthwise:
        # The weights tap by tap: frozen ones once for good (kept with them, their finiteness
        # after the taps: a relayout per call took 18 us of a 7x7x1152 5x5 layer's 70), others
        # in the caller's workspace (depthwise parts take none of their own, so it stays valid
        # while they run).
        if cv.dtype == NNC_32F and cv.c < (<Py_ssize_t>1 << 40) and cv.kh * cv.kw < (1 << 20):
            kept = <const float*>constant_pack(
                cv.w, (<unsigned long long>TAPS_FORMAT << 60)
                | (<unsigned long long>(cv.kh * cv.kw) << 40) | <unsigned long long>cv.c,
                (n + 1) * sizeof(float), _keep_taps, cv)
        if kept != NULL:
            cv.patch = <const char*>kept
            cv.finite = kept[n] != 0.0
        else:
            cv.patch = <const char*>nnc_workspace(ctx, n * itemsize)
            if cv.patch == NULL:
                return NNC_OOM
            if cv.dtype == NNC_32F:
                cv.finite = nnc_dw_taps(<const float*>cv.w, cv.c, cv.kh * cv.kw,
                                        <float*>cv.patch)
            else:
                _taps_first(cv, <double*>cv.patch)
    return nnc_parallel_for(parts, _part, cv, ctx)
