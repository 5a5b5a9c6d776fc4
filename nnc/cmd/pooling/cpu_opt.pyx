"""MAX_POOL's and AVG_POOL's CPU_OPT backends in C: direct NHWC loops, no GIL.

NNC: cmd/pool/ccv_nnc_max_pool_cpu_opt.c and _avg_pool_cpu_ref.c. Semantics are pool.py's:
padding never wins a max; an average divides by the real (non-padding) elements under the
window, or by kh * kw with ``count_include_pad``.

- Every output pixel walks its window clipped to the real input, innermost over channels
  (contiguous in the input and the output, so the loop vectorises): no padded copy, no scratch.
- The input and the output may be any views whose channel axis is contiguous; pixel strides
  come from the tensors (a pool branch of Inception writes a channel slice of the concat's
  buffer).
- Work is cut into parts of whole output rows, or, when there are too few rows (a global
  average pool: one output pixel per image), of channels; parts run on the caller and idle pool
  threads (nnc.base.parallel). Parts write disjoint output elements; the input is only read.

Tensors whose channels are not contiguous are refused by ``accept`` (which runs these same
checks) and run on the NumPy backend (CPU_NUMPY, pool.py) or CPU_REF.
"""

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.cmd.command cimport Cmd, nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensor_views
from nnc.base.parallel cimport nnc_parallel_for
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef enum:
    # Window taps x channels per part: enough that waking a helper thread costs little.
    PART_WORK = 1 << 17
    MIN_PART_CHANNELS = 64              # channel parts narrower than this stop vectorising well


# The geometry of one call, shared (read-only) by its parts. Strides in elements.
ctypedef struct pool_t:
    int dtype                           # NNC_32F or NNC_64F
    int is_max
    int include_pad                     # AVG_POOL: divide by kh * kw
    const char* x
    char* out
    Py_ssize_t h, wd, c                 # input [n, h, wd, c]
    Py_ssize_t xs_n, xs_h, xs_w         # input strides (channel stride is 1)
    Py_ssize_t ho, wo                   # output [n, ho, wo, c]
    Py_ssize_t os_n, os_h, os_w         # output strides (channel stride is 1)
    int kh, kw, sh, sw, pt, pl
    Py_ssize_t rows                     # n * ho output rows
    Py_ssize_t rows_per_part
    Py_ssize_t channels_per_part
    Py_ssize_t channel_parts


cdef void _rows(const pool_t* pl, real* unused, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t c0,
                Py_ssize_t c1) noexcept nogil:
    """Output rows r0..r1 - 1 (row r: image r // ho, row r % ho), channels c0..c1 - 1."""
    cdef Py_ssize_t r, n, oh, q, i, j, ch, i0, i1, j0, j1
    cdef Py_ssize_t nc = c1 - c0
    cdef real* y
    cdef const real* src
    cdef const real* xn
    cdef real v, scale
    cdef bint first
    for r in range(r0, r1):
        n = r // pl.ho
        oh = r % pl.ho
        i0 = max(oh * pl.sh - pl.pt, 0)
        i1 = min(oh * pl.sh - pl.pt + pl.kh, pl.h)
        xn = <const real*>pl.x + n * pl.xs_n + c0
        for q in range(pl.wo):
            j0 = max(q * pl.sw - pl.pl, 0)
            j1 = min(q * pl.sw - pl.pl + pl.kw, pl.wd)
            y = <real*>pl.out + n * pl.os_n + oh * pl.os_h + q * pl.os_w + c0
            first = True
            for i in range(i0, i1):
                for j in range(j0, j1):
                    src = xn + i * pl.xs_h + j * pl.xs_w
                    if first:
                        for ch in range(nc):
                            y[ch] = src[ch]
                        first = False
                    elif pl.is_max:
                        # A NaN anywhere in the window wins, as CPU_REF's max does.
                        for ch in range(nc):
                            v = src[ch]
                            y[ch] = v if (v > y[ch] or v != v) else y[ch]
                    else:
                        for ch in range(nc):
                            y[ch] = y[ch] + src[ch]
            if pl.is_max:
                continue
            if pl.include_pad:
                scale = 1 / <real>(pl.kh * pl.kw)
            else:
                scale = 1 / <real>((i1 - i0) * (j1 - j0))
            for ch in range(nc):
                y[ch] = y[ch] * scale


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const pool_t* pl = <const pool_t*>arg
    cdef Py_ssize_t rp = part // pl.channel_parts, cp = part % pl.channel_parts
    cdef Py_ssize_t r0 = rp * pl.rows_per_part, c0 = cp * pl.channels_per_part
    cdef Py_ssize_t r1 = min(r0 + pl.rows_per_part, pl.rows)
    cdef Py_ssize_t c1 = min(c0 + pl.channels_per_part, pl.c)
    if pl.dtype == NNC_32F:
        _rows(pl, <float*>NULL, r0, r1, c0, c1)
    else:
        _rows(pl, <double*>NULL, r0, r1, c0, c1)
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
    cdef int d, dtype
    cdef Py_ssize_t n, work
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
    pl.dtype, pl.is_max, pl.include_pad = dtype, is_max, p.count_include_pad != 0
    pl.x, pl.out = <const char*>x.data, <char*>y.data
    pl.xs_n = x.stride[0] if d else 0
    pl.h, pl.wd, pl.c = x.dim[d], x.dim[d + 1], x.dim[d + 2]
    pl.xs_h, pl.xs_w = x.stride[d], x.stride[d + 1]
    pl.os_n = y.stride[0] if d else 0
    pl.ho, pl.wo = y.dim[d], y.dim[d + 1]
    pl.os_h, pl.os_w = y.stride[d], y.stride[d + 1]
    pl.kh, pl.kw, pl.sh, pl.sw = p.size[0], p.size[1], p.stride[0], p.stride[1]
    pl.pt, pl.pl = p.pad[0], p.pad[1]
    if pl.kh < 1 or pl.kw < 1 or pl.sh < 1 or pl.sw < 1 or min(p.pad[0], p.pad[1]) < 0:
        return NNC_INVALID
    if (max(p.pad[0], p.pad[2]) >= pl.kh or max(p.pad[1], p.pad[3]) >= pl.kw
            or min(p.pad[2], p.pad[3]) < 0):
        return NNC_INVALID
    if y.dim[d + 2] != pl.c or (d and y.dim[0] != n):
        return NNC_INVALID
    if (pl.h + pl.pt + p.pad[2] < pl.kh or pl.wd + pl.pl + p.pad[3] < pl.kw
            or pl.ho != (pl.h + pl.pt + p.pad[2] - pl.kh) // pl.sh + 1
            or pl.wo != (pl.wd + pl.pl + p.pad[3] - pl.kw) // pl.sw + 1):
        return NNC_INVALID
    pl.rows = n * pl.ho
    # Rows per part by the work of one output row; too few rows: split the channels instead.
    work = max(pl.wo * pl.kh * pl.kw * pl.c, 1)
    pl.rows_per_part = max(1, PART_WORK // work)
    pl.channels_per_part = pl.c
    if pl.rows <= pl.rows_per_part and pl.c >= 2 * MIN_PART_CHANNELS:
        work = max(pl.rows * pl.wo * pl.kh * pl.kw, 1)
        pl.channels_per_part = max(MIN_PART_CHANNELS, (PART_WORK // work + 15) // 16 * 16)
    pl.channels_per_part = max(1, min(pl.channels_per_part, pl.c))
    pl.channel_parts = (pl.c + pl.channels_per_part - 1) // pl.channels_per_part
    return NNC_SUCCESS


cdef int _pool(bint is_max, const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
               nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef pool_t pl
    cdef Py_ssize_t row_parts
    if _plan(is_max, p, inputs, n_in, outputs, n_out, &pl) != NNC_SUCCESS:
        return NNC_INVALID
    if pl.rows == 0 or pl.wo == 0 or pl.c == 0:
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
