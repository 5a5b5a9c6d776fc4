"""CONVOLUTION_TRANSPOSE's CPU_OPT backend in C, no GIL, float32 and float64 on BLAS.

The standard way (NNC's cuDNN path does the same): per group, one GEMM multiplies the input's
pixels [pixels, C/groups] with the weights [C/groups, kh * kw * O/groups] (NNC's layout [C, kh,
kw, O/groups] is that matrix row-major, group by group) into a column buffer, one row per input
pixel holding what it gives every tap; then *col2im* adds each row's taps into the output
pixels they land on.

The output is cut into *parts*: bands of whole output rows of one image. A part first writes
its rows with the bias (or zeros), then multiplies only the input rows whose taps reach its
band and adds only what lands inside it, so parts never write the same pixel (no races, no
atomics, and every output value is one sum in one order whichever part computes it: the bits
do not depend on the split or on the thread count). Input rows whose taps straddle two bands
are multiplied by both; bands are only cut when there are fewer images than helpers (and the
work is worth waking them), so that costs little. Parts run through nnc_parallel_for
(nnc.base.parallel); each takes its column buffer from its thread's workspace.

BLAS does not follow ``cpu_isa()``: the result is the same at every level. The input and the
output may be any views whose channels are contiguous (the pixel strides are the leading
dimensions); the weights and the bias are contiguous. The dilation travels in the command's
``size`` field; the output padding is what the output's shape leaves over."""

from libc.string cimport memset

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_OOM, NNC_SUCCESS
from nnc.base.openblas cimport BLAS_NO_TRANS, nnc_dgemm, nnc_sgemm
from nnc.base.parallel cimport nnc_parallel_for, nnc_workspace, parallel_width
from nnc.cmd.command cimport Cmd, nnc_cmd_param_t, register_c_backend
from nnc.cmd.convolution.conv_geometry cimport floor_div
from nnc.cmd.cpu_check cimport _channels_last, fits_int, tensor_views
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

# A transposed convolution below this many multiply-adds runs whole on its thread: waking a
# helper (tens of microseconds) would cost more than it saves.
cdef Py_ssize_t _split_macs = 4000000
# Bands per image when > 0 (tests and sweeps); 0: chosen by the pool's width as below.
cdef Py_ssize_t _bands = 0

cdef enum:
    # Bands are cut until there are about this many parts per parallel_width.
    SPLIT_EVEN = 4


# The geometry of one call, shared (read-only) by its parts. Strides in elements.
ctypedef struct convt_t:
    int dtype                           # NNC_32F or NNC_64F
    const char* x
    const char* w                       # [c, kh, kw, og], contiguous
    const char* bias                    # NULL: none
    char* out
    Py_ssize_t n, h, wd, c              # input [n, h, wd, c]
    Py_ssize_t xs_n, xs_h, xs_w         # input strides (channel stride is 1)
    Py_ssize_t ho, wo, o                # output [n, ho, wo, o]
    Py_ssize_t os_n, os_h, os_w         # output strides (channel stride is 1)
    Py_ssize_t kh, kw, sh, sw, dh, dw, pt, pl
    Py_ssize_t groups, cg, og           # channels per group in and out
    Py_ssize_t k                        # kh * kw * og: one input pixel's column row
    Py_ssize_t bands                    # parts per image
    Py_ssize_t band_rows                # output rows per band (the last may have fewer)


cdef void _fill(const convt_t* cv, real* y, Py_ssize_t r0, Py_ssize_t r1) noexcept nogil:
    """Output rows r0..r1 of the image at y = the bias (zeros without one)."""
    cdef Py_ssize_t r, q, j, o = cv.o
    cdef const real* b = <const real*>cv.bias
    cdef real* p
    for r in range(r0, r1):
        for q in range(cv.wo):
            p = y + r * cv.os_h + q * cv.os_w
            if b == NULL:
                memset(p, 0, o * sizeof(real))
            else:
                for j in range(o):
                    p[j] = b[j]


cdef void _gemm(const convt_t* cv, const real* a, Py_ssize_t lda, Py_ssize_t m, Py_ssize_t g,
                real* col) noexcept nogil:
    """col[m, k] = a[m, cg] . w_g[cg, k] (group g's rows of the weights)."""
    cdef const real* w = <const real*>cv.w + g * cv.cg * cv.k
    if real is float:
        nnc_sgemm(BLAS_NO_TRANS, BLAS_NO_TRANS, <int>m, <int>cv.k, <int>cv.cg, 1.0, a,
                  <int>lda, w, <int>cv.k, 0.0, col, <int>cv.k)
    else:
        nnc_dgemm(BLAS_NO_TRANS, BLAS_NO_TRANS, <int>m, <int>cv.k, <int>cv.cg, 1.0, a,
                  <int>lda, w, <int>cv.k, 0.0, col, <int>cv.k)


cdef void _col2im(const convt_t* cv, const real* col, Py_ssize_t ih0, Py_ssize_t ih1,
                  Py_ssize_t g, real* y, Py_ssize_t r0, Py_ssize_t r1) noexcept nogil:
    """Add the column rows of input rows ih0..ih1 into output rows r0..r1 (channels of group
    g) of the image at y, each tap where it lands; taps outside those rows or the output's
    width are the cropped ones (or another band's). The geometry is copied into locals:
    extensions build with -fno-strict-aliasing, so each store would otherwise reload it."""
    cdef Py_ssize_t ih, iw, i, j, t, oh, ow
    cdef Py_ssize_t wd = cv.wd, wo = cv.wo, kh = cv.kh, kw = cv.kw, og = cv.og, k = cv.k
    cdef Py_ssize_t sh = cv.sh, sw = cv.sw, dh = cv.dh, dw = cv.dw, pt = cv.pt, pl = cv.pl
    cdef Py_ssize_t os_h = cv.os_h, os_w = cv.os_w
    cdef const real* src
    cdef real* dst
    cdef real* yg = y + g * og
    for ih in range(ih0, ih1):
        for i in range(kh):
            oh = ih * sh - pt + i * dh
            if oh < r0 or oh >= r1:
                continue
            for iw in range(wd):
                src = col + ((ih - ih0) * wd + iw) * k + i * kw * og
                for j in range(kw):
                    ow = iw * sw - pl + j * dw
                    if 0 <= ow < wo:
                        dst = yg + oh * os_h + ow * os_w
                        for t in range(og):
                            dst[t] += src[t]
                    src += og


cdef int _band(const convt_t* cv, Py_ssize_t part, void* context, real* _type) noexcept nogil:
    """One part: output rows [r0, r1) of one image."""
    cdef Py_ssize_t b = part // cv.bands
    cdef Py_ssize_t r0 = (part % cv.bands) * cv.band_rows
    cdef Py_ssize_t r1 = min(r0 + cv.band_rows, cv.ho)
    cdef Py_ssize_t ih0, ih1, g, ih, m
    cdef real* y = <real*>cv.out + b * cv.os_n
    cdef const real* x = <const real*>cv.x + b * cv.xs_n
    cdef real* col
    _fill(cv, y, r0, r1)
    if cv.cg == 0:
        return NNC_SUCCESS              # no input channels: the bias alone
    # The input rows with a tap in [r0, r1): ih * sh - pt + i * dh in it for some i < kh.
    ih0 = max(0, -floor_div(-(r0 + cv.pt - (cv.kh - 1) * cv.dh), cv.sh))
    ih1 = min(cv.h, floor_div(r1 - 1 + cv.pt, cv.sh) + 1)
    if ih0 >= ih1:
        return NNC_SUCCESS
    m = (ih1 - ih0) * cv.wd
    col = <real*>nnc_workspace(context, m * cv.k * sizeof(real))
    if col == NULL:
        return NNC_OOM
    for g in range(cv.groups):
        if cv.xs_h == cv.wd * cv.xs_w:
            # The rows are one evenly strided run of pixels: one GEMM.
            _gemm(cv, x + ih0 * cv.xs_h + g * cv.cg, cv.xs_w, m, g, col)
        else:
            for ih in range(ih0, ih1):
                _gemm(cv, x + ih * cv.xs_h + g * cv.cg, cv.xs_w, cv.wd, g,
                      col + (ih - ih0) * cv.wd * cv.k)
        _col2im(cv, col, ih0, ih1, g, y, r0, r1)
    return NNC_SUCCESS


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const convt_t* cv = <const convt_t*>arg
    if cv.dtype == NNC_32F:
        return _band(cv, part, context, <float*>NULL)
    return _band(cv, part, context, <double*>NULL)


cdef bint convt_operands_ok(nnc_tensor_t** inputs, int n_in, nnc_tensor_t** outputs,
                            int n_out) noexcept nogil:
    """(x, w) or (x, w, bias) -> y, all in CPU memory and of y's float dtype; x and y [n, h,
    w, c] or [h, w, c] (same rank) with contiguous channels; w [C, kh, kw, O/groups] and bias
    [O] contiguous."""
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* w
    cdef nnc_tensor_t* b
    cdef nnc_tensor_t* y
    cdef int dtype
    if n_in < 2 or n_in > 3 or n_out != 1 or inputs[0] == NULL or outputs[0] == NULL:
        return False
    x, w, y = inputs[0], inputs[1], outputs[0]
    b = inputs[2] if n_in == 3 else NULL
    dtype = y.datatype
    if not (dtype == NNC_32F or dtype == NNC_64F):
        return False
    if not (_channels_last(x, dtype) and _channels_last(y, dtype)) or y.ndim != x.ndim:
        return False
    if w == NULL or w.device >= 0 or w.datatype != dtype or not w.contiguous or w.ndim != 4:
        return False
    return b == NULL or (b.device < 0 and b.datatype == dtype and b.contiguous
                         and b.count == y.dim[y.ndim - 1])


cdef int convt_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef convt_t cv
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* w
    cdef nnc_tensor_t* b
    cdef nnc_tensor_t* y
    cdef int d, width
    cdef Py_ssize_t full_h, full_w, parts
    if not convt_operands_ok(inputs, n_in, outputs, n_out):
        return NNC_INVALID
    x, w, y = inputs[0], inputs[1], outputs[0]
    b = inputs[2] if n_in == 3 else NULL
    d = x.ndim - 3                      # 1 with a batch axis, 0 without
    cv.dtype = y.datatype
    cv.x, cv.w, cv.out = <const char*>x.data, <const char*>w.data, <char*>y.data
    cv.bias = <const char*>b.data if b != NULL else NULL
    cv.n = x.dim[0] if d else 1
    cv.xs_n = x.stride[0] if d else 0
    cv.h, cv.wd, cv.c = x.dim[d], x.dim[d + 1], x.dim[d + 2]
    cv.xs_h, cv.xs_w = x.stride[d], x.stride[d + 1]
    cv.os_n = y.stride[0] if d else 0
    cv.ho, cv.wo, cv.o = y.dim[d], y.dim[d + 1], y.dim[d + 2]
    cv.os_h, cv.os_w = y.stride[d], y.stride[d + 1]
    cv.kh, cv.kw, cv.og = w.dim[1], w.dim[2], w.dim[3]
    cv.sh, cv.sw = p.stride[0], p.stride[1]
    cv.dh, cv.dw = p.size[0], p.size[1]
    cv.pt, cv.pl = p.pad[0], p.pad[1]
    cv.groups = p.groups
    # Re-check what the loops rely on (the command's check did, but a C backend may be called
    # directly): shapes agree, the output is the scatter's size (cropped by the padding, plus
    # an output padding of >= 0), nothing overflows int.
    if (cv.groups < 1 or cv.c % cv.groups or cv.sh < 1 or cv.sw < 1 or cv.dh < 1
            or cv.dw < 1 or cv.kh < 1 or cv.kw < 1 or cv.pt < 0 or cv.pl < 0
            or p.pad[2] < 0 or p.pad[3] < 0):
        return NNC_INVALID
    cv.cg = cv.c // cv.groups
    cv.k = cv.kh * cv.kw * cv.og
    if w.dim[0] != cv.c or cv.o != cv.og * cv.groups or (d and y.dim[0] != cv.n):
        return NNC_INVALID
    full_h = (cv.h - 1) * cv.sh + (cv.kh - 1) * cv.dh + 1 - cv.pt - p.pad[2]
    full_w = (cv.wd - 1) * cv.sw + (cv.kw - 1) * cv.dw + 1 - cv.pl - p.pad[3]
    if cv.h < 1 or cv.wd < 1 or cv.ho < full_h or cv.wo < full_w:
        return NNC_INVALID
    if not (fits_int(cv.k) and fits_int(cv.cg) and fits_int(cv.xs_w)
            and fits_int(cv.h * cv.wd * cv.k) and fits_int(cv.h * cv.wd)):
        return NNC_INVALID
    if cv.n == 0 or cv.o == 0:
        return NNC_SUCCESS
    width = parallel_width()
    if cv.n * cv.h * cv.wd * cv.c * cv.kh * cv.kw * cv.og < _split_macs:
        width = 1                       # too small to be worth waking a helper
    cv.bands = 1
    if _bands > 0:
        cv.bands = min(cv.ho, _bands)
    elif width > 1 and cv.n < SPLIT_EVEN * width:
        cv.bands = min(cv.ho, (SPLIT_EVEN * width + cv.n - 1) // cv.n)
    cv.band_rows = (cv.ho + cv.bands - 1) // cv.bands
    cv.bands = (cv.ho + cv.band_rows - 1) // cv.band_rows
    parts = cv.n * cv.bands
    return nnc_parallel_for(parts, _part, &cv, ctx)


def _tune(split_macs, bands=0):
    """Set the smallest transposed convolution worth splitting and the bands per image (0:
    chosen by the pool's width) for tests and sweeps; returns the previous (split_macs,
    bands)."""
    global _split_macs, _bands
    old = (_split_macs, _bands)
    _split_macs, _bands = max(0, split_macs), max(0, bands)
    return old


def _accept(Cmd cmd, list inputs, list outputs):
    """Channels contiguous in x and the output (any pixel strides); w and bias contiguous."""
    cdef nnc_tensor_t* io[4]
    cdef int n_in = tensor_views(inputs, io, 3)
    cdef int n_out = tensor_views(outputs, io + 3, 1)
    # The backend's own operand check, on the Tensors' C views: the two cannot disagree.
    return n_in >= 0 and n_out >= 0 and convt_operands_ok(io, n_in, io + 3, n_out)


def register():
    register_c_backend("CONVOLUTION_TRANSPOSE", "CPU_OPT", convt_opt, NNC_32F | NNC_64F, False,
                       _accept, None, True)
