"""CONVOLUTION_TRANSPOSE (nnc/cmd/convolution/conv_transpose.py, conv_transpose_opt.pyx): NNC's
forward.tests.c cases, CPU_REF against a per-pixel scatter written out, CPU_OPT against CPU_REF
at every kernel ISA level, and the calls it refuses."""

import numpy as np
import pytest

import nnc
from nnc.cmd.convolution import conv_transpose_opt

NAME = "CONVOLUTION_TRANSPOSE"

# forward.tests.c: a = 1 everywhere, w[i] = i, bias = 1; hint stride s, no border.
_NNC_CASES = {
    # "convolution transpose of 3x3 on 2x2 with given weights"
    (1, 1): [10., 21., 25., 14.,
             25., 53., 61., 33.,
             37., 77., 85., 45.,
             22., 45., 49., 26.],
    # "... and group of 2"
    (2, 1): [1., 10., 2., 20., 4., 22., 3., 12.,
             4., 22., 9., 45., 13., 49., 8., 26.,
             10., 28., 21., 57., 25., 61., 14., 32.,
             7., 16., 14., 32., 16., 34., 9., 18.],
    # "... and group of 2, stride of 2"
    (2, 2): [1., 10., 2., 11., 3., 21., 2., 11., 3., 12.,
             4., 13., 5., 14., 9., 27., 5., 14., 6., 15.,
             7., 25., 9., 27., 17., 53., 9., 27., 11., 29.,
             4., 13., 5., 14., 9., 27., 5., 14., 6., 15.,
             7., 16., 8., 17., 15., 33., 8., 17., 9., 18.],
}

# The same three in NCHW (the cases named ", NCHW"): run on NCHW tensors as upstream builds them
# (test_nnc_nchw_cases_on_nchw_tensors_exactly), and on the NHWC transposes of NNC's tensors
# (w [2, 1, 3, 3] and [2, 3, 3, 1] hold the same floats) with the output transposed back.
_NNC_CASES_NCHW = {
    (1, 1): [10., 21., 25., 14., 25., 53., 61., 33., 37., 77., 85., 45., 22., 45., 49., 26.],
    (2, 1): [1., 2., 4., 3., 4., 9., 13., 8., 10., 21., 25., 14., 7., 14., 16., 9.,
             10., 20., 22., 12., 22., 45., 49., 26., 28., 57., 61., 32., 16., 32., 34., 18.],
    (2, 2): [1., 2., 3., 2., 3., 4., 5., 9., 5., 6., 7., 9., 17., 9., 11., 4., 5., 9., 5., 6.,
             7., 8., 15., 8., 9.,
             10., 11., 21., 11., 12., 13., 14., 27., 14., 15., 25., 27., 53., 27., 29.,
             13., 14., 27., 14., 15., 16., 17., 33., 17., 18.],
}


def _nnc_case(groups, stride):
    """CMD_CONVOLUTION_TRANSPOSE_FORWARD(groups, count=groups, 0, 3, 3, 2) on a 2x2x2 of ones."""
    a = np.ones((2, 2, 2), np.float32)
    w = np.arange(18, dtype=np.float32).reshape(2, 3, 3, 1)
    bias = np.ones(groups, np.float32)
    side = 2 + 2 * stride - stride + 1 if stride == 2 else 4   # (2 - 1) * s + 3
    return a, w, bias, (side, side, groups)


@pytest.mark.parametrize("backend", ["CPU_REF", "CPU_OPT"])
@pytest.mark.parametrize("case", sorted(_NNC_CASES))
def test_nnc_forward_cases_exactly(backend, case):
    groups, stride = case
    a, w, bias, shape = _nnc_case(groups, stride)
    cmd = nnc.Cmd(NAME, groups=groups, stride=stride, backend=backend)
    out = np.full(shape, np.nan, np.float32)
    nnc.cmd_exec(cmd, [a, w, bias], [out])
    np.testing.assert_array_equal(out.reshape(-1), np.float32(_NNC_CASES[case]))
    # NCHW: NNC's tensors are these transposed; the output transposed back to [C, H, W].
    np.testing.assert_array_equal(out.transpose(2, 0, 1).reshape(-1),
                                  np.float32(_NNC_CASES_NCHW[case]))


@pytest.mark.parametrize("case", sorted(_NNC_CASES_NCHW))
def test_nnc_nchw_cases_on_nchw_tensors_exactly(case):
    """The ", NCHW" cases as upstream builds them: a [2, 2, 2], w [2, O/g = 1, 3, 3], bias and
    the output NCHW tensors (CPU_REF reads them; the C backend takes NHWC only)."""
    groups, stride = case
    side = 5 if stride == 2 else 4
    a = nnc.Tensor.empty((2, 2, 2), format="NCHW")
    b = nnc.Tensor.empty((groups, side, side), format="NCHW")
    cmd = nnc.Cmd(NAME, groups=groups, stride=stride)
    w = nnc.Tensor.empty((2, 1, 3, 3), format="NCHW")
    bias = nnc.Tensor.empty((groups,), format="NCHW")
    w.numpy().reshape(-1)[:] = np.arange(3 * 3 * 2)
    a.numpy()[...] = 1
    bias.numpy()[...] = 1
    nnc.cmd_exec(cmd, [a, w, bias], [b])
    c = nnc.Tensor(np.float32(_NNC_CASES_NCHW[case]).reshape(groups, side, side), format="NCHW")
    assert nnc.tensor_eq(b, c), "convolution transpose output should be exactly the same"


def convt_numpy(x, w, bias, stride, pad, groups, dilation, out_hw):
    """The definition scattered pixel by pixel, tap by tap (float64)."""
    n, h, wd, c = x.shape
    _, kh, kw, og = w.shape
    cg = c // groups
    ho, wo = out_hw
    y = np.zeros((n, ho, wo, og * groups))
    for ih in range(h):
        for iw in range(wd):
            for i in range(kh):
                for j in range(kw):
                    oh = ih * stride[0] - pad[0] + i * dilation[0]
                    ow = iw * stride[1] - pad[1] + j * dilation[1]
                    if not (0 <= oh < ho and 0 <= ow < wo):
                        continue
                    for g in range(groups):
                        xs = x[:, ih, iw, g * cg:(g + 1) * cg].astype(np.float64)
                        y[:, oh, ow, g * og:(g + 1) * og] += xs @ w[g * cg:(g + 1) * cg, i, j]
    if bias is not None:
        y += bias
    return y


def _out_hw(h, wd, kh, kw, stride, pad, dilation, extra):
    return ((h - 1) * stride[0] + (kh - 1) * dilation[0] + 1 - pad[0] - pad[2] + extra[0],
            (wd - 1) * stride[1] + (kw - 1) * dilation[1] + 1 - pad[1] - pad[3] + extra[1])


_SHAPES = [
    # n, h, w, c, o, kh, kw, stride, pad, groups, dilation, output_padding
    (2, 5, 4, 3, 4, 3, 3, (1, 1), (0, 0, 0, 0), 1, (1, 1), (0, 0)),
    (2, 5, 4, 4, 6, 3, 3, (2, 2), (1, 1, 1, 1), 1, (1, 1), (1, 1)),
    (1, 6, 7, 6, 4, 4, 4, (2, 2), (1, 1, 1, 1), 2, (1, 1), (0, 0)),
    (3, 3, 5, 4, 8, 2, 3, (2, 3), (0, 1, 2, 0), 4, (1, 1), (1, 2)),
    (1, 4, 4, 2, 3, 3, 3, (1, 1), (2, 2, 2, 2), 1, (2, 2), (1, 0)),
    (2, 4, 3, 3, 3, 3, 2, (3, 2), (1, 0, 0, 1), 3, (2, 3), (2, 0)),
    (1, 1, 1, 5, 2, 1, 1, (1, 1), (0, 0, 0, 0), 1, (1, 1), (0, 0)),
    (1, 9, 9, 8, 16, 5, 5, (2, 2), (2, 2, 2, 2), 1, (1, 1), (1, 1)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", _SHAPES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_every_backend_matches_the_definition(kernel_isa, dtype, shape, with_bias):
    n, h, wd, c, o, kh, kw, stride, pad, groups, dilation, extra = shape
    rng = np.random.default_rng(h * 31 + c * 7 + kh)
    x = rng.standard_normal((n, h, wd, c)).astype(dtype)
    w = rng.standard_normal((c, kh, kw, o // groups)).astype(dtype)
    bias = rng.standard_normal(o).astype(dtype) if with_bias else None
    hw = _out_hw(h, wd, kh, kw, stride, pad, dilation, extra)
    want = convt_numpy(x, w, bias, stride, pad, groups, dilation, hw)
    tol = 1e-5 if dtype == "float32" else 1e-12
    backends = nnc.backends(NAME, device="cpu")
    assert backends == ["CPU_OPT", "CPU_REF"]
    for b in backends:
        cmd = nnc.Cmd(NAME, stride=stride, padding=pad, groups=groups, dilation=dilation,
                      output_padding=extra, backend=b)
        out = np.full((n,) + hw + (o,), np.nan, dtype)
        nnc.cmd_exec(cmd, [x, w] + ([bias] if with_bias else []), [out])
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol, err_msg=b)
        # [H, W, C]: the same without the batch.
        out1 = np.full(hw + (o,), np.nan, dtype)
        nnc.cmd_exec(cmd, [x[0], w] + ([bias] if with_bias else []), [out1])
        np.testing.assert_allclose(out1, want[0], rtol=tol, atol=tol, err_msg=b)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cpu_opt_bands_and_views_give_the_same_bits(dtype):
    """Split into bands of output rows or not, on strided views of the input and the output,
    CPU_OPT gives the same bits, within tolerance of CPU_REF, and writes only its channels."""
    rng = np.random.default_rng(5)
    big = rng.standard_normal((1, 23, 40, 24)).astype(dtype)
    # x = big[:, :, ::2, 4:20]: pixel strides, channels contiguous.
    x = nnc.Tensor(big).view((1, 23, 20, 16), 4, (23 * 40 * 24, 40 * 24, 48, 1))
    w = rng.standard_normal((16, 3, 3, 8)).astype(dtype)
    bias = rng.standard_normal(8).astype(dtype)
    cmd = nnc.Cmd(NAME, stride=2, padding=1, output_padding=1, backend="CPU_OPT")
    hw = _out_hw(23, 20, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), (1, 1))
    outs = []
    old = conv_transpose_opt._tune(0)
    try:
        for bands in (1, 3, 7, 47):                 # 47: one output row each
            conv_transpose_opt._tune(0, bands)
            wide = np.full((1,) + hw + (12,), np.nan, dtype)
            out = nnc.Tensor(wide).view((1,) + hw + (8,), 2,
                                        (hw[0] * hw[1] * 12, hw[1] * 12, 12, 1))
            nnc.cmd_exec(cmd, [x, w, bias], [out])
            outs.append(wide[..., 2:10].copy())
            assert np.isnan(wide[..., :2]).all() and np.isnan(wide[..., 10:]).all()
    finally:
        conv_transpose_opt._tune(*old)
    for other in outs[1:]:
        np.testing.assert_array_equal(other, outs[0])
    ref = np.zeros((1,) + hw + (8,), dtype)
    nnc.cmd_exec(nnc.Cmd(NAME, stride=2, padding=1, output_padding=1, backend="CPU_REF"),
                 [np.ascontiguousarray(big[:, :, ::2, 4:20]), w, bias], [ref])
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(outs[0], ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("params, shapes, match", [
    ({"groups": 0}, None, "groups"),
    ({"groups": 1.5}, None, "groups"),
    ({"stride": 0}, None, "stride"),
    ({"dilation": 0}, None, "dilation"),
    ({"output_padding": -1}, None, "output_padding"),
    ({"output_padding": 1}, None, "output_padding"),          # stride 1, dilation 1
    ({"stride": 2, "output_padding": 2}, None, "output_padding"),
    ({"padding": -1}, None, "padding"),
    ({"activation": "relu"}, None, "unknown parameters"),
    ({}, ((1, 4, 4, 3), (2, 3, 3, 2), (1, 6, 6, 2)), "input channels"),
    ({"groups": 2}, ((1, 4, 4, 3), (3, 3, 3, 2), (1, 6, 6, 4)), "groups"),
    ({}, ((1, 4, 4, 3), (3, 3, 3), (1, 6, 6, 2)), "w must be"),
    ({}, ((4, 4), (3, 3, 3, 2), (6, 6, 2)), "NHWC"),
    ({}, ((1, 4, 4, 3), (3, 3, 3, 2), (1, 5, 6, 2)), "should have shape"),
    ({"groups": 2}, ((1, 4, 4, 4), (4, 3, 3, 2), (1, 6, 6, 2)), "should have shape"),
    ({"padding": 3}, ((1, 1, 1, 3), (3, 3, 3, 2), (1, 1, 1, 2)), "leaves no output"),
])
def test_bad_calls_raise_command_error(params, shapes, match):
    with pytest.raises(nnc.CommandError, match=match):
        cmd = nnc.Cmd(NAME, **params)
        xs, ws, ys = shapes or ((1, 4, 4, 3), (3, 3, 3, 2), (1, 6, 6, 2))
        nnc.cmd_exec(cmd, [np.zeros(xs, np.float32), np.zeros(ws, np.float32)],
                     [np.zeros(ys, np.float32)])


def test_bad_bias_and_dtypes_raise_command_error():
    x = np.zeros((1, 4, 4, 3), np.float32)
    w = np.zeros((3, 3, 3, 2), np.float32)
    y = np.zeros((1, 6, 6, 2), np.float32)
    cmd = nnc.Cmd(NAME)
    with pytest.raises(nnc.CommandError, match="bias"):
        nnc.cmd_exec(cmd, [x, w, np.zeros(3, np.float32)], [y])
    with pytest.raises(nnc.CommandError):
        nnc.cmd_exec(cmd, [x, w.astype(np.float64)], [y])
    with pytest.raises(nnc.CommandError):
        nnc.cmd_exec(cmd, [x.astype(np.int32), w.astype(np.int32)], [y.astype(np.int32)])
    with pytest.raises(nnc.CommandError):
        nnc.cmd_exec(cmd, [x, w, None, x], [y])
