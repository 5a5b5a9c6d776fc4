"""CPU_OPT loop for TRANSPOSE: a batch of 2-D transposes, in cache-sized tiles (float32:
transpose_kernel.h's register blocks at cpu_isa()'s level; float64: the element loop below);
FORMAT_TRANSFORM's C backends (CPU_REF: any strides and dtype; CPU_OPT: contiguous
float32/float64 on these tiles).

Every permutation that moves one block of adjacent axes past another (NCHW -> NHWC is
[N, C, H*W] -> [N, H*W, C], NHWC -> NCHW the reverse, a matrix transpose [R, S] -> [S, R]) is
this loop; the family module (__init__.py) finds that form and falls back to NumPy otherwise. Both
arrays are C-contiguous and distinct (TRANSPOSE is never in place). A float32 transpose of 256 KB
or more is cut over the pool's threads (nnc_parallel_for) into ranges of one matrix's columns of
x (rows of y; rows of x for 2-7 columns), which write disjoint parts of y.
"""

from libc.string cimport memcpy

from nnc.base.core cimport (
    NNC_8U, NNC_16F, NNC_32F, NNC_32S, NNC_64F, NNC_64S, NNC_INVALID, NNC_MAX_DIM, NNC_SUCCESS,
)
from nnc.base.isa cimport cpu_isa
from nnc.base.parallel cimport nnc_parallel_for, parallel_width
from nnc.cmd.command cimport nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensor_plain
from nnc.tensor.tensor cimport TENSOR_FORMAT_NCHW, TENSOR_FORMAT_NHWC, nnc_tensor_t

ctypedef fused real:
    float
    double

cdef extern from "cmd/transpose/transpose_kernel.h":
    void nnc_transpose_f32(int isa, float* y, const float* x, Py_ssize_t batch, Py_ssize_t rows,
                           Py_ssize_t cols) noexcept nogil
    void nnc_transpose_f32_range(int isa, float* y, const float* x, Py_ssize_t rows,
                                 Py_ssize_t cols, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil
    bint nnc_transpose_by_rows(int isa, Py_ssize_t rows, Py_ssize_t cols) noexcept nogil

# A float32 transpose of at least this many bytes is cut into parts over the pool's threads:
# it moves every byte once, so it is memory-bound, and the network's input (224 x 224 x 3 to
# NHWC: 0.6 MB) ran alone on the caller while the helpers spun.
cdef Py_ssize_t _split_bytes = 256 << 10


ctypedef struct _tr_t:
    float* y
    const float* x
    Py_ssize_t rows, cols
    Py_ssize_t per_matrix               # parts of one matrix
    Py_ssize_t span                     # rows (nnc_transpose_by_rows) or columns of x a part
    Py_ssize_t n                        # rows or columns of x a matrix
    int isa


cdef int _tr_part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    """One range of rows or columns of one matrix (parts numbered matrix by matrix, in order)."""
    cdef const _tr_t* t = <const _tr_t*>arg
    cdef Py_ssize_t b = part // t.per_matrix, lo = (part % t.per_matrix) * t.span
    cdef Py_ssize_t size = t.rows * t.cols
    nnc_transpose_f32_range(t.isa, t.y + b * size, t.x + b * size, t.rows, t.cols, lo,
                            min(lo + t.span, t.n))
    return NNC_SUCCESS


cdef int _transpose_f32_split(float* y, const float* x, Py_ssize_t batch, Py_ssize_t rows,
                              Py_ssize_t cols, void* ctx) noexcept nogil:
    """y[b, c, r] = x[b, r, c], cut into about two parts a pool thread when large (the same
    values land in the same places whatever the cut)."""
    cdef _tr_t t
    cdef int width = parallel_width()
    t.isa = cpu_isa()
    if width <= 1 or batch * rows * cols * <Py_ssize_t>sizeof(float) < _split_bytes:
        nnc_transpose_f32(t.isa, y, x, batch, rows, cols)
        return NNC_SUCCESS
    t.y, t.x, t.rows, t.cols = y, x, rows, cols
    t.n = rows if nnc_transpose_by_rows(t.isa, rows, cols) else cols
    # Parts of at least 64 rows or columns; a batch of many matrices is cut by matrices.
    t.per_matrix = max(1, min(t.n // 64, (2 * width + batch - 1) // batch))
    t.span = (t.n + t.per_matrix - 1) // t.per_matrix
    t.per_matrix = (t.n + t.span - 1) // t.span
    return nnc_parallel_for(batch * t.per_matrix, _tr_part, &t, ctx)


def _tune(split_bytes):
    """Set the smallest float32 transpose cut into parts (for A/B runs and tests); returns the
    previous value."""
    global _split_bytes
    old = _split_bytes
    _split_bytes = max(0, split_bytes)
    return old

# Tiles are 32 x 32 (the literal 32 in the loops: Cython needs a constant step to make a C
# loop): 8 KiB of doubles per side, so both tiles stay in L1 while one is read by rows and the
# other written by columns.


cdef void _transpose(real* y, const real* x, Py_ssize_t batch, Py_ssize_t rows,
                     Py_ssize_t cols) noexcept nogil:
    cdef Py_ssize_t b, r0, c0, r, c, r1, c1
    cdef const real* xb
    cdef real* yb
    if real is float:
        nnc_transpose_f32(cpu_isa(), y, x, batch, rows, cols)
    elif rows < 8:
        # Few rows (an image's 3 colours to NHWC, a channel shuffle's groups): y is written in
        # order from `rows` sequential read streams; tiles of 32 would leave the inner loop
        # a few elements long.
        for b in range(batch):
            xb = x + b * rows * cols
            yb = y + b * rows * cols
            for c in range(cols):
                for r in range(rows):
                    yb[c * rows + r] = xb[r * cols + c]
    else:
        for b in range(batch):
            xb = x + b * rows * cols
            yb = y + b * rows * cols
            for r0 in range(0, rows, 32):
                r1 = min(r0 + 32, rows)
                for c0 in range(0, cols, 32):
                    c1 = min(c0 + 32, cols)
                    for r in range(r0, r1):
                        for c in range(c0, c1):
                            yb[c * rows + r] = xb[r * cols + c]


def transpose_batched(real[::1] y, const real[::1] x, Py_ssize_t batch, Py_ssize_t rows,
                      Py_ssize_t cols):
    """y[b, c, r] = x[b, r, c] for flat arrays of batch * rows * cols elements."""
    if batch < 0 or rows < 0 or cols < 0:
        raise ValueError("transpose_batched: negative size")
    if x.shape[0] != batch * rows * cols or y.shape[0] != x.shape[0]:
        raise ValueError("transpose_batched: sizes do not match batch * rows * cols")
    if x.shape[0] == 0:
        return
    with nogil:
        _transpose(&y[0], &x[0], batch, rows, cols)


cdef int transpose_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                       nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    """TRANSPOSE's C backend: the permutation from the Cmd's param (begin[]: the axes or perm,
    end[0]: 1 for axes, end[1]: their count), reduced as ``batched_2d`` does (size-1 axes
    dropped, axes that stay adjacent and in order merged) to y[b, c, r] = x[b, r, c]; anything
    else is NNC_INVALID. No Python on the way: the per-call cost of a small shuffle."""
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    cdef int perm[NNC_MAX_DIM]
    cdef int pos[NNC_MAX_DIM]
    cdef int first[3]
    cdef Py_ssize_t size[3]
    cdef int nd, k, a, i, j, nkeep = 0, nruns = 0, last = -1
    if n_in != 1 or n_out != 1 or not tensor_plain(inputs[0]) or not tensor_plain(outputs[0]):
        return NNC_INVALID
    x, y = inputs[0], outputs[0]
    nd = x.ndim
    if (x.datatype != y.datatype or not (x.datatype & (NNC_32F | NNC_64F)) or y.ndim != nd
            or x.count != y.count or x.data == y.data):
        return NNC_INVALID
    if p.end[0]:
        if p.end[1] != 2 or nd < 1:
            return NNC_INVALID
        i, j = p.begin[0], p.begin[1]
        if i < -nd or i >= nd or j < -nd or j >= nd:
            return NNC_INVALID
        for k in range(nd):
            perm[k] = k
        i, j = (i + nd) % nd, (j + nd) % nd
        perm[i], perm[j] = j, i
    else:
        if p.end[1] != nd:
            return NNC_INVALID
        for k in range(nd):
            pos[k] = 0
        for k in range(nd):
            a = p.begin[k]
            if a < -nd or a >= nd:
                return NNC_INVALID
            perm[k] = (a + nd) % nd
            pos[perm[k]] += 1
        for k in range(nd):
            if pos[k] != 1:
                return NNC_INVALID
    for k in range(nd):
        if y.dim[k] != x.dim[perm[k]]:
            return NNC_INVALID
    for k in range(nd):   # pos[a]: the rank of axis a among the axes longer than 1
        pos[k] = nkeep
        if x.dim[k] != 1:
            nkeep += 1
    for k in range(nd):
        a = perm[k]
        if x.dim[a] == 1:
            continue
        if nruns > 0 and pos[a] == pos[last] + 1:
            size[nruns - 1] *= x.dim[a]
        else:
            if nruns == 3:
                return NNC_INVALID
            first[nruns] = pos[a]
            size[nruns] = x.dim[a]
            nruns += 1
        last = a
    if x.count == 0:
        return NNC_SUCCESS
    if nruns <= 1:
        memcpy(y.data, x.data, x.count * x.itemsize)
        return NNC_SUCCESS
    if nruns == 2 and first[0] > first[1]:
        size[2], size[1], size[0] = size[0], size[1], 1     # batch 1, rows size[1], cols size[0]
    elif nruns == 3 and first[0] < first[2] < first[1]:
        size[1], size[2] = size[2], size[1]                 # batch, rows, cols
    else:
        return NNC_INVALID
    if x.datatype == NNC_32F:
        return _transpose_f32_split(<float*>y.data, <const float*>x.data, size[0], size[1],
                                    size[2], ctx)
    else:
        _transpose(<double*>y.data, <const double*>x.data, size[0], size[1], size[2])
    return NNC_SUCCESS


cdef bint _format_perm(const nnc_tensor_t* x, const nnc_tensor_t* y, int* perm) noexcept nogil:
    """perm[k] = the axis of x that y's axis k is, for FORMAT_TRANSFORM x -> y (NNC's
    ccv_nnc_util_cpu_ref.c: the same format is a copy, NHWC <-> NCHW moves the channels of a
    3-d or 4-d tensor); False when the formats or shapes do not allow it."""
    cdef int nd = x.ndim, k, c
    if y.ndim != nd or x.datatype != y.datatype:
        return False
    for k in range(nd):
        perm[k] = k
    if x.format != y.format:
        if nd != 3 and nd != 4:
            return False
        c = nd - 3                                  # the first image axis: N's after it
        if x.format == TENSOR_FORMAT_NHWC and y.format == TENSOR_FORMAT_NCHW:
            perm[c], perm[c + 1], perm[c + 2] = nd - 1, c, c + 1
        elif x.format == TENSOR_FORMAT_NCHW and y.format == TENSOR_FORMAT_NHWC:
            perm[c], perm[c + 1], perm[c + 2] = c + 1, c + 2, c
        else:
            return False                            # CHWN: NNC asserts too
    for k in range(nd):
        if y.dim[k] != x.dim[perm[k]]:
            return False
    return True


cdef void _copy_strided(char* yp, const char* xp, const nnc_tensor_t* x, const nnc_tensor_t* y,
                        const int* perm) noexcept nogil:
    """y[i] = x[perm applied to i] for every index i of y, element by element (any strides)."""
    cdef int nd = y.ndim, k, size = y.itemsize
    cdef Py_ssize_t idx[NNC_MAX_DIM]
    cdef Py_ssize_t xs[NNC_MAX_DIM]
    cdef Py_ssize_t _n, xo = 0, yo = 0
    for k in range(nd):
        idx[k] = 0
        xs[k] = x.stride[perm[k]]
    for _n in range(y.count):
        memcpy(yp + yo * size, xp + xo * size, size)
        k = nd - 1
        while k >= 0:                               # the odometer: last axis fastest
            idx[k] += 1
            xo += xs[k]
            yo += y.stride[k]
            if idx[k] < y.dim[k]:
                break
            xo -= xs[k] * y.dim[k]
            yo -= y.stride[k] * y.dim[k]
            idx[k] = 0
            k -= 1


cdef int format_transform_ref(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                              nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    """FORMAT_TRANSFORM's CPU_REF: outputs[k] = inputs[k] in outputs[k]'s format, any strides
    and dtype (NNC's CPU_REF takes views too)."""
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    cdef int perm[NNC_MAX_DIM]
    cdef int k
    if n_out > n_in:
        return NNC_INVALID
    for k in range(n_out):
        x, y = inputs[k], outputs[k]
        if (x == NULL or y == NULL or x.device >= 0 or y.device >= 0 or x.data == y.data
                or not _format_perm(x, y, perm)):
            return NNC_INVALID
    for k in range(n_out):
        x, y = inputs[k], outputs[k]
        _format_perm(x, y, perm)
        if y.count:
            _copy_strided(<char*>y.data, <const char*>x.data, x, y, perm)
    return NNC_SUCCESS


cdef int format_transform_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                              nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    """FORMAT_TRANSFORM's CPU_OPT: contiguous float32/float64 tensors; the same format is one
    memcpy, NHWC -> NCHW the batched transpose [N, H*W, C] -> [N, C, H*W], NCHW -> NHWC its
    reverse."""
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    cdef int perm[NNC_MAX_DIM]
    cdef int k, nd, rc
    cdef Py_ssize_t batch, rows, cols
    if n_out > n_in:
        return NNC_INVALID
    for k in range(n_out):
        x, y = inputs[k], outputs[k]
        if (not tensor_plain(x) or not tensor_plain(y) or x.data == y.data
                or not (x.datatype & (NNC_32F | NNC_64F)) or not _format_perm(x, y, perm)):
            return NNC_INVALID
    for k in range(n_out):
        x, y = inputs[k], outputs[k]
        if x.count == 0:
            continue
        if x.format == y.format:
            memcpy(y.data, x.data, x.count * x.itemsize)
            continue
        nd = x.ndim
        batch = x.dim[0] if nd == 4 else 1
        if x.format == TENSOR_FORMAT_NHWC:
            rows, cols = x.dim[nd - 3] * x.dim[nd - 2], x.dim[nd - 1]
        else:
            rows, cols = x.dim[nd - 3], x.dim[nd - 2] * x.dim[nd - 1]
        if x.datatype == NNC_32F:
            rc = _transpose_f32_split(<float*>y.data, <const float*>x.data, batch, rows, cols,
                                      ctx)
            if rc != NNC_SUCCESS:
                return rc
        else:
            _transpose(<double*>y.data, <const double*>x.data, batch, rows, cols)
    return NNC_SUCCESS


def register_format_transform():
    """Register FORMAT_TRANSFORM's C backends: CPU_REF (every dtype, any strides), CPU_OPT."""
    register_c_backend("FORMAT_TRANSFORM", "CPU_REF", format_transform_ref,
                       NNC_8U | NNC_16F | NNC_32S | NNC_32F | NNC_64S | NNC_64F,
                       False, None, None, True)
    register_c_backend("FORMAT_TRANSFORM", "CPU_OPT", format_transform_opt,
                       NNC_32F | NNC_64F, True, None, None, True)


def register(accept):
    """Register TRANSPOSE's CPU_OPT (``accept``: the family's check that the permutation has
    the batched 2-D form)."""
    register_c_backend("TRANSPOSE", "CPU_OPT", transpose_opt, NNC_32F | NNC_64F, True, accept,
                       None, True)
