"""The im2col patches of a CONVOLUTION CPU_OPT call: each output pixel's window of input as one
row of K = kh * kw * C/groups values, ordered (i, j, c) as the weights' rows, zeros in the
padding. float64 parts multiply them with BLAS (conv_unpacked.pyx); float32 copies them only
for the few shapes whose A rows cannot be pointers into the input (cpu_opt.pyx)."""

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
