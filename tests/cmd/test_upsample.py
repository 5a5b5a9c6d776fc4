"""UPSAMPLE (nnc/cmd/upsample/): CPU_REF against NNC's formulas written out per pixel, CPU_OPT
against CPU_REF at every kernel ISA level, and calls it refuses."""

import math

import numpy as np
import pytest

import nnc
from nnc.cmd.command import cmd_backends_for


def upsample_numpy(x, ho, wo, kind, align):
    """NNC's upsample per output pixel (nnc clamps bilinear's source at 0)."""
    n, h, w, c = x.shape
    x = x.astype(np.float64)
    rh = (h - 1) / max(1, ho - 1) if align else h / ho
    rw = (w - 1) / max(1, wo - 1) if align else w / wo
    y = np.zeros((n, ho, wo, c))
    for i in range(ho):
        for j in range(wo):
            if kind == "nearest":
                si = min(math.floor(i * rh + 0.5) if align else math.floor((i + 0.5) * rh), h - 1)
                sj = min(math.floor(j * rw + 0.5) if align else math.floor((j + 0.5) * rw), w - 1)
                y[:, i, j] = x[:, si, sj]
                continue
            sy = i * rh if align else max((i + 0.5) * rh - 0.5, 0)
            sx = j * rw if align else max((j + 0.5) * rw - 0.5, 0)
            y0, x0 = min(math.floor(sy), h - 1), min(math.floor(sx), w - 1)
            y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
            fy, fx = sy - y0, sx - x0
            y[:, i, j] = (x[:, y0, x0] * (1 - fy) * (1 - fx) + x[:, y0, x1] * (1 - fy) * fx
                          + x[:, y1, x0] * fy * (1 - fx) + x[:, y1, x1] * fy * fx)
    return y


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["nearest", "bilinear"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("sizes", [(4, 5, 8, 10), (3, 3, 7, 5), (5, 6, 2, 3), (1, 1, 3, 4),
                                   (6, 4, 1, 1), (2, 3, 2, 3)])
def test_upsample_every_backend_matches_the_definition(kernel_isa, dtype, kind, align, sizes):
    h, w, ho, wo = sizes
    rng = np.random.default_rng(h * 7 + w)
    x = rng.standard_normal((2, h, w, 3)).astype(dtype)
    want = upsample_numpy(x, ho, wo, kind, align)
    tol = 1e-6 if dtype == "float32" else 1e-13
    for b in nnc.backends("UPSAMPLE", device="cpu"):
        out = np.full((2, ho, wo, 3), np.nan, dtype)
        nnc.cmd_exec(nnc.Cmd("UPSAMPLE", type=kind, align_corners=align, backend=b), [x], [out])
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol, err_msg=b)
    # [H, W, C]: the same without the batch.
    out = np.zeros((ho, wo, 3), dtype)
    nnc.cmd_exec(nnc.Cmd("UPSAMPLE", type=kind, align_corners=align), [x[0]], [out])
    np.testing.assert_allclose(out, want[0], rtol=tol, atol=tol)


def test_upsample_cpu_opt_runs_in_parts_and_nearest_is_a_copy():
    x = np.random.default_rng(1).standard_normal((3, 40, 33, 48)).astype(np.float32)
    for kind in ("nearest", "bilinear"):
        outs = []
        for b in ("CPU_REF", "CPU_OPT"):
            out = np.zeros((3, 80, 70, 48), np.float32)
            nnc.cmd_exec(nnc.Cmd("UPSAMPLE", type=kind, backend=b), [x], [out])
            outs.append(out)
        if kind == "nearest":
            np.testing.assert_array_equal(outs[1], outs[0])
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("params, shapes, fragment", [
    ({}, None, "UPSAMPLE needs type="),
    ({"type": "cubic"}, None, "UPSAMPLE needs type="),
    ({"type": "nearest", "align_corners": 1}, None, "align_corners must be a bool"),
    ({"type": "nearest", "scale": 2}, None, "unknown parameters ['scale']"),
    ({"type": "nearest"}, [(1, 2, 2, 3), (1, 4, 4, 2)], "keep the batch and channels"),
    ({"type": "nearest"}, [(2, 2), (4, 4)], "[N, H, W, C] or [H, W, C]"),
    ({"type": "bilinear"}, [(1, 0, 2, 3), (1, 4, 4, 3)], "H and W must be >= 1"),
])
def test_upsample_bad_calls(params, shapes, fragment):
    with pytest.raises(nnc.CommandError) as info:
        cmd = nnc.Cmd("UPSAMPLE", **params)
        arrays = [np.zeros(s, np.float32) for s in shapes]
        nnc.cmd_exec(cmd, arrays[:1], arrays[1:])
    assert fragment in str(info.value)
    with pytest.raises(nnc.CommandError, match="floating-point"):
        nnc.cmd_exec(nnc.Cmd("UPSAMPLE", type="nearest"), [np.zeros((2, 2, 1), np.int32)],
                     [np.zeros((4, 4, 1), np.int32)])


@pytest.mark.parametrize("kind", ["nearest", "bilinear"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("batch", [(), (2,)])
def test_upsample_reads_nchw_tensors_by_their_format(kernel_isa, kind, align, batch):
    """An NCHW tensor is [.., C, H, W]: the same image as NHWC, upsampled on H and W (CPU_REF;
    the C backend takes NHWC only), and Graph.simplify moves the node to NHWC and CPU_OPT."""
    x = np.random.default_rng(5).standard_normal(batch + (5, 4, 3)).astype(np.float32)
    want = np.zeros(batch + (9, 7, 3), np.float32)
    nnc.cmd_exec(nnc.Cmd("UPSAMPLE", type=kind, align_corners=align), [x], [want])
    xc = nnc.Tensor(np.ascontiguousarray(np.moveaxis(x, -1, -3)), format="NCHW")
    out = nnc.Tensor.zeros(batch + (3, 9, 7), format="NCHW")
    cmd = nnc.Cmd("UPSAMPLE", type=kind, align_corners=align)
    assert [b.name for b in cmd_backends_for(cmd, [xc], [out])] == ["CPU_REF"]
    nnc.cmd_exec(cmd, [xc], [out])
    np.testing.assert_allclose(np.moveaxis(out.numpy(), -3, -1), want, rtol=1e-6, atol=1e-6)
    g = nnc.Graph()
    g.exec(nnc.Cmd("UPSAMPLE", type=kind, align_corners=align), [xc], [out])
    assert g.simplify() == 1 and len(g) == 3            # FORMAT_TRANSFORM on each side
    out.numpy()[...] = np.nan
    g.run()
    np.testing.assert_allclose(np.moveaxis(out.numpy(), -3, -1), want, rtol=1e-6, atol=1e-6)


def test_upsample_refuses_an_output_of_another_format():
    x = nnc.Tensor.zeros((3, 2, 2), format="NCHW")
    with pytest.raises(nnc.CommandError, match="output 0 is NHWC but the input is NCHW"):
        nnc.cmd_exec(nnc.Cmd("UPSAMPLE", type="nearest"), [x], [nnc.Tensor.zeros((4, 4, 3))])
    with pytest.raises(nnc.CommandError, match="keep the batch and channels"):
        nnc.cmd_exec(nnc.Cmd("UPSAMPLE", type="nearest"), [x],
                     [nnc.Tensor.zeros((4, 4, 3), format="NCHW")])
