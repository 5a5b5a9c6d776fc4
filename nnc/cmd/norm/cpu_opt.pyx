"""LAYER_NORM's, GROUP_NORM's and RMSNORM's CPU_OPT backends in C: contiguous rows, no GIL.

Semantics are norm/__init__.py's. The fast paths: LAYER_NORM and RMSNORM over trailing axes (x
seen as rows x inner, one row's statistics at a time) and GROUP_NORM with the groups on the last
axis and every axis but the first and the last reduced (x seen as [n, s, c], an NHWC image's
group or instance norm); the scale and bias hold exactly inner (or c) elements, contiguous. Other
layouts go to CPU_REF (``_accept`` asks ``_plan``, the same check the kernel makes).

float32 runs norm_kernel.h (per ISA level, ``cpu_isa()`` read once per call); float64 the
Cython loops below. Statistics in double: float32 LAYER_NORM rows in one pass over x - x[0]
(norm_kernel.h says why that is safe), float64 rows and GROUP_NORM in two (the mean, then the
squared deviations from it); either way a row with a large offset loses nothing to
cancellation and a constant row's variance is exactly 0. Parts
write disjoint rows (or disjoint (n, group) blocks) and only read the rest: every thread setting
gives the same bits.

The command's parameters reach C as: ``a`` = epsilon, ``groups``, ``stride[0]`` = group_axis,
``stride[1]`` = a mask of the normalised (or reduced) axes: bit i for axis i >= 0, bit
MAX_RANK + j for axis -(j + 1) (command.pyx's _fill_param), so C resolves them for any rank.
"""

from libc.math cimport sqrt

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_SUCCESS
from nnc.base.isa cimport cpu_isa
from nnc.base.parallel cimport nnc_parallel_for
from nnc.cmd.command cimport Cmd, nnc_cmd_param_t, register_c_backend
from nnc.cmd.cpu_check cimport tensor_plain, tensor_views
from nnc.tensor.tensor cimport nnc_tensor_t

cdef extern from "cmd/norm/norm_kernel.h" nogil:
    void nnc_norm_row_f32(int isa, const float* x, float* y, Py_ssize_t m, const float* scale,
                          const float* bias, double eps, int rms, double* mean_out,
                          double* inv_std_out)
    void nnc_norm_groups_f32(int isa, const float* x, float* y, Py_ssize_t s, Py_ssize_t c,
                             Py_ssize_t cg, Py_ssize_t g0, Py_ssize_t g1, const float* scale,
                             const float* bias, double eps, double* mean, double* inv_std)

ctypedef fused real:
    float
    double

cdef enum:
    PART_WORK = 1 << 16                 # elements per part: enough that a helper's wake-up is cheap
    MAX_RANK = 12                       # norm/__init__.py's MAX_RANK (the axis mask's halves)
    GROUP_CHUNK = 64                    # groups one GROUP_NORM part accumulates at once
    #                                     (norm_kernel.h's NNC_NORM_GROUP_CHUNK)
    CHAN_BLOCK = 256                    # channels a GROUP_NORM pass keeps a double for each
    LANES = 8                           # partial sums of a row (vectorised: 4 SSE2 registers)
    KIND_LAYER = 0
    KIND_GROUP = 1
    KIND_RMS = 2


# One call, shared (read-only) by its parts.
ctypedef struct norm_t:
    int kind                            # KIND_*
    int dtype                           # NNC_32F or NNC_64F
    int isa                             # cpu_isa() at the call: every part runs one variant
    const char* x
    char* y
    const char* scale                   # inner (LAYER, RMS) or c (GROUP) elements, or NULL
    const char* bias                    # likewise, or NULL
    char* mean                          # saved_mean: one per row (or per (n, group)), or NULL
    char* inv_std                       # saved_inv_std, likewise, or NULL
    Py_ssize_t rows, inner              # LAYER, RMS: x is rows x inner, inner >= 1
    Py_ssize_t n, s, c, groups, cg      # GROUP: x is [n, s, c], c = groups * cg
    Py_ssize_t per_part                 # rows (LAYER, RMS) or group chunks (GROUP) per part
    Py_ssize_t chunks                   # GROUP: group chunks per n
    double eps


cdef inline bint _in_mask(int mask, int axis, int ndim) noexcept nogil:
    return ((mask >> axis) & 1) != 0 or ((mask >> (MAX_RANK + ndim - 1 - axis)) & 1) != 0


cdef inline bint _fits(nnc_tensor_t* t, nnc_tensor_t* like, Py_ssize_t count) noexcept nogil:
    return t == NULL or (tensor_plain(t) and t.datatype == like.datatype and t.count == count)


cdef int _plan(int kind, const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
               nnc_tensor_t** outputs, int n_out, norm_t* t) noexcept nogil:
    """Fill t for these tensors, or NNC_INVALID where the fast path does not apply."""
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* y
    cdef int i, ndim, k, first
    cdef Py_ssize_t stats, width
    if n_in < 1 or n_in > 3 or n_out < 1 or n_out > 3 or inputs[0] == NULL or outputs[0] == NULL:
        return NNC_INVALID
    x, y = inputs[0], outputs[0]
    if not tensor_plain(x) or not tensor_plain(y) or not (x.datatype & (NNC_32F | NNC_64F)) \
            or y.datatype != x.datatype or y.ndim != x.ndim or x.ndim < 1:
        return NNC_INVALID
    ndim = x.ndim
    for i in range(ndim):
        if x.dim[i] != y.dim[i]:
            return NNC_INVALID
    t.kind, t.dtype, t.eps, t.isa = kind, x.datatype, p.a, cpu_isa()
    if not p.a >= 0:
        return NNC_INVALID
    if kind == KIND_GROUP:
        # The groups on the last axis, every axis strictly between the first and the last reduced.
        if ndim < 2 or p.stride[0] not in (-1, ndim - 1) or p.groups < 1:
            return NNC_INVALID
        for i in range(ndim):
            if _in_mask(p.stride[1], i, ndim) != (0 < i < ndim - 1):
                return NNC_INVALID
        t.n, t.c, t.groups = x.dim[0], x.dim[ndim - 1], p.groups
        if t.c % t.groups:
            return NNC_INVALID
        t.cg = t.c // t.groups
        t.s = x.count // t.c // t.n if t.n and t.c else 0
        stats, width = t.n * t.groups, t.c
    else:
        # The normalised axes are the trailing ones: a run ending at the last axis.
        first = ndim
        while first > 0 and _in_mask(p.stride[1], first - 1, ndim):
            first -= 1
        if first == ndim:
            return NNC_INVALID
        for i in range(first):
            if _in_mask(p.stride[1], i, ndim):
                return NNC_INVALID
        t.inner = 1
        for i in range(first, ndim):
            t.inner *= x.dim[i]
        t.rows = x.count // t.inner if t.inner else 0
        stats, width = t.rows, t.inner
    # Scale and bias: exactly the row's (or the channels') elements.
    k = 2 if kind == KIND_RMS else 3
    if n_in > k:
        return NNC_INVALID
    t.scale = t.bias = NULL
    for i in range(1, n_in):
        if inputs[i] == NULL or not _fits(inputs[i], x, width):
            return NNC_INVALID
    if n_in > 1:
        t.scale = <const char*>inputs[1].data
    if n_in > 2:
        t.bias = <const char*>inputs[2].data
    t.mean = t.inv_std = NULL
    if n_out > k:
        return NNC_INVALID
    for i in range(1, n_out):
        if not _fits(outputs[i], x, stats):
            return NNC_INVALID
    if kind == KIND_RMS:
        if n_out > 1 and outputs[1] != NULL:
            t.inv_std = <char*>outputs[1].data
    else:
        if n_out > 1 and outputs[1] != NULL:
            t.mean = <char*>outputs[1].data
        if n_out > 2 and outputs[2] != NULL:
            t.inv_std = <char*>outputs[2].data
    t.x, t.y = <const char*>x.data, <char*>y.data
    if kind == KIND_GROUP:
        t.chunks = (t.groups + GROUP_CHUNK - 1) // GROUP_CHUNK
        t.per_part = max(1, PART_WORK // max(1, t.s * min(t.c, <Py_ssize_t>GROUP_CHUNK * t.cg)))
    else:
        t.per_part = max(1, PART_WORK // max(1, t.inner))
    return NNC_SUCCESS


cdef inline double _sum(const real* x, Py_ssize_t m, double mean, bint square) noexcept nogil:
    """The sum of x[j] - mean (its square with ``square``) over m elements, in double, in LANES
    independent partial sums (the compiler vectorises them; a single chain would wait on each
    add's latency), added in one fixed order: the same bits for every thread setting."""
    cdef double acc[LANES]
    cdef double v, total = 0
    cdef Py_ssize_t j = 0, lane
    for lane in range(LANES):
        acc[lane] = 0
    if square:
        while j + LANES <= m:
            for lane in range(LANES):
                v = x[j + lane] - mean
                acc[lane] += v * v
            j += LANES
    else:
        while j + LANES <= m:
            for lane in range(LANES):
                acc[lane] += x[j + lane]
            j += LANES
    for lane in range(LANES):
        total += acc[lane]
    while j < m:
        v = x[j] - mean
        total += v * v if square else x[j]
        j += 1
    return total


cdef void _rows(real* y, const real* x, const norm_t* t, Py_ssize_t r0,
                Py_ssize_t r1) noexcept nogil:
    cdef Py_ssize_t r, j, m = t.inner
    cdef const real* xr
    cdef real* yr
    cdef const real* sc = <const real*>t.scale
    cdef const real* bi = <const real*>t.bias
    cdef double mean, inv_std
    for r in range(r0, r1):
        xr = x + r * m
        yr = y + r * m
        mean = 0 if t.kind == KIND_RMS else _sum(xr, m, 0, False) / m
        inv_std = 1 / sqrt(_sum(xr, m, mean, True) / m + t.eps)
        if t.mean != NULL:
            (<real*>t.mean)[r] = <real>mean
        if t.inv_std != NULL:
            (<real*>t.inv_std)[r] = <real>inv_std
        if sc != NULL and bi != NULL:
            for j in range(m):
                yr[j] = <real>((xr[j] - mean) * inv_std * sc[j] + bi[j])
        elif sc != NULL:
            for j in range(m):
                yr[j] = <real>((xr[j] - mean) * inv_std * sc[j])
        else:
            for j in range(m):
                yr[j] = <real>((xr[j] - mean) * inv_std)


cdef void _rows_f32(const norm_t* t, Py_ssize_t r0, Py_ssize_t r1) noexcept nogil:
    """float32 rows through norm_kernel.h, the variant of t.isa."""
    cdef Py_ssize_t r, m = t.inner
    cdef double mean, inv_std
    for r in range(r0, r1):
        nnc_norm_row_f32(t.isa, <const float*>t.x + r * m, <float*>t.y + r * m, m,
                         <const float*>t.scale, <const float*>t.bias, t.eps, t.kind == KIND_RMS,
                         &mean, &inv_std)
        if t.mean != NULL:
            (<float*>t.mean)[r] = <float>mean
        if t.inv_std != NULL:
            (<float*>t.inv_std)[r] = <float>inv_std


cdef void _groups_f32(const norm_t* t, Py_ssize_t b, Py_ssize_t g0, Py_ssize_t g1) noexcept nogil:
    """float32 image b's groups g0 .. g1 - 1 through norm_kernel.h, the variant of t.isa."""
    cdef double mean[GROUP_CHUNK]
    cdef double inv_std[GROUP_CHUNK]
    cdef Py_ssize_t g, image = b * t.s * t.c
    nnc_norm_groups_f32(t.isa, <const float*>t.x + image, <float*>t.y + image, t.s, t.c, t.cg,
                        g0, g1, <const float*>t.scale, <const float*>t.bias, t.eps, mean, inv_std)
    for g in range(g1 - g0):
        if t.mean != NULL:
            (<float*>t.mean)[b * t.groups + g0 + g] = <float>mean[g]
        if t.inv_std != NULL:
            (<float*>t.inv_std)[b * t.groups + g0 + g] = <float>inv_std[g]


cdef void _groups(real* y, const real* x, const norm_t* t, Py_ssize_t b, Py_ssize_t g0,
                  Py_ssize_t g1) noexcept nogil:
    """Image b's groups g0 .. g1 - 1 (at most GROUP_CHUNK), CHAN_BLOCK channels at a time: each
    pass walks the pixels and keeps one double per channel of the block (contiguous in every
    pixel, so the channel loop vectorises whatever the group width, one channel per group
    included), then adds the block's channels into their groups in channel order."""
    cdef double acc[GROUP_CHUNK]
    cdef double mean[GROUP_CHUNK]
    cdef double inv_std[GROUP_CHUNK]
    cdef double cacc[CHAN_BLOCK]
    cdef double cm[CHAN_BLOCK]
    cdef double ck[CHAN_BLOCK]
    cdef double cb[CHAN_BLOCK]
    cdef Py_ssize_t i, g, q, c0, nc, cg = t.cg, c_lo = g0 * cg, c_hi = g1 * cg
    cdef double n = <double>(t.s * cg), v
    cdef const real* xp
    cdef real* yp
    cdef const real* sc = <const real*>t.scale
    cdef const real* bi = <const real*>t.bias
    cdef const real* xb = x + b * t.s * t.c
    cdef real* yb = y + b * t.s * t.c
    for g in range(g1 - g0):
        acc[g] = 0
    c0 = c_lo
    while c0 < c_hi:
        nc = min(<Py_ssize_t>CHAN_BLOCK, c_hi - c0)
        for q in range(nc):
            cacc[q] = 0
        for i in range(t.s):
            xp = xb + i * t.c + c0
            for q in range(nc):
                cacc[q] += xp[q]
        for q in range(nc):
            acc[(c0 + q) // cg - g0] += cacc[q]
        c0 += nc
    for g in range(g1 - g0):
        mean[g] = acc[g] / n
        acc[g] = 0
    c0 = c_lo
    while c0 < c_hi:
        nc = min(<Py_ssize_t>CHAN_BLOCK, c_hi - c0)
        for q in range(nc):
            cm[q] = mean[(c0 + q) // cg - g0]
            cacc[q] = 0
        for i in range(t.s):
            xp = xb + i * t.c + c0
            for q in range(nc):
                v = xp[q] - cm[q]
                cacc[q] += v * v
        for q in range(nc):
            acc[(c0 + q) // cg - g0] += cacc[q]
        c0 += nc
    for g in range(g1 - g0):
        inv_std[g] = 1 / sqrt(acc[g] / n + t.eps)
        if t.mean != NULL:
            (<real*>t.mean)[b * t.groups + g0 + g] = <real>mean[g]
        if t.inv_std != NULL:
            (<real*>t.inv_std)[b * t.groups + g0 + g] = <real>inv_std[g]
    c0 = c_lo
    while c0 < c_hi:
        nc = min(<Py_ssize_t>CHAN_BLOCK, c_hi - c0)
        # y = (x - mean) * (inv_std * scale) + bias, per channel of the block.
        for q in range(nc):
            g = (c0 + q) // cg - g0
            cm[q] = mean[g]
            ck[q] = inv_std[g] * (sc[c0 + q] if sc != NULL else 1.0)
            cb[q] = bi[c0 + q] if bi != NULL else 0.0
        for i in range(t.s):
            xp = xb + i * t.c + c0
            yp = yb + i * t.c + c0
            for q in range(nc):
                yp[q] = <real>((xp[q] - cm[q]) * ck[q] + cb[q])
        c0 += nc


cdef int _part(void* arg, Py_ssize_t part, void* context) noexcept nogil:
    cdef const norm_t* t = <const norm_t*>arg
    cdef Py_ssize_t q, q0 = part * t.per_part, q1, b, k
    if t.kind == KIND_GROUP:
        q1 = min(q0 + t.per_part, t.n * t.chunks)
        for q in range(q0, q1):
            b, k = q // t.chunks, q % t.chunks
            if t.dtype == NNC_32F:
                _groups_f32(t, b, k * GROUP_CHUNK, min((k + 1) * GROUP_CHUNK, t.groups))
            else:
                _groups(<double*>t.y, <const double*>t.x, t, b, k * GROUP_CHUNK,
                        min((k + 1) * GROUP_CHUNK, t.groups))
        return NNC_SUCCESS
    q1 = min(q0 + t.per_part, t.rows)
    if t.dtype == NNC_32F:
        _rows_f32(t, q0, q1)
    else:
        _rows(<double*>t.y, <const double*>t.x, t, q0, q1)
    return NNC_SUCCESS


cdef int _norm(int kind, const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
               nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef norm_t t
    cdef Py_ssize_t units
    if _plan(kind, p, inputs, n_in, outputs, n_out, &t) != NNC_SUCCESS:
        return NNC_INVALID
    units = t.n * t.chunks if kind == KIND_GROUP else t.rows
    if units == 0 or outputs[0].count == 0:
        return NNC_SUCCESS
    return nnc_parallel_for((units + t.per_part - 1) // t.per_part, _part, &t, ctx)


cdef int layer_norm_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                        nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _norm(KIND_LAYER, p, inputs, n_in, outputs, n_out, ctx)


cdef int group_norm_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                        nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _norm(KIND_GROUP, p, inputs, n_in, outputs, n_out, ctx)


cdef int rmsnorm_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                     nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    return _norm(KIND_RMS, p, inputs, n_in, outputs, n_out, ctx)


def _accept(Cmd cmd, list inputs, list outputs):
    """The C backend's own checks, on the Tensors' C views: normalised axes trailing (GROUP_NORM:
    groups on the last axis, the axes between the first and the last reduced), scale and bias of
    exactly the normalised elements."""
    cdef nnc_tensor_t* io[6]
    cdef norm_t t
    cdef int kind = (KIND_GROUP if cmd.info.name == "GROUP_NORM" else
                     KIND_RMS if cmd.info.name == "RMSNORM" else KIND_LAYER)
    cdef int n_in = tensor_views(inputs, io, 3)
    cdef int n_out = tensor_views(outputs, io + 3, 3)
    return (n_in >= 0 and n_out >= 0
            and _plan(kind, &cmd.param, io, n_in, io + 3, n_out, &t) == NNC_SUCCESS)


def register():
    """Register the family's CPU_OPT (called once by register_builtins)."""
    mask = NNC_32F | NNC_64F
    register_c_backend("LAYER_NORM", "CPU_OPT", layer_norm_opt, mask, True, _accept, None, True)
    register_c_backend("GROUP_NORM", "CPU_OPT", group_norm_opt, mask, True, _accept, None, True)
    register_c_backend("RMSNORM", "CPU_OPT", rmsnorm_opt, mask, True, _accept, None, True)
