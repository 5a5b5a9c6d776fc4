"""MAX_POOL's and AVG_POOL's CPU_OPT backends in C: direct NHWC loops, no GIL.

NNC: cmd/pool/ccv_nnc_max_pool_cpu_opt.c and _avg_pool_cpu_ref.c. Semantics are pool.py's:
padding never wins a max; an average divides by the real (non-padding) elements under the
window, or with ``count_include_pad`` by its elements inside the padded input (kh * kw, less
for a ``ceil_mode`` window that runs past the bottom or right padding).

- float32 runs pool_kernel.h: each output pixel's window is clipped to the real input once, then
  blocks of channels (4 AVX-512 or AVX2 vectors, or 16 floats on the baseline) accumulate in
  registers over the whole window and are stored once; the variant is ``cpu_isa()``'s, read once
  per call, and every variant gives the same bits. float64 runs the plain loop below (the same
  order of taps, innermost over channels). No padded copy, no scratch.
- The input and the output may be any views whose channel axis is contiguous; pixel strides
  come from the tensors (a pool branch of Inception writes a channel slice of the concat's
  buffer).
- Work is cut into parts of whole output rows, or, when there are too few rows (a global
  average pool: one output pixel per image), of channels; parts run on the caller and idle pool
  threads (nnc.base.parallel). Parts write disjoint output elements; the input is only read.
  A channel's result does not depend on the cut, so every thread setting gives the same bits.

Tensors whose channels are not contiguous are refused by ``accept`` (which runs these same
checks) and run on the NumPy backend (CPU_NUMPY, pool.py) or CPU_REF.
"""

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.base.isa cimport cpu_isa
from nnc.cmd.command cimport Cmd, nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensor_views
from nnc.base.parallel cimport nnc_parallel_for
from nnc.tensor.tensor cimport nnc_tensor_t

cdef extern from "cmd/pooling/pool_kernel.h" nogil:
    ctypedef struct nnc_pool_geom_t:
        Py_ssize_t h, w, c
        Py_ssize_t xs_h, xs_w
        Py_ssize_t ho, wo
        Py_ssize_t ys_h, ys_w
        int kh, kw, sh, sw, pt, pl
        int is_max
        int include_pad
        Py_ssize_t hp, wp
    void nnc_pool_row_f32(int isa, const nnc_pool_geom_t* g, const float* x, float* y,
                          Py_ssize_t oh, Py_ssize_t c0, Py_ssize_t c1)

cdef enum:
    # Window taps x channels per part: enough that waking a helper thread costs little.
    PART_WORK = 1 << 17
    MIN_PART_CHANNELS = 64              # channel parts narrower than this stop vectorising well


# One call, shared (read-only) by its parts. Strides in elements.
ctypedef struct pool_t:
    int dtype                           # NNC_32F or NNC_64F
    int isa                             # cpu_isa() at the call: every part runs one variant
    nnc_pool_geom_t g                   # one image's geometry (channel stride 1 both sides)
    const char* x
    char* out
    Py_ssize_t xs_n, os_n               # image strides of the input and the output
    Py_ssize_t rows                     # n * ho output rows
    Py_ssize_t rows_per_part
    Py_ssize_t channels_per_part
    Py_ssize_t channel_parts


cdef void _rows64(const pool_t* pl, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t c0,
                  Py_ssize_t c1) noexcept nogil:
    """float64: output rows r0..r1 - 1 (row r: image r // ho, row r % ho), channels c0..c1 - 1,
    in pool_kernel.h's order of taps."""
    cdef const nnc_pool_geom_t* g = &pl.g
    cdef Py_ssize_t r, n, oh, q, i, j, ch, i0, i1, j0, j1
    cdef Py_ssize_t nc = c1 - c0
    cdef double* y
    cdef const double* src
    cdef const double* xn
    cdef double v, scale
    cdef bint first
    for r in range(r0, r1):
        n = r // g.ho
        oh = r % g.ho
        i0 = max(oh * g.sh - g.pt, 0)
        i1 = min(oh * g.sh - g.pt + g.kh, g.h)
        xn = <const double*>pl.x + n * pl.xs_n + c0
        for q in range(g.wo):
            j0 = max(q * g.sw - g.pl, 0)
            j1 = min(q * g.sw - g.pl + g.kw, g.w)
            y = <double*>pl.out + n * pl.os_n + oh * g.ys_h + q * g.ys_w + c0
            first = True
            for i in range(i0, i1):
                for j in range(j0, j1):
                    src = xn + i * g.xs_h + j * g.xs_w
                    if first:
                        for ch in range(nc):
                            y[ch] = src[ch]
                        first = False
                    elif g.is_max:
                        # A NaN anywhere in the window wins, as CPU_REF's max does.
                        for ch in range(nc):
                            v = src[ch]
                            y[ch] = v if (v > y[ch] or v != v) else y[ch]
                    else:
                        for ch in range(nc):
                            y[ch] = y[ch] + src[ch]
            if g.is_max:
                continue
            if g.include_pad:
                scale = 1 / <double>((min(oh * g.sh - g.pt + g.kh, g.hp) - (oh * g.sh - g.pt))
                                     * (min(q * g.sw - g.pl + g.kw, g.wp) - (q * g.sw - g.pl)))
            else:
                scale = 1 / <double>((i1 - i0) * (j1 - j0))
            for ch in range(nc):
                y[ch] = y[ch] * scale


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const pool_t* pl = <const pool_t*>arg
    cdef Py_ssize_t rp = part // pl.channel_parts, cp = part % pl.channel_parts
    cdef Py_ssize_t r0 = rp * pl.rows_per_part, c0 = cp * pl.channels_per_part
    cdef Py_ssize_t r1 = min(r0 + pl.rows_per_part, pl.rows)
    cdef Py_ssize_t c1 = min(c0 + pl.channels_per_part, pl.g.c)
    cdef Py_ssize_t r, n, oh
    if pl.dtype == NNC_64F:
        _rows64(pl, r0, r1, c0, c1)
        return NNC_SUCCESS
    for r in range(r0, r1):
        n = r // pl.g.ho
        oh = r % pl.g.ho
        nnc_pool_row_f32(pl.isa, &pl.g, <const float*>pl.x + n * pl.xs_n,
                         <float*>pl.out + n * pl.os_n + oh * pl.g.ys_h, oh, c0, c1)
    return NNC_SUCCESS


cdef bint _channels_last(const nnc_tensor_t* t, int dtype) noexcept nogil:
    """A CPU float tensor of ``dtype``, [n, h, w, c] or [h, w, c], channels contiguous."""
    return (t != NULL and t.device < 0 and t.datatype == dtype and 3 <= t.ndim <= 4
            and (t.dim[t.ndim - 1] <= 1 or t.stride[t.ndim - 1] == 1))


cdef int _plan(bint is_max, const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
               nnc_tensor_t** outputs, int n_out, pool_t* pl) noexcept nogil:
    """Fill pl for these tensors, or NNC_INVALID. Re-checks what the loops rely on (the
    command's check did, but a C backend may be called directly): shapes agree with the window,
    and every window holds a real element (each padding is smaller than the window)."""
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    cdef nnc_pool_geom_t* g = &pl.g
    cdef int d, dtype
    cdef Py_ssize_t n, work, ho, wo
    if n_in != 1 or n_out != 1 or inputs[0] == NULL or outputs[0] == NULL:
        return NNC_INVALID
    x, y = inputs[0], outputs[0]
    dtype = y.datatype
    if not (dtype == NNC_32F or dtype == NNC_64F):
        return NNC_INVALID
    if not _channels_last(x, dtype) or not _channels_last(y, dtype) or y.ndim != x.ndim:
        return NNC_INVALID
    d = x.ndim - 3                      # 1 with a batch axis, 0 without
    n = x.dim[0] if d else 1
    pl.dtype, pl.isa = dtype, cpu_isa()
    g.is_max, g.include_pad = is_max, p.count_include_pad != 0
    pl.x, pl.out = <const char*>x.data, <char*>y.data
    pl.xs_n = x.stride[0] if d else 0
    g.h, g.w, g.c = x.dim[d], x.dim[d + 1], x.dim[d + 2]
    g.xs_h, g.xs_w = x.stride[d], x.stride[d + 1]
    pl.os_n = y.stride[0] if d else 0
    g.ho, g.wo = y.dim[d], y.dim[d + 1]
    g.ys_h, g.ys_w = y.stride[d], y.stride[d + 1]
    g.kh, g.kw, g.sh, g.sw = p.size[0], p.size[1], p.stride[0], p.stride[1]
    g.pt, g.pl = p.pad[0], p.pad[1]
    g.hp, g.wp = g.h + p.pad[2], g.w + p.pad[3]
    if g.kh < 1 or g.kw < 1 or g.sh < 1 or g.sw < 1 or min(p.pad[0], p.pad[1]) < 0:
        return NNC_INVALID
    if (max(p.pad[0], p.pad[2]) >= g.kh or max(p.pad[1], p.pad[3]) >= g.kw
            or min(p.pad[2], p.pad[3]) < 0):
        return NNC_INVALID
    if y.dim[d + 2] != g.c or (d and y.dim[0] != n):
        return NNC_INVALID
    if g.h + g.pt + p.pad[2] < g.kh or g.w + g.pl + p.pad[3] < g.kw:
        return NNC_INVALID
    ho = (g.h + g.pt + p.pad[2] - g.kh) // g.sh + 1
    wo = (g.w + g.pl + p.pad[3] - g.kw) // g.sw + 1
    if p.ceil_mode:
        # Rounded up, less a last window that would start in the bottom (right) padding:
        # every window still starts inside the input or its top (left) padding.
        ho = (g.h + g.pt + p.pad[2] - g.kh + g.sh - 1) // g.sh + 1
        wo = (g.w + g.pl + p.pad[3] - g.kw + g.sw - 1) // g.sw + 1
        ho -= (ho - 1) * g.sh >= g.h + g.pt
        wo -= (wo - 1) * g.sw >= g.w + g.pl
    if g.ho != ho or g.wo != wo:
        return NNC_INVALID
    pl.rows = n * g.ho
    # Rows per part by the work of one output row; too few rows: split the channels instead.
    work = max(g.wo * g.kh * g.kw * g.c, 1)
    pl.rows_per_part = max(1, PART_WORK // work)
    pl.channels_per_part = g.c
    if pl.rows <= pl.rows_per_part and g.c >= 2 * MIN_PART_CHANNELS:
        work = max(pl.rows * g.wo * g.kh * g.kw, 1)
        pl.channels_per_part = max(MIN_PART_CHANNELS, (PART_WORK // work + 15) // 16 * 16)
    pl.channels_per_part = max(1, min(pl.channels_per_part, g.c))
    pl.channel_parts = (g.c + pl.channels_per_part - 1) // pl.channels_per_part
    return NNC_SUCCESS


cdef int _pool(bint is_max, const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
               nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef pool_t pl
    cdef Py_ssize_t row_parts
    if _plan(is_max, p, inputs, n_in, outputs, n_out, &pl) != NNC_SUCCESS:
        return NNC_INVALID
    if pl.rows == 0 or pl.g.wo == 0 or pl.g.c == 0:
        return NNC_SUCCESS
    row_parts = (pl.rows + pl.rows_per_part - 1) // pl.rows_per_part
    return nnc_parallel_for(row_parts * pl.channel_parts, _part, &pl, ctx)


cdef int max_pool_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                      nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _pool(True, p, inputs, n_in, outputs, n_out, ctx)


cdef int avg_pool_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                      nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _pool(False, p, inputs, n_in, outputs, n_out, ctx)


def _accept(Cmd cmd, list inputs, list outputs):
    """The C backend's own checks, on the Tensors' C views: channels contiguous."""
    cdef nnc_tensor_t* io[2]
    cdef pool_t pl
    cdef int n_in = tensor_views(inputs, io, 1)
    cdef int n_out = tensor_views(outputs, io + 1, 1)
    return (n_in >= 0 and n_out >= 0
            and _plan(True, &cmd.param, io, n_in, io + 1, n_out, &pl) == NNC_SUCCESS)


def register():
    """Register MAX_POOL's and AVG_POOL's CPU_OPT (called once by register_builtins)."""
    mask = NNC_32F | NNC_64F
    register_c_backend("MAX_POOL", "CPU_OPT", max_pool_opt, mask, False, _accept, None, True)
    register_c_backend("AVG_POOL", "CPU_OPT", avg_pool_opt, mask, False, _accept, None, True)
