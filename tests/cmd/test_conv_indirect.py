"""CONVOLUTION's CPU_OPT float32 A rows (nnc/cmd/convolution/cpu_opt.pyx): copied patches
(im2col), pointers tap by tap into the input, or pointers to kernel-row runs of it (windows
crossing the left or right edge copied with zeros). The three sum each output over the same
values in the same order, so they must give the same bits, at every ISA level, cut into parts
or not, through every part plan (rows, pointwise-like, output channels for few pixels), with
the epilogue, and with NaN and infinity where the padding meets them; and CPU_REF within
tolerance."""

import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnc
from nnc.cmd.convolution import cpu_opt

# (min_cg, runs) for cpu_opt._tune_indirect: each path forced where it can run.
PATHS = {"im2col": (1 << 30, 0), "taps": (1, 0), "runs": (1 << 30, 2), "auto": (4, 1)}

# name: (input shape, weight shape, params)
CASES = {
    "first_layer_7x7_s2": ((1, 23, 21, 3), (40, 7, 7, 3), {"stride": 2, "padding": 3}),
    "3x3_p1_panels": ((2, 9, 11, 24), (72, 3, 3, 24), {"padding": 1}),
    "asymmetric_pad_stride": ((1, 10, 13, 16), (48, 3, 2, 16),
                              {"stride": (2, 1), "padding": (0, 2, 1, 0)}),
    "1x7": ((1, 9, 9, 20), (36, 1, 7, 20), {"padding": (0, 3, 0, 3)}),
    "7x1": ((1, 9, 9, 20), (36, 7, 1, 20), {"padding": (3, 0, 3, 0)}),
    "grouped_cg8": ((1, 12, 12, 32), (64, 3, 3, 8), {"padding": 1, "groups": 4}),
    "grouped_cg2": ((1, 12, 12, 8), (16, 3, 3, 2), {"padding": 1, "groups": 4}),
    "window_wider_than_input": ((1, 3, 3, 5), (8, 5, 5, 5), {"padding": 2}),
    "1x1_stride2": ((1, 13, 13, 40), (24, 1, 1, 40), {"stride": 2}),
    "few_pixels_by_channels": ((1, 8, 8, 48), (72, 3, 3, 48), {"padding": 1}),
    "one_column_out": ((1, 6, 3, 6), (16, 3, 3, 6), {"padding": (1, 0, 1, 0)}),
    # Taps in the padding for every pixel of a tile, skipped with finite weights.
    "1x1_map_3x3": ((2, 1, 1, 40), (48, 3, 3, 40), {"padding": 1}),
    "3x3_map_1x7": ((1, 3, 3, 24), (40, 1, 7, 24), {"padding": (0, 3, 0, 3)}),
}


def _run(ins, oshape, params, path, threads, activation="relu"):
    """The convolution on CPU_OPT with A rows made one way, into a channel slice of a wider
    NaN-filled buffer (which must stay NaN outside the slice)."""
    wide = np.full(oshape[:3] + (oshape[3] + 8,), np.nan, np.float32)
    c = oshape[3] + 8
    out = nnc.Tensor(wide).view(oshape, offset=5, strides=(oshape[1] * oshape[2] * c,
                                                          oshape[2] * c, c, 1))
    old = cpu_opt._tune_indirect(*PATHS[path])
    nnc.set_intra_op_threads(threads)
    try:
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_OPT", activation=activation,
                             **params), ins, [out])
    finally:
        nnc.set_intra_op_threads(None)
        cpu_opt._tune_indirect(*old)
    assert np.isnan(wide[..., :5]).all() and np.isnan(wide[..., 5 + oshape[3]:]).all()
    return wide[..., 5:5 + oshape[3]].copy()


def _out_shape(xs, ws, params):
    s = params.get("stride", 1)
    sh, sw = s if isinstance(s, tuple) else (s, s)
    p = params.get("padding", 0)
    pt, pl, pb, pr = p if isinstance(p, tuple) else (p,) * 4
    return (xs[0], (xs[1] + pt + pb - ws[1]) // sh + 1, (xs[2] + pl + pr - ws[2]) // sw + 1,
            ws[0])


def _inputs(xs, ws, oshape, residual, seed=3):
    rng = np.random.default_rng(seed)
    ins = [nnc.Tensor(rng.standard_normal(xs).astype(np.float32)),
           nnc.Tensor(rng.standard_normal(ws).astype(np.float32)),
           nnc.Tensor(rng.standard_normal(ws[0]).astype(np.float32))]
    if residual:
        ins.append(nnc.Tensor(rng.standard_normal(oshape).astype(np.float32)))
    return ins


def _paths_agree(ins, oshape, params, paths):
    """Each of ``paths`` at 1 and 2 threads, every size split (a pool of 2), gives the bits of
    im2col on one thread; returns those."""
    size = nnc.get_num_threads()
    old = cpu_opt._tune(1 << 19, 512, split_macs=0)      # every size is worth splitting
    try:
        nnc.set_num_threads(2)
        want = _run(ins, oshape, params, "im2col", 1)
        for path in paths:
            for threads in (1, 2):
                got = _run(ins, oshape, params, path, threads)
                np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32),
                                              err_msg=f"{path}, {threads} thread(s)")
    finally:
        cpu_opt._tune(*old)
        nnc.set_num_threads(size)
    return want


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_path_gives_the_same_bits(kernel_isa, case, residual):
    xs, ws, params = CASES[case]
    oshape = _out_shape(xs, ws, params)
    ins = _inputs(xs, ws, oshape, residual)
    want = _paths_agree(ins, oshape, params, PATHS)
    ref = nnc.Tensor.zeros(oshape, dtype="float32")
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF", activation="relu", **params), ins,
                 [ref])
    k = ws[1] * ws[2] * ws[3]
    np.testing.assert_allclose(want, ref.numpy(), rtol=1e-5, atol=k * 4e-6)


def _random_geometries(n, seed=29):
    """n (input shape, weight shape, params) with any window, stride and padding on small
    images: windows inside, across either edge, or wider than the image."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        h, w = (int(v) for v in rng.integers(1, 10, 2))
        kh, kw = (int(v) for v in rng.integers(1, 6, 2))
        sh, sw = (int(v) for v in rng.integers(1, 4, 2))
        pt, pl, pb, pr = (int(v) for v in rng.integers(0, 4, 4))
        if h + pt + pb < kh or w + pl + pr < kw:
            continue
        c = int(rng.choice([3, 4, 8]))
        o = int(rng.integers(8, 41))
        out.append(((1, h, w, c), (o, kh, kw, c),
                    {"stride": (sh, sw), "padding": (pt, pl, pb, pr)}))
    return out


@pytest.mark.parametrize("case", _random_geometries(80))
def test_random_geometries_give_the_im2col_bits(case):
    """The row pointers of both indirect paths (the span of columns whose window lies in the
    image, the rest zeros or copies) against the copied patches, bit for bit."""
    xs, ws, params = case
    oshape = _out_shape(xs, ws, params)
    _paths_agree(_inputs(xs, ws, oshape, False), oshape, params, ("taps", "runs"))


@pytest.mark.parametrize("case", ["few_pixels_by_channels", "3x3_p1_panels", "1x1_stride2",
                                  "grouped_cg8", "1x1_map_3x3"])
def test_fetching_next_panels_ahead_leaves_the_bits(kernel_isa, case):
    """The tiles fetch each next weight panel ahead, past a part's own columns too: a
    fetch is only a hint, so every part plan gives the bits it gives without."""
    xs, ws, params = CASES[case]
    oshape = _out_shape(xs, ws, params)
    ins = _inputs(xs, ws, oshape, True)
    size = nnc.get_num_threads()
    old = cpu_opt._tune(1 << 19, 512, split_macs=0)
    was = cpu_opt._switch("prefetch", False)
    try:
        nnc.set_num_threads(2)
        want = _run(ins, oshape, params, "auto", 1)
        cpu_opt._switch("prefetch", True)
        for threads in (1, 2, 3):
            nnc.set_num_threads(threads)
            got = _run(ins, oshape, params, "auto", threads)
            np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32),
                                          err_msg=f"{threads} thread(s)")
    finally:
        cpu_opt._switch("prefetch", was)
        cpu_opt._tune(*old)
        nnc.set_num_threads(size)


@pytest.mark.parametrize("shape,o,stride,pixel", [
    ((1, 7, 7, 1024), 40, 1, 1024),        # 4 KiB apart: copied, split by channels at 2
    ((1, 9, 12, 256), 72, 1, 1024),        # a slice of a 1024-channel buffer (a Concat's)
    ((1, 13, 13, 512), 48, 2, 1024),       # strided pixels: 8 KiB apart
    ((2, 6, 5, 768), 24, 1, 1024),         # two images
], ids=["dense_1024", "slice_of_1024", "strided_512", "two_images"])
def test_pixels_4k_apart_copied_apart_give_the_same_bits(kernel_isa, shape, o, stride, pixel):
    """Pointwise pixels whose stride is a multiple of 4 KiB are copied apart before the tiles
    read them (their rows would share one L1 set): same values, same sums, same bits, cut
    into parts or not, with the residual as the output too."""
    n, h, w, c = shape
    rng = np.random.default_rng(11)
    buf = rng.standard_normal((n, h, w, pixel)).astype(np.float32)
    x = nnc.Tensor(buf).view(shape, offset=0, strides=(h * w * pixel, w * pixel, pixel, 1))
    wt = nnc.Tensor(rng.standard_normal((o, 1, 1, c)).astype(np.float32))
    b = nnc.Tensor(rng.standard_normal(o).astype(np.float32))
    oshape = (n, (h - 1) // stride + 1, (w - 1) // stride + 1, o)
    res = rng.standard_normal(oshape).astype(np.float32)
    size = nnc.get_num_threads()
    old = cpu_opt._tune(1 << 19, 512, split_macs=0)
    was = cpu_opt._switch("copies", False)
    got = {}
    try:
        nnc.set_num_threads(2)
        for copies in (False, True):
            cpu_opt._switch("copies", copies)
            for threads in (1, 2):
                nnc.set_intra_op_threads(threads)
                for part_bytes in (1 << 19, 1 << 12):
                    cpu_opt._tune(part_bytes, 512, split_macs=0)
                    out = nnc.Tensor(res.copy())
                    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_OPT", stride=stride,
                                         activation="relu"), [x, wt, b, out], [out])
                    got[copies, threads, part_bytes] = out.numpy().view(np.int32).copy()
    finally:
        nnc.set_intra_op_threads(None)
        cpu_opt._switch("copies", was)
        cpu_opt._tune(*old)
        nnc.set_num_threads(size)
    want = got[False, 1, 1 << 19]
    for key, v in got.items():
        np.testing.assert_array_equal(v, want, err_msg=str(key))
    ref = nnc.Tensor(res.copy())
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF", stride=stride, activation="relu"),
                 [x, wt, b, ref], [ref])
    np.testing.assert_allclose(want.view(np.float32), ref.numpy(), rtol=1e-5, atol=c * 4e-6)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_nan_and_infinity_meet_the_padding_the_same_way(kernel_isa, path):
    """The padding's zeros are multiplied like any input: an infinite weight over the padding
    makes NaN (0 * inf) in every path, a NaN input spreads only to the windows it is in."""
    xs, ws, params = (1, 7, 9, 4), (20, 3, 3, 4), {"padding": 1, "stride": (1, 2)}
    oshape = _out_shape(xs, ws, params)
    ins = _inputs(xs, ws, oshape, False, seed=5)
    ins[1].numpy()[3, 0, 0, 1] = np.inf                  # meets the top and left padding
    ins[1].numpy()[7, 2, 2, 0] = -np.inf
    ins[0].numpy()[0, 3, 4, 2] = np.nan
    want = _run(ins, oshape, params, "im2col", 1, activation=None)
    got = _run(ins, oshape, params, path, 1, activation=None)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    assert np.isnan(got[0, 0, 0, 3])                     # 0 * inf from the padding
    assert np.isinf(got[0, 5, 1, 3])                     # its window is inside the image
    assert np.isnan(got[0, 3, 2, 0]) and not np.isnan(got[0, 0, 0, 0])


def test_weights_made_infinite_between_runs_are_multiplied_by_the_padding(kernel_isa):
    """Whether padding taps may be skipped is decided from the weights each call packs (or
    once for frozen ones, which cannot change): a weight made infinite after a first run
    makes 0 * inf = NaN where its tap meets the padding, as CPU_REF does."""
    rng = np.random.default_rng(2)
    x = nnc.Tensor(rng.standard_normal((1, 1, 1, 16)).astype(np.float32))
    w = nnc.Tensor(rng.standard_normal((32, 3, 3, 16)).astype(np.float32))
    y, ref = (nnc.Tensor.zeros((1, 1, 1, 32), dtype="float32") for _ in range(2))
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", backend="CPU_OPT", padding=1), [x, w], [y])
    g.run()
    assert np.isfinite(y.numpy()).all()
    w.numpy()[5, 0, 0, 3] = np.inf                      # a corner tap: padding for 1x1
    g.run()
    with np.errstate(invalid="ignore"):                  # CPU_REF's NumPy meets 0 * inf
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF", padding=1), [x, w], [ref])
    assert np.isnan(y.numpy()[0, 0, 0, 5]) and np.isnan(ref.numpy()[0, 0, 0, 5])
    np.testing.assert_allclose(np.delete(y.numpy(), 5, axis=3),
                               np.delete(ref.numpy(), 5, axis=3), rtol=1e-5, atol=1e-4)


def test_strided_pixels_and_thin_inputs_take_a_path_that_reads_them_right(kernel_isa):
    """An input whose pixels are wider than its channels (a channel slice of a concat's
    buffer) cannot be read in runs: taps or patches read it, and the bits agree."""
    rng = np.random.default_rng(11)
    buf = rng.standard_normal((1, 10, 10, 30)).astype(np.float32)
    x = nnc.Tensor(buf).view((1, 10, 10, 6), offset=7, strides=(3000, 300, 30, 1))
    w = nnc.Tensor(rng.standard_normal((24, 3, 3, 6)).astype(np.float32))
    b = nnc.Tensor(rng.standard_normal(24).astype(np.float32))
    oshape = (1, 10, 10, 24)
    outs = {path: _run([x, w, b], oshape, {"padding": 1}, path, 1) for path in PATHS}
    for path, got in outs.items():
        np.testing.assert_array_equal(got.view(np.int32), outs["im2col"].view(np.int32),
                                      err_msg=path)
    ref = nnc.Tensor.zeros(oshape, dtype="float32")
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF", activation="relu", padding=1),
                 [nnc.Tensor(x.numpy().copy()), w, b], [ref])
    np.testing.assert_allclose(outs["auto"], ref.numpy(), rtol=1e-5, atol=1e-4)


def test_a_large_image_takes_a_bounded_workspace_of_row_pointers():
    """An indirect part holds taps row pointers a pixel: parts are cut so that they stay
    within about 512 KiB, so a 1024x1024 image (3 million pointers in one part) does not take
    tens of MB of workspace. Measured as the child process's peak RSS across the call."""
    code = textwrap.dedent("""
        import resource, numpy as np, nnc
        nnc.set_intra_op_threads(1)
        x = nnc.Tensor(np.ones((1, 1024, 1024, 4), np.float32))
        w = nnc.Tensor(np.ones((8, 3, 3, 4), np.float32))
        y = nnc.Tensor.zeros((1, 1024, 1024, 8), dtype="float32")
        small = nnc.Tensor(np.ones((1, 8, 8, 4), np.float32))
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=1), [small, w],
                     [nnc.Tensor.zeros((1, 8, 8, 8), dtype="float32")])
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        nnc.cmd_exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y])
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert float(y.numpy()[0, 5, 5, 0]) == 36.0 and float(y.numpy()[0, 0, 0, 0]) == 16.0
        print(grown)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) < 8 * 1024, out.stdout    # KiB


def _sgemm_cimports(text):
    """The names a module's source cimports from nnc.cmd.gemm.sgemm_kernel."""
    names = set()
    for group in re.findall(r"from nnc\.cmd\.gemm\.sgemm_kernel cimport (\([^)]*\)|[^\n]*)",
                            text):
        names.update(n.strip() for n in group.strip("()").replace("\n", " ").split(","))
    return names - {""}


def test_padding_zeros_are_taken_where_the_tiles_compare_against_them():
    """sgemm_kernel.h's nnc_sgemm_zeros is a static array, one copy in each extension that
    includes the header, and the tiles skip a tap whose row pointers are all their own
    extension's copy. Its address taken in another extension would never be skipped (the same
    values, at the cost of multiplying zeros, which no result shows): so a module that names
    it also runs the tiles (cpu_opt.pyx, not conv_unpacked.pyx or conv_patches.pyx)."""
    root = pathlib.Path(nnc.__file__).parent
    takers = {}
    for path in sorted(root.rglob("*.pyx")):
        names = _sgemm_cimports(path.read_text(encoding="utf-8"))
        if "nnc_sgemm_zeros" in names:
            takers[path.relative_to(root).as_posix()] = names
    assert "cmd/convolution/cpu_opt.pyx" in takers, sorted(takers)
    for module, names in takers.items():
        assert any(n.startswith("nnc_sgemm_packed") and n != "nnc_sgemm_packed_floats"
                   for n in names), f"{module} takes nnc_sgemm_zeros but runs no tiles"
    # The check reads what it is meant to read: conv_unpacked.pyx's own cimports, parsed.
    assert {"NNC_ACT_CLAMP", "nnc_epilogue_t"} <= _sgemm_cimports(
        (root / "cmd/convolution/conv_unpacked.pyx").read_text(encoding="utf-8"))
