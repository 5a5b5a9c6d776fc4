"""CONVOLUTION's CPU_OPT backend in C, no GIL: float32 on nnc's own kernels, float64 on BLAS.

This module checks the call, describes it (conv_t, conv_geometry.pxd) and plans its parts;
it runs the float64 and depthwise paths. The float32 GEMM path runs in conv_packed.pyx (the
packed weights and the tiles), over A rows made by conv_rows.pyx; the kernels themselves are
in the headers.

NNC: cmd/convolution/cpu_opt/_ccv_nnc_conv_cpu_opt.c, which packs input patches into scratch
memory and multiplies them with the weights, split across threads by output rows. Here:

- float32 (docs/kernels.md): the weights are packed for nnc's GEMM tiles
  (cmd/gemm/sgemm_kernel.h, AVX-512 / AVX2 / baseline by ``cpu_isa()``) once per call into the
  caller's workspace, or, when they are frozen (``Graph.freeze``; ``nnc.models`` and
  ``nnc.onnx.load`` freeze weights), once for good: the packed copy is kept with the frozen
  memory (nnc.tensor.constant), so a run reads them once, in the order the tiles use them. The
  tiles take A's rows by pointer: a pointwise (1x1, stride 1, no padding) convolution's rows
  are the input's pixels themselves; any other's are pointers into the input too (an
  indirect convolution, as XNNPACK's): per kernel row to its run of kw pixels, or per tap to
  one pixel, the padding a row of zeros; only a few shapes copy im2col patches per part into
  the running thread's workspace (see _indirect_min_cg). Bias, residual and activation are
  applied in registers before a tile is stored. Each output value is one sum in one order
  whichever part computes it, so the bits never depend on the split or the thread count (they
  depend on the ISA level).
- float64: each part copies its patches (none for pointwise) and multiplies them with one
  single-threaded BLAS GEMM per group (nnc.base.openblas), then a pass adds the bias and the
  residual and applies the activation while the rows are hot.
- A depthwise convolution (groups = C = O) is no GEMM (it would be O one-column products): in
  float32 it runs nnc's own kernel (cmd/convolution/depthwise_kernel.h: vectorised over channels
  per CPU ISA, 3x3 weights in registers, interior pixels without bounds checks, bias and
  activation fused), on weights laid out tap by tap once per call in the caller's workspace (its
  parts take none of their own); float64 is a direct loop over taps.
- The output's pixels are cut into *parts* of whole output rows (about 512 KiB of patches and
  at least 512 pixels each when patches are copied; two per thread otherwise, as pointwise);
  parts run through nnc_parallel_for (nnc.base.parallel): idle pool threads take some, so a
  large convolution uses every core in a sequential run, and in a scheduled run a thread whose
  stream waits helps the other stream's convolution. Parts write disjoint output rows; the
  weights are only read. With few parts they are evened out to a
  multiple of ``parallel_width`` (the pool's size); a pointwise convolution takes two parts
  per thread. With too few pixels for that many parts (17x17 and 8x8 layers) every A row is
  made once (the patches copied in parts of rows when large) and a part is one packed panel of
  output channels by one block of output rows, about four parts per thread, so that the
  threads end together. Below 1M multiply-adds and 256 KiB of weights nothing is split (a
  depthwise multiply-add counts four), and in float32 nothing is split for a call no helper may
  join (intra-op 1): nnc's kernels give each output the same sum whatever the cut, so the
  uncut call has the same bits and skips what the cut costs one thread.
- The output may be a channel slice of a wider buffer (a concat's part), the input and the
  residual any views whose channels are contiguous: the pixel strides are the leading
  dimensions.

Weights are [O, kh, kw, C/groups] (NNC's layout), i.e. one [O, K] row-major matrix per group
with K ordered (i, j, c), the order each patch row is copied in. Part sizes were chosen by
sweeping them (``_tune``) over Inception-V3's layers."""

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_OOM, NNC_SUCCESS
from nnc.base.isa cimport cpu_isa
from nnc.base.openblas cimport BLAS_NO_TRANS, BLAS_TRANS, nnc_dgemm, nnc_sgemm
from nnc.base.parallel cimport (
    nnc_parallel_for, nnc_workspace, parallel_threads, parallel_width,
)
from nnc.cmd.command cimport (ACTIVATION_CLAMP, ACTIVATION_HARD_SWISH, ACTIVATION_RELU,
                              ACTIVATION_SWISH, Cmd, nnc_cmd_param_t, register_c_backend)
from nnc.cmd.convolution.conv_geometry cimport (INDIRECT_NONE, INDIRECT_RUNS, INDIRECT_TAPS,
                                                SPLIT_EVEN, conv_t, out_row, real, rows_even)
from nnc.cmd.convolution.conv_packed cimport conv_packed
from nnc.cmd.convolution.conv_rows cimport im2col
from nnc.cmd.cpu_check cimport conv_operands_ok, fits_int, tensor_views
from nnc.cmd.gemm.sgemm_kernel cimport (NNC_ACT_CLAMP, NNC_ACT_HSWISH, NNC_ACT_NONE,
                                        NNC_ACT_RELU, NNC_ACT_SILU, NNC_SGEMM_ZEROS,
                                        nnc_epilogue_t)
from nnc.tensor.tensor cimport nnc_tensor_t

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

# Patch-matrix bytes per part: small enough to stay in L2 between copy and GEMM, large
# enough that GEMM runs at full speed (python -m benchmarks.conv; docs/benchmarks.md).
cdef Py_ssize_t _part_bytes = 1 << 19
# No part has fewer output pixels than this: BLAS (float64) packs the weights once per call,
# which a part of few pixels would not amortise; below it per thread the float32 path splits
# output channels instead. Pointwise parts (no patches to keep hot) use it too.
cdef Py_ssize_t _part_pixels = 512

# A convolution below this many multiply-adds (about 20 us of one core) runs whole on its
# thread: a split costs a few microseconds when a helper spins (as one does through a run that
# splits), more when one must be woken ...
cdef Py_ssize_t _split_macs = 1000000
# ... unless its weights take this many bytes: a few-pixel layer (the 8x8 to 1x1 maps of small
# images) streams its weights from memory, which one core cannot do at the memory's speed, so
# its output channels are split even when it computes little. (Swept at two threads on the
# 2-vCPU VM once helpers spun through runs and were woken late: 4 M / 1 MiB -> 1 M / 256 KiB
# took Inception-V3 at 75x75 from 6.99 to 6.77 ms and MobileNet-V2 from 5.94 to 5.41 ms;
# lower thresholds were within the noise.)
cdef Py_ssize_t _split_weight_bytes = 1 << 18
# A depthwise multiply-add takes several times a GEMM's (no register blocking over input
# channels, one load per tap): its size counts this many times against _split_macs, so
# MobileNet's 28x28 to 7x7 depthwise layers split too.
cdef Py_ssize_t _depthwise_cost = 4
# Parts per pool thread of a split pointwise convolution, claimed one at a time: a helper that
# joins late takes fewer, instead of the caller waiting for its one half.
cdef Py_ssize_t _pointwise_parts = 2

# float32 convolutions take their A rows by pointer from the input (an indirect convolution,
# no im2col copy), in one of two ways:
# - kernel row by kernel row (INDIRECT_RUNS; groups = 1, pixels contiguous): the kw pixels
#   under a kernel row are one run of kw * c floats, so each set of row pointers feeds a loop
#   of kw * c steps; windows crossing the left or right edge are copied with the padding's
#   zeros. Taken when _runs is 2, or when it is 1 and the input is thin (fewer than 16
#   channels: the first layer) or at most 1/8 of the output columns are such copies;
# - else tap by tap (INDIRECT_TAPS), a pointer per pixel and tap, with at least
#   _indirect_min_cg input channels per group (a tap of fewer is a loop of a few steps per
#   set of row pointers) and at most NNC_SGEMM_ZEROS;
# and else patches are copied (im2col). Measured, 1 thread (tests keep the three paths' bits
# equal): Inception-V3's first layer 57 -> 82 GFLOP/s, ResNet-50's 91 -> 104, the 3x3 layers
# of 56x56x64 and 35x35x96 105 -> 113 and 108 -> 114, 14x14x256 111 -> 115 (taps).
cdef Py_ssize_t _indirect_min_cg = 4
cdef int _runs = 1
# Whether the float32 tiles fetch each next weight panel ahead (nnc_sgemm_packed_ahead).
# Where a part ends at a panel another thread takes next, the fetch is still worth it: with
# one panel a part (7x7 maps at 2 threads), fetching the panel width parts on, the one this
# thread would likely take, measured the same as the next one (7x7 1x1 layers, 2 threads,
# weights cold: 143 -> 153 GFLOP/s either way).
cdef bint _prefetch = True


def _tune(part_bytes, part_pixels, split_macs=None, split_weight_bytes=None):
    """Set the part sizes and the smallest convolution worth splitting (for sweeps in
    benchmarks); returns the previous (part_bytes, part_pixels, split_macs,
    split_weight_bytes)."""
    global _part_bytes, _part_pixels, _split_macs, _split_weight_bytes
    old = (_part_bytes, _part_pixels, _split_macs, _split_weight_bytes)
    _part_bytes, _part_pixels = max(1, part_bytes), max(1, part_pixels)
    if split_macs is not None:
        _split_macs = max(0, split_macs)
    if split_weight_bytes is not None:
        _split_weight_bytes = max(0, split_weight_bytes)
    return old


def _tune_split(depthwise_cost=None, pointwise_parts=None):
    """Set how depthwise sizes count against the split threshold and how many parts per
    thread a pointwise convolution takes (for sweeps in benchmarks); returns the previous
    (depthwise_cost, pointwise_parts)."""
    global _depthwise_cost, _pointwise_parts
    old = (_depthwise_cost, _pointwise_parts)
    if depthwise_cost is not None:
        _depthwise_cost = max(1, depthwise_cost)
    if pointwise_parts is not None:
        _pointwise_parts = max(1, pointwise_parts)
    return old


def _tune_prefetch(on=None):
    """Whether the float32 tiles fetch each next weight panel ahead (for A/B runs); returns
    the previous setting."""
    global _prefetch
    old = _prefetch
    if on is not None:
        _prefetch = bool(on)
    return old


def _tune_indirect(min_cg=None, runs=None):
    """Set the fewest input channels per group of a tap-by-tap indirect float32 convolution
    (a huge value: none) and when kernel-row runs are taken (0 never, 1 by the rule above, 2
    whenever they can be): for A/B runs and for tests that compare the paths. Returns the
    previous (min_cg, runs)."""
    global _indirect_min_cg, _runs
    old = (_indirect_min_cg, _runs)
    if min_cg is not None:
        _indirect_min_cg = max(1, min_cg)
    if runs is not None:
        _runs = min(2, max(0, runs))
    return old


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


cdef int _split_channels(conv_t* cv, int width, Py_ssize_t itemsize, void* ctx) noexcept nogil:
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


cdef void _empty_sums(const conv_t* cv, real* y0) noexcept nogil:
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


cdef int conv_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef conv_t cv
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* w
    cdef nnc_tensor_t* b
    cdef nnc_tensor_t* r
    cdef nnc_tensor_t* y
    cdef int d, dtype, itemsize
    cdef Py_ssize_t part_pixels, parts, i
    cdef int width
    cdef bint packed
    if not conv_operands_ok(inputs, n_in, outputs, n_out):
        return NNC_INVALID
    x, w, y = inputs[0], inputs[1], outputs[0]
    b = inputs[2] if n_in >= 3 else NULL
    dtype = y.datatype
    d = x.ndim - 3                      # 1 with a batch axis, 0 without
    cv.dtype = dtype
    cv.x, cv.w, cv.out = <char*>x.data, <const char*>w.data, <char*>y.data
    cv.bias = <const char*>b.data if b != NULL else NULL
    cv.n = x.dim[0] if d else 1
    cv.xs_n = x.stride[0] if d else 0
    cv.h, cv.wd, cv.c = x.dim[d], x.dim[d + 1], x.dim[d + 2]
    cv.xs_h, cv.xs_w = x.stride[d], x.stride[d + 1]
    cv.os_n = y.stride[0] if d else 0
    cv.ho, cv.wo, cv.o = y.dim[d], y.dim[d + 1], y.dim[d + 2]
    cv.os_h, cv.os_w = y.stride[d], y.stride[d + 1]
    cv.kh, cv.kw = <int>w.dim[1], <int>w.dim[2]
    cv.sh, cv.sw = p.stride[0], p.stride[1]
    cv.pt, cv.pl = p.pad[0], p.pad[1]
    cv.groups = p.groups
    cv.isa = cpu_isa()                  # one level for every part and pass: the same bits
    cv.act = (NNC_ACT_RELU if p.activation == ACTIVATION_RELU else
              NNC_ACT_CLAMP if p.activation == ACTIVATION_CLAMP else
              NNC_ACT_HSWISH if p.activation == ACTIVATION_HARD_SWISH else
              NNC_ACT_SILU if p.activation == ACTIVATION_SWISH else NNC_ACT_NONE)
    cv.lo, cv.hi = <float>p.a, <float>p.b
    r = inputs[3] if n_in == 4 else NULL
    cv.residual = <const char*>r.data if r != NULL else NULL
    cv.rs_n = r.stride[0] if r != NULL and d else 0
    cv.rs_h = r.stride[d] if r != NULL else 0
    cv.rs_w = r.stride[d + 1] if r != NULL else 0
    # Re-check what the loops rely on (the command's check did, but a C backend may be called
    # directly): shapes agree, the output lies where the window says, nothing overflows int.
    if cv.groups < 1 or cv.c % cv.groups or cv.o % cv.groups or cv.sh < 1 or cv.sw < 1:
        return NNC_INVALID
    cv.cg, cv.og = cv.c // cv.groups, cv.o // cv.groups
    cv.k = cv.kh * cv.kw * cv.cg
    if w.dim[0] != cv.o or w.dim[3] != cv.cg or (d and y.dim[0] != cv.n):
        return NNC_INVALID
    if (cv.ho != (cv.h + cv.pt + p.pad[2] - cv.kh) // cv.sh + 1
            or cv.wo != (cv.wd + cv.pl + p.pad[3] - cv.kw) // cv.sw + 1
            or cv.h + cv.pt + p.pad[2] < cv.kh or cv.wd + cv.pl + p.pad[3] < cv.kw):
        return NNC_INVALID
    if not (fits_int(cv.k) and fits_int(cv.o) and fits_int(cv.xs_w) and fits_int(cv.os_w)
            and fits_int(cv.n * cv.ho * cv.wo)):
        return NNC_INVALID
    cv.rows = cv.n * cv.ho
    itemsize = 4 if dtype == NNC_32F else 8
    if cv.rows == 0 or cv.o == 0 or cv.wo == 0:
        return NNC_SUCCESS
    if cv.k == 0:
        # No input channels: every sum is empty (BLAS refuses K = 0 with lda 0), so the output
        # is the bias, through the ReLU.
        if dtype == NNC_32F:
            _empty_sums(&cv, <float*>cv.out)
        else:
            _empty_sums(&cv, <double*>cv.out)
        return NNC_SUCCESS
    cv.pointwise = (cv.kh == 1 and cv.kw == 1 and cv.sh == 1 and cv.sw == 1 and cv.pt == 0
                    and cv.pl == 0 and p.pad[2] == 0 and p.pad[3] == 0)
    cv.depthwise = cv.groups > 1 and cv.cg == 1 and cv.og == 1
    width = parallel_width()
    if (cv.rows * cv.wo * cv.o * cv.k * (_depthwise_cost if cv.depthwise else 1) < _split_macs
            and cv.o * cv.k * itemsize < _split_weight_bytes):
        width = 1                       # too small to be worth waking a helper
    elif dtype == NNC_32F and parallel_threads() <= 1:
        # No helper may join: uncut, with the same bits (nnc's float32 kernels sum each output
        # in one order whatever the cut; tests/cmd/test_conv_split.py). float64's BLAS calls
        # keep the pool's cut, which sets their bits. Cut for one thread, the few-pixel layers
        # of Inception-V3 at 75x75 ran about 5 % slower.
        width = 1
    packed = dtype == NNC_32F and not cv.depthwise
    cv.ahead = 1 if _prefetch else 0
    cv.indirect, cv.taps, cv.kt, cv.edge_q = INDIRECT_NONE, 1, cv.k, 0
    if packed and not cv.pointwise:
        for i in range(cv.wo):
            if i * cv.sw - cv.pl < 0 or i * cv.sw - cv.pl + cv.kw > cv.wd:
                cv.edge_q += 1
        if (_runs and cv.groups == 1 and cv.xs_w == cv.c and cv.kw * cv.c <= NNC_SGEMM_ZEROS
                and (_runs == 2 or cv.c < 16 or cv.edge_q * 8 <= cv.wo)):
            cv.indirect, cv.taps, cv.kt = INDIRECT_RUNS, cv.kh, cv.kw * cv.c
        elif cv.cg >= _indirect_min_cg and cv.cg <= NNC_SGEMM_ZEROS:
            cv.indirect, cv.taps, cv.kt = INDIRECT_TAPS, cv.kh * cv.kw, cv.cg
    if cv.pointwise or cv.indirect:
        # No patches to keep in cache: one GEMM per part (one for the whole image alone). A
        # part's row pointers (taps of them a pixel) stay within about _part_bytes, so a
        # large image does not take a workspace of pointers taps times its size.
        parts = min(width * _pointwise_parts if width > 1 else 1, cv.rows)
        parts = max(parts, min(cv.rows, (cv.rows * cv.wo * cv.taps * <Py_ssize_t>sizeof(
            float*) + _part_bytes - 1) // _part_bytes))
    else:
        part_pixels = _part_pixels
        if not cv.depthwise:
            part_pixels = max(part_pixels, _part_bytes // (cv.k * itemsize))
        parts = (cv.rows + max(1, part_pixels // cv.wo) - 1) // max(1, part_pixels // cv.wo)
    if width > 1 and parts < SPLIT_EVEN * width:
        if cv.rows * cv.wo < _part_pixels * width and cv.groups == 1 and cv.o >= 2 * 16:
            # Too few pixels for each part to be a GEMM worth the name (17x17, 8x8).
            if packed:
                return conv_packed(&cv, 0, True, width, _part_bytes, ctx)
            return _split_channels(&cv, width, itemsize, ctx)
        # A few parts: a multiple of the width, so no thread waits at the end for a lone part.
        parts = (parts + width - 1) // width * width
    cv.rows_per_part = (cv.rows + parts - 1) // parts
    parts = (cv.rows + cv.rows_per_part - 1) // cv.rows_per_part
    if packed:
        return conv_packed(&cv, parts, False, width, _part_bytes, ctx)
    if cv.depthwise:
        # The weights tap by tap, in the caller's workspace: depthwise parts take none of their
        # own, so this stays valid while they run.
        cv.patch = <const char*>nnc_workspace(ctx, cv.kh * cv.kw * cv.c * itemsize)
        if cv.patch == NULL:
            return NNC_OOM
        if dtype == NNC_32F:
            cv.finite = nnc_dw_taps(<const float*>cv.w, cv.c, cv.kh * cv.kw, <float*>cv.patch)
        else:
            _taps_first(&cv, <double*>cv.patch)
    return nnc_parallel_for(parts, _part, &cv, ctx)


def _accept(Cmd cmd, list inputs, list outputs):
    """Channels contiguous in x and the output (any pixel strides); w and bias contiguous."""
    cdef nnc_tensor_t* io[5]
    cdef int n_in = tensor_views(inputs, io, 4)
    cdef int n_out = tensor_views(outputs, io + 4, 1)
    # The backend's own operand check, on the Tensors' C views: the two cannot disagree.
    return n_in >= 0 and n_out >= 0 and conv_operands_ok(io, n_in, io + 4, n_out)


def register():
    register_c_backend("CONVOLUTION", "CPU_OPT", conv_opt, NNC_32F | NNC_64F, False, _accept,
                       None, True)
