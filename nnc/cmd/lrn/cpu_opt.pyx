"""LRN's CPU_OPT backend in C: rows of channels, no GIL.

Semantics are lrn/__init__.py's. Each row (one pixel's channels, contiguous) keeps a running
sum of its squares in double over the sliding window: x * x of a float is exact in double, so
adding the entering channel and subtracting the leaving one loses nothing a float32 result
could show (float64 rows lose at most a few ulps of the window's sum). Then
y = x * pow(bias + alpha / size * sum, -beta). Rows are cut into parts on the pool
(nnc.base.parallel); parts write disjoint rows, the input is only read, so every thread setting
gives the same bits. The backend re-checks what it relies on (contiguous tensors of one float
dtype and shape, no overlap is the command's check) and returns NNC_INVALID otherwise.
"""

from libc.math cimport pow

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.base.parallel cimport nnc_parallel_for
from nnc.cmd.command cimport nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensors_like
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef enum:
    PART_WORK = 1 << 16                 # elements per part: enough that a helper's wake-up is cheap


# One call, shared (read-only) by its parts.
ctypedef struct lrn_t:
    int dtype                           # NNC_32F or NNC_64F
    const char* x
    char* y
    Py_ssize_t c                        # channels in a row (the last axis), >= 1
    Py_ssize_t rows
    Py_ssize_t rows_per_part
    int before, after                   # channels of the window before and after c
    double scale                        # alpha / size
    double bias, beta


cdef void _rows(real* y, const real* x, const lrn_t* t, Py_ssize_t r0,
                Py_ssize_t r1) noexcept nogil:
    cdef Py_ssize_t r, j, c = t.c
    cdef const real* xr
    cdef real* yr
    cdef double total, v
    for r in range(r0, r1):
        xr = x + r * c
        yr = y + r * c
        # The window of channel 0: channels 0..after (those that exist).
        total = 0
        for j in range(min(<Py_ssize_t>t.after + 1, c)):
            v = xr[j]
            total += v * v
        for j in range(c):
            yr[j] = <real>(xr[j] * pow(t.bias + t.scale * total, -t.beta))
            # Slide to channel j + 1: channel j + 1 + after enters, j - before leaves.
            if j + 1 + t.after < c:
                v = xr[j + 1 + t.after]
                total += v * v
            if j - t.before >= 0:
                v = xr[j - t.before]
                total -= v * v
                if total < 0:           # rounding of the running sum; a sum of squares is >= 0
                    total = 0


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const lrn_t* t = <const lrn_t*>arg
    cdef Py_ssize_t r0 = part * t.rows_per_part
    cdef Py_ssize_t r1 = min(r0 + t.rows_per_part, t.rows)
    if t.dtype == NNC_32F:
        _rows(<float*>t.y, <const float*>t.x, t, r0, r1)
    else:
        _rows(<double*>t.y, <const double*>t.x, t, r0, r1)
    return NNC_SUCCESS


cdef int lrn_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef lrn_t t
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    if n_in != 1 or n_out != 1 or not tensors_like(inputs, n_in, outputs, n_out):
        return NNC_INVALID
    x, y = inputs[0], outputs[0]
    if x.ndim < 1 or y.ndim < 1 or x.dim[x.ndim - 1] != y.dim[y.ndim - 1] or p.size[0] < 1:
        return NNC_INVALID
    t.c = y.dim[y.ndim - 1]
    if t.c == 0 or y.count == 0:
        return NNC_SUCCESS
    t.dtype = y.datatype
    t.x, t.y = <const char*>x.data, <char*>y.data
    t.rows = y.count // t.c
    t.before, t.after = (p.size[0] - 1) // 2, p.size[0] // 2
    t.scale = p.a / p.size[0]
    t.beta, t.bias = p.b, p.c
    t.rows_per_part = max(1, PART_WORK // t.c)
    return nnc_parallel_for((t.rows + t.rows_per_part - 1) // t.rows_per_part, _part, &t, ctx)


def register():
    """Register LRN's CPU_OPT (called once by register_builtins)."""
    register_c_backend("LRN", "CPU_OPT", lrn_opt, NNC_32F | NNC_64F, True, None, None, True)
