"""UPSAMPLE's CPU_OPT backend in C: output rows in parts, no GIL.

Semantics are upsample/__init__.py's; the source indices and weights are computed the same way,
in double, so nearest is a bit-exact copy of CPU_REF's pixels and bilinear differs from CPU_REF
(which rounds once from float64) only by the rounding of float32 sums of four products. Each
output row (one n, one ho) is computed on its own: its two input rows and their weight first,
then per output pixel its two input columns, then the channels (contiguous in NHWC, so the
inner loop is a plain vectorisable stride-1 loop). In nearest mode an output row whose input row
is the previous output row's (every row after the first of an integer scale's group) is a copy
of that row, one memcpy of W * C elements instead of a copy per pixel. Parts write disjoint rows
and only read the input, so every thread setting gives the same bits. The backend re-checks
what it relies on (contiguous CPU tensors of one float dtype, the ranks and sizes of the check)
and returns NNC_INVALID otherwise.
"""

from libc.math cimport floor
from libc.string cimport memcpy

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.base.parallel cimport nnc_parallel_for
from nnc.cmd.command cimport (
    UPSAMPLE_BILINEAR, UPSAMPLE_NEAREST, nnc_cmd_param_t, register_c_backend,
)
from nnc.cmd.cpu_check cimport tensor_plain
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef enum:
    PART_WORK = 1 << 15                 # output elements per part: a helper's wake-up is cheap


# One call, shared (read-only) by its parts.
ctypedef struct upsample_t:
    int dtype                           # NNC_32F or NNC_64F
    int bilinear                        # 1: UPSAMPLE_BILINEAR, 0: UPSAMPLE_NEAREST
    int align                           # align_corners
    const char* x
    char* y
    Py_ssize_t h, w, c                  # input H, W, C (H, W >= 1)
    Py_ssize_t ho, wo                   # output H, W (>= 1)
    double rh, rw                       # the ratios of upsample/__init__.py
    Py_ssize_t rows                     # N * ho output rows
    Py_ssize_t rows_per_part


cdef inline void _source(Py_ssize_t o, Py_ssize_t n, double r, int bilinear, int align,
                         Py_ssize_t* i0, Py_ssize_t* i1, double* w) noexcept nogil:
    """upsample.source_index for one output index o of an axis of n inputs."""
    cdef double s
    if not bilinear:
        s = floor(o * r + 0.5) if align else floor((o + 0.5) * r)
        i0[0] = min(<Py_ssize_t>s, n - 1)
        i1[0] = i0[0]
        w[0] = 0
        return
    s = o * r if align else max((o + 0.5) * r - 0.5, 0.0)
    i0[0] = min(<Py_ssize_t>floor(s), n - 1)
    i1[0] = min(i0[0] + 1, n - 1)
    w[0] = s - i0[0]


cdef void _rows(real* y, const real* x, const upsample_t* t, Py_ssize_t r0,
                Py_ssize_t r1) noexcept nogil:
    cdef Py_ssize_t r, b, oh, ow, k, c = t.c
    cdef Py_ssize_t y0, y1, x0, x1, src, last = -1
    cdef double wy, wx
    cdef real c00, c01, c10, c11
    cdef const real* top
    cdef const real* bottom
    cdef const real* p00
    cdef const real* p01
    cdef const real* p10
    cdef const real* p11
    cdef real* out
    for r in range(r0, r1):
        b, oh = r // t.ho, r % t.ho
        _source(oh, t.h, t.rh, t.bilinear, t.align, &y0, &y1, &wy)
        src = b * t.h + y0
        top = x + src * t.w * c
        bottom = x + (b * t.h + y1) * t.w * c
        out = y + r * t.wo * c
        if not t.bilinear:
            # The previous output row (this part wrote it) read the same input row.
            if src == last:
                memcpy(out, out - t.wo * c, t.wo * c * sizeof(real))
                continue
            last = src
        for ow in range(t.wo):
            _source(ow, t.w, t.rw, t.bilinear, t.align, &x0, &x1, &wx)
            if not t.bilinear:
                memcpy(out + ow * c, top + x0 * c, c * sizeof(real))
                continue
            c00 = <real>((1 - wx) * (1 - wy))
            c01 = <real>(wx * (1 - wy))
            c10 = <real>((1 - wx) * wy)
            c11 = <real>(wx * wy)
            p00, p01 = top + x0 * c, top + x1 * c
            p10, p11 = bottom + x0 * c, bottom + x1 * c
            for k in range(c):
                out[ow * c + k] = p00[k] * c00 + p01[k] * c01 + p10[k] * c10 + p11[k] * c11


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const upsample_t* t = <const upsample_t*>arg
    cdef Py_ssize_t r0 = part * t.rows_per_part
    cdef Py_ssize_t r1 = min(r0 + t.rows_per_part, t.rows)
    if t.dtype == NNC_32F:
        _rows(<float*>t.y, <const float*>t.x, t, r0, r1)
    else:
        _rows(<double*>t.y, <const double*>t.x, t, r0, r1)
    return NNC_SUCCESS


cdef int upsample_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                      nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef upsample_t t
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    cdef int lead, i
    if n_in != 1 or n_out != 1 or not tensor_plain(inputs[0]) or not tensor_plain(outputs[0]):
        return NNC_INVALID
    x, y = inputs[0], outputs[0]
    if x.datatype != y.datatype or not (y.datatype & (NNC_32F | NNC_64F)) \
            or x.ndim != y.ndim or x.ndim not in (3, 4) or x == y \
            or p.mode not in (UPSAMPLE_NEAREST, UPSAMPLE_BILINEAR):
        return NNC_INVALID
    lead = x.ndim - 3
    for i in range(lead):
        if x.dim[i] != y.dim[i]:
            return NNC_INVALID
    if x.dim[x.ndim - 1] != y.dim[y.ndim - 1]:
        return NNC_INVALID
    if y.count == 0:
        return NNC_SUCCESS
    t.h, t.w, t.c = x.dim[lead], x.dim[lead + 1], x.dim[lead + 2]
    t.ho, t.wo = y.dim[lead], y.dim[lead + 1]
    if t.h < 1 or t.w < 1:
        return NNC_INVALID
    t.dtype = y.datatype
    t.bilinear = p.mode == UPSAMPLE_BILINEAR
    t.align = p.align_corners
    if t.align:
        t.rh = <double>(t.h - 1) / max(1, t.ho - 1)
        t.rw = <double>(t.w - 1) / max(1, t.wo - 1)
    else:
        t.rh = <double>t.h / t.ho
        t.rw = <double>t.w / t.wo
    t.x, t.y = <const char*>x.data, <char*>y.data
    t.rows = y.count // (t.wo * t.c)
    t.rows_per_part = max(1, PART_WORK // (t.wo * t.c))
    return nnc_parallel_for((t.rows + t.rows_per_part - 1) // t.rows_per_part, _part, &t, ctx)


def register():
    """Register UPSAMPLE's CPU_OPT (called once by register_builtins)."""
    register_c_backend("UPSAMPLE", "CPU_OPT", upsample_opt, NNC_32F | NNC_64F, True, None, None,
                       True)
