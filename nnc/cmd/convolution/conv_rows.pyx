"""The A rows of CONVOLUTION's CPU_OPT float32 path by pointer (cpu_opt.pyx): row i of a part is
the input pixel under output pixel i (pointwise), a copy of it (pixels a multiple of 4 KiB
apart), a pointer per tap (tap by tap), or one per kernel row (kernel-row runs, windows across
the left or right edge copied with the padding's zeros). The tiles read them in the order an
im2col patch would hold them, so every form gives the patches' bits (conv_patches.pyx)."""

from libc.string cimport memcpy, memset

from nnc.cmd.convolution.conv_geometry cimport conv_t, floor_div


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


cdef void pixel_copies(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, const float** rows,
                       float* buf) noexcept nogil:
    """A 1x1 convolution's A rows (no padding, one group, any stride): copies of the input
    pixels under output pixels r0..r1 in buf, k + PIXEL_PAD floats apart.
    A tile reads its MR rows a k step at a time; rows a multiple of 4 KiB apart (1024 or 2048
    channels, or slices of such a Concat) all fall in one L1 set, more of them than its ways,
    and evict each other every step: copied apart, ResNet-50's K = 1024 and 2048 layers went
    from 104 to 114 GFLOP/s (AVX-512) and 95 to 98 (AVX2). Same values, same sums."""
    cdef Py_ssize_t r, q, i = 0
    cdef const float* px
    cdef float* dst
    for r in range(r0, r1):
        px = <const float*>cv.x + (r // cv.ho) * cv.xs_n + (r % cv.ho) * cv.sh * cv.xs_h
        for q in range(cv.wo):
            dst = buf + i * (cv.k + PIXEL_PAD)
            memcpy(dst, px + q * cv.sw * cv.xs_w, cv.k * sizeof(float))
            rows[i] = dst
            i += 1


cdef inline void _q_span(Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t sw, Py_ssize_t wo,
                         Py_ssize_t* q0, Py_ssize_t* q1) noexcept nogil:
    """The output columns q in [0, wo) with lo <= q * sw <= hi, as [q0, q1) (q0 == q1: none)."""
    cdef Py_ssize_t a = min(wo, max(0, -floor_div(-lo, sw))), b = min(wo, floor_div(hi, sw) + 1)
    q0[0] = a
    q1[0] = max(a, b)


cdef void tap_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t g,
                   const float** rows, Py_ssize_t ts) noexcept nogil:
    """rows[t * ts + i]: tap t (t = i * kw + j, the patches' order) of output pixel i of rows
    r0..r1: the input pixel under it at group g's channels, or zeros in the padding. The
    geometry is copied into locals first (see im2col). Tap by tap, the columns whose pixel lies
    in the image are one span of pointers a stride apart: a loop of one add and one store (as
    a branch per pixel and tap, a first layer's 3 channels spent a quarter of its time here)."""
    cdef Py_ssize_t r, q, q0, q1, i = 0, ti, tj, ih, oh, t
    cdef Py_ssize_t ho = cv.ho, wo = cv.wo, h = cv.h, wd = cv.wd, kh = cv.kh, kw = cv.kw
    cdef Py_ssize_t sh = cv.sh, sw = cv.sw, pt = cv.pt, pl = cv.pl
    cdef Py_ssize_t xs_n = cv.xs_n, xs_h = cv.xs_h, xs_w = cv.xs_w
    cdef const float* xg = <const float*>cv.x + g * cv.cg
    cdef const float* img
    cdef const float* p
    cdef const float* zeros = cv.zeros
    cdef const float** out
    for r in range(r0, r1):
        oh = r % ho
        img = xg + (r // ho) * xs_n
        t = 0
        for ti in range(kh):
            ih = oh * sh - pt + ti
            for tj in range(kw):
                out = rows + t * ts + i
                t += 1
                if ih < 0 or ih >= h:
                    q0 = q1 = wo
                else:
                    _q_span(pl - tj, wd - 1 + pl - tj, sw, wo, &q0, &q1)
                for q in range(q0):
                    out[q] = zeros
                p = img + ih * xs_h + (q0 * sw - pl + tj) * xs_w
                for q in range(q0, q1):
                    out[q] = p
                    p += sw * xs_w
                for q in range(q1, wo):
                    out[q] = zeros
        i += wo


cdef inline const float* _edge_run(const float* src, Py_ssize_t iw, Py_ssize_t kw,
                                   Py_ssize_t wd, Py_ssize_t c, float* edges) noexcept nogil:
    """Copy the kw pixels of input row src from column iw on into edges, zeros where a column
    lies outside [0, wd) (a window crossing the left or right edge); returns edges."""
    cdef Py_ssize_t tj
    for tj in range(kw):
        if iw + tj < 0 or iw + tj >= wd:
            memset(edges + tj * c, 0, c * sizeof(float))
        else:
            memcpy(edges + tj * c, src + (iw + tj) * c, c * sizeof(float))
    return edges


cdef void run_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, const float** rows,
                   Py_ssize_t ts, float* edges) noexcept nogil:
    """rows[t * ts + i]: kernel row t of output pixel i of rows r0..r1 (groups = 1, pixels
    contiguous): the kw * c floats of input under it, zeros above or below the image, or, for
    a window crossing the left or right edge, a copy with the padding's zeros in edges (kh *
    kw * c floats each such pixel: edge_q of them an output row). Locals as in im2col. The
    windows inside the image are one span of columns, a stride apart (see tap_rows)."""
    cdef Py_ssize_t r, q, q0, q1, i = 0, t, ih, oh
    cdef Py_ssize_t ho = cv.ho, wo = cv.wo, h = cv.h, wd = cv.wd, kh = cv.kh, kw = cv.kw
    cdef Py_ssize_t sh = cv.sh, sw = cv.sw, pt = cv.pt, pl = cv.pl, c = cv.c
    cdef Py_ssize_t xs_n = cv.xs_n, xs_h = cv.xs_h, run = cv.kt
    cdef const float* img
    cdef const float* src
    cdef const float* p
    cdef const float* zeros = cv.zeros
    cdef const float** out
    _q_span(pl, wd - kw + pl, sw, wo, &q0, &q1)
    for r in range(r0, r1):
        oh = r % ho
        img = <const float*>cv.x + (r // ho) * xs_n
        for t in range(kh):
            ih = oh * sh - pt + t
            out = rows + t * ts + i
            if ih < 0 or ih >= h:
                for q in range(wo):
                    out[q] = zeros
                continue
            src = img + ih * xs_h
            p = src + (q0 * sw - pl) * c
            for q in range(q0, q1):
                out[q] = p
                p += sw * c
            for q in range(q0):
                out[q] = _edge_run(src, q * sw - pl, kw, wd, c, edges)
                edges += run
            for q in range(q1, wo):
                out[q] = _edge_run(src, q * sw - pl, kw, wd, c, edges)
                edges += run
        i += wo
