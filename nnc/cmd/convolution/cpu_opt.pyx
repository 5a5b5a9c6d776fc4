"""CONVOLUTION's CPU_OPT backend in C, no GIL: float32 on nnc's own kernels, float64 on BLAS.

This module checks the call, describes it (conv_t, conv_geometry.pxd), plans its parts and runs
float32 on nnc's tiles, the hot path, whole (its A rows by pointer included); the float64 and
depthwise paths are in conv_unpacked.pyx, the im2col patches both copy in conv_patches.pyx, the
A rows by pointer in conv_rows.pyx, the kernels themselves in the headers.

NNC: cmd/convolution/cpu_opt/_ccv_nnc_conv_cpu_opt.c, which packs input patches into scratch
memory and multiplies them with the weights, split across threads by output rows. Here:

- float32 (docs/kernels.md): the weights are packed for nnc's GEMM tiles
  (cmd/gemm/sgemm_kernel.h, AVX-512 / AVX2 / baseline by ``cpu_isa()``) once per call into the
  caller's workspace, or, when they are frozen (``Graph.freeze``; ``nnc.models`` and
  ``nnc.onnx.load`` freeze weights), once for good: the packed copy is kept with the frozen
  memory (nnc.tensor.constant), so a run reads them once, in the order the tiles use them. The
  tiles take A's rows by pointer: a pointwise (1x1, stride 1, no padding) convolution's rows
  are the input's pixels themselves; any other's are pointers into the input too (an
  indirect convolution, as XNNPACK's): per kernel row to its run of kw pixels, or per tap to
  one pixel, the padding a row of zeros; only a few shapes copy im2col patches per part into
  the running thread's workspace (see _indirect_min_cg). Bias, residual and activation are
  applied in registers before a tile is stored. Each output value is one sum in one order
  whichever part computes it, so the bits never depend on the split or the thread count (they
  depend on the ISA level).
- float64: each part copies its patches (none for pointwise) and multiplies them with one
  single-threaded BLAS GEMM per group (nnc.base.openblas), then a pass adds the bias and the
  residual and applies the activation while the rows are hot.
- A depthwise convolution (groups = C = O) is no GEMM (it would be O one-column products): in
  float32 it runs nnc's own kernel (cmd/convolution/depthwise_kernel.h: vectorised over channels
  per CPU ISA, 3x3 weights in registers, interior pixels without bounds checks, bias and
  activation fused), on weights laid out tap by tap once per call in the caller's workspace (its
  parts take none of their own); float64 is a direct loop over taps.
- The output's pixels are cut into *parts* of whole output rows (about 512 KiB of patches and
  at least 512 pixels each when patches are copied; two per thread otherwise, as pointwise);
  parts run through nnc_parallel_for (nnc.base.parallel): idle pool threads take some, so a
  large convolution uses every core in a sequential run, and in a scheduled run a thread whose
  stream waits helps the other stream's convolution. Parts write disjoint output rows; the
  weights are only read. With few parts they are evened out to a
  multiple of ``parallel_width`` (the pool's size); a pointwise convolution takes two parts
  per thread. With too few pixels for that many parts (17x17 and 8x8 layers) every A row is
  made once (the patches copied in parts of rows when large) and a part is one packed panel of
  output channels by one block of output rows, about four parts per thread, so that the
  threads end together. Below 1M multiply-adds and 256 KiB of weights nothing is split (a
  depthwise multiply-add counts four), and in float32 nothing is split for a call no helper may
  join (intra-op 1): nnc's kernels give each output the same sum whatever the cut, so the
  uncut call has the same bits and skips what the cut costs one thread.
- The output may be a channel slice of a wider buffer (a concat's part), the input and the
  residual any views whose channels are contiguous: the pixel strides are the leading
  dimensions.

Weights are [O, kh, kw, C/groups] (NNC's layout), i.e. one [O, K] row-major matrix per group
with K ordered (i, j, c), the order each patch row is copied in. Part sizes were chosen by
sweeping them (``_tune``) over Inception-V3's layers."""

from nnc.base.core cimport NNC_32F, NNC_64F, NNC_INVALID, NNC_OOM, NNC_SUCCESS
from nnc.base.isa cimport cpu_isa
from nnc.base.parallel cimport (
    nnc_parallel_for, nnc_parallel_for_in_turn, nnc_workspace, parallel_threads, parallel_width,
)
from nnc.cmd.command cimport (ACTIVATION_CLAMP, ACTIVATION_HARD_SWISH, ACTIVATION_RELU,
                              ACTIVATION_SWISH, Cmd, nnc_cmd_param_t, register_c_backend)
from nnc.cmd.convolution.conv_geometry cimport (INDIRECT_NONE, INDIRECT_RUNS, INDIRECT_TAPS,
                                                SPLIT_EVEN, align64, conv_t, out_row,
                                                rows_even)
from nnc.cmd.convolution.conv_patches cimport im2col
from nnc.cmd.convolution.conv_rows cimport PIXEL_PAD, pixel_copies, pixel_rows, run_rows, tap_rows
from nnc.cmd.convolution.conv_unpacked cimport conv_unpacked, empty_sums, split_channels
from nnc.cmd.cpu_check cimport conv_operands_ok, fits_int, tensor_views
from nnc.cmd.gemm.sgemm_kernel cimport (NNC_ACT_CLAMP, NNC_ACT_HSWISH, NNC_ACT_NONE,
                                        NNC_ACT_RELU, NNC_ACT_SILU, NNC_SGEMM_MC, NNC_SGEMM_ZEROS,
                                        nnc_epilogue_t, nnc_sgemm_set_row_blocks, nnc_sgemm_zeros,
                                        nnc_sgemm_mr, nnc_sgemm_nr, nnc_sgemm_pack_groups,
                                        nnc_sgemm_packed_ahead, nnc_sgemm_packed_floats)
from nnc.tensor.constant cimport constant_pack
from nnc.tensor.tensor cimport nnc_tensor_t

# Patch-matrix bytes per part: small enough to stay in L2 between copy and GEMM, large
# enough that GEMM runs at full speed (python -m benchmarks.conv; docs/benchmarks.md).
cdef Py_ssize_t _part_bytes = 1 << 19
# No part has fewer output pixels than this: BLAS (float64) packs the weights once per call,
# which a part of few pixels would not amortise; below it per thread the float32 path splits
# output channels instead. Pointwise parts (no patches to keep hot) use it too.
cdef Py_ssize_t _part_pixels = 512

# A convolution below this many multiply-adds (about 20 us of one core) runs whole on its
# thread: a split costs a few microseconds when a helper spins (as one does through a run that
# splits), more when one must be woken ...
cdef Py_ssize_t _split_macs = 1000000
# ... unless its weights take this many bytes: a few-pixel layer (the 8x8 to 1x1 maps of small
# images) streams its weights from memory, which one core cannot do at the memory's speed, so
# its output channels are split even when it computes little. (Swept at two threads on the
# 2-vCPU VM once helpers spun through runs and were woken late: 4 M / 1 MiB -> 1 M / 256 KiB
# took Inception-V3 at 75x75 from 6.99 to 6.77 ms and MobileNet-V2 from 5.94 to 5.41 ms;
# lower thresholds were within the noise.)
cdef Py_ssize_t _split_weight_bytes = 1 << 18
# A depthwise multiply-add takes several times a GEMM's (no register blocking over input
# channels, one load per tap): its size counts this many times against _split_macs, so
# MobileNet's 28x28 to 7x7 depthwise layers split too.
cdef Py_ssize_t _depthwise_cost = 4
# Parts per pool thread of a split pointwise convolution, claimed one at a time: a helper that
# joins late takes fewer, instead of the caller waiting for its one half.
cdef Py_ssize_t _pointwise_parts = 2

cdef enum:
    # The packed-weight layout's version, in the cache key of frozen weights' packed copies
    # (2: a flag after the panels says whether every weight is finite). Each family keeping
    # copies has its own (GEMM's 3, Winograd's U 4, depthwise taps 5): keys never collide.
    PACK_FORMAT = 2

# float32 convolutions take their A rows by pointer from the input (an indirect convolution,
# no im2col copy), in one of two ways:
# - kernel row by kernel row (INDIRECT_RUNS; groups = 1, pixels contiguous): the kw pixels
#   under a kernel row are one run of kw * c floats, so each set of row pointers feeds a loop
#   of kw * c steps; windows crossing the left or right edge are copied with the padding's
#   zeros. Taken when _runs is 2, or when it is 1 and the input is thin (fewer than 16
#   channels: the first layer) or at most 1/8 of the output columns are such copies;
# - else tap by tap (INDIRECT_TAPS), a pointer per pixel and tap, with at least
#   _indirect_min_cg input channels per group (a tap of fewer is a loop of a few steps per
#   set of row pointers) and at most NNC_SGEMM_ZEROS;
# and else patches are copied (im2col). Measured, 1 thread (tests keep the three paths' bits
# equal): Inception-V3's first layer 57 -> 82 GFLOP/s, ResNet-50's 91 -> 104, the 3x3 layers
# of 56x56x64 and 35x35x96 105 -> 113 and 108 -> 114, 14x14x256 111 -> 115 (taps).
cdef Py_ssize_t _indirect_min_cg = 4
cdef int _runs = 1
# A 1x1 convolution's pixels a multiple of 4 KiB apart are copied PIXEL_PAD floats apart when
# all the copies take at most _copy_bytes (conv_rows.pyx, pixel_copies); _copy_pixels off: A/B
# runs, tests.
cdef Py_ssize_t _copy_bytes = 4 << 20
cdef bint _copy_pixels = True
# Whether the float32 tiles fetch each next weight panel ahead (nnc_sgemm_packed_ahead).
# Where a part ends at a panel another thread takes next, the fetch is still worth it: with
# one panel a part (7x7 maps at 2 threads), fetching the panel width parts on, the one this
# thread would likely take, measured the same as the next one (7x7 1x1 layers, 2 threads,
# weights cold: 143 -> 153 GFLOP/s either way).
cdef bint _prefetch = True
# Whether a float32 layer of few pixels (under _part_pixels a thread) is cut by output
# channels only where its weights outweigh its A rows (conv_opt); off: always (A/B runs).
cdef bint _rows_by_size = True
# Whether a layer cut by output channels is cut into at least a block of rows a thread
# (_conv_packed); off: as few blocks as make SPLIT_EVEN parts a thread (A/B runs, tests).
cdef bint _block_per_thread = True
# Whether a split few-pixel layer whose pixels fit one tile takes whole panels as parts
# (_conv_packed); off: A/B runs, tests (_switch).
cdef bint _whole_tile_parts = True
# Whether a few-pixel layer whose rows do not cut evenly into its usual parts tries fewer
# (down to one a thread) before it falls back to a channel cut (_row_parts); off: A/B runs.
cdef bint _fewer_row_parts = True
# Whether a few-pixel layer whose row parts would each hold a block of tile rows (at least
# NNC_SGEMM_MC pixels) is cut by rows even where its weights outweigh its A rows; off: A/B runs.
cdef bint _block_row_parts = True

# What an indirect convolution's taps in the padding point at when a weight is infinite or
# NaN (never written): unlike nnc_sgemm_zeros, tiles multiply these (0 * inf is NaN).
cdef float _zeros[NNC_SGEMM_ZEROS]


def _tune(part_bytes, part_pixels, split_macs=None, split_weight_bytes=None):
    """Set the part sizes and the smallest convolution worth splitting (for sweeps in
    benchmarks); returns the previous (part_bytes, part_pixels, split_macs,
    split_weight_bytes)."""
    global _part_bytes, _part_pixels, _split_macs, _split_weight_bytes
    old = (_part_bytes, _part_pixels, _split_macs, _split_weight_bytes)
    _part_bytes, _part_pixels = max(1, part_bytes), max(1, part_pixels)
    if split_macs is not None:
        _split_macs = max(0, split_macs)
    if split_weight_bytes is not None:
        _split_weight_bytes = max(0, split_weight_bytes)
    return old


def _tune_split(depthwise_cost=None, pointwise_parts=None):
    """Set how depthwise sizes count against the split threshold and how many parts per
    thread a pointwise convolution takes (for sweeps in benchmarks); returns the previous
    (depthwise_cost, pointwise_parts)."""
    global _depthwise_cost, _pointwise_parts
    old = (_depthwise_cost, _pointwise_parts)
    if depthwise_cost is not None:
        _depthwise_cost = max(1, depthwise_cost)
    if pointwise_parts is not None:
        _pointwise_parts = max(1, pointwise_parts)
    return old


def _switch(name, on=None):
    """Read (``on`` None) or set one of the float32 path's on/off rules, for A/B runs and
    tests; returns its previous setting. ``name``: "prefetch" (the tiles fetch each next weight
    panel ahead), "whole_tile_parts" (a split few-pixel layer whose pixels fit one tile takes
    whole panels as parts), "rows_by_size" (a layer of few pixels is cut by output channels
    only where its weights outweigh its A rows), "block_per_thread" (a channel cut takes at
    least a block of rows a thread), "row_blocks" (this extension's tiles run a call whose
    weights outweigh its rows as one block of rows, and join a short last block to the one
    before: nnc_sgemm_block_rows), "copies" (a 1x1 convolution's pixels a multiple of 4 KiB
    apart are copied apart), "fewer_row_parts" (a few-pixel layer whose rows do not cut evenly
    into its usual parts tries fewer, down to one a thread, before a channel cut),
    "block_row_parts" (a few-pixel layer whose row parts each hold a block of tile rows is cut
    by rows even where its weights outweigh its A rows)."""
    global _prefetch, _whole_tile_parts, _rows_by_size, _block_per_thread, _copy_pixels
    global _fewer_row_parts, _block_row_parts
    cdef bint old
    if name == "row_blocks":
        old = nnc_sgemm_set_row_blocks(1)
        nnc_sgemm_set_row_blocks(old if on is None else bool(on))
        return old
    olds = {"prefetch": _prefetch, "whole_tile_parts": _whole_tile_parts,
            "rows_by_size": _rows_by_size, "block_per_thread": _block_per_thread,
            "copies": _copy_pixels, "fewer_row_parts": _fewer_row_parts,
            "block_row_parts": _block_row_parts}
    if name not in olds:
        raise ValueError(f"no switch {name!r}; the switches: {sorted(olds) + ['row_blocks']}")
    if on is not None:
        if name == "prefetch":
            _prefetch = bool(on)
        elif name == "whole_tile_parts":
            _whole_tile_parts = bool(on)
        elif name == "rows_by_size":
            _rows_by_size = bool(on)
        elif name == "block_per_thread":
            _block_per_thread = bool(on)
        elif name == "fewer_row_parts":
            _fewer_row_parts = bool(on)
        elif name == "block_row_parts":
            _block_row_parts = bool(on)
        else:
            _copy_pixels = bool(on)
    return olds[name]


def _tune_indirect(min_cg=None, runs=None):
    """Set the fewest input channels per group of a tap-by-tap indirect float32 convolution
    (a huge value: none) and when kernel-row runs are taken (0 never, 1 by the rule above, 2
    whenever they can be): for A/B runs and for tests that compare the paths. Returns the
    previous (min_cg, runs)."""
    global _indirect_min_cg, _runs
    old = (_indirect_min_cg, _runs)
    if min_cg is not None:
        _indirect_min_cg = max(1, min_cg)
    if runs is not None:
        _runs = min(2, max(0, runs))
    return old


cdef inline size_t _rows_bytes(const conv_t* cv, Py_ssize_t m) noexcept nogil:
    """Scratch a packed part of m pixels takes after cv.skip: its A-row pointers (taps of
    them a pixel), then (but pointwise and indirect) its patch, or its pixels' copies."""
    if cv.copy_pixels:
        return align64(m * sizeof(float*)) + m * (cv.k + PIXEL_PAD) * sizeof(float)
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
        if cv.copy_pixels:
            pixel_copies(cv, r0, r1, rows, patch)
        elif cv.pointwise:
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


cdef int _conv_packed(conv_t* cv, Py_ssize_t parts, bint by_channels, int width,
                      void* ctx) noexcept nogil:
    """float32 through nnc's own GEMM tiles: pack every group's weights into the caller's
    workspace, then run the parts (of output rows, or of output channels when there are too
    few pixels to split rows). Each output value is the same sum in the same order whichever
    part computes it, so the bits do not depend on the split."""
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
    cv.ahead = 1 if _prefetch else 0
    if not by_channels:
        return nnc_parallel_for(parts, _part_packed, cv, ctx)
    cv.rowp = <const float**>(scratch + cv.skip)
    if cv.copy_pixels:
        pixel_copies(cv, 0, cv.rows, cv.rowp,
                     <float*>(scratch + cv.skip + align64(m * sizeof(float*))))
    elif cv.pointwise:
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
        if m * cv.k * sizeof(float) >= _part_bytes and cv.rows >= width:
            cv.rows_per_part = (cv.rows + width - 1) // width
        rc = nnc_parallel_for((cv.rows + cv.rows_per_part - 1) // cv.rows_per_part,
                              _im2col_part, cv, ctx)
        if rc != NNC_SUCCESS:
            return rc
        for i in range(m):
            cv.rowp[i] = patch + i * cv.k
    # Parts are one packed panel (chunk = its width, so each part's first column starts one)
    # by one block of output rows: about SPLIT_EVEN parts per thread, claimed one at a time,
    # so the threads end together (two parts of unequal panels ran 60/40); and at least a
    # block of rows a thread: parts are claimed in turn, panel by panel, so each thread tends
    # to stay on one block and reads about its share of the A rows, not all of them (one
    # block: every thread read every row, out of the L2 of the core that wrote it). 2 threads,
    # Xeon: 7x7 2048 -> 512 and 14x14 1024 -> 256 231 -> 250 and 228 -> 237 GFLOP/s
    # (weights cold), ResNet-50 6 %, Inception-V3 at 299 3 % faster.
    cv.chunk = nr
    panels = (cv.o + nr - 1) // nr
    blocks = min(cv.rows, max(width if _block_per_thread else 1,
                              (SPLIT_EVEN * width + panels - 1) // panels))
    if _whole_tile_parts and cv.rows * cv.wo <= nnc_sgemm_mr(cv.isa) and panels >= 2 * width:
        # Every pixel fits one tile (3x3 maps and smaller), and the layer streams its weights:
        # cut in rows, each panel would be read by two smaller tiles that waste rows (9 pixels
        # as 6 + 3 ran as 8 + 4), so parts are whole panels, two or more a thread. Inception-V3
        # at 75x75, 2 threads: its 1x1 768 -> 192 layers at 3x3 29.6 -> 24.8 us, 768 -> 160
        # 25.0 -> 18.6 us (weights cold; 1 thread: 32 us).
        blocks = 1
    cv.rows_per_part = (cv.rows + blocks - 1) // blocks
    blocks = (cv.rows + cv.rows_per_part - 1) // cv.rows_per_part
    return nnc_parallel_for_in_turn(panels * blocks, _channel_part_packed, cv, ctx)


cdef bint _cuts_evenly(Py_ssize_t rows, Py_ssize_t parts, int width) noexcept nogil:
    """Whether rows cut into about ``parts`` parts of whole rows, claimed by ``width``
    threads, give no thread more than 5 % over an even share."""
    cdef Py_ssize_t per = (rows + parts - 1) // parts
    cdef Py_ssize_t cut = (rows + per - 1) // per
    return ((cut + width - 1) // width) * per * width * 20 <= rows * 21


cdef Py_ssize_t _row_parts(Py_ssize_t rows, Py_ssize_t parts, int width) noexcept nogil:
    """How many parts of whole rows a few-pixel layer is cut into: ``parts`` (a multiple of
    ``width``) if they cut evenly (_cuts_evenly), else the most of fewer multiples of the width,
    down to one part a thread, that do (_fewer_row_parts); 0 if none does. 14 rows in four
    parts are 4 + 4 | 4 + 2, in two 7 | 7: MnasNet's and MobileNet-V2's 14x14 1x1 layers of
    64-96 output channels ran cut by channels instead, whose 2-3 panels do not split evenly
    over 2 threads (MnasNet's 576 -> 96 at 101 us; by rows in two parts 70 us, Xeon)."""
    cdef Py_ssize_t p = parts
    while p >= width and p > 0:
        if _cuts_evenly(rows, p, width):
            return p
        if not _fewer_row_parts:
            break
        p -= width
    return 0


def _row_parts_for(rows, parts, width):
    """_row_parts, for tests."""
    return _row_parts(rows, parts, width)


cdef int conv_opt(const nnc_cmd_param_t* p, nnc_tensor_t** inputs, int n_in,
                  nnc_tensor_t** outputs, int n_out, void* ctx) noexcept nogil:
    cdef conv_t cv
    cdef nnc_tensor_t* x
    cdef nnc_tensor_t* w
    cdef nnc_tensor_t* b
    cdef nnc_tensor_t* r
    cdef nnc_tensor_t* y
    cdef int d, dtype, itemsize
    cdef Py_ssize_t part_pixels, parts, even_parts, row_parts, i
    cdef int width
    cdef bint packed, few
    if not conv_operands_ok(inputs, n_in, outputs, n_out):
        return NNC_INVALID
    x, w, y = inputs[0], inputs[1], outputs[0]
    b = inputs[2] if n_in >= 3 else NULL
    dtype = y.datatype
    d = x.ndim - 3                      # 1 with a batch axis, 0 without
    cv.dtype = dtype
    cv.x, cv.w, cv.out = <char*>x.data, <const char*>w.data, <char*>y.data
    cv.bias = <const char*>b.data if b != NULL else NULL
    cv.n = x.dim[0] if d else 1
    cv.xs_n = x.stride[0] if d else 0
    cv.h, cv.wd, cv.c = x.dim[d], x.dim[d + 1], x.dim[d + 2]
    cv.xs_h, cv.xs_w = x.stride[d], x.stride[d + 1]
    cv.os_n = y.stride[0] if d else 0
    cv.ho, cv.wo, cv.o = y.dim[d], y.dim[d + 1], y.dim[d + 2]
    cv.os_h, cv.os_w = y.stride[d], y.stride[d + 1]
    cv.kh, cv.kw = <int>w.dim[1], <int>w.dim[2]
    cv.sh, cv.sw = p.stride[0], p.stride[1]
    cv.pt, cv.pl = p.pad[0], p.pad[1]
    cv.groups = p.groups
    cv.isa = cpu_isa()                  # one level for every part and pass: the same bits
    cv.act = (NNC_ACT_RELU if p.activation == ACTIVATION_RELU else
              NNC_ACT_CLAMP if p.activation == ACTIVATION_CLAMP else
              NNC_ACT_HSWISH if p.activation == ACTIVATION_HARD_SWISH else
              NNC_ACT_SILU if p.activation == ACTIVATION_SWISH else NNC_ACT_NONE)
    cv.lo, cv.hi = <float>p.a, <float>p.b
    r = inputs[3] if n_in == 4 else NULL
    cv.residual = <const char*>r.data if r != NULL else NULL
    cv.rs_n = r.stride[0] if r != NULL and d else 0
    cv.rs_h = r.stride[d] if r != NULL else 0
    cv.rs_w = r.stride[d + 1] if r != NULL else 0
    # Re-check what the loops rely on (the command's check did, but a C backend may be called
    # directly): shapes agree, the output lies where the window says, nothing overflows int.
    if cv.groups < 1 or cv.c % cv.groups or cv.o % cv.groups or cv.sh < 1 or cv.sw < 1:
        return NNC_INVALID
    cv.cg, cv.og = cv.c // cv.groups, cv.o // cv.groups
    cv.k = cv.kh * cv.kw * cv.cg
    if w.dim[0] != cv.o or w.dim[3] != cv.cg or (d and y.dim[0] != cv.n):
        return NNC_INVALID
    if (cv.ho != (cv.h + cv.pt + p.pad[2] - cv.kh) // cv.sh + 1
            or cv.wo != (cv.wd + cv.pl + p.pad[3] - cv.kw) // cv.sw + 1
            or cv.h + cv.pt + p.pad[2] < cv.kh or cv.wd + cv.pl + p.pad[3] < cv.kw):
        return NNC_INVALID
    if not (fits_int(cv.k) and fits_int(cv.o) and fits_int(cv.xs_w) and fits_int(cv.os_w)
            and fits_int(cv.n * cv.ho * cv.wo)):
        return NNC_INVALID
    cv.rows = cv.n * cv.ho
    itemsize = 4 if dtype == NNC_32F else 8
    if cv.rows == 0 or cv.o == 0 or cv.wo == 0:
        return NNC_SUCCESS
    if cv.k == 0:
        # No input channels: every sum is empty (BLAS refuses K = 0 with lda 0), so the output
        # is the bias, through the ReLU.
        if dtype == NNC_32F:
            empty_sums(&cv, <float*>cv.out)
        else:
            empty_sums(&cv, <double*>cv.out)
        return NNC_SUCCESS
    cv.pointwise = (cv.kh == 1 and cv.kw == 1 and cv.sh == 1 and cv.sw == 1 and cv.pt == 0
                    and cv.pl == 0 and p.pad[2] == 0 and p.pad[3] == 0)
    cv.depthwise = cv.groups > 1 and cv.cg == 1 and cv.og == 1
    width = parallel_width()
    if (cv.rows * cv.wo * cv.o * cv.k * (_depthwise_cost if cv.depthwise else 1) < _split_macs
            and cv.o * cv.k * itemsize < _split_weight_bytes):
        width = 1                       # too small to be worth waking a helper
    elif dtype == NNC_32F and parallel_threads() <= 1:
        # No helper may join: uncut, with the same bits (nnc's float32 kernels sum each output
        # in one order whatever the cut; tests/cmd/test_conv_split.py). float64's BLAS calls
        # keep the pool's cut, which sets their bits. Cut for one thread, the few-pixel layers
        # of Inception-V3 at 75x75 ran about 5 % slower.
        width = 1
    packed = dtype == NNC_32F and not cv.depthwise
    cv.indirect, cv.taps, cv.kt, cv.edge_q = INDIRECT_NONE, 1, cv.k, 0
    # Pixels a multiple of 4 KiB apart are copied apart (pixel_copies) where all the copies
    # stay small: a few-pixel layer split by channels copies every pixel once up front.
    cv.copy_pixels = (_copy_pixels and packed and cv.kh == 1 and cv.kw == 1 and cv.groups == 1
                      and cv.pt == 0 and cv.pl == 0 and p.pad[2] == 0 and p.pad[3] == 0
                      and (cv.sw * cv.xs_w * itemsize) % 4096 == 0 and cv.k >= 256
                      and cv.rows * cv.wo * (cv.k + PIXEL_PAD) * itemsize <= _copy_bytes)
    if packed and not cv.pointwise:
        for i in range(cv.wo):
            if i * cv.sw - cv.pl < 0 or i * cv.sw - cv.pl + cv.kw > cv.wd:
                cv.edge_q += 1
        if (_runs and cv.groups == 1 and cv.xs_w == cv.c and cv.kw * cv.c <= NNC_SGEMM_ZEROS
                and (_runs == 2 or cv.c < 16 or cv.edge_q * 8 <= cv.wo)):
            cv.indirect, cv.taps, cv.kt = INDIRECT_RUNS, cv.kh, cv.kw * cv.c
        elif cv.cg >= _indirect_min_cg and cv.cg <= NNC_SGEMM_ZEROS:
            cv.indirect, cv.taps, cv.kt = INDIRECT_TAPS, cv.kh * cv.kw, cv.cg
    if cv.pointwise or cv.indirect:
        # No patches to keep in cache: one GEMM per part (one for the whole image alone). A
        # part's row pointers (taps of them a pixel) stay within about _part_bytes, so a
        # large image does not take a workspace of pointers taps times its size.
        parts = min(width * _pointwise_parts if width > 1 else 1, cv.rows)
        parts = max(parts, min(cv.rows, (cv.rows * cv.wo * cv.taps * <Py_ssize_t>sizeof(
            float*) + _part_bytes - 1) // _part_bytes))
        if cv.copy_pixels:
            parts = max(parts, min(cv.rows, (cv.rows * cv.wo * (cv.k + PIXEL_PAD) * itemsize
                                             + _part_bytes - 1) // _part_bytes))
    else:
        part_pixels = _part_pixels
        if not cv.depthwise:
            part_pixels = max(part_pixels, _part_bytes // (cv.k * itemsize))
        parts = (cv.rows + max(1, part_pixels // cv.wo) - 1) // max(1, part_pixels // cv.wo)
    if width > 1 and parts < SPLIT_EVEN * width:
        # A few parts: a multiple of the width, so no thread waits at the end for a lone part.
        even_parts = (parts + width - 1) // width * width
        few = cv.rows * cv.wo < _part_pixels * width and cv.groups == 1 and cv.o >= 2 * 16
        row_parts = _row_parts(cv.rows, even_parts, width) if few else 0
        if few and not (packed and _rows_by_size and row_parts and (
                cv.rows * cv.wo > cv.o or (_block_row_parts and cv.rows * cv.wo
                                           >= row_parts * NNC_SGEMM_MC))):
            # Too few pixels for each part to be a GEMM worth the name (17x17, 8x8); with
            # nnc's own tiles, only where the weights outweigh the A rows (output channels >=
            # pixels): cut by rows each thread reads all the weights and half the rows, cut by
            # channels half the weights and all the rows, so the cut reads the smaller twice.
            # ResNet-50's 28x28 1x1 layers at 2 threads, Xeon (2 MiB L2), by rows: 248 -> 315
            # GFLOP/s against a channel cut of one block of rows, and the network 2 % faster
            # against one of a block a thread (_block_per_thread). Rows only where they cut
            # evenly: 17 rows as 5 + 5 | 5 + 2 left a thread idle for a sixth of the layer
            # (Inception-V3 at 299 6 % slower). Rows too where each part holds a block of tile
            # rows (NNC_SGEMM_MC pixels), whatever the weights (_block_row_parts): a channel cut
            # of a block a thread reads every panel on each thread as well, and ResNet-50's
            # 14x14 layers (7 | 7 rows) ran 2 % faster by rows (the network, Xeon); 8x8 maps
            # (Inception-V3) cut so would be parts of a tile or two, and stay cut by channels.
            if packed:
                return _conv_packed(&cv, 0, True, width, ctx)
            return split_channels(&cv, width, itemsize, ctx)
        parts = row_parts if row_parts else even_parts
    cv.rows_per_part = (cv.rows + parts - 1) // parts
    parts = (cv.rows + cv.rows_per_part - 1) // cv.rows_per_part
    if packed:
        return _conv_packed(&cv, parts, False, width, ctx)
    return conv_unpacked(&cv, parts, itemsize, ctx)


def _accept(Cmd cmd, list inputs, list outputs):
    """Channels contiguous in x and the output (any pixel strides); w and bias contiguous."""
    cdef nnc_tensor_t* io[5]
    cdef int n_in = tensor_views(inputs, io, 4)
    cdef int n_out = tensor_views(outputs, io + 4, 1)
    # The backend's own operand check, on the Tensors' C views: the two cannot disagree.
    return n_in >= 0 and n_out >= 0 and conv_operands_ok(io, n_in, io + 4, n_out)


def register():
    register_c_backend("CONVOLUTION", "CPU_OPT", conv_opt, NNC_32F | NNC_64F, False, _accept,
                       None, True)
