"""CPU_OPT C backends of ADD, MUL, EWDIV, EWPOW, MIN, MAX, PRELU and CLAMP (NNC:
cmd/blas/ccv_nnc_add_cpu_opt, cmd/ew, cmd/compare, cmd/clamp).

Each is an ``nnc_cmd_exec_f``, so graph runners call it with no Python (ResNet's residual ADDs,
MobileNet-V2's ReLU6 CLAMPs). Their scalars come from the C parameter struct (nnc/cmd/command.pxd):
ADD's p and q are ``a`` and ``b``, MUL's p is ``a``, CLAMP's min and max are ``a`` and ``b``
(NaN: no bound on that side).

Cases taken (contiguous float32/float64 tensors of one dtype): ADD, MUL, EWDIV, EWPOW, MIN, MAX
and PRELU where one input has the output's shape and the other has it too, is one trailing row of it
(a per-channel [C] vector of an NHWC tensor), is one block of its neighbouring axes (a [1, C, 1, 1]
of an NCHW tensor: a scalar per run; not EWPOW) or is a single element, or is absent (ADD, MUL:
out = p * a; EWDIV: out = 1 / b), leading 1s aside; CLAMP on any shape. For EWDIV, EWPOW, MIN
and MAX the whole input may be either one (``swap`` says it is b), as their operands do not
commute (MIN's and MAX's ties give b, so not even they do for -0 and +0). Everything else
(strided views, broadcasts over two blocks of axes) is refused by
``accept``, which asks these same checks, so CPU_REF runs it.

Big tensors are cut into parts of about PART_ELEMENTS elements (whole rows when the other input
is a row) that idle pool threads take (nnc.base.parallel). Each loop reads element i of every input
before writing element i of the output, so an output that is exactly an input is safe.
"""

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.cmd.command cimport Cmd, nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensor_plain, tensor_views, tensors_like
from nnc.base.parallel cimport nnc_parallel_for
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef enum:
    OP_ADD = 0
    OP_MUL = 1
    OP_CLAMP = 2
    # Their loops are C (below, where NNC_BIN_OP_* repeat these values): y = f(a, b).
    OP_DIV = 3
    OP_POW = 4
    OP_MIN = 5
    OP_MAX = 6
    OP_PRELU = 7                        # y = a < 0 ? b * a : a, a the input x, b the slope

cdef enum:
    B_NONE = 0                          # out = p * a
    B_SCALAR = 1                        # b holds one element
    B_FULL = 2                          # b has the output's shape
    B_ROW = 3                           # b is one trailing row of m elements
    B_MID = 4                           # b is m values, each for a run of `inner` elements

cdef enum:
    # Elements per part: enough that waking a helper thread costs little beside the loop.
    PART_ELEMENTS = 1 << 16


# One call, shared read-only by its parts.
ctypedef struct ew_t:
    int op                              # OP_*
    int mode                            # B_*; OP_CLAMP: B_NONE
    int dtype                           # NNC_32F or NNC_64F
    void* y
    const void* a                       # the input with the output's shape
    const void* b                       # the other input (mode != B_NONE), else NULL
    double p, q                         # ADD: y = p*a + q*b; MUL: y = p*a*b; CLAMP: [p, q]
    bint swap                           # OP_DIV..OP_PRELU: a is the command's b, so y = f(b, a)
    Py_ssize_t count                    # elements of y
    Py_ssize_t m                        # B_ROW: row length, B_MID: b's count; else 1
    Py_ssize_t inner                    # B_MID: run length (count % (m * inner) == 0); else 1
    Py_ssize_t chunk                    # elements per part (B_ROW: m's multiple, B_MID: inner's)


cdef extern from *:
    """
    #include <math.h>
    #include <stddef.h>

    /* MIN and MAX: NNC's a < b ? a : b (a tie gives b), but a NaN in either gives NaN. */
    #define NNC_BIN_DIV(a, b) ((a) / (b))
    #define NNC_BIN_MIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))
    #define NNC_BIN_MAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
    /* PRELU: x < 0 ? slope * x : x (NaN fails the compare and stays NaN). */
    #define NNC_BIN_PRELU(a, b) ((a) < 0 ? (b) * (a) : (a))
    /* float32 pow is powf: within 0.82 ulp of the exact power (glibc's bound; C's pow rules at
       0, inf and NaN), so within 1 ulp of CPU_REF's float64 pow rounded once, at 2-3x the
       speed of pow in double. */
    #define NNC_BIN_POW_f32(a, b) powf((a), (b))
    #define NNC_BIN_POW_f64(a, b) pow((a), (b))

    /* y = f(a, b) on n elements; a or b with step 0 is one value for all (a scalar operand).
       Three loops, so the usual whole-whole and whole-scalar ones vectorise without a
       stride multiply. */
    #define NNC_BIN_LOOP(NAME, T, F)                                                    \\
        static void NAME(T* y, const T* a, ptrdiff_t sa, const T* b, ptrdiff_t sb,      \\
                         ptrdiff_t n)                                                   \\
        {                                                                               \\
            ptrdiff_t i;                                                                \\
            if (sa && sb) { for (i = 0; i < n; i++) y[i] = F(a[i], b[i]); }             \\
            else if (sa) { const T c = b[0]; for (i = 0; i < n; i++) y[i] = F(a[i], c); } \\
            else { const T c = a[0]; for (i = 0; i < n; i++) y[i] = F(c, b[i]); }       \\
        }

    NNC_BIN_LOOP(nnc_bin_div_f32, float, NNC_BIN_DIV)
    NNC_BIN_LOOP(nnc_bin_div_f64, double, NNC_BIN_DIV)
    NNC_BIN_LOOP(nnc_bin_min_f32, float, NNC_BIN_MIN)
    NNC_BIN_LOOP(nnc_bin_min_f64, double, NNC_BIN_MIN)
    NNC_BIN_LOOP(nnc_bin_max_f32, float, NNC_BIN_MAX)
    NNC_BIN_LOOP(nnc_bin_max_f64, double, NNC_BIN_MAX)
    NNC_BIN_LOOP(nnc_bin_prelu_f32, float, NNC_BIN_PRELU)
    NNC_BIN_LOOP(nnc_bin_prelu_f64, double, NNC_BIN_PRELU)
    NNC_BIN_LOOP(nnc_bin_pow_f32, float, NNC_BIN_POW_f32)
    NNC_BIN_LOOP(nnc_bin_pow_f64, double, NNC_BIN_POW_f64)

    /* EWPOW by one exponent e for all elements, where a shorter exact form gives pow's result
       (C's pow, which CPU_REF computes in float64 and rounds once); 0 if e has none. Why each
       is exact: x^1 is x; x^2 is x * x, one rounding of the exact square; x^-1 is 1 / x, one
       correctly rounded division (for float32, rounding 1 / x to double first and then to float
       gives the same: a double has more than 2 * 24 + 2 bits); x^0.5 is sqrt(x + 0), correctly
       rounded as pow's, with pow's +0 for -0 (adding +0 turns -0 into +0) and +inf for -inf;
       float32 x^3 is the double product x * x * x (x * x is exact in double, so one rounding,
       then float32's, as CPU_REF's). float64 x^3 has no such form (two roundings) and stays
       pow. */
    #define NNC_POW_BY(SFX, T, SQRT, CUBE)                                                   \\
        static int nnc_pow_by_##SFX(T* y, const T* a, T e, ptrdiff_t n)                   \\
        {                                                                                   \\
            ptrdiff_t i;                                                                    \\
            if (e == 1) { for (i = 0; i < n; i++) y[i] = a[i]; return 1; }                 \\
            if (e == 2) { for (i = 0; i < n; i++) y[i] = a[i] * a[i]; return 1; }          \\
            if (e == -1) { for (i = 0; i < n; i++) y[i] = (T)1 / a[i]; return 1; }         \\
            if (e == (T)0.5) {                                                              \\
                for (i = 0; i < n; i++)                                                     \\
                    y[i] = a[i] == -(T)INFINITY ? (T)INFINITY : SQRT(a[i] + (T)0);          \\
                return 1;                                                                   \\
            }                                                                               \\
            if (e == 3 && CUBE) {                                                           \\
                for (i = 0; i < n; i++) {                                                   \\
                    double v = a[i];                                                        \\
                    y[i] = (T)(v * v * v);                                                  \\
                }                                                                           \\
                return 1;                                                                   \\
            }                                                                               \\
            return 0;                                                                       \\
        }
    NNC_POW_BY(f32, float, sqrtf, 1)
    NNC_POW_BY(f64, double, sqrt, 0)

    /* The values of this module's OP_DIV..OP_PRELU. */
    enum { NNC_BIN_OP_DIV = 3, NNC_BIN_OP_POW = 4, NNC_BIN_OP_MIN = 5, NNC_BIN_OP_MAX = 6,
           NNC_BIN_OP_PRELU = 7 };

    #define NNC_BIN_CALL(SFX)                                                           \\
        static void nnc_bin_##SFX(int op, T_##SFX* y, const T_##SFX* a, ptrdiff_t sa,   \\
                                  const T_##SFX* b, ptrdiff_t sb, ptrdiff_t n)          \\
        {                                                                               \\
            /* One exponent for all: an exact form without libm where there is one. */  \\
            if (op == NNC_BIN_OP_POW && !sb && sa && nnc_pow_by_##SFX(y, a, b[0], n))   \\
                return;                                                                 \\
            switch (op) {                                                               \\
            case NNC_BIN_OP_DIV: nnc_bin_div_##SFX(y, a, sa, b, sb, n); break;          \\
            case NNC_BIN_OP_POW: nnc_bin_pow_##SFX(y, a, sa, b, sb, n); break;          \\
            case NNC_BIN_OP_MIN: nnc_bin_min_##SFX(y, a, sa, b, sb, n); break;          \\
            case NNC_BIN_OP_MAX: nnc_bin_max_##SFX(y, a, sa, b, sb, n); break;          \\
            default: nnc_bin_prelu_##SFX(y, a, sa, b, sb, n); break;                    \\
            }                                                                           \\
        }
    typedef float T_f32;
    typedef double T_f64;
    NNC_BIN_CALL(f32)
    NNC_BIN_CALL(f64)
    """
    void nnc_bin_f32(int op, float* y, const float* a, Py_ssize_t sa, const float* b,
                     Py_ssize_t sb, Py_ssize_t n) noexcept nogil
    void nnc_bin_f64(int op, double* y, const double* a, Py_ssize_t sa, const double* b,
                     Py_ssize_t sb, Py_ssize_t n) noexcept nogil


cdef void _bin(int op, real* y, const real* a, Py_ssize_t sa, const real* b, Py_ssize_t sb,
               Py_ssize_t n) noexcept nogil:
    """y = f(a, b) for OP_DIV..OP_PRELU; a step sa or sb of 0 makes that operand one value."""
    if real is float:
        nnc_bin_f32(op, y, a, sa, b, sb, n)
    else:
        nnc_bin_f64(op, y, a, sa, b, sb, n)


cdef void _bin_whole(const ew_t* e, real* y, const real* a, const real* b, Py_ssize_t sb,
                     Py_ssize_t n) noexcept nogil:
    """y = f(a, b) where a is the whole input (n elements) and b the other, of step sb:
    f(b, a) if the command's b is the whole one (swap)."""
    if e.swap:
        _bin(e.op, y, b, sb, a, 1, n)
    else:
        _bin(e.op, y, a, 1, b, sb, n)


cdef void _axpby(real* y, const real* a, const real* b, real p, real q,
                 Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t j
    if p == 1 and q == 1:
        for j in range(n):
            y[j] = a[j] + b[j]
    else:
        for j in range(n):
            y[j] = p * a[j] + q * b[j]


cdef void _axpc(real* y, const real* a, real p, real c, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t j
    for j in range(n):
        y[j] = p * a[j] + c


cdef void _mul(real* y, const real* a, const real* b, real p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t j
    if p == 1:
        for j in range(n):
            y[j] = a[j] * b[j]
    else:
        for j in range(n):
            y[j] = p * a[j] * b[j]


cdef void _mulc(real* y, const real* a, real p, real c, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t j
    for j in range(n):
        y[j] = p * a[j] * c


cdef void _clamp(real* y, const real* x, Py_ssize_t n, real lo, real hi, bint has_lo,
                 bint has_hi) noexcept nogil:
    cdef Py_ssize_t i
    cdef real v
    # "v < lo ? lo : v" keeps a NaN element NaN, as CPU_REF's np.maximum does.
    if has_lo and has_hi:
        for i in range(n):
            v = x[i]
            v = lo if v < lo else v
            y[i] = hi if v > hi else v
    elif has_lo:
        for i in range(n):
            v = x[i]
            y[i] = lo if v < lo else v
    elif has_hi:
        for i in range(n):
            v = x[i]
            y[i] = hi if v > hi else v
    else:
        for i in range(n):
            y[i] = x[i]


cdef void _run(const ew_t* e, real* y, const real* a, const real* b, Py_ssize_t i0,
               Py_ssize_t i1) noexcept nogil:
    """Elements i0..i1 - 1 of the output."""
    cdef real p = <real>e.p, q = <real>e.q, one
    cdef Py_ssize_t n = i1 - i0, r, c
    y += i0
    a += i0
    if e.mode == B_MID:
        # One run of `inner` elements per value of b (parts start and end on run boundaries):
        # the scalar loops, which vectorise, run by run.
        c = (i0 // e.inner) % e.m
        r = 0
        while r < n:
            if e.op >= OP_DIV:
                _bin_whole(e, y + r, a + r, b + c, 0, e.inner)
            elif e.op == OP_ADD:
                _axpc(y + r, a + r, p, q * b[c], e.inner)
            else:
                _mulc(y + r, a + r, p, b[c], e.inner)
            r += e.inner
            c += 1
            if c == e.m:
                c = 0
        return
    if e.op == OP_CLAMP:
        _clamp(y, a, n, p, q, e.p == e.p, e.q == e.q)     # x == x: not NaN
    elif e.op >= OP_DIV:
        one = 1
        if e.mode == B_NONE:            # EWDIV without a: 1 / b (b is the whole input here)
            _bin(e.op, y, &one, 0, a, 1, n)
        elif e.mode == B_SCALAR:
            _bin_whole(e, y, a, b, 0, n)
        elif e.mode == B_FULL:
            _bin_whole(e, y, a, b + i0, 1, n)
        else:
            for r in range(n // e.m):   # parts start and end on row boundaries
                _bin_whole(e, y + r * e.m, a + r * e.m, b, 1, e.m)
    elif e.mode == B_NONE:
        _mulc(y, a, p, 1, n)
    elif e.mode == B_SCALAR:
        if e.op == OP_ADD:
            _axpc(y, a, p, q * b[0], n)
        else:
            _mulc(y, a, p, b[0], n)
    elif e.mode == B_FULL:
        if e.op == OP_ADD:
            _axpby(y, a, b + i0, p, q, n)
        else:
            _mul(y, a, b + i0, p, n)
    else:
        for r in range(n // e.m):       # parts start and end on row boundaries
            if e.op == OP_ADD:
                _axpby(y + r * e.m, a + r * e.m, b, p, q, e.m)
            else:
                _mul(y + r * e.m, a + r * e.m, b, p, e.m)


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const ew_t* e = <const ew_t*>arg
    cdef Py_ssize_t i0 = part * e.chunk
    cdef Py_ssize_t i1 = min(i0 + e.chunk, e.count)
    if e.dtype == NNC_32F:
        _run(e, <float*>e.y, <const float*>e.a, <const float*>e.b, i0, i1)
    else:
        _run(e, <double*>e.y, <const double*>e.a, <const double*>e.b, i0, i1)
    return NNC_SUCCESS


cdef int _go(ew_t* e, void* ctx) noexcept nogil:
    """Cut e into parts and run them."""
    if e.count == 0:
        return NNC_SUCCESS
    e.chunk = PART_ELEMENTS
    if e.mode == B_ROW:
        e.chunk = max(1, PART_ELEMENTS // e.m) * e.m
    elif e.mode == B_MID:
        e.chunk = max(1, PART_ELEMENTS // e.inner) * e.inner
    return nnc_parallel_for((e.count + e.chunk - 1) // e.chunk, _part, e, ctx)


cdef int _lead(const nnc_tensor_t* t) noexcept nogil:
    """How many leading axes of t have size 1."""
    cdef int i = 0
    while i < t.ndim and t.dim[i] == 1:
        i += 1
    return i


cdef bint _same_shape(const nnc_tensor_t* t, const nnc_tensor_t* like) noexcept nogil:
    """Equal shapes but for leading 1s: the same elements in the same (contiguous) order."""
    cdef int i, s = _lead(t), u = _lead(like)
    if t.ndim - s != like.ndim - u:
        return False
    for i in range(t.ndim - s):
        if t.dim[s + i] != like.dim[u + i]:
            return False
    return True


cdef bint _row_of(const nnc_tensor_t* t, const nnc_tensor_t* y) noexcept nogil:
    """t is [1, ..., 1, m] with m y's last axis: one row that broadcasts along y's others."""
    return t.ndim >= 1 and y.ndim >= 1 and _lead(t) >= t.ndim - 1 \
        and t.dim[t.ndim - 1] == y.dim[y.ndim - 1]


cdef Py_ssize_t _mid_of(const nnc_tensor_t* t, const nnc_tensor_t* y) noexcept nogil:
    """The run length `inner` if t, aligned with y from the right, has y's sizes on one block of
    neighbouring axes and 1 on all others (a per-channel [1, C, 1, 1] of an NCHW image: y is
    [outer, t.count, inner] with t's value c for each run of `inner` elements), else 0."""
    cdef int k, lo = -1, hi = -1, lead = y.ndim - t.ndim
    cdef Py_ssize_t td, inner = 1
    if _lead(t) < -lead:                # t has more axes than y beyond leading 1s
        return 0
    for k in range(y.ndim):
        td = t.dim[k - lead] if k >= lead else 1
        if td != 1:
            if td != y.dim[k] or (hi >= 0 and hi != k - 1):
                return 0                # a size-1 axis between two of the block's
            if lo < 0:
                lo = k
            hi = k
        elif hi >= 0 and y.dim[k] == 1 and hi == k - 1:
            hi = k                      # a size-1 axis of both joins the block
    if lo < 0:
        return 0
    for k in range(hi + 1, y.ndim):
        inner *= y.dim[k]
    return inner


cdef int _binary_plan(int op, const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                      nnc_tensor_t** outputs, int n_out, ew_t* e) noexcept nogil:
    """Fill e for ADD, MUL or OP_DIV..OP_PRELU on these tensors, or NNC_INVALID (nothing
    written)."""
    cdef nnc_tensor_t* y
    cdef nnc_tensor_t* a
    cdef nnc_tensor_t* b
    if n_in < 1 or n_in > 2 or n_out != 1 or outputs[0] == NULL:
        return NNC_INVALID
    y, a = outputs[0], inputs[0]
    b = inputs[1] if n_in == 2 else NULL
    e.swap = False
    if op >= OP_DIV:
        if b == NULL:                   # every one takes two inputs; only EWDIV's a may be absent
            return NNC_INVALID
        if a == NULL:
            if op != OP_DIV or not tensor_plain(b) or not _same_shape(b, y) \
                    or not (y.datatype == NNC_32F or y.datatype == NNC_64F) \
                    or not tensor_plain(y) or b.datatype != y.datatype:
                return NNC_INVALID
            e.op, e.dtype, e.y, e.count, e.m, e.inner = op, y.datatype, y.data, y.count, 1, 1
            e.p, e.q, e.mode, e.a, e.b = 0, 0, B_NONE, b.data, NULL
            return NNC_SUCCESS
    elif a == NULL:
        return NNC_INVALID
    if not tensor_plain(y) or not (y.datatype == NNC_32F or y.datatype == NNC_64F):
        return NNC_INVALID
    if not tensor_plain(a) or a.datatype != y.datatype:
        return NNC_INVALID
    if b != NULL and (not tensor_plain(b) or b.datatype != y.datatype):
        return NNC_INVALID
    e.op, e.dtype, e.y, e.count, e.m, e.inner = op, y.datatype, y.data, y.count, 1, 1
    e.p, e.q = p.a, (p.b if op == OP_ADD else 0)
    if b == NULL:
        if not _same_shape(a, y):
            return NNC_INVALID
        e.mode, e.a, e.b = B_NONE, a.data, NULL
        return NNC_SUCCESS
    if not _same_shape(a, y):
        # b carries the output's shape: swap, so a is always the whole one (p and q with them).
        a, b = b, a
        e.swap = True
        if op == OP_ADD:
            e.p, e.q = e.q, e.p
        if not _same_shape(a, y):
            return NNC_INVALID
    e.a, e.b = a.data, b.data
    if _same_shape(b, y):
        e.mode = B_FULL
    elif b.count == 1:
        e.mode = B_SCALAR
    elif _row_of(b, y):
        e.mode, e.m = B_ROW, b.count
    else:
        # EWPOW's C loop calls libm's powf per element: slower than CPU_REF's vectorised NumPy
        # power on these (NCHW per-channel) forms, so they stay there.
        e.inner = 0 if op == OP_POW else _mid_of(b, y)
        if e.inner <= 0:
            return NNC_INVALID
        e.mode, e.m = B_MID, b.count
    return NNC_SUCCESS


cdef int add_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef ew_t e
    if _binary_plan(OP_ADD, p, inputs, n_in, outputs, n_out, &e) != NNC_SUCCESS:
        return NNC_INVALID
    return _go(&e, ctx)


cdef int mul_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef ew_t e
    if _binary_plan(OP_MUL, p, inputs, n_in, outputs, n_out, &e) != NNC_SUCCESS:
        return NNC_INVALID
    return _go(&e, ctx)


cdef int clamp_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef ew_t e
    if n_in != 1 or n_out != 1 or not tensors_like(inputs, n_in, outputs, n_out):
        return NNC_INVALID
    if p.a > p.b:                       # False when either is NaN (no bound)
        return NNC_INVALID
    e.op, e.mode, e.dtype = OP_CLAMP, B_NONE, outputs[0].datatype
    e.y, e.a, e.b = outputs[0].data, inputs[0].data, NULL
    e.p, e.q, e.count, e.m, e.inner = p.a, p.b, outputs[0].count, 1, 1
    return _go(&e, ctx)


cdef int _binary_opt(int op, const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                     nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef ew_t e
    if _binary_plan(op, p, inputs, n_in, outputs, n_out, &e) != NNC_SUCCESS:
        return NNC_INVALID
    return _go(&e, ctx)


cdef int ewdiv_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _binary_opt(OP_DIV, p, inputs, n_in, outputs, n_out, ctx)


cdef int ewpow_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _binary_opt(OP_POW, p, inputs, n_in, outputs, n_out, ctx)


cdef int min_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _binary_opt(OP_MIN, p, inputs, n_in, outputs, n_out, ctx)


cdef int max_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                 nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _binary_opt(OP_MAX, p, inputs, n_in, outputs, n_out, ctx)


cdef int prelu_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                   nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    # The check keeps x the output's shape, so the plan never swaps x and the slope.
    return _binary_opt(OP_PRELU, p, inputs, n_in, outputs, n_out, ctx)


def _accept_binary(Cmd cmd, list inputs, list outputs):
    """ADD's and MUL's accept: the C backend's own checks, run on the Tensors' C views."""
    cdef nnc_tensor_t* io[3]
    cdef ew_t e
    cdef int n_in = tensor_views(inputs, io, 2)
    cdef int n_out = tensor_views(outputs, io + 2, 1)
    return (n_in >= 0 and n_out >= 0
            and _binary_plan(OP_ADD, &cmd.param, io, n_in, io + 2, n_out, &e) == NNC_SUCCESS)


def _accept_other(Cmd cmd, list inputs, list outputs):
    """EWDIV's, EWPOW's, MIN's and MAX's accept: the C backend's own checks (EWDIV's, which take
    an absent a as well)."""
    cdef nnc_tensor_t* io[3]
    cdef ew_t e
    cdef int n_in = tensor_views(inputs, io, 2)
    cdef int n_out = tensor_views(outputs, io + 2, 1)
    return (n_in >= 0 and n_out >= 0
            and _binary_plan(OP_DIV, &cmd.param, io, n_in, io + 2, n_out, &e) == NNC_SUCCESS)


def _accept_pow(Cmd cmd, list inputs, list outputs):
    """EWPOW's accept: the C backend's own checks (which leave it the forms without a middle
    block)."""
    cdef nnc_tensor_t* io[3]
    cdef ew_t e
    cdef int n_in = tensor_views(inputs, io, 2)
    cdef int n_out = tensor_views(outputs, io + 2, 1)
    return (n_in >= 0 and n_out >= 0
            and _binary_plan(OP_POW, &cmd.param, io, n_in, io + 2, n_out, &e) == NNC_SUCCESS)


def register():
    """Register ADD's, MUL's, EWDIV's, EWPOW's, MIN's, MAX's, PRELU's and CLAMP's CPU_OPT
    (called once by register_builtins)."""
    mask = NNC_32F | NNC_64F
    register_c_backend("ADD", "CPU_OPT", add_opt, mask, True, _accept_binary, None, True)
    register_c_backend("MUL", "CPU_OPT", mul_opt, mask, True, _accept_binary, None, True)
    register_c_backend("EWDIV", "CPU_OPT", ewdiv_opt, mask, True, _accept_other, None, True)
    register_c_backend("EWPOW", "CPU_OPT", ewpow_opt, mask, True, _accept_pow, None, True)
    register_c_backend("MIN", "CPU_OPT", min_opt, mask, True, _accept_other, None, True)
    register_c_backend("MAX", "CPU_OPT", max_opt, mask, True, _accept_other, None, True)
    register_c_backend("PRELU", "CPU_OPT", prelu_opt, mask, True, _accept_other, None, True)
    register_c_backend("CLAMP", "CPU_OPT", clamp_opt, mask, True, None, None, True)
