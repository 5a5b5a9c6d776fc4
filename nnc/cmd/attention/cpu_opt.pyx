"""SCALED_DOT_PRODUCT_ATTENTION's CPU_OPT backend in C: per (batch entry, head) parts on the
pool, no GIL (NNC: ccv_nnc_scaled_dot_product_attention_cpu_ref.c's loops, with BLAS for the two
products).

A part is a block of query rows of one batch entry and head: its scores s = scale * q . k^T
(one single-threaded BLAS GEMM straight from the [batch, seq, heads, dim] layout: a head's
rows are strided by heads * dim, its dim contiguous) land in the running thread's workspace;
each row gets its mask row added, its causal limit applied and its softmax (the row's maximum
subtracted, exp in the operands' precision, the sum in double); then out = p . v is a second
GEMM written straight into the output's rows. Query rows are cut into blocks only when batch
entries and heads are fewer than the threads that may help; the cut never depends on which
threads run it, and a row's result does not depend on the cut. Layouts BLAS cannot take (a
head_dim or v_dim axis without unit stride) are refused by ``accept``, so CPU_REF runs them.
"""

from libc.math cimport exp, expf

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_OOM, NNC_SUCCESS
from nnc.base.openblas cimport BLAS_NO_TRANS, BLAS_TRANS, nnc_dgemm, nnc_sgemm
from nnc.base.parallel cimport nnc_parallel_for, nnc_workspace, parallel_width
from nnc.cmd.command cimport Cmd, nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensor_views
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef enum:
    # Multiply-adds a part must have at least (GEMM's PART_MACS): a block of query rows is cut
    # only when it is worth waking a helper thread for.
    PART_MACS = 1 << 20
    MIN_PART_ROWS = 16


# The geometry of one call, shared (read-only) by its parts. Strides in elements; the last axis
# of q, k, v and out has unit stride. A mask stride of 0 broadcasts that axis.
ctypedef struct sdpa_t:
    int dtype                           # NNC_32F or NNC_64F
    const char* q
    const char* k
    const char* v
    const char* mask                    # NULL: none
    char* out
    Py_ssize_t b, sq, sk, h, hk, d, dv  # h is a multiple of hk >= 1
    Py_ssize_t q_sb, q_ss, q_sh         # q's [batch, seq, head] strides
    Py_ssize_t k_sb, k_ss, k_sh
    Py_ssize_t v_sb, v_ss, v_sh
    Py_ssize_t o_sb, o_ss, o_sh
    Py_ssize_t m_sb, m_sh, m_sq, m_sk   # the mask's [batch, head, seq_q, seq_k] strides
    double scale
    bint causal
    Py_ssize_t rows, row_parts          # a part's block of query rows; blocks per (batch, head)
    int ld_q, ld_k, ld_v, ld_o          # BLAS leading dimensions (the seq strides)


cdef bint _ld(Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t stride, int* ld) noexcept nogil:
    """A [rows, cols] row-major BLAS operand with row stride ``stride``: its leading dimension
    (any one >= cols does when there is a single row), or False if BLAS cannot take it."""
    cdef Py_ssize_t want = max(cols, 1)
    if rows <= 1:
        stride = want
    if stride < want or stride > 2147483647:
        return False
    ld[0] = <int>stride
    return True


cdef bint _qkv(const nnc_tensor_t* t, bint four, Py_ssize_t* dims,
               Py_ssize_t* strides) noexcept nogil:
    """dims/strides = t's [batch, seq, heads, dim] (heads 1, stride 0 for a rank-3 t); False
    unless the last axis has unit stride (or at most one element)."""
    cdef int i
    if four:
        for i in range(4):
            dims[i], strides[i] = t.dim[i], t.stride[i]
    else:
        dims[0], dims[1], dims[2], dims[3] = t.dim[0], t.dim[1], 1, t.dim[2]
        strides[0], strides[1], strides[2], strides[3] = t.stride[0], t.stride[1], 0, t.stride[2]
    return strides[3] == 1 or dims[3] <= 1


cdef int _plan(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
               nnc_tensor_t** outputs, int n_out, sdpa_t* g) noexcept nogil:
    """Fill g for these tensors, or NNC_INVALID (shapes that disagree, a layout BLAS cannot
    take). Re-checks what the command's check did: a C backend may be called directly."""
    cdef nnc_tensor_t* m
    cdef nnc_tensor_t* t
    cdef Py_ssize_t qd[4]
    cdef Py_ssize_t qs[4]
    cdef Py_ssize_t kd[4]
    cdef Py_ssize_t ks[4]
    cdef Py_ssize_t vd[4]
    cdef Py_ssize_t vs[4]
    cdef Py_ssize_t od[4]
    cdef Py_ssize_t os[4]
    cdef Py_ssize_t full[4]
    cdef Py_ssize_t ms[4]
    cdef Py_ssize_t want, per
    cdef int i, j, nd
    cdef bint four
    if n_in < 3 or n_in > 4 or n_out != 1 or outputs[0] == NULL:
        return NNC_INVALID
    g.dtype = outputs[0].datatype
    if not (g.dtype == NNC_32F or g.dtype == NNC_64F):
        return NNC_INVALID
    nd = outputs[0].ndim
    for i in range(n_in + 1):
        t = outputs[0] if i == n_in else inputs[i]
        if t == NULL:
            if i < 3:
                return NNC_INVALID
            continue
        if t.device >= 0 or t.datatype != g.dtype or (i != 3 and t.ndim != nd):
            return NNC_INVALID
    if nd != 3 and nd != 4:
        return NNC_INVALID
    four = nd == 4
    if not (_qkv(inputs[0], four, qd, qs) and _qkv(inputs[1], four, kd, ks)
            and _qkv(inputs[2], four, vd, vs) and _qkv(outputs[0], four, od, os)):
        return NNC_INVALID
    g.b, g.sq, g.h, g.d = qd[0], qd[1], qd[2], qd[3]
    g.sk, g.hk, g.dv = kd[1], kd[2], vd[3]
    if (kd[0] != g.b or vd[0] != g.b or kd[3] != g.d or vd[1] != g.sk or vd[2] != g.hk
            or g.hk < 1 or g.h % g.hk != 0):
        return NNC_INVALID
    if od[0] != g.b or od[1] != g.sq or od[2] != g.h or od[3] != g.dv:
        return NNC_INVALID
    g.q_sb, g.q_ss, g.q_sh = qs[0], qs[1], qs[2]
    g.k_sb, g.k_ss, g.k_sh = ks[0], ks[1], ks[2]
    g.v_sb, g.v_ss, g.v_sh = vs[0], vs[1], vs[2]
    g.o_sb, g.o_ss, g.o_sh = os[0], os[1], os[2]
    g.q, g.k, g.v = <const char*>inputs[0].data, <const char*>inputs[1].data, \
        <const char*>inputs[2].data
    g.out = <char*>outputs[0].data
    # The mask: [seq_q, seq_k] with up to [batch, heads] before it, each 1 (stride 0) or full.
    g.mask, g.m_sb, g.m_sh, g.m_sq, g.m_sk = NULL, 0, 0, 0, 0
    m = inputs[3] if n_in == 4 else NULL
    if m != NULL:
        if m.ndim < 2 or m.ndim > 4:
            return NNC_INVALID
        full[0], full[1], full[2], full[3] = g.b, g.h, g.sq, g.sk
        for i in range(4):
            ms[i] = 0
        for i in range(m.ndim):
            j = 4 - m.ndim + i
            if m.dim[i] == full[j] and full[j] != 1:
                ms[j] = m.stride[i]
            elif m.dim[i] != 1 or j >= 2 and full[j] != 1:
                return NNC_INVALID
        g.mask = <const char*>m.data
        g.m_sb, g.m_sh, g.m_sq, g.m_sk = ms[0], ms[1], ms[2], ms[3]
    g.scale = p.a
    g.causal = p.b != 0
    if not (g.sk <= 2147483647 and g.d <= 2147483647 and g.dv <= 2147483647):
        return NNC_INVALID
    # Rows per part: whole heads when batch entries times heads give the threads enough work.
    per = g.sq * g.sk * (g.d + g.dv)
    want = min(<Py_ssize_t>parallel_width(), max(1, g.b * g.h * per // PART_MACS))
    g.rows = g.sq
    if g.b * g.h < want and g.sq > MIN_PART_ROWS:
        want = (want + g.b * g.h - 1) // (g.b * g.h)
        g.rows = max(MIN_PART_ROWS, (g.sq + want - 1) // want)
    g.rows = max(1, min(g.rows, g.sq))
    if g.rows > 2147483647:
        return NNC_INVALID
    g.row_parts = (g.sq + g.rows - 1) // g.rows
    # Leading dimensions: a block of rows of q and out, all keys of k and v. An operand with
    # an empty dim is never read (the scores are 0, or there is no output).
    g.ld_q = g.ld_k = g.ld_v = g.ld_o = 1
    if g.d > 0 and not (_ld(g.sq, g.d, g.q_ss, &g.ld_q) and _ld(g.sk, g.d, g.k_ss, &g.ld_k)):
        return NNC_INVALID
    if g.dv > 0 and not (_ld(g.sk, g.dv, g.v_ss, &g.ld_v) and _ld(g.sq, g.dv, g.o_ss, &g.ld_o)):
        return NNC_INVALID
    return NNC_SUCCESS


cdef void _softmax_row(const sdpa_t* g, real* s, Py_ssize_t x, const real* mrow) noexcept nogil:
    """Row x of the scores in place: + the mask row, the causal limit, softmax (0 past the
    limit; all 0 when no key is left)."""
    cdef Py_ssize_t j, end = g.sk
    cdef real top, e
    cdef double total
    if g.causal:
        end = min(g.sk, max(<Py_ssize_t>0, x + g.sk - g.sq + 1))
    if mrow != NULL:
        for j in range(end):
            s[j] = s[j] + mrow[j * g.m_sk]
    if end > 0:
        top = s[0]
        for j in range(1, end):
            if s[j] > top:
                top = s[j]
        # Summed in double so long float32 rows lose nothing to rounding.
        total = 0
        for j in range(end):
            if real is float:
                e = expf(s[j] - top)
            else:
                e = exp(s[j] - top)
            s[j] = e
            total += e
        e = <real>(1 / total)
        for j in range(end):
            s[j] = s[j] * e
    for j in range(end, g.sk):
        s[j] = 0


cdef int _part_typed(const sdpa_t* g, Py_ssize_t part, void* context, real* unused) noexcept nogil:
    cdef Py_ssize_t bh = part // g.row_parts
    cdef Py_ssize_t bi = bh // g.h, hi = bh % g.h, kh = hi // (g.h // g.hk)
    cdef Py_ssize_t r0 = (part % g.row_parts) * g.rows
    cdef Py_ssize_t rows = min(g.rows, g.sq - r0), i, j
    cdef const real* q = <const real*>g.q + bi * g.q_sb + hi * g.q_sh + r0 * g.q_ss
    cdef const real* k = <const real*>g.k + bi * g.k_sb + kh * g.k_sh
    cdef const real* v = <const real*>g.v + bi * g.v_sb + kh * g.v_sh
    cdef real* out = <real*>g.out + bi * g.o_sb + hi * g.o_sh + r0 * g.o_ss
    cdef const real* mrow = NULL
    cdef real* s = <real*>nnc_workspace(context, max(rows * g.sk, 1) * sizeof(real))
    cdef real* row
    if s == NULL:
        return NNC_OOM
    if g.d == 0:
        for i in range(rows * g.sk):
            s[i] = 0
    elif g.sk > 0:
        if real is float:
            nnc_sgemm(BLAS_NO_TRANS, BLAS_TRANS, <int>rows, <int>g.sk, <int>g.d, <float>g.scale,
                      q, g.ld_q, k, g.ld_k, 0.0, s, <int>g.sk)
        else:
            nnc_dgemm(BLAS_NO_TRANS, BLAS_TRANS, <int>rows, <int>g.sk, <int>g.d, g.scale,
                      q, g.ld_q, k, g.ld_k, 0.0, s, <int>g.sk)
    for i in range(rows):
        if g.mask != NULL:
            mrow = <const real*>g.mask + bi * g.m_sb + hi * g.m_sh + (r0 + i) * g.m_sq
        _softmax_row(g, s + i * g.sk, r0 + i, mrow)
    if g.sk == 0 or g.dv == 0:
        for i in range(rows):
            row = out + i * g.o_ss
            for j in range(g.dv):
                row[j] = 0
    elif real is float:
        nnc_sgemm(BLAS_NO_TRANS, BLAS_NO_TRANS, <int>rows, <int>g.dv, <int>g.sk, 1.0,
                  s, <int>g.sk, v, g.ld_v, 0.0, out, g.ld_o)
    else:
        nnc_dgemm(BLAS_NO_TRANS, BLAS_NO_TRANS, <int>rows, <int>g.dv, <int>g.sk, 1.0,
                  s, <int>g.sk, v, g.ld_v, 0.0, out, g.ld_o)
    return NNC_SUCCESS


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const sdpa_t* g = <const sdpa_t*>arg
    if g.dtype == NNC_32F:
        return _part_typed(g, part, context, <float*>NULL)
    return _part_typed(g, part, context, <double*>NULL)


cdef int attention_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                       nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef sdpa_t g
    if _plan(p, inputs, n_in, outputs, n_out, &g) != NNC_SUCCESS:
        return NNC_INVALID
    if g.b == 0 or g.h == 0 or g.sq == 0 or g.dv == 0:
        return NNC_SUCCESS
    return nnc_parallel_for(g.b * g.h * g.row_parts, _part, &g, ctx)


def _accept(Cmd cmd, list inputs, list outputs):
    """The C backend's own checks, on the Tensors' C views: BLAS can take these layouts."""
    cdef nnc_tensor_t* io[5]
    cdef sdpa_t g
    cdef int n_in = tensor_views(inputs, io, 4)
    cdef int n_out = tensor_views(outputs, io + 4, 1)
    return (n_in >= 0 and n_out >= 0
            and _plan(&cmd.param, io, n_in, io + 4, n_out, &g) == NNC_SUCCESS)


def register():
    """Register SCALED_DOT_PRODUCT_ATTENTION's CPU_OPT (called once by register_builtins)."""
    register_c_backend("SCALED_DOT_PRODUCT_ATTENTION", "CPU_OPT", attention_opt,
                       NNC_32F | NNC_64F, False, _accept, None, True)
