"""A float32 CONVOLUTION CPU_OPT call through nnc's own GEMM tiles (cmd/gemm/sgemm_kernel.h,
AVX-512 / AVX2 / baseline by the call's ISA level): the weights packed once per call into the
caller's workspace, or once for good when frozen (nnc.tensor.constant); A's rows by pointer
(conv_rows.pyx); bias, residual and activation applied in registers before a tile is stored.
cpu_opt.pyx plans the call (conv_t, the parts, the indirect path) and hands it over here.

The tiles skip a tap whose row pointers are all sgemm_kernel.h's nnc_sgemm_zeros, a static
array: each extension including the header has its own, so the pointer the rows are given
(cv.zeros) is taken here, in the extension whose tiles compare against it."""

from nnc.base.core cimport NNC_OOM, NNC_SUCCESS
from nnc.base.parallel cimport nnc_parallel_for, nnc_workspace
from nnc.cmd.convolution.conv_geometry cimport (INDIRECT_RUNS, SPLIT_EVEN, align64, conv_t,
                                                out_row, rows_even)
from nnc.cmd.convolution.conv_rows cimport im2col, pixel_rows, run_rows, tap_rows
from nnc.cmd.gemm.sgemm_kernel cimport (NNC_SGEMM_ZEROS, nnc_epilogue_t, nnc_sgemm_nr,
                                        nnc_sgemm_pack_groups, nnc_sgemm_packed_ahead,
                                        nnc_sgemm_packed_floats, nnc_sgemm_zeros)
from nnc.tensor.constant cimport constant_pack

cdef enum:
    # The packed-weight layout's version, in the cache key of frozen weights' packed copies
    # (2: a flag after the panels says whether every weight is finite).
    PACK_FORMAT = 2

# What an indirect convolution's taps in the padding point at when a weight is infinite or
# NaN (never written): unlike nnc_sgemm_zeros, tiles multiply these (0 * inf is NaN).
cdef float _zeros[NNC_SGEMM_ZEROS]


cdef inline size_t _rows_bytes(const conv_t* cv, Py_ssize_t m) noexcept nogil:
    """Scratch a packed part of m pixels takes after cv.skip: its A-row pointers (taps of
    them a pixel), then (but pointwise and indirect) its patch."""
    if cv.indirect == INDIRECT_RUNS:
        # The copies of edge windows: edge_q pixels of each output row, kh runs each.
        return (align64(m * cv.taps * sizeof(float*))
                + (m // cv.wo) * cv.edge_q * cv.k * sizeof(float))
    return (align64(m * cv.taps * sizeof(float*))
            + (0 if cv.pointwise or cv.indirect else m * cv.k * sizeof(float)))


cdef inline const float* _residual_row(
        const conv_t* cv, Py_ssize_t r, Py_ssize_t g) noexcept nogil:
    """Row r of the residual at group g's channels, or NULL without one."""
    if cv.residual == NULL:
        return NULL
    return (<const float*>cv.residual + (r // cv.ho) * cv.rs_n + (r % cv.ho) * cv.rs_h
            + g * cv.og)


cdef void _packed_rows(const conv_t* cv, const float** rows, Py_ssize_t ts, Py_ssize_t r0,
                       Py_ssize_t r1, Py_ssize_t g, Py_ssize_t c0, Py_ssize_t c1) noexcept nogil:
    """Output rows r0..r1, group g's channels c0..c1 (c0 a multiple of the tile width) = A rows
    (rows[t * ts + i]: tap t of pixel i of those rows) times group g's packed weights, with the
    bias, the residual and the activation applied in registers."""
    cdef nnc_epilogue_t ep
    cdef float* y0 = <float*>cv.out
    cdef const float* bp = cv.packed + g * cv.gfloats
    cdef Py_ssize_t r
    ep.bias = <const float*>cv.bias + g * cv.og if cv.bias != NULL else NULL
    ep.ldr = cv.rs_w
    ep.act = cv.act
    ep.lo = cv.lo
    ep.hi = cv.hi
    if (rows_even(r0, r1, cv.ho, cv.wo, cv.os_n, cv.os_h, cv.os_w)
            and (cv.residual == NULL
                 or rows_even(r0, r1, cv.ho, cv.wo, cv.rs_n, cv.rs_h, cv.rs_w))):
        ep.residual = _residual_row(cv, r0, g)
        nnc_sgemm_packed_ahead(cv.isa, 0, (r1 - r0) * cv.wo, c0, c1, cv.og, cv.kt, cv.taps,
                               rows, ts, bp, out_row(cv, y0, r0) + g * cv.og, cv.os_w, &ep,
                               cv.ahead)
        return
    for r in range(r0, r1):
        ep.residual = _residual_row(cv, r, g)
        nnc_sgemm_packed_ahead(cv.isa, 0, cv.wo, c0, c1, cv.og, cv.kt, cv.taps,
                               rows + (r - r0) * cv.wo, ts, bp,
                               out_row(cv, y0, r) + g * cv.og, cv.os_w, &ep, cv.ahead)


cdef int _part_packed(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    """Output rows of one part, every group: A is the input (pointwise) or the part's
    patches, in the running thread's workspace after the packed weights' room (on the
    caller's thread that room holds them; the caller asked for this size first, so it does
    not grow here and they stay)."""
    cdef const conv_t* cv = <const conv_t*>arg
    cdef Py_ssize_t r0 = part * cv.rows_per_part
    cdef Py_ssize_t r1 = min(r0 + cv.rows_per_part, cv.rows)
    cdef Py_ssize_t m = (r1 - r0) * cv.wo, i, g, most = cv.rows_per_part * cv.wo
    cdef char* scratch = <char*>nnc_workspace(context, cv.skip + _rows_bytes(cv, most))
    cdef const float** rows
    cdef float* patch
    if scratch == NULL:
        return NNC_OOM
    rows = <const float**>(scratch + cv.skip)
    patch = <float*>(scratch + cv.skip + align64(most * cv.taps * sizeof(float*)))
    if not cv.pointwise and not cv.indirect:
        for i in range(m):
            rows[i] = patch + i * cv.k
    for g in range(cv.groups):
        if cv.pointwise:
            pixel_rows(cv, r0, r1, g, rows)
        elif cv.indirect == INDIRECT_RUNS:
            run_rows(cv, r0, r1, rows, m, patch)
        elif cv.indirect:
            tap_rows(cv, r0, r1, g, rows, m)
        else:
            im2col(cv, patch, r0, r1, g)
        _packed_rows(cv, rows, m, r0, r1, g, 0, cv.og)
    return NNC_SUCCESS


cdef int _channel_part_packed(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    """One packed panel of output channels (chunk of them) of one block of output rows (one
    group): the caller made every A row once (cv.rowp). Parts of one panel are adjacent, so
    the threads taking them read that panel's weights at about the same time."""
    cdef const conv_t* cv = <const conv_t*>arg
    cdef Py_ssize_t blocks = (cv.rows + cv.rows_per_part - 1) // cv.rows_per_part
    cdef Py_ssize_t c0 = (part // blocks) * cv.chunk
    cdef Py_ssize_t r0 = (part % blocks) * cv.rows_per_part
    cdef Py_ssize_t r1 = min(r0 + cv.rows_per_part, cv.rows)
    _packed_rows(cv, cv.rowp + r0 * cv.wo, cv.rows * cv.wo, r0, r1, 0, c0,
                 min(c0 + cv.chunk, cv.o))
    return NNC_SUCCESS


cdef int _im2col_part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    """Rows [part * rows_per_part, ...) of every pixel's patch (one group) into cv.patch."""
    cdef const conv_t* cv = <const conv_t*>arg
    cdef Py_ssize_t r0 = part * cv.rows_per_part
    im2col(cv, <float*>cv.patch + r0 * cv.wo * cv.k, r0, min(r0 + cv.rows_per_part, cv.rows),
           0)
    return NNC_SUCCESS


cdef bint _all_finite(const float* w, Py_ssize_t n) noexcept nogil:
    """No weight is infinite or NaN (exponent bits all ones): one pass gcc vectorises."""
    cdef const unsigned int* u = <const unsigned int*>w
    cdef unsigned int bad = 0
    cdef Py_ssize_t i
    for i in range(n):
        bad |= (u[i] & 0x7f800000u) == 0x7f800000u
    return bad == 0


cdef void _pack_weights(void* arg, void* dst) noexcept nogil:
    """Every group's weights packed for cv.isa into dst (groups * gfloats floats), then a
    float flag, 1 when every weight is finite (padding taps may be skipped), else 0: the
    callback that makes frozen weights' kept copy (nnc.tensor.constant), and the per-call
    packing."""
    cdef const conv_t* cv = <const conv_t*>arg
    nnc_sgemm_pack_groups(cv.isa, <const float*>cv.w, cv.groups, cv.og, cv.k, <float*>dst)
    (<float*>dst)[cv.groups * cv.gfloats] = (
        1.0 if _all_finite(<const float*>cv.w, cv.o * cv.k) else 0.0)


cdef unsigned long long _pack_key(const conv_t* cv) noexcept nogil:
    """What the packed copy depends on besides the weights' address, as exact bit fields (no
    hash: two layouts can never share a key): the format, the ISA (its tile width), groups,
    output channels per group and K. 0 when a field does not fit (the call packs per call)."""
    if cv.groups >= (1 << 16) or cv.og >= (1 << 20) or cv.k >= (1 << 22):
        return 0
    return ((<unsigned long long>PACK_FORMAT << 60) | (<unsigned long long>cv.isa << 58)
            | (<unsigned long long>cv.groups << 42) | (<unsigned long long>cv.og << 22)
            | <unsigned long long>cv.k)


cdef int conv_packed(conv_t* cv, Py_ssize_t parts, bint by_channels, int width,
                     Py_ssize_t part_bytes, void* ctx) noexcept nogil:
    """float32 through nnc's own GEMM tiles: pack every group's weights into the caller's
    workspace, then run the parts (of output rows, or of output channels when there are too
    few pixels to split rows). Each output value is the same sum in the same order whichever
    part computes it, so the bits do not depend on the split. By channels, patches of
    part_bytes or more are copied in parts too (cpu_opt.pyx's _part_bytes)."""
    cdef Py_ssize_t i, m = cv.rows * cv.wo, panels, blocks
    cdef size_t need
    cdef char* scratch
    cdef const float* w = <const float*>cv.w
    cdef float* patch
    cdef unsigned long long key
    cdef int nr, rc
    nr = nnc_sgemm_nr(cv.isa)
    cv.gfloats = <Py_ssize_t>nnc_sgemm_packed_floats(cv.isa, cv.og, cv.k)
    key = _pack_key(cv)
    # Frozen weights can never change: their packed copy is made once and kept with them
    # (nnc.tensor.constant). Others are packed into this call's workspace.
    cv.packed = NULL
    if key != 0:
        cv.packed = <const float*>constant_pack(
            w, key, (cv.groups * cv.gfloats + 1) * sizeof(float), _pack_weights, cv)
    cv.skip = (0 if cv.packed != NULL
               else align64((cv.groups * cv.gfloats + 1) * sizeof(float)))
    # The whole size first: parts run on this thread ask for no more, so nothing moves.
    need = cv.skip + (_rows_bytes(cv, m) if by_channels
                      else _rows_bytes(cv, cv.rows_per_part * cv.wo))
    scratch = <char*>nnc_workspace(ctx, need)
    if scratch == NULL:
        return NNC_OOM
    if cv.packed == NULL:
        _pack_weights(cv, scratch)
        cv.packed = <const float*>scratch
    cv.zeros = &_zeros[0]
    if cv.packed[cv.groups * cv.gfloats] != 0:
        cv.zeros = &nnc_sgemm_zeros[0]
    if not by_channels:
        return nnc_parallel_for(parts, _part_packed, cv, ctx)
    cv.rowp = <const float**>(scratch + cv.skip)
    if cv.pointwise:
        pixel_rows(cv, 0, cv.rows, 0, cv.rowp)
    elif cv.indirect == INDIRECT_RUNS:
        run_rows(cv, 0, cv.rows, cv.rowp, m,
                 <float*>(scratch + cv.skip + align64(m * cv.taps * sizeof(float*))))
    elif cv.indirect:
        tap_rows(cv, 0, cv.rows, 0, cv.rowp, m)
    else:
        patch = <float*>(scratch + cv.skip + align64(m * sizeof(float*)))
        cv.patch = <const char*>patch
        # The patches are a copy at memory speed: split too when they are large.
        cv.rows_per_part = cv.rows
        if m * cv.k * sizeof(float) >= part_bytes and cv.rows >= width:
            cv.rows_per_part = (cv.rows + width - 1) // width
        rc = nnc_parallel_for((cv.rows + cv.rows_per_part - 1) // cv.rows_per_part,
                              _im2col_part, cv, ctx)
        if rc != NNC_SUCCESS:
            return rc
        for i in range(m):
            cv.rowp[i] = patch + i * cv.k
    # Parts are one packed panel (chunk = its width, so each part's first column starts one)
    # by one block of output rows: about SPLIT_EVEN parts per thread, claimed one at a time,
    # so the threads end together (two parts of unequal panels ran 60/40).
    cv.chunk = nr
    panels = (cv.o + nr - 1) // nr
    blocks = min(cv.rows, max(1, (SPLIT_EVEN * width + panels - 1) // panels))
    cv.rows_per_part = (cv.rows + blocks - 1) // blocks
    blocks = (cv.rows + cv.rows_per_part - 1) // cv.rows_per_part
    return nnc_parallel_for(panels * blocks, _channel_part_packed, cv, ctx)
