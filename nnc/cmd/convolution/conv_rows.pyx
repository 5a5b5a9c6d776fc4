"""The A rows of a float32 CONVOLUTION CPU_OPT call's GEMM tiles (conv_packed.pyx), made once
per part: the input's pixels themselves (pointwise), pointers into the input per tap or per
kernel-row run (an indirect convolution; the padding a row of zeros), or copied im2col patches
(float32 and float64: cpu_opt.pyx's float64 parts copy theirs too). Each fills the part's own
scratch and reads only the input: parts on different threads never share what they write."""

from libc.string cimport memcpy, memset

from nnc.cmd.convolution.conv_geometry cimport conv_t, real


cdef inline void _copy(real* dst, const real* src, Py_ssize_t n) noexcept nogil:
    """memcpy, but a loop for the short runs of thin inputs (3 channels: a call per 12 bytes
    would cost more than the copy)."""
    cdef Py_ssize_t i
    if n >= 16:
        memcpy(dst, src, n * sizeof(real))
        return
    for i in range(n):
        dst[i] = src[i]


cdef void im2col(const conv_t* cv, real* patch, Py_ssize_t r0, Py_ssize_t r1,
                 Py_ssize_t g) noexcept nogil:
    """patch[(r - r0) * wo + q, (i, j, c)] = x[n, oh*sh - pt + i, q*sw - pl + j, g*cg + c], or
    0 in the padding. The geometry is copied into locals first: extensions build with
    -fno-strict-aliasing, so each store into the patch would otherwise reload every field."""
    cdef Py_ssize_t r, q, i, j, ih, iw, oh
    cdef Py_ssize_t cg = cv.cg, run = cv.kw * cv.cg, k = cv.k, wo = cv.wo, ho = cv.ho
    cdef Py_ssize_t h = cv.h, wd = cv.wd, kh = cv.kh, kw = cv.kw, sh = cv.sh, sw = cv.sw
    cdef Py_ssize_t pt = cv.pt, pl = cv.pl, xs_n = cv.xs_n, xs_h = cv.xs_h, xs_w = cv.xs_w
    cdef real* dst
    cdef const real* row
    cdef const real* xg = <const real*>cv.x + g * cg
    # A kernel row's kw pixels are one contiguous run when channels fill the pixel stride.
    cdef bint whole = cv.groups == 1 and xs_w == cv.c
    for r in range(r0, r1):
        oh = r % ho
        for q in range(wo):
            dst = patch + ((r - r0) * wo + q) * k
            iw = q * sw - pl
            for i in range(kh):
                ih = oh * sh - pt + i
                if ih < 0 or ih >= h:
                    memset(dst, 0, run * sizeof(real))
                    dst += run
                    continue
                row = xg + (r // ho) * xs_n + ih * xs_h
                if whole and iw >= 0 and iw + kw <= wd:
                    _copy(dst, row + iw * xs_w, run)
                    dst += run
                    continue
                for j in range(kw):
                    if iw + j < 0 or iw + j >= wd:
                        memset(dst, 0, cg * sizeof(real))
                    else:
                        _copy(dst, row + (iw + j) * xs_w, cg)
                    dst += cg


cdef void pixel_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t g,
                     const float** rows) noexcept nogil:
    """rows[i]: the input pixel of output pixel i of rows r0..r1, at group g's channels
    (pointwise: A is the input itself, any pixel strides)."""
    cdef Py_ssize_t r, q, i = 0
    cdef const float* px
    for r in range(r0, r1):
        px = <const float*>cv.x + (r // cv.ho) * cv.xs_n + (r % cv.ho) * cv.xs_h + g * cv.cg
        for q in range(cv.wo):
            rows[i] = px + q * cv.xs_w
            i += 1


cdef void tap_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t g,
                   const float** rows, Py_ssize_t ts) noexcept nogil:
    """rows[t * ts + i]: tap t (t = i * kw + j, the patches' order) of output pixel i of rows
    r0..r1: the input pixel under it at group g's channels, or zeros in the padding. The
    geometry is copied into locals first (see im2col)."""
    cdef Py_ssize_t r, q, i = 0, ti, tj, ih, iw, oh, t
    cdef Py_ssize_t ho = cv.ho, wo = cv.wo, h = cv.h, wd = cv.wd, kh = cv.kh, kw = cv.kw
    cdef Py_ssize_t sh = cv.sh, sw = cv.sw, pt = cv.pt, pl = cv.pl
    cdef Py_ssize_t xs_n = cv.xs_n, xs_h = cv.xs_h, xs_w = cv.xs_w
    cdef const float* xg = <const float*>cv.x + g * cv.cg
    cdef const float* img
    cdef const float* zeros = cv.zeros
    for r in range(r0, r1):
        oh = r % ho
        img = xg + (r // ho) * xs_n
        for q in range(wo):
            t = 0
            for ti in range(kh):
                ih = oh * sh - pt + ti
                for tj in range(kw):
                    iw = q * sw - pl + tj
                    if ih < 0 or ih >= h or iw < 0 or iw >= wd:
                        rows[t * ts + i] = zeros
                    else:
                        rows[t * ts + i] = img + ih * xs_h + iw * xs_w
                    t += 1
            i += 1


cdef void run_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, const float** rows,
                   Py_ssize_t ts, float* edges) noexcept nogil:
    """rows[t * ts + i]: kernel row t of output pixel i of rows r0..r1 (groups = 1, pixels
    contiguous): the kw * c floats of input under it, zeros above or below the image, or, for
    a window crossing the left or right edge, a copy with the padding's zeros in edges (kh *
    kw * c floats each such pixel: edge_q of them an output row). Locals as in im2col."""
    cdef Py_ssize_t r, q, i = 0, t, tj, ih, iw, oh
    cdef Py_ssize_t ho = cv.ho, wo = cv.wo, h = cv.h, wd = cv.wd, kh = cv.kh, kw = cv.kw
    cdef Py_ssize_t sh = cv.sh, sw = cv.sw, pt = cv.pt, pl = cv.pl, c = cv.c
    cdef Py_ssize_t xs_n = cv.xs_n, xs_h = cv.xs_h, run = cv.kt
    cdef const float* img
    cdef const float* src
    cdef const float* zeros = cv.zeros
    cdef bint inside
    for r in range(r0, r1):
        oh = r % ho
        img = <const float*>cv.x + (r // ho) * xs_n
        for q in range(wo):
            iw = q * sw - pl
            inside = iw >= 0 and iw + kw <= wd
            for t in range(kh):
                ih = oh * sh - pt + t
                if ih < 0 or ih >= h:
                    rows[t * ts + i] = zeros
                elif inside:
                    rows[t * ts + i] = img + ih * xs_h + iw * c
                else:
                    src = img + ih * xs_h
                    for tj in range(kw):
                        if iw + tj < 0 or iw + tj >= wd:
                            memset(edges + tj * c, 0, c * sizeof(float))
                        else:
                            memcpy(edges + tj * c, src + (iw + tj) * c, c * sizeof(float))
                    rows[t * ts + i] = edges
                    edges += run
            i += 1
