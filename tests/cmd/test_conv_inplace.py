"""CONVOLUTION with its residual (input 3) the output itself: out = act(conv + bias + out).

The float32 tiles read each residual value before they store over it, so the alias gives the
bits of a separate output, through every A-row path, part plan and ISA level; float64 and
depthwise convolutions (which add the residual in a pass after storing) are left to CPU_REF,
whose sums never touch the output before the end. Any other overlap is refused."""

import numpy as np
import pytest

import nnc
from nnc.cmd.command import cmd_backends_for
from nnc.cmd.convolution import cpu_opt

# name: (input shape, weight shape, params)
CASES = {
    "1x1": ((1, 9, 7, 40), (72, 1, 1, 40), {}),
    "1x1_few_pixels": ((1, 3, 3, 96), (80, 1, 1, 96), {}),
    "3x3_taps": ((2, 9, 11, 24), (48, 3, 3, 24), {"padding": 1}),
    "first_layer_runs": ((1, 15, 13, 3), (40, 7, 7, 3), {"stride": 2, "padding": 3}),
    "grouped_cg2_patches": ((1, 8, 8, 8), (16, 3, 3, 2), {"padding": 1, "groups": 4}),
    "1x1_stride2": ((1, 13, 13, 40), (24, 1, 1, 40), {"stride": 2}),
}
PATHS = {"auto": (4, 1), "taps": (1, 0), "runs": (1 << 30, 2), "im2col": (1 << 30, 0)}


def _out_shape(xs, ws, params):
    s = params.get("stride", 1)
    p = params.get("padding", 0)
    return (xs[0], (xs[1] + 2 * p - ws[1]) // s + 1, (xs[2] + 2 * p - ws[2]) // s + 1, ws[0])


def _operands(xs, ws, dtype=np.float32, seed=5):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype),
            rng.standard_normal(ws[0]).astype(dtype))


def _conv(params, x, w, b, residual, out, backend=None, activation="relu"):
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend=backend, activation=activation, **params),
                 [nnc.Tensor(x), nnc.Tensor(w), nnc.Tensor(b), residual], [out])


def _channel_slice(shape, fill):
    """An [n, h, w, c] view at channel offset 3 of a wider buffer, holding ``fill``."""
    wide = np.full(shape[:3] + (shape[3] + 7,), np.nan, np.float32)
    wide[..., 3:3 + shape[3]] = fill
    c = shape[3] + 7
    t = nnc.Tensor(wide).view(shape, offset=3, strides=(shape[1] * shape[2] * c, shape[2] * c,
                                                        c, 1))
    return t, wide


@pytest.mark.parametrize("strided", [False, True], ids=["dense", "channel_slice"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_output_as_residual_gives_the_bits_of_a_separate_output(kernel_isa, case, strided):
    xs, ws, params = CASES[case]
    oshape = _out_shape(xs, ws, params)
    x, w, b = _operands(xs, ws)
    res = np.random.default_rng(9).standard_normal(oshape).astype(np.float32)
    size = nnc.get_num_threads()
    old = cpu_opt._tune(1 << 19, 512, split_macs=0)
    try:
        nnc.set_num_threads(2)
        want = nnc.Tensor.zeros(oshape, dtype="float32")
        _conv(params, x, w, b, nnc.Tensor(res.copy()), want, "CPU_OPT")
        for path, knobs in PATHS.items():
            was = cpu_opt._tune_indirect(*knobs)
            try:
                for threads in (1, 2):
                    nnc.set_intra_op_threads(threads)
                    if strided:
                        out, wide = _channel_slice(oshape, res)
                    else:
                        out = nnc.Tensor(res.copy())
                    _conv(params, x, w, b, out, out, "CPU_OPT")
                    np.testing.assert_array_equal(out.numpy().view(np.int32),
                                                  want.numpy().view(np.int32),
                                                  err_msg=f"{path}, {threads} thread(s)")
                    if strided:
                        assert np.isnan(wide[..., :3]).all() and np.isnan(wide[..., -4:]).all()
            finally:
                cpu_opt._tune_indirect(*was)
    finally:
        nnc.set_intra_op_threads(None)
        cpu_opt._tune(*old)
        nnc.set_num_threads(size)
    ref = nnc.Tensor(res.copy())
    _conv(params, x, w, b, ref, ref, "CPU_REF")
    k = ws[1] * ws[2] * ws[3]
    np.testing.assert_allclose(want.numpy(), ref.numpy(), rtol=1e-5, atol=k * 4e-6)


@pytest.mark.parametrize("activation", [None, "relu", "swish"])
def test_no_input_channels_adds_the_bias_to_the_residual_in_place(activation):
    res = np.random.default_rng(1).standard_normal((1, 4, 4, 6)).astype(np.float32)
    res[0, 0, 0, :2] = (-0.0, np.nan)
    x = np.zeros((1, 4, 4, 0), np.float32)
    w = np.zeros((6, 1, 1, 0), np.float32)
    b = np.array([0.0, 1, -2, 3, -0.0, 5], np.float32)
    want = nnc.Tensor.zeros(res.shape, dtype="float32")
    _conv({}, x, w, b, nnc.Tensor(res.copy()), want, "CPU_OPT", activation)
    out = nnc.Tensor(res.copy())
    _conv({}, x, w, b, out, out, "CPU_OPT", activation)
    np.testing.assert_array_equal(out.numpy().view(np.int32), want.numpy().view(np.int32))


@pytest.mark.parametrize("kind", ["float64", "depthwise"])
def test_float64_and_depthwise_aliases_run_the_reference(kind):
    """CPU_OPT stores their convolution before adding the residual: it does not accept the
    alias, and the default choice (CPU_REF) gives conv + residual, not conv + conv."""
    if kind == "float64":
        xs, ws, params, dtype = (1, 6, 6, 8), (12, 3, 3, 8), {"padding": 1}, np.float64
    else:
        xs, ws, params, dtype = (1, 6, 6, 8), (8, 3, 3, 1), {"padding": 1, "groups": 8}, \
            np.float32
    oshape = _out_shape(xs, ws, params)
    x, w, b = _operands(xs, ws, dtype)
    res = np.random.default_rng(2).standard_normal(oshape).astype(dtype)
    want = nnc.Tensor.zeros(oshape, dtype=np.dtype(dtype).name)
    _conv(params, x, w, b, nnc.Tensor(res.copy()), want, "CPU_OPT")
    out = nnc.Tensor(res.copy())
    cmd = nnc.Cmd("CONVOLUTION", activation="relu", **params)
    ins = [nnc.Tensor(x), nnc.Tensor(w), nnc.Tensor(b), out]
    assert "CPU_OPT" not in [be.name for be in cmd_backends_for(cmd, ins, [out])]
    with pytest.raises(nnc.NNCError):
        _conv(params, x, w, b, out, out, "CPU_OPT")
    np.testing.assert_array_equal(out.numpy(), res)          # refused: nothing written
    nnc.cmd_exec(cmd, ins, [out])
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-4)


def test_only_the_residual_may_alias_the_output_and_only_exactly():
    x, w, b = _operands((1, 4, 4, 8), (8, 1, 1, 8))
    buf = np.zeros((1, 4, 4, 9), np.float32)
    out = nnc.Tensor(buf).view((1, 4, 4, 8), offset=0, strides=(144, 36, 9, 1))
    shifted = nnc.Tensor(buf).view((1, 4, 4, 8), offset=1, strides=(144, 36, 9, 1))
    cmd = nnc.Cmd("CONVOLUTION")
    with pytest.raises(nnc.CommandError, match="overlaps input 3"):
        nnc.cmd_exec(cmd, [nnc.Tensor(x), nnc.Tensor(w), nnc.Tensor(b), shifted], [out])
    same = nnc.Tensor(x.copy())
    with pytest.raises(nnc.CommandError, match="overlaps input 0"):
        nnc.cmd_exec(cmd, [same, nnc.Tensor(w), nnc.Tensor(b), None], [same])
    with pytest.raises(nnc.CommandError, match="overlaps input 0"):
        nnc.cmd_exec(cmd, [same, nnc.Tensor(w), nnc.Tensor(b), same], [same])
    assert nnc.command_info("CONVOLUTION").alias_inputs == (3,)
    assert nnc.command_info("ADD").alias_inputs == ()


def test_register_command_checks_alias_inputs():
    with pytest.raises(nnc.CommandError, match="alias_inputs"):
        nnc.register_command("TEST_ALIAS_BAD", alias_inputs=("x",))
    with pytest.raises(nnc.CommandError, match="alias_inputs"):
        nnc.register_command("TEST_ALIAS_BAD", alias_inputs=(-1,))
    info = nnc.register_command("TEST_ALIAS_OK", alias_inputs=[2, 1, 2])
    assert info.alias_inputs == (1, 2)
    assert nnc.register_command("TEST_ALIAS_OK", alias_inputs=(1, 2)) is info
    with pytest.raises(nnc.CommandError, match="alias_inputs"):
        nnc.register_command("TEST_ALIAS_OK", alias_inputs=(1,))
