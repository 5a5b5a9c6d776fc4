# The geometry of one CONVOLUTION CPU_OPT call (conv_t) and what the modules that run it share:
# cpu_opt.pyx (the backend: plans the parts; float32 on the packed tiles), conv_unpacked.pyx
# (float64 and depthwise), conv_patches.pyx (im2col) and conv_rows.pyx (A rows by pointer);
# floor_div serves CONVOLUTION_TRANSPOSE's bands too. Inline only: nothing to build or import.

ctypedef fused real:
    float
    double

# How a float32 convolution takes its A rows (cpu_opt.pyx's conv_opt chooses; see
# _indirect_min_cg there): by pointer into the input per tap (TAPS) or per kernel-row run
# (RUNS), or (NONE) from copied patches or, pointwise, the pixels themselves.
cdef enum:
    INDIRECT_NONE = 0
    INDIRECT_TAPS = 1
    INDIRECT_RUNS = 2

cdef enum:
    # With fewer parts than this many per parallel_width, the split is evened out to a
    # multiple of it (or, for very few rows, made over output channels).
    SPLIT_EVEN = 4

# The geometry of one call, shared (read-only) by its parts. Strides in elements.
ctypedef struct conv_t:
    int dtype                           # NNC_32F or NNC_64F
    char* x
    const char* w
    const char* bias                    # NULL: none
    char* out
    Py_ssize_t n, h, wd, c              # input [n, h, wd, c]
    Py_ssize_t xs_n, xs_h, xs_w         # input strides (channel stride is 1)
    Py_ssize_t ho, wo, o                # output [n, ho, wo, o]
    Py_ssize_t os_n, os_h, os_w         # output strides (channel stride is 1)
    int kh, kw, sh, sw, pt, pl
    int groups
    Py_ssize_t cg, og, k                # channels per group in and out; K = kh * kw * cg
    Py_ssize_t rows_per_part            # output rows (of wo pixels) per part
    const char* patch                   # channel parts: every row's patches (NULL: pointwise)
    Py_ssize_t chunk                    # channel parts: output channels per part
    Py_ssize_t rows                     # n * ho
    int pointwise
    int depthwise
    # The epilogue, in this order: + bias, + residual, the activation.
    const char* residual                # NULL: none; else [n, ho, wo, o] like the output
    Py_ssize_t rs_n, rs_h, rs_w         # its strides (channel stride is 1)
    int act                             # NNC_ACT_* (sgemm_kernel.h)
    float lo, hi                        # NNC_ACT_CLAMP's bounds
    # float32: nnc's own kernels, the level read once per call (one kernel for every part).
    int isa                             # cpu_isa() at the call's start: the level the weights
    #                                     were packed for, the kernels' and epilogue's
    int finite                          # depthwise: every weight finite
    const float* packed                 # group g's packed weights at packed + g * gfloats
    Py_ssize_t gfloats
    size_t skip                         # bytes the packed weights take at the start of the
    #                                     caller's workspace: parts' scratch starts after them
    const float** rowp                  # channel parts: every pixel's A rows (the caller's)
    # float32 packed: A is taken tap by tap, kt floats a tap. INDIRECT_TAPS: taps = kh * kw,
    # kt = cg, the pointers the input's pixels; INDIRECT_RUNS: taps = kh, kt = kw * c, the
    # pointers the input's kernel-row runs (or copies of those crossing an edge); else taps = 1
    # and kt = k, over patches or, pointwise, the pixels themselves.
    int indirect                        # INDIRECT_*
    Py_ssize_t taps, kt
    Py_ssize_t edge_q                   # INDIRECT_RUNS: output columns whose window crosses
    #                                     the left or right edge (their runs are copied)
    const float* zeros                  # indirect: what taps in the padding point at,
    #                                     nnc_sgemm_zeros (skipped) when every weight is finite;
    #                                     set where the tiles run (cpu_opt.pyx): each
    #                                     extension has its own copy of that static array
    int ahead                           # nnc_sgemm_packed_ahead's: 1 the next panel, 0 none
    int copy_pixels                     # 1x1 float32, groups = 1, no padding: A rows are
    #                                     copies of the pixels, k + PIXEL_PAD floats apart
    #                                     (next ones in x a multiple of 4 KiB apart)


cdef inline bint rows_even(Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t ho, Py_ssize_t wo,
                           Py_ssize_t s_n, Py_ssize_t s_h, Py_ssize_t s_w) noexcept nogil:
    """Rows r0..r1 (each wo pixels) of an [n, ho, wo, ...] view are one evenly strided run of
    pixels: GEMM can treat them as one matrix with leading dimension s_w."""
    if r1 - r0 <= 1:
        return True
    if s_h != wo * s_w:
        return False
    # Crossing an image boundary needs the image stride to continue the run too.
    return r0 // ho == (r1 - 1) // ho or s_n == ho * s_h


cdef inline real* out_row(const conv_t* cv, real* y0, Py_ssize_t r) noexcept nogil:
    """Output row r (image r // ho, row r % ho); y0 is cv.out, typed."""
    return y0 + (r // cv.ho) * cv.os_n + (r % cv.ho) * cv.os_h


cdef inline Py_ssize_t floor_div(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """a / b rounded down for b > 0 and a of either sign (C division truncates towards zero);
    rounded up is -floor_div(-a, b)."""
    return a // b if a >= 0 else -((-a + b - 1) // b)


cdef inline size_t align64(size_t n) noexcept nogil:
    return (n + 63) & ~(<size_t>63)
