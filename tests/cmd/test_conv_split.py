"""CONVOLUTION's CPU_OPT cut into parts (nnc/cmd/convolution/cpu_opt.pyx): a few-pixel layer
into packed panels of output channels by blocks of output rows (its patches made in parts),
a pointwise layer into two parts per thread, others into blocks of rows. Each output is the
same sum in the same order whichever part computes it, so every cut gives the bits of the
uncut call (a pool of one thread), with the bias, the residual and the activation applied per
part, into an output that is a channel slice of a wider buffer; and CPU_REF within tolerance."""

import numpy as np
import pytest

import nnc
from nnc.cmd.convolution import cpu_opt

# (input, weights, params): 72 output channels are two full 32-wide panels and a half one;
# the 17x17 patches (665 KB) are made in parts too.
CASES = {
    "panels_by_row_blocks_3x3_17x17": ((1, 17, 17, 64), (72, 3, 3, 64), {"padding": 1}),
    "panels_pointwise_8x8": ((1, 8, 8, 200), (330, 1, 1, 200), {}),
    "rows_pointwise_28x28": ((1, 28, 28, 32), (72, 1, 1, 32), {}),
    "rows_3x3_35x35": ((1, 35, 35, 24), (40, 3, 3, 24), {"padding": 1}),
    "rows_depthwise_28x28": ((1, 28, 28, 48), (48, 3, 3, 1), {"padding": 1, "groups": 48}),
    # 9 pixels, one tile: 7 panels (6 full, a half) as whole panels at widths 2 and 3; 5
    # panels at width 3 (fewer than two a thread) by blocks of rows again.
    "whole_panels_pointwise_3x3": ((1, 3, 3, 256), (200, 1, 1, 256), {}),
    "whole_panels_3x3_3x3": ((1, 3, 3, 64), (160, 3, 3, 64), {"padding": 1}),
    # 49 pixels, weights outweighing them: one block of rows in the tiles (nnc_sgemm_block_rows)
    "one_row_block_pointwise_7x7": ((1, 7, 7, 96), (600, 1, 1, 96), {}),
    # 196 pixels, 40 channels: blocks of 48 rows, the short last one joined to the one before
    "joined_row_block_pointwise_14x14": ((1, 14, 14, 64), (40, 1, 1, 64), {}),
    # 14 rows, 96 channels (3 panels): by rows in one part a thread (four parts are uneven)
    "row_halves_pointwise_14x14": ((1, 14, 14, 120), (96, 1, 1, 120), {}),
    # 196 pixels, 256 channels: by rows all the same, each part 98 pixels (a block of tiles)
    "block_row_parts_3x3_14x14": ((1, 14, 14, 32), (256, 3, 3, 32), {"padding": 1}),
}


def _conv(backend, ins, oshape, threads, **params):
    wide = np.full(oshape[:3] + (oshape[3] + 8,), np.nan, np.float32)
    c = oshape[3] + 8
    out = nnc.Tensor(wide).view(oshape, offset=5, strides=(oshape[1] * oshape[2] * c,
                                                          oshape[2] * c, c, 1))
    nnc.set_intra_op_threads(threads)
    try:
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=backend, activation="relu", **params), ins,
                     [out])
    finally:
        nnc.set_intra_op_threads(None)
    assert np.isnan(wide[..., :5]).all() and np.isnan(wide[..., 5 + oshape[3]:]).all()
    return wide[..., 5:5 + oshape[3]].copy()


def _inputs(case, seed, residual=False):
    """The case's input, weights, bias (and residual), and the output's shape."""
    xs, ws, _ = CASES[case]
    rng = np.random.default_rng(seed)
    oshape = xs[:3] + (ws[0],)
    ins = [rng.standard_normal(xs).astype(np.float32),
           rng.standard_normal(ws).astype(np.float32),
           rng.standard_normal(ws[0]).astype(np.float32)]
    if residual:
        ins.append(rng.standard_normal(oshape).astype(np.float32))
    return ins, oshape


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_cut_gives_the_uncut_bits(kernel_isa, case, residual):
    xs, ws, params = CASES[case]
    ins, oshape = _inputs(case, 7, residual)
    size = nnc.get_num_threads()
    old = cpu_opt._tune(1 << 19, 512, split_macs=0)      # every size is worth splitting
    try:
        nnc.set_num_threads(1)                           # parallel_width 1: one part
        whole = _conv("CPU_OPT", ins, oshape, 1, **params)
        for width in (2, 3):
            nnc.set_num_threads(width)
            for threads in (1, width):
                cut = _conv("CPU_OPT", ins, oshape, threads, **params)
                np.testing.assert_array_equal(cut.view(np.int32), whole.view(np.int32))
    finally:
        cpu_opt._tune(*old)
        nnc.set_num_threads(size)
    ref = _conv("CPU_REF", ins, oshape, None, **params)
    k = ws[1] * ws[2] * ws[3]
    np.testing.assert_allclose(whole, ref, rtol=1e-5, atol=k * 4e-6)


@pytest.mark.parametrize("case", sorted(CASES))
def test_row_blocks_and_cut_rules_keep_the_bits(kernel_isa, case):
    """How the tiles block their rows (one block where the weights outweigh the rows, a short
    last block joined), whether a few-pixel layer is cut by rows or channels, and into how many
    blocks of rows a channel cut goes change which rows share a pass over a panel, never a
    sum's order: the bits are those of the old rules."""
    params = CASES[case][2]
    ins, oshape = _inputs(case, 11)
    size = nnc.get_num_threads()
    old = cpu_opt._tune(1 << 19, 512, split_macs=0)
    rules = ("row_blocks", "rows_by_size", "block_per_thread", "fewer_row_parts",
             "block_row_parts")
    was = {name: cpu_opt._switch(name) for name in rules}
    try:
        outs = []
        for on in (True, False):
            for name in rules:
                cpu_opt._switch(name, on)
            for width in (1, 2):
                nnc.set_num_threads(width)
                outs.append(_conv("CPU_OPT", ins, oshape, width, **params))
    finally:
        cpu_opt._tune(*old)
        for name, on in was.items():
            cpu_opt._switch(name, on)
        nnc.set_num_threads(size)
    for out in outs[1:]:
        np.testing.assert_array_equal(out.view(np.int32), outs[0].view(np.int32))


@pytest.mark.parametrize("rows,parts,width,want", [
    (28, 4, 2, 4),      # 7 rows a part
    (8, 4, 2, 4),
    (14, 4, 2, 2),      # 4 + 4 | 4 + 2 is uneven, 7 | 7 is not
    (7, 4, 2, 0),       # 2 + 2 | 2 + 1 and 4 | 3: a channel cut
    (17, 4, 2, 0),      # 5 + 5 | 5 + 2 and 9 | 8
    (12, 6, 3, 6),
    (15, 6, 3, 3),      # 3 + 3 + 3 | 3 + 3 + 0 against 5 | 5 | 5
])
def test_a_few_pixel_layer_tries_fewer_row_parts_before_a_channel_cut(rows, parts, width, want):
    assert cpu_opt._row_parts_for(rows, parts, width) == want
    old = cpu_opt._switch("fewer_row_parts", False)
    try:
        assert cpu_opt._row_parts_for(rows, parts, width) == (want if want == parts else 0)
    finally:
        cpu_opt._switch("fewer_row_parts", old)
