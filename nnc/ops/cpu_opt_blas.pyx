"""CPU_OPT loops for ADD, MUL and CLAMP (NNC: cmd/blas/ccv_nnc_add_cpu_opt, cmd/clamp).

These commands carry two scalars (ADD's p and q, CLAMP's min and max) and the C parameter struct
of nnc/cmd.pxd holds one, so their CPU_OPT backends are Python callables (nnc/ops/blas.py,
nnc/ops/clamp.py) that check shapes and call these loops, which drop the GIL while they run.
Every array here is C-contiguous and flat; the callers guarantee it (they are module-private).
Each loop reads element i of every input before writing element i of the output, so an output
that is exactly an input (in place) is safe.
"""

ctypedef fused real:
    float
    double


cdef void _axpby(real* y, const real* a, const real* b, real p, real q, Py_ssize_t rows,
                 Py_ssize_t m, bint has_b) noexcept nogil:
    cdef Py_ssize_t r, j
    cdef const real* ar
    cdef real* yr
    for r in range(rows):
        ar = a + r * m
        yr = y + r * m
        if not has_b:
            for j in range(m):
                yr[j] = p * ar[j]
        elif p == 1 and q == 1:
            for j in range(m):
                yr[j] = ar[j] + b[j]
        else:
            for j in range(m):
                yr[j] = p * ar[j] + q * b[j]


cdef void _mul(real* y, const real* a, const real* b, real p, Py_ssize_t rows,
               Py_ssize_t m) noexcept nogil:
    cdef Py_ssize_t r, j
    cdef const real* ar
    cdef real* yr
    for r in range(rows):
        ar = a + r * m
        yr = y + r * m
        if p == 1:
            for j in range(m):
                yr[j] = ar[j] * b[j]
        else:
            for j in range(m):
                yr[j] = p * ar[j] * b[j]


cdef void _clamp(real* y, const real* x, Py_ssize_t n, real lo, real hi, bint has_lo,
                 bint has_hi) noexcept nogil:
    cdef Py_ssize_t i
    cdef real v
    # "v < lo ? lo : v" keeps a NaN element NaN, as np.maximum does.
    for i in range(n):
        v = x[i]
        if has_lo and v < lo:
            v = lo
        if has_hi and v > hi:
            v = hi
        y[i] = v


def add_rows(real[::1] y, const real[::1] a, const real[::1] b, double p, double q,
             bint has_b):
    """y[r*m + j] = p * a[r*m + j] + q * b[j] for every row r; m = len(b) (b: one row)."""
    cdef Py_ssize_t n = y.shape[0], m = b.shape[0] if has_b else y.shape[0]
    if a.shape[0] != n or m == 0 or n % m:
        raise ValueError("add_rows: a must match y and len(b) must divide len(y)")
    if n == 0:
        return
    with nogil:
        _axpby(&y[0], &a[0], &b[0], <real>p, <real>q, n // m, m, has_b)


def mul_rows(real[::1] y, const real[::1] a, const real[::1] b, double p):
    """y[r*m + j] = p * a[r*m + j] * b[j] for every row r; m = len(b)."""
    cdef Py_ssize_t n = y.shape[0], m = b.shape[0]
    if a.shape[0] != n or m == 0 or n % m:
        raise ValueError("mul_rows: a must match y and len(b) must divide len(y)")
    if n == 0:
        return
    with nogil:
        _mul(&y[0], &a[0], &b[0], <real>p, n // m, m)


def clamp(real[::1] y, const real[::1] x, double lo, double hi, bint has_lo, bint has_hi):
    """y = min(max(x, lo), hi), skipping a bound whose flag is off."""
    cdef Py_ssize_t n = y.shape[0]
    if x.shape[0] != n:
        raise ValueError("clamp: x and y differ in length")
    if n == 0:
        return
    with nogil:
        _clamp(&y[0], &x[0], n, <real>lo, <real>hi, has_lo, has_hi)
