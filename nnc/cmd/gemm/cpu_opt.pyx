"""GEMM's CPU_OPT backend in C: single-threaded BLAS GEMMs split into parts, no GIL.

NNC: cmd/blas/ccv_nnc_gemm_cpu_opt.c. out = op(a) . op(w) + bias for every shape GEMM takes
(nnc/cmd/gemm/__init__.py): a vector a, batch dimensions on a, on w or on both, broadcast where
one of them is 1 or missing (a 2-D w shared by the batch), transpose_a / transpose_b, an optional
bias of any shape that broadcasts to the output.

- Each operand is a batch of matrices described by its logical strides (after op): a's [M, K], w's
  [K, N] and the output's [M, N]; the batch is the output's batch dimensions, each operand's stride
  along one being 0 where it broadcasts. A matrix with unit stride along its columns is row-major
  for BLAS; one with unit stride along its rows is passed transposed (so a transposed *view* costs
  no copy, just like the transpose flags). The output needs unit stride along N (a channel slice of
  a wider buffer is fine: its row stride is GEMM's ldc). Anything else is refused by ``accept``
  (which runs these same checks), so CPU_REF or the NumPy backend runs it.
- Work is cut into as many parts as threads may help now (nnc.base.parallel), each one
  single-threaded GEMM (nnc.base.openblas) on a block of rows of one batch entry, or, when M is
  too small to split (a batch-1 fully connected layer, M = 1), on a block of the output's
  columns, or, when the batch alone gives enough parts (attention's heads), on a run of whole
  batch entries each worth too little to be a part of its own; parts run on the caller and idle
  pool threads. One row is a GEMV (GEMM would pack all of w first). The bias is added by each
  part to its own block while it is hot.
"""

from libc.string cimport memcpy

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_MAX_DIM, NNC_OOM, NNC_SUCCESS
from nnc.base.isa cimport cpu_isa
from nnc.base.openblas cimport (
    BLAS_NO_TRANS, BLAS_TRANS, nnc_dgemm, nnc_dgemv, nnc_sgemm, nnc_sgemv,
)
from nnc.base.parallel cimport nnc_parallel_for, nnc_workspace, parallel_width
from nnc.cmd.command cimport Cmd, nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensor_views
from nnc.cmd.gemm.sgemm_kernel cimport (NNC_ACT_NONE, NNC_SGEMM_MC, nnc_epilogue_t,
                                        nnc_sgemm_nr, nnc_sgemm_pack, nnc_sgemm_packed,
                                        nnc_sgemm_packed_floats)
from nnc.tensor.constant cimport constant_pack
from nnc.tensor.tensor cimport nnc_tensor_t

ctypedef fused real:
    float
    double

cdef enum:
    # Multiply-adds a part must have at least: about a tenth of a millisecond of one core's
    # GEMM, so waking a helper thread is cheap beside it.
    PART_MACS = 1 << 20
    MIN_PART_ROWS = 32                  # fewer rows than this and GEMM's packing dominates
    MIN_PART_COLS = 64
    # What one byte of w read from memory costs, in multiply-adds: a core streams ~15 GB/s
    # and multiplies-adds ~50 G/s. A GEMM of few rows (a batch-1 fully connected layer) is
    # that stream, not its multiply-adds: 1280 x 1000 weights are 5 MB, ~0.3 ms of one core
    # for 1.3 M multiply-adds, and two cores stream them nearly twice as fast.
    STREAM_MACS_PER_BYTE = 3
    ROW_PAD = 16                        # floats between copied rows of a (copy_rows)

# A part copies a's rows apart when they are a multiple of 4 KiB apart and a block of the
# tiles' rows takes at most _copy_bytes; _copy_rows off is for A/B runs, tests (_tune_copies).
cdef Py_ssize_t _copy_bytes = 1 << 20
cdef bint _copy_rows = True


def _tune_copies(on=None):
    """Whether parts copy a's rows apart when they are a multiple of 4 KiB apart (A/B runs,
    tests); returns the previous setting."""
    global _copy_rows
    old = _copy_rows
    if on is not None:
        _copy_rows = bool(on)
    return old


# How one operand matrix is handed to BLAS.
ctypedef struct operand_t:
    int trans                           # BLAS_NO_TRANS or BLAS_TRANS
    int ld                              # leading dimension, elements


# The geometry of one call, shared (read-only) by its parts. Strides in elements; a batch
# stride of 0 shares one matrix across that batch dimension (broadcast).
ctypedef struct gemm_t:
    int dtype                           # NNC_32F or NNC_64F
    const char* a
    const char* w
    const char* bias                    # NULL: none
    char* out
    Py_ssize_t batch, m, n, k           # batch: the product of bdim[0:nb]
    int nb                              # the output's batch dimensions, 0 <= nb < NNC_MAX_DIM
    Py_ssize_t bdim[NNC_MAX_DIM]        # their sizes
    Py_ssize_t a_bs[NNC_MAX_DIM]        # a's stride along each (0: broadcast)
    Py_ssize_t w_bs[NNC_MAX_DIM]        # w's
    Py_ssize_t o_bs[NNC_MAX_DIM]        # out's
    Py_ssize_t bias_bs[NNC_MAX_DIM]     # bias's
    bint w_shared                       # every w_bs is 0: one w for the whole batch
    Py_ssize_t a_sm, a_sk               # a's logical [M, K] strides
    Py_ssize_t w_sk, w_sn               # w's logical [K, N] strides
    Py_ssize_t o_sm                     # out's [M, N] row stride (N's is 1)
    Py_ssize_t bias_sm, bias_s          # bias's [M, N] strides (0 along an axis it broadcasts)
    operand_t op_a, op_w
    Py_ssize_t rows, cols               # a part's block: rows of M by cols of N
    Py_ssize_t row_parts, col_parts     # per batch entry
    Py_ssize_t chunk                    # batch entries per part (> 1 only when rows = M, cols = N)
    # float32 with one w for the whole batch and rows of a contiguous: nnc's GEMM tiles.
    int isa                             # cpu_isa() when w was packed for it
    const float* packed                 # w packed (NULL: the BLAS path)
    size_t skip                         # bytes the packed w takes at the start of the caller's
    #                                     workspace (0 when frozen w's kept copy is used)
    bint copy_rows                      # a's rows are a multiple of 4 KiB apart: each part
    #                                     reads copies of a block of them at a time,
    #                                     k + ROW_PAD floats apart (_copied_rows)


cdef bint _operand(Py_ssize_t rows, Py_ssize_t cols, Py_ssize_t s_r, Py_ssize_t s_c,
                   operand_t* op) noexcept nogil:
    """A logical [rows, cols] matrix with strides (s_r, s_c) as a CBLAS row-major operand:
    unit column stride -> as is (ld = s_r); unit row stride -> transposed (ld = s_c). Strides
    along an axis of size 1 do not matter. False if neither fits."""
    cdef Py_ssize_t ld
    if cols <= 1 or s_c == 1:
        ld = max(cols, 1) if rows <= 1 else s_r
        if ld >= max(cols, 1) and ld <= 2147483647:
            op.trans, op.ld = BLAS_NO_TRANS, <int>ld
            return True
    if rows <= 1 or s_r == 1:
        ld = max(rows, 1) if cols <= 1 else s_c
        if ld >= max(rows, 1) and ld <= 2147483647:
            op.trans, op.ld = BLAS_TRANS, <int>ld
            return True
    return False


cdef bint _batch_strides(const nnc_tensor_t* t, int lead, const gemm_t* g,
                         Py_ssize_t* bs) noexcept nogil:
    """bs[d] = t's stride along the output's batch dimension d, its leading ``lead`` axes
    aligned from the right with g.bdim: 0 where t lacks the axis or has size 1 there
    (broadcast). False if a size is neither 1 nor the output's."""
    cdef int d, i
    cdef Py_ssize_t size
    for d in range(g.nb):
        bs[d] = 0
        i = d - (g.nb - lead)
        if i < 0:
            continue
        size = t.dim[i]
        if size == g.bdim[d] and size != 1:
            bs[d] = t.stride[i]
        elif size != 1:
            return False
    return True


cdef int _plan(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
               nnc_tensor_t** outputs, int n_out, gemm_t* g) noexcept nogil:
    """Fill g for these tensors, or NNC_INVALID (the shapes disagree, or a layout BLAS cannot
    take). Re-checks everything the command's check did: a C backend may be called directly."""
    cdef nnc_tensor_t* a
    cdef nnc_tensor_t* w
    cdef nnc_tensor_t* b
    cdef nnc_tensor_t* y
    cdef nnc_tensor_t* t
    cdef int dtype, i, d, yd, a_lead, w_lead, b_lead
    cdef Py_ssize_t k_w, r, c, sr, sc, want
    cdef operand_t op_out
    if n_in < 2 or n_in > 3 or n_out != 1:
        return NNC_INVALID
    a, w, y = inputs[0], inputs[1], outputs[0]
    b = inputs[2] if n_in == 3 else NULL
    if a == NULL or w == NULL or y == NULL:
        return NNC_INVALID
    dtype = y.datatype
    if not (dtype == NNC_32F or dtype == NNC_64F):
        return NNC_INVALID
    for i in range(n_in + 1):
        t = y if i == n_in else inputs[i]
        if t != NULL and (t.device >= 0 or t.datatype != dtype):
            return NNC_INVALID
    g.dtype = dtype
    g.a, g.w, g.out = <const char*>a.data, <const char*>w.data, <char*>y.data
    # a: [K] (M = 1, no M axis in out) or [..., M, K]; transpose_a swaps its last two axes.
    if a.ndim == 1:
        if p.transpose_a:
            return NNC_INVALID
        g.m, g.k, g.a_sm, g.a_sk = 1, a.dim[0], 0, a.stride[0]
    elif a.ndim >= 2:
        r, c = a.dim[a.ndim - 2], a.dim[a.ndim - 1]
        sr, sc = a.stride[a.ndim - 2], a.stride[a.ndim - 1]
        if p.transpose_a:
            r, c, sr, sc = c, r, sc, sr
        g.m, g.k, g.a_sm, g.a_sk = r, c, sr, sc
    else:
        return NNC_INVALID
    # w: [..., K, N]; transpose_b swaps its last two axes.
    if w.ndim < 2:
        return NNC_INVALID
    r, c = w.dim[w.ndim - 2], w.dim[w.ndim - 1]
    sr, sc = w.stride[w.ndim - 2], w.stride[w.ndim - 1]
    if p.transpose_b:
        r, c, sr, sc = c, r, sc, sr
    k_w, g.n, g.w_sk, g.w_sn = r, c, sr, sc
    if k_w != g.k:
        return NNC_INVALID
    # out: [batch..., M?, N]: its leading axes are the batch, each one a's or w's size where
    # that is not 1 (NumPy's broadcast from the right).
    yd = y.ndim
    g.nb = yd - 1 - (1 if a.ndim > 1 else 0)
    a_lead = a.ndim - 2 if a.ndim > 1 else 0
    w_lead = w.ndim - 2
    if g.nb < 0 or a_lead > g.nb or w_lead > g.nb or y.dim[yd - 1] != g.n:
        return NNC_INVALID
    if a.ndim > 1 and y.dim[yd - 2] != g.m:
        return NNC_INVALID
    g.batch = 1
    for d in range(g.nb):
        g.bdim[d] = y.dim[d]
        g.o_bs[d] = y.stride[d]
        g.batch *= y.dim[d]
    if not (_batch_strides(a, a_lead, g, g.a_bs) and _batch_strides(w, w_lead, g, g.w_bs)):
        return NNC_INVALID
    g.w_shared = True
    for d in range(g.nb):
        # The output's size must come from an operand: 1 unless a or w has it.
        i = d - (g.nb - a_lead)
        want = a.dim[i] if i >= 0 else 1
        i = d - (g.nb - w_lead)
        if i >= 0 and w.dim[i] != 1:
            want = w.dim[i] if want == 1 else want
        if want != g.bdim[d]:
            return NNC_INVALID
        if g.w_bs[d] != 0:
            g.w_shared = False
    g.o_sm = y.stride[yd - 2] if a.ndim > 1 else 0
    # bias: broadcasts to out with N in full; a vector a's out has no M axis for it.
    g.bias, g.bias_s, g.bias_sm = NULL, 0, 0
    for d in range(g.nb):
        g.bias_bs[d] = 0
    if b != NULL:
        if b.ndim < 1 or b.ndim > yd or b.dim[b.ndim - 1] != g.n:
            return NNC_INVALID
        g.bias, g.bias_s = <const char*>b.data, b.stride[b.ndim - 1]
        b_lead = b.ndim - 1
        if a.ndim > 1 and b.ndim >= 2:
            b_lead -= 1
            if b.dim[b.ndim - 2] == g.m and g.m != 1:
                g.bias_sm = b.stride[b.ndim - 2]
            elif b.dim[b.ndim - 2] != 1:
                return NNC_INVALID
        if not _batch_strides(b, b_lead, g, g.bias_bs):
            return NNC_INVALID
    if a.ndim > 1 and g.w_shared:
        _fold_batch(g)
    if not (g.m <= 2147483647 and g.n <= 2147483647 and g.k <= 2147483647):
        return NNC_INVALID
    # K = 0 multiplies nothing (the output is the bias or 0): a and w are never read.
    if g.k > 0 and not (_operand(g.m, g.k, g.a_sm, g.a_sk, &g.op_a)
                        and _operand(g.k, g.n, g.w_sk, g.w_sn, &g.op_w)):
        return NNC_INVALID
    # The output must be row-major: BLAS writes C with unit column stride.
    if not (_operand(g.m, g.n, g.o_sm, y.stride[yd - 1], &op_out)
            and op_out.trans == BLAS_NO_TRANS):
        return NNC_INVALID
    return NNC_SUCCESS


cdef void _fold_batch(gemm_t* g) noexcept nogil:
    """With one w for the whole batch, the innermost batch axes whose entries continue a's,
    the output's and the bias's rows evenly become rows of one product: a [197, 1, 768] a
    (a transformer's [tokens, batch, features]) is one 197-row GEMM, not 197 one-row ones that
    each stream all of w (ViT-B/16's QKV projections ran at 77 GFLOP/s on 2 threads so).
    Each output is the same dot product in the same order either way."""
    cdef int d
    cdef Py_ssize_t a_sm, o_sm, bias_sm
    cdef operand_t op
    while g.nb > 0:
        d = g.nb - 1
        # A single row has no row stride of its own: the batch axis gives it.
        a_sm = g.a_bs[d] if g.m == 1 else g.a_sm
        o_sm = g.o_bs[d] if g.m == 1 else g.o_sm
        bias_sm = g.bias_bs[d] if g.m == 1 and g.bias_sm == 0 else g.bias_sm
        if (g.a_bs[d] == 0 or g.a_bs[d] != g.m * a_sm or g.o_bs[d] != g.m * o_sm
                or (g.bias != NULL and g.bias_bs[d] != g.m * bias_sm)):
            return
        # Rows that overlap (a window view) or outgrow BLAS's int stay batches.
        if (g.m * g.bdim[d] > 2147483647 or o_sm < g.n
                or (g.k > 0 and not _operand(g.m * g.bdim[d], g.k, a_sm, g.a_sk, &op))):
            return
        g.m *= g.bdim[d]
        g.a_sm, g.o_sm, g.bias_sm = a_sm, o_sm, bias_sm
        g.batch //= g.bdim[d]
        g.nb -= 1


cdef inline void _entry(const gemm_t* g, Py_ssize_t bi, Py_ssize_t* off) noexcept nogil:
    """off = the element offsets of batch entry bi (row-major over g.bdim) in a, w, out and
    bias."""
    cdef int d
    cdef Py_ssize_t idx
    off[0] = off[1] = off[2] = off[3] = 0
    for d in range(g.nb - 1, -1, -1):
        idx = bi % g.bdim[d]
        bi = bi // g.bdim[d]
        off[0] += idx * g.a_bs[d]
        off[1] += idx * g.w_bs[d]
        off[2] += idx * g.o_bs[d]
        off[3] += idx * g.bias_bs[d]


cdef void _split(gemm_t* g) noexcept nogil:
    """Up to parallel_width parts (each about PART_MACS at least): blocks of rows, or of
    columns when M is too small; a batch's entries are parts already, in runs of whole entries
    of about PART_MACS when each is smaller (many small matrices). A GEMM split finer than
    that would pack w once per part for nothing. The cut does not depend on the threads that
    run it, so every intra-op setting and schedule gives the same bits."""
    cdef Py_ssize_t per = g.m * g.n * max(g.k, 1)
    cdef Py_ssize_t itemsize = 4 if g.dtype == NNC_32F else 8
    # w is read once per call when shared, once per batch entry otherwise.
    cdef Py_ssize_t w_bytes = (1 if g.w_shared else g.batch) * g.n * g.k * itemsize
    cdef Py_ssize_t want = min(<Py_ssize_t>parallel_width(),
                               max(1, max(g.batch * g.m * g.n * g.k,
                                          w_bytes * STREAM_MACS_PER_BYTE) // PART_MACS))
    g.chunk = 1
    if want <= g.batch:
        g.chunk = min(max(1, PART_MACS // per), g.batch)
    want = (want + g.batch - 1) // g.batch          # parts per batch entry
    g.rows, g.cols = g.m, g.n
    if want > 1 and g.m >= want * MIN_PART_ROWS:
        g.rows = ((g.m + want - 1) // want + 7) // 8 * 8
    elif want > 1 and g.n >= want * MIN_PART_COLS:
        g.cols = ((g.n + want - 1) // want + 15) // 16 * 16
    g.rows, g.cols = max(min(g.rows, g.m), 1), max(min(g.cols, g.n), 1)
    g.row_parts = (g.m + g.rows - 1) // g.rows
    g.col_parts = (g.n + g.cols - 1) // g.cols


cdef void _gemv(const gemm_t* g, const real* a, const real* w, real* y,
                Py_ssize_t n) noexcept nogil:
    """y[n] = a[K] . w[K, n]: w^T a when w is stored [K, N], S a when stored S = [N, K]."""
    cdef int inc = <int>g.a_sk if g.k > 1 else 1
    cdef int trans = BLAS_TRANS if g.op_w.trans == BLAS_NO_TRANS else BLAS_NO_TRANS
    cdef int rows = <int>g.k if trans == BLAS_TRANS else <int>n
    cdef int cols = <int>n if trans == BLAS_TRANS else <int>g.k
    if real is float:
        nnc_sgemv(trans, rows, cols, 1.0, w, g.op_w.ld, a, inc, 0.0, y, 1)
    else:
        nnc_dgemv(trans, rows, cols, 1.0, w, g.op_w.ld, a, inc, 0.0, y, 1)


cdef void _block(const gemm_t* g, const real* a, const real* w, const real* bias, real* y,
                 Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    """y[m, n] (leading dimension g.o_sm) = a[m, K] . w[K, n] (+ bias[m, n], strides
    g.bias_sm and g.bias_s)."""
    cdef Py_ssize_t i, j
    cdef real* row
    # One row: ldc is never used to step, but BLAS requires ldc >= n.
    cdef int ldc = <int>(max(n, 1) if m <= 1 else g.o_sm)
    if g.k == 0:
        for i in range(m):
            row = y + i * g.o_sm
            for j in range(n):
                row[j] = 0
    elif m == 1:
        _gemv(g, a, w, y, n)
    elif real is float:
        nnc_sgemm(g.op_a.trans, g.op_w.trans, <int>m, <int>n, <int>g.k, 1.0, a, g.op_a.ld,
                  w, g.op_w.ld, 0.0, y, ldc)
    else:
        nnc_dgemm(g.op_a.trans, g.op_w.trans, <int>m, <int>n, <int>g.k, 1.0, a, g.op_a.ld,
                  w, g.op_w.ld, 0.0, y, ldc)
    if bias == NULL:
        return
    for i in range(m):
        row = y + i * g.o_sm
        if g.bias_s == 1:
            for j in range(n):
                row[j] = row[j] + bias[j]
        else:
            for j in range(n):
                row[j] = row[j] + bias[j * g.bias_s]
        bias += g.bias_sm


cdef void _part_typed(const gemm_t* g, Py_ssize_t part, real* unused) noexcept nogil:
    cdef Py_ssize_t per_batch = g.row_parts * g.col_parts
    cdef Py_ssize_t b0 = (part // per_batch) * g.chunk, rest = part % per_batch
    cdef Py_ssize_t i0 = (rest // g.col_parts) * g.rows, j0 = (rest % g.col_parts) * g.cols
    cdef Py_ssize_t m = min(g.rows, g.m - i0), n = min(g.cols, g.n - j0), bi
    cdef Py_ssize_t off[4]
    cdef const real* bias = NULL
    for bi in range(b0, min(b0 + g.chunk, g.batch)):
        _entry(g, bi, off)
        if g.bias != NULL:
            bias = <const real*>g.bias + off[3] + i0 * g.bias_sm + j0 * g.bias_s
        _block(g, <const real*>g.a + off[0] + i0 * g.a_sm,
               <const real*>g.w + off[1] + j0 * g.w_sn, bias,
               <real*>g.out + off[2] + i0 * g.o_sm + j0, m, n)


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const gemm_t* g = <const gemm_t*>arg
    if g.dtype == NNC_32F:
        _part_typed(g, part, <float*>NULL)
    else:
        _part_typed(g, part, <double*>NULL)
    return NNC_SUCCESS


cdef enum:
    # The packed-weight layout's version in frozen weights' cache key (nnc.tensor.constant):
    # each family that keeps copies has its own, so two layouts never share a key even where
    # their other fields happen to agree (the convolution's panels are 2, Winograd's U 4,
    # depthwise taps 5).
    PACK_FORMAT = 3


cdef void _pack_w(void* arg, void* dst) noexcept nogil:
    """w ([K, N] by its logical strides) packed for g.isa into dst."""
    cdef const gemm_t* g = <const gemm_t*>arg
    nnc_sgemm_pack(g.isa, <const float*>g.w, g.w_sk, g.w_sn, g.n, g.k, <float*>dst)


cdef unsigned long long _pack_key(const gemm_t* g) noexcept nogil:
    """What w's packed copy depends on besides its address, as exact bit fields: the format,
    the ISA, which of w's axes is contiguous, N and K. 0 (pack per call) for a w that is not
    one contiguous matrix or too large for the fields."""
    cdef unsigned long long trans
    if g.w_sk == 1 and (g.w_sn == g.k or g.n == 1):
        trans = 0
    elif g.w_sn == 1 and (g.w_sk == g.n or g.k == 1):
        trans = 1
    else:
        return 0
    if g.n >= (1 << 24) or g.k >= (1 << 24):
        return 0
    return ((<unsigned long long>PACK_FORMAT << 60) | (<unsigned long long>g.isa << 58)
            | (trans << 57) | (<unsigned long long>g.n << 24) | <unsigned long long>g.k)


cdef inline size_t _rows_bytes(const gemm_t* g) noexcept nogil:
    """Scratch a packed part takes after g.skip: its A-row pointers, then their copies."""
    cdef size_t ptrs = (g.rows * sizeof(float*) + 63) & ~(<size_t>63)
    return ptrs + (NNC_SGEMM_MC * (g.k + ROW_PAD) * sizeof(float) if g.copy_rows else 0)


cdef int _part_packed(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    """One block of rows by columns through the tiles, for each batch entry of the part: its
    A-row pointers in the running thread's workspace after the packed w's room (see the
    convolution's _part_packed). A bias with rows ([..., M, N]) is the epilogue's residual."""
    cdef const gemm_t* g = <const gemm_t*>arg
    cdef Py_ssize_t per_batch = g.row_parts * g.col_parts
    cdef Py_ssize_t b0 = (part // per_batch) * g.chunk, rest = part % per_batch
    cdef Py_ssize_t i0 = (rest // g.col_parts) * g.rows, j0 = (rest % g.col_parts) * g.cols
    cdef Py_ssize_t m = min(g.rows, g.m - i0), n = min(g.cols, g.n - j0), i, bi
    cdef char* scratch = <char*>nnc_workspace(context, g.skip + _rows_bytes(g))
    cdef const float** rows
    cdef const float* a
    cdef float* copy
    cdef const float* bias
    cdef Py_ssize_t off[4]
    cdef nnc_epilogue_t ep
    if scratch == NULL:
        return NNC_OOM
    rows = <const float**>(scratch + g.skip)
    copy = <float*>(scratch + g.skip + ((g.rows * sizeof(float*) + 63) & ~(<size_t>63)))
    ep.act = NNC_ACT_NONE
    ep.lo = 0
    ep.hi = 0
    for bi in range(b0, min(b0 + g.chunk, g.batch)):
        _entry(g, bi, off)
        a = <const float*>g.a + off[0] + i0 * g.a_sm
        bias = <const float*>g.bias + off[3] if g.bias != NULL else NULL
        if g.copy_rows:
            _copied_rows(g, a, m, j0, n, bias, <float*>g.out + off[2] + i0 * g.o_sm, rows,
                         copy, &ep)
            continue
        for i in range(m):
            rows[i] = a + i * g.a_sm
        ep.bias, ep.residual, ep.ldr = bias, NULL, 0
        if g.bias_sm != 0:
            ep.bias, ep.residual, ep.ldr = NULL, bias + i0 * g.bias_sm, g.bias_sm
        nnc_sgemm_packed(g.isa, 0, m, j0, j0 + n, g.n, g.k, rows, g.packed,
                         <float*>g.out + off[2] + i0 * g.o_sm, g.o_sm,
                         &ep if bias != NULL else NULL)
    return NNC_SUCCESS


cdef void _copied_rows(const gemm_t* g, const float* a, Py_ssize_t m, Py_ssize_t j0,
                       Py_ssize_t n, const float* bias, float* out, const float** rows,
                       float* copy, nnc_epilogue_t* ep) noexcept nogil:
    """_part_packed's product for rows of a a multiple of 4 KiB apart, a block of the tiles'
    rows at a time over copies k + ROW_PAD floats apart. Such rows share one L1 set and evict
    each other at every k step of a tile (the convolution's pixel_copies): ViT's K = 3072
    product ran at 88 GFLOP/s so, 102 over copies. Same values, same sums."""
    cdef Py_ssize_t b = 0, i, mb
    while b < m:
        mb = min(<Py_ssize_t>NNC_SGEMM_MC, m - b)
        for i in range(mb):
            memcpy(copy + i * (g.k + ROW_PAD), a + (b + i) * g.a_sm, g.k * sizeof(float))
            rows[i] = copy + i * (g.k + ROW_PAD)
        ep.bias, ep.residual, ep.ldr = bias, NULL, 0
        if g.bias_sm != 0:
            ep.bias, ep.residual, ep.ldr = NULL, bias + b * g.bias_sm, g.bias_sm
        nnc_sgemm_packed(g.isa, 0, mb, j0, j0 + n, g.n, g.k, rows, g.packed, out + b * g.o_sm,
                         g.o_sm, ep if bias != NULL else NULL)
        b += mb


cdef int _gemm_packed(gemm_t* g, void* ctx) noexcept nogil:
    """float32 through nnc's GEMM tiles: w packed once per call into the caller's workspace,
    or once for good when it is frozen; parts of rows or of whole packed panels of columns.
    Each output is one sum in one order whichever part computes it."""
    cdef Py_ssize_t nr
    cdef unsigned long long key
    cdef size_t nbytes
    cdef char* scratch
    g.isa = cpu_isa()
    nr = nnc_sgemm_nr(g.isa)
    if g.cols < g.n:                    # columns split on whole panels
        g.cols = (g.cols + nr - 1) // nr * nr
        g.col_parts = (g.n + g.cols - 1) // g.cols
    nbytes = nnc_sgemm_packed_floats(g.isa, g.n, g.k) * sizeof(float)
    key = _pack_key(g)
    g.packed = NULL
    if key != 0:
        g.packed = <const float*>constant_pack(g.w, key, nbytes, _pack_w, g)
    g.skip = 0 if g.packed != NULL else (nbytes + 63) & ~(<size_t>63)
    # Copies of a's rows when they are a multiple of 4 KiB apart, a block of the tiles' rows
    # at a time, where such a block stays small.
    g.copy_rows = (_copy_rows and g.k >= 256 and g.m > 1 and (g.a_sm * 4) % 4096 == 0
                   and NNC_SGEMM_MC * (g.k + ROW_PAD) * sizeof(float) <= _copy_bytes)
    # The whole size first: parts run on this thread ask for no more, so nothing moves.
    scratch = <char*>nnc_workspace(ctx, g.skip + _rows_bytes(g))
    if scratch == NULL:
        return NNC_OOM
    if g.packed == NULL:
        _pack_w(g, scratch)
        g.packed = <const float*>scratch
    return nnc_parallel_for(_parts(g), _part_packed, g, ctx)


cdef inline Py_ssize_t _parts(const gemm_t* g) noexcept nogil:
    return (g.batch + g.chunk - 1) // g.chunk * g.row_parts * g.col_parts


cdef int gemm_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef gemm_t g
    if _plan(p, inputs, n_in, outputs, n_out, &g) != NNC_SUCCESS:
        return NNC_INVALID
    if g.m == 0 or g.n == 0 or g.batch == 0:
        return NNC_SUCCESS
    _split(&g)
    # The tiles read each row of a as K contiguous floats and the bias's rows as N of them.
    if (g.dtype == NNC_32F and g.k > 0 and g.w_shared and (g.a_sk == 1 or g.k == 1)
            and (g.bias == NULL or g.bias_s == 1 or g.n == 1)):
        return _gemm_packed(&g, ctx)
    return nnc_parallel_for(_parts(&g), _part, &g, ctx)


def _accept(Cmd cmd, list inputs, list outputs):
    """The C backend's own checks, on the Tensors' C views: BLAS can take these layouts."""
    cdef nnc_tensor_t* io[4]
    cdef gemm_t g
    cdef int n_in = tensor_views(inputs, io, 3)
    cdef int n_out = tensor_views(outputs, io + 3, 1)
    return (n_in >= 0 and n_out >= 0
            and _plan(&cmd.param, io, n_in, io + 3, n_out, &g) == NNC_SUCCESS)


def register():
    """Register GEMM's CPU_OPT (called once by register_builtins)."""
    register_c_backend("GEMM", "CPU_OPT", gemm_opt, NNC_32F | NNC_64F, False, _accept, None,
                       True)
