"""CPU_OPT for REDUCE_SUM, REDUCE_MEAN, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD and REDUCE_NORM2 (NNC:
cmd/reduce/ccv_nnc_reduce_*_cpu_ref.c).

As in NNC's kernels, the reduced axes are read from the shapes: the output has the input's ndim,
and an axis is reduced where the output has size 1 and the input does not (the command's check
has already matched them with ``axes``). Axes of input size 1 are dropped, and neighbouring axes
of one kind merged, so any reduction becomes blocks [kept, reduced, kept, ...]; the innermost
block is a contiguous run of the input, either reduced into one output element (trailing axes:
rows) or added element by element into a run of the output (middle axes, e.g. H and W of an NHWC
image for a global average pool: float32 in vectors at cpu_isa()'s level, reduce_kernel.h's
nnc_red_colsum_f32, with the scalar loop's bits). An odometer walks the outer blocks.

SUM, MEAN, PROD and NORM2 (the sum of squares, then its square root) accumulate in double (one
rounding at the end, as CPU_REF); MAX and MIN work in the dtype and let NaN win, as np.max and
np.min do: their loops are reduce_kernel.h's (float32 in vectors at cpu_isa()'s level, read once
a call).
Each backend re-checks what it relies on (non-NULL, contiguous, CPU, one float datatype, same
ndim, every output dim equal to the input's or 1, output not overlapping the input, a non-empty
reduction for MAX and MIN) and returns NNC_INVALID before writing.
"""

from libc.math cimport INFINITY, sqrt
from libc.stdlib cimport free, malloc

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_MAX_DIM, NNC_OOM, NNC_SUCCESS
from nnc.base.isa cimport cpu_isa
from nnc.cmd.command cimport nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensor_plain
from nnc.tensor.tensor cimport nnc_tensor_t, tensor_overlap

ctypedef fused real:
    float
    double

cdef enum:
    RED_SUM
    RED_MEAN
    RED_MAX
    RED_MIN
    RED_PROD
    RED_NORM2

cdef extern from "cmd/reduce/reduce_kernel.h":
    float nnc_red_row_f32(int isa, int is_max, const float* p, Py_ssize_t n,
                          float m) noexcept nogil
    void nnc_red_col_f32(int isa, int is_max, float* m, const float* p,
                         Py_ssize_t n) noexcept nogil
    double nnc_red_row_f64(int is_max, const double* p, Py_ssize_t n, double m) noexcept nogil
    void nnc_red_col_f64(int is_max, double* m, const double* p, Py_ssize_t n) noexcept nogil
    void nnc_red_colsum_f32(int isa, double* a, const float* p, Py_ssize_t n) noexcept nogil

# The blocks of one reduction: sizes, whether each is reduced, and each block's step in the
# output (0 for reduced blocks).
ctypedef struct plan_t:
    int nb
    Py_ssize_t size[NNC_MAX_DIM]
    bint reduced[NNC_MAX_DIM]
    Py_ssize_t ostep[NNC_MAX_DIM]
    Py_ssize_t rcount               # elements reduced into each output element


cdef bint _plan(nnc_tensor_t* x, nnc_tensor_t* y, plan_t* pl) noexcept nogil:
    """Fill pl from the shapes; False if y is not x's shape with some axes of size 1. y lines up
    with x from the right (NNC's rule): y may lack leading axes of x (then of size 1) or have
    leading axes of size 1 more; a contiguous y's memory is the same either way."""
    cdef int i, b, lead = x.ndim - y.ndim
    cdef bint red
    cdef Py_ssize_t step, yd
    for i in range(-lead):
        if y.dim[i] != 1:
            return False
    pl.nb = 0
    pl.rcount = 1
    for i in range(x.ndim):
        yd = y.dim[i - lead] if i >= lead else 1
        if yd != x.dim[i] and yd != 1:
            return False
        if x.dim[i] == 1:
            continue
        red = yd == 1
        if red:
            pl.rcount *= x.dim[i]
        if pl.nb > 0 and pl.reduced[pl.nb - 1] == red:
            pl.size[pl.nb - 1] *= x.dim[i]
        else:
            pl.size[pl.nb] = x.dim[i]
            pl.reduced[pl.nb] = red
            pl.nb += 1
    step = 1
    for b in range(pl.nb - 1, -1, -1):
        if pl.reduced[b]:
            pl.ostep[b] = 0
        else:
            pl.ostep[b] = step
            step *= pl.size[b]
    return True


cdef inline double _row_sum(const real* p, Py_ssize_t n) noexcept nogil:
    # Four partial sums: independent additions the CPU can overlap (order differs from a plain
    # loop only by rounding in double, far below the float32 result's precision).
    cdef double s0 = 0, s1 = 0, s2 = 0, s3 = 0
    cdef Py_ssize_t i = 0
    while i + 4 <= n:
        s0 += p[i]
        s1 += p[i + 1]
        s2 += p[i + 2]
        s3 += p[i + 3]
        i += 4
    while i < n:
        s0 += p[i]
        i += 1
    return (s0 + s1) + (s2 + s3)


cdef inline double _row_sumsq(const real* p, Py_ssize_t n) noexcept nogil:
    # As _row_sum, of the squares (each square in double: exact for a float32 element).
    cdef double s0 = 0, s1 = 0, s2 = 0, s3 = 0, v
    cdef Py_ssize_t i = 0
    while i + 4 <= n:
        s0 += <double>p[i] * p[i]
        s1 += <double>p[i + 1] * p[i + 1]
        s2 += <double>p[i + 2] * p[i + 2]
        s3 += <double>p[i + 3] * p[i + 3]
        i += 4
    while i < n:
        v = p[i]
        s0 += v * v
        i += 1
    return (s0 + s1) + (s2 + s3)


cdef inline double _row_prod(const real* p, Py_ssize_t n) noexcept nogil:
    # As _row_sum, with four partial products.
    cdef double s0 = 1, s1 = 1, s2 = 1, s3 = 1
    cdef Py_ssize_t i = 0
    while i + 4 <= n:
        s0 *= p[i]
        s1 *= p[i + 1]
        s2 *= p[i + 2]
        s3 *= p[i + 3]
        i += 4
    while i < n:
        s0 *= p[i]
        i += 1
    return (s0 * s1) * (s2 * s3)


cdef inline real _row_ext(const real* p, Py_ssize_t n, real m, int is_max,
                          int isa) noexcept nogil:
    """The max (is_max) or min of m and p[0..n), NaN winning."""
    if real is float:
        return nnc_red_row_f32(isa, is_max, p, n, m)
    else:
        return nnc_red_row_f64(is_max, p, n, m)


cdef inline void _col_ext(real* m, const real* p, Py_ssize_t n, int is_max,
                          int isa) noexcept nogil:
    """m[j] = the max (is_max) or min of m[j] and p[j], NaN winning."""
    if real is float:
        nnc_red_col_f32(isa, is_max, m, p, n)
    else:
        nnc_red_col_f64(is_max, m, p, n)


cdef void _walk(const real* x, Py_ssize_t count, const plan_t* pl, double* acc, real* ymax,
                int op, int isa) noexcept nogil:
    """Visit x in memory order, one innermost block (a row of L elements) at a time, adding
    (its squares for NORM2), multiplying (PROD) or taking the max or min into acc (SUM, MEAN,
    PROD, NORM2) or ymax (MAX, MIN) at the row's output offset."""
    cdef int last = pl.nb - 1, b
    cdef Py_ssize_t L = pl.size[last], rows = count // L, row, j, off = 0
    cdef Py_ssize_t idx[NNC_MAX_DIM]
    cdef bint red_last = pl.reduced[last]
    cdef const real* p
    cdef double* a
    for b in range(last):
        idx[b] = 0
    for row in range(rows):
        p = x + row * L
        if op == RED_MAX or op == RED_MIN:
            if red_last:
                ymax[off] = _row_ext(p, L, ymax[off], op == RED_MAX, isa)
            else:
                _col_ext(ymax + off, p, L, op == RED_MAX, isa)
        elif op == RED_PROD:
            if red_last:
                acc[off] *= _row_prod(p, L)
            else:
                a = acc + off
                for j in range(L):
                    a[j] *= p[j]
        elif op == RED_NORM2:
            if red_last:
                acc[off] += _row_sumsq(p, L)
            else:
                a = acc + off
                for j in range(L):
                    a[j] += <double>p[j] * p[j]
        elif red_last:
            acc[off] += _row_sum(p, L)
        elif real is float:
            nnc_red_colsum_f32(isa, acc + off, p, L)
        else:
            a = acc + off
            for j in range(L):
                a[j] += p[j]
        # Next row: advance the odometer over the outer blocks.
        b = last - 1
        while b >= 0:
            idx[b] += 1
            off += pl.ostep[b]
            if idx[b] < pl.size[b]:
                break
            off -= pl.ostep[b] * pl.size[b]
            idx[b] = 0
            b -= 1


cdef int _reduce(const real* x, real* y, Py_ssize_t xcount, Py_ssize_t ycount,
                 const plan_t* pl, int op, int isa) noexcept nogil:
    cdef Py_ssize_t i
    cdef double* acc
    cdef double scale
    if pl.nb == 0:
        # Every axis has size 1: each reduction is one element (NORM2's is its magnitude).
        for i in range(ycount):
            y[i] = <real>sqrt(<double>x[i] * x[i]) if op == RED_NORM2 else x[i]
        return NNC_SUCCESS
    if op == RED_MAX or op == RED_MIN:
        for i in range(ycount):
            y[i] = -INFINITY if op == RED_MAX else INFINITY
        if xcount > 0:
            _walk(x, xcount, pl, NULL, y, op, isa)
        return NNC_SUCCESS
    acc = <double*>malloc(ycount * sizeof(double))
    if acc == NULL:
        return NNC_OOM
    for i in range(ycount):
        acc[i] = 1 if op == RED_PROD else 0
    if xcount > 0:
        _walk(x, xcount, pl, acc, <real*>NULL, op, isa)
    if op == RED_MEAN:
        # 0 / 0 is NaN: the mean of nothing, as NumPy gives it.
        scale = <double>pl.rcount
        for i in range(ycount):
            y[i] = <real>(acc[i] / scale)
    elif op == RED_NORM2:
        for i in range(ycount):
            y[i] = <real>sqrt(acc[i])
    else:
        for i in range(ycount):
            y[i] = <real>acc[i]
    free(acc)
    return NNC_SUCCESS


cdef int _reduce_exec(nnc_tensor_t** inputs, int n_in, nnc_tensor_t** outputs, int n_out,
                      int op) noexcept nogil:
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    cdef plan_t pl
    if n_in != 1 or n_out != 1 or inputs[0] == NULL or outputs[0] == NULL:
        return NNC_INVALID
    x, y = inputs[0], outputs[0]
    if not (tensor_plain(x) and tensor_plain(y)):
        return NNC_INVALID
    if x.datatype != y.datatype or (x.datatype != NNC_32F and x.datatype != NNC_64F):
        return NNC_INVALID
    if not _plan(x, y, &pl) or (y.count > 0 and tensor_overlap(x, y)):
        return NNC_INVALID
    if y.count == 0:
        return NNC_SUCCESS
    if (op == RED_MAX or op == RED_MIN) and pl.rcount == 0:
        return NNC_INVALID                      # the max or min of nothing
    if x.datatype == NNC_32F:
        return _reduce(<const float*>x.data, <float*>y.data, x.count, y.count, &pl, op,
                       cpu_isa())
    return _reduce(<const double*>x.data, <double*>y.data, x.count, y.count, &pl, op,
                   cpu_isa())


cdef int reduce_sum_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                        nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _reduce_exec(inputs, n_in, outputs, n_out, RED_SUM)


cdef int reduce_mean_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                         nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _reduce_exec(inputs, n_in, outputs, n_out, RED_MEAN)


cdef int reduce_max_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                        nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _reduce_exec(inputs, n_in, outputs, n_out, RED_MAX)


cdef int reduce_min_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                        nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _reduce_exec(inputs, n_in, outputs, n_out, RED_MIN)


cdef int reduce_prod_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                         nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _reduce_exec(inputs, n_in, outputs, n_out, RED_PROD)


cdef int reduce_norm2_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                          nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _reduce_exec(inputs, n_in, outputs, n_out, RED_NORM2)


def register():
    """Register the CPU_OPT C backends of this module (called once by register_builtins)."""
    cdef int mask = NNC_32F | NNC_64F
    register_c_backend("REDUCE_SUM", "CPU_OPT", reduce_sum_opt, mask, True, None, None, True)
    register_c_backend("REDUCE_MEAN", "CPU_OPT", reduce_mean_opt, mask, True, None, None, True)
    register_c_backend("REDUCE_MAX", "CPU_OPT", reduce_max_opt, mask, True, None, None, True)
    register_c_backend("REDUCE_MIN", "CPU_OPT", reduce_min_opt, mask, True, None, None, True)
    register_c_backend("REDUCE_PROD", "CPU_OPT", reduce_prod_opt, mask, True, None, None, True)
    register_c_backend("REDUCE_NORM2", "CPU_OPT", reduce_norm2_opt, mask, True, None, None,
                       True)
