"""PAD's CPU_OPT backend in C: output rows in parts, no GIL.

Semantics are pad/__init__.py's. The output is cut into rows along its last axis; a row's
coordinates on the other axes map to one input row (reflected or clamped), or, in constant mode,
to none (a row of the value). Within a row the input row is copied whole (memcpy) and the
begin/end elements are the value or mapped one by one. The values are copied, never computed,
so the result is bit-exact to CPU_REF. Parts write disjoint rows and only read the input. The
backend re-checks what it relies on (contiguous CPU tensors of one float dtype, the output's
shape the input's + begin + end, reflect/edge sizes) and returns NNC_INVALID otherwise.
"""

from libc.string cimport memcpy

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_MAX_DIM, NNC_SUCCESS
from nnc.base.parallel cimport nnc_parallel_for
from nnc.cmd.command cimport (
    PAD_CONSTANT, PAD_EDGE, PAD_REFLECT, nnc_cmd_param_t, register_c_backend,
)
from nnc.cmd.cpu_check cimport tensor_plain
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef enum:
    PART_WORK = 1 << 15                 # output elements per part


# One call, shared (read-only) by its parts.
ctypedef struct pad_t:
    int dtype                           # NNC_32F or NNC_64F
    int mode                            # PAD_CONSTANT, PAD_REFLECT or PAD_EDGE
    int ndim                            # >= 1
    double value                        # constant mode's value
    const char* x
    char* y
    Py_ssize_t xdim[NNC_MAX_DIM]
    Py_ssize_t ydim[NNC_MAX_DIM]
    Py_ssize_t begin[NNC_MAX_DIM]
    Py_ssize_t rows                     # output rows: the product of ydim[0:ndim - 1]
    Py_ssize_t rows_per_part


cdef inline Py_ssize_t _map(Py_ssize_t i, Py_ssize_t n, int mode) noexcept nogil:
    """The input index output index i - begin reads on an axis of n, or -1 (constant)."""
    if mode == PAD_CONSTANT:
        return i if 0 <= i < n else -1
    if mode == PAD_EDGE:
        return 0 if i < 0 else (n - 1 if i >= n else i)
    if i < 0:                           # reflect: begin, end < n, so one reflection suffices
        return -i
    return 2 * (n - 1) - i if i >= n else i


cdef void _rows(real* y, const real* x, const pad_t* t, Py_ssize_t r0,
                Py_ssize_t r1) noexcept nogil:
    cdef Py_ssize_t r, q, k, j, idx, src, last = t.ndim - 1
    cdef Py_ssize_t n = t.xdim[last], m = t.ydim[last], b = t.begin[last]
    cdef real value = <real>t.value
    cdef real* out
    cdef const real* row
    for r in range(r0, r1):
        out = y + r * m
        # The input row: the row index's coordinates on axes 0..last-1, each mapped.
        q, src, j = r, 0, 1
        for k in range(last - 1, -1, -1):
            idx = _map(q % t.ydim[k] - t.begin[k], t.xdim[k], t.mode)
            q //= t.ydim[k]
            if idx < 0:
                src = -1
                break
            src += idx * j
            j *= t.xdim[k]
        if src < 0 or (n == 0 and t.mode == PAD_CONSTANT):
            for k in range(m):
                out[k] = value
            continue
        row = x + src * n
        memcpy(out + b, row, n * sizeof(real))
        for k in range(b):
            idx = _map(k - b, n, t.mode)
            out[k] = value if idx < 0 else row[idx]
        for k in range(b + n, m):
            idx = _map(k - b, n, t.mode)
            out[k] = value if idx < 0 else row[idx]


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const pad_t* t = <const pad_t*>arg
    cdef Py_ssize_t r0 = part * t.rows_per_part
    cdef Py_ssize_t r1 = min(r0 + t.rows_per_part, t.rows)
    if t.dtype == NNC_32F:
        _rows(<float*>t.y, <const float*>t.x, t, r0, r1)
    else:
        _rows(<double*>t.y, <const double*>t.x, t, r0, r1)
    return NNC_SUCCESS


cdef int pad_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef pad_t t
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    cdef int i
    if n_in != 1 or n_out != 1 or not tensor_plain(inputs[0]) or not tensor_plain(outputs[0]):
        return NNC_INVALID
    x, y = inputs[0], outputs[0]
    if x.datatype != y.datatype or not (y.datatype & (NNC_32F | NNC_64F)) \
            or x.ndim != y.ndim or x == y or p.mode not in (PAD_CONSTANT, PAD_REFLECT, PAD_EDGE):
        return NNC_INVALID
    if x.ndim == 0:
        if y.count:
            memcpy(y.data, x.data, y.itemsize)
        return NNC_SUCCESS
    for i in range(x.ndim):
        if p.begin[i] < 0 or p.end[i] < 0 or y.dim[i] != x.dim[i] + p.begin[i] + p.end[i]:
            return NNC_INVALID
        if p.mode == PAD_REFLECT and (p.begin[i] >= max(x.dim[i], 1)
                                      or p.end[i] >= max(x.dim[i], 1)):
            return NNC_INVALID
        if p.mode == PAD_EDGE and x.dim[i] == 0 and p.begin[i] + p.end[i]:
            return NNC_INVALID
        t.xdim[i], t.ydim[i], t.begin[i] = x.dim[i], y.dim[i], p.begin[i]
    if y.count == 0:
        return NNC_SUCCESS
    t.dtype, t.mode, t.ndim, t.value = y.datatype, p.mode, x.ndim, p.a
    t.x, t.y = <const char*>x.data, <char*>y.data
    t.rows = y.count // y.dim[y.ndim - 1]
    t.rows_per_part = max(1, PART_WORK // y.dim[y.ndim - 1])
    return nnc_parallel_for((t.rows + t.rows_per_part - 1) // t.rows_per_part, _part, &t, ctx)


def register():
    """Register PAD's CPU_OPT (called once by register_builtins)."""
    register_c_backend("PAD", "CPU_OPT", pad_opt, NNC_32F | NNC_64F, True, None, None, True)
