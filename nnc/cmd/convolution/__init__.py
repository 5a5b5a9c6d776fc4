"""Layer 2 command, the convolution family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT: float32 on nnc's GEMM tiles over packed weights; conv_unpacked.pyx its depthwise path on
depthwise_kernel.h and float64 on OpenBLAS; conv_patches.pyx the im2col patches both copy;
conv_rows.pyx the float32 A rows by pointer; conv_geometry.pxd the call's geometry),
winograd.pyx (CPU_OPT_WINOGRAD); gpu/ (layer 3, never imported from here): GPU_REF and GPU_OPT
through cuDNN, registered by nnc.cuda.builtins.

CONVOLUTION, NHWC (NNC: cmd/convolution/ccv_nnc_conv_cpu_ref.c, cpu_opt/_ccv_nnc_conv_cpu_opt.c).
An image command: NCHW tensors (x [N, C, H, W], w [O, C // groups, kh, kw], out and residual
[N, O, Ho, Wo], NNC's NCHW layouts) run CPU_REF, on the NHWC views of their arrays
(nnc/cmd/command.pyx); the C and GPU backends take NHWC only.

Inputs ``(x, w)``, ``(x, w, bias)`` or ``(x, w, bias, residual)`` (bias may be None), one
output:

- x: [N, H, W, C] or [H, W, C],
- w: [O, kh, kw, C // groups] (NNC's NHWC weight layout),
- bias: [O],
- residual: the output's shape, added before the activation (a ResNet shortcut: out =
  act(conv + bias + residual), what ``Graph.simplify`` makes of a convolution and the in-place
  ADD after it),
- out: [N, Ho, Wo, O] (or [Ho, Wo, O]), Ho = (H + top + bottom - kh) // sh + 1, likewise Wo.

Parameters ``stride`` (int or (sh, sw)), ``padding`` (int, (ph, pw) or (top, left, bottom,
right); zeros), ``groups`` (C and O are split into that many independent convolutions) and
``activation``: None; "relu": max(0, .); "clamp" with ``clamp=(lo, hi)``: min(max(., lo), hi)
(ReLU6 is (0, 6)); "hard_swish": HARD_SWISH, x * min(max(x + 3, 0), 6) / 6 (MobileNet-V3);
"swish": SWISH, x * sigmoid(x) (SiLU, EfficientNet): the epilogues ``Graph.simplify`` fuses a
following in-place RELU, CLAMP, HARD_SWISH or SWISH into (docs/commands.md). NaN stays NaN
through each; HARD_SWISH and SWISH of -inf are -0, as the element-wise commands give (CPU_REF
computes them by those commands' float64 definitions, CPU_OPT by their CPU_OPT functions, so
a fused float32 convolution gives the bits of the convolution then the command). Floats only,
one dtype, and the output may not overlap an input, except that the residual may be exactly
the output (same memory, same layout: out = act(conv + bias + out), each value read before it
is written). CPU_REF and CPU_OPT's float32 kernels take that alias; CPU_OPT does not accept
it for float64 or depthwise convolutions, whose residual is added in a pass after the
convolution is stored, and the other backends take no residual.
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command
from nnc.cmd.elementwise.activation import hard_swish64, swish64

# The activations a convolution applies last (fused by Graph.simplify).
ACTIVATIONS = (None, "relu", "clamp", "hard_swish", "swish")


def _clamp_bounds(value):
    """``clamp=(lo, hi)`` as two floats, lo <= hi, neither NaN (+-inf: no bound)."""
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise CommandError(f"CONVOLUTION: clamp must be a pair of numbers (lo, hi), not "
                           f"{value!r}") from None
    if lo != lo or hi != hi or lo > hi:
        raise CommandError(f"CONVOLUTION: clamp must be (lo, hi) with lo <= hi and neither NaN, "
                           f"not {value!r}")
    return (lo, hi)


def _conv_normalize(params):
    _check.only("CONVOLUTION", params, ("stride", "padding", "groups", "activation", "clamp"))
    groups = params.get("groups", 1)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise CommandError(f"CONVOLUTION: groups must be an int >= 1, not {groups!r}")
    activation = params.get("activation")
    if activation not in ACTIVATIONS:
        raise CommandError(f"CONVOLUTION: activation must be None, 'relu', 'clamp', "
                           f"'hard_swish' or 'swish', not {activation!r}")
    if (activation == "clamp") != ("clamp" in params):
        raise CommandError("CONVOLUTION: clamp=(lo, hi) goes with activation='clamp', and only "
                           "with it")
    out = {
        "stride": _check.pair("CONVOLUTION", params.get("stride", 1), "stride", 1),
        "padding": _check.padding("CONVOLUTION", params.get("padding", 0)),
        "groups": int(groups),
    }
    if activation is not None:          # only fused convolutions carry it (Graph.simplify)
        out["activation"] = activation
    if activation == "clamp":
        out["clamp"] = _clamp_bounds(params["clamp"])
    return out


def conv_shape(cmd, x_shape, w_shape):
    """The output shape for these x and w shapes, or CommandError saying why there is none."""
    groups = cmd.params["groups"]
    c = x_shape[-1]
    if len(w_shape) != 4:
        raise CommandError(f"CONVOLUTION: w must be [O, kh, kw, C/groups], got shape {w_shape}")
    o, kh, kw, cg = w_shape
    if c % groups or o % groups:
        raise CommandError(
            f"CONVOLUTION: groups={groups} must divide both input channels C={c} and "
            f"output channels O={o}"
        )
    if cg != c // groups:
        raise CommandError(
            f"CONVOLUTION: w {w_shape} has {cg} input channels per group but x has "
            f"C={c} / groups={groups} = {c // groups}"
        )
    ho, wo = _check.window_output(
        cmd, x_shape[-3:-1], (kh, kw), cmd.params["stride"], cmd.params["padding"]
    )
    return tuple(x_shape[:-3]) + (ho, wo, o)


def _conv_check(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, (2, 4), 1)
    _check.present(cmd, inputs, "input", 0, 1)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    x_shape = _check.nhwc(cmd, x, "x (input 0)")
    residual = inputs[3] if len(inputs) > 3 else None
    _check.same_format(cmd, x, {"w (input 1)": w, "residual (input 3)": residual,
                                "output 0": outputs[0]})
    shape = conv_shape(cmd, x_shape, _check.nhwc_shape(w))
    if bias is not None:
        _check.expect_shape(cmd, bias, shape[-1:], "bias")
    if residual is not None:
        _check.expect_image_shape(cmd, residual, shape, "residual (input 3)")
    _check.expect_image_shape(cmd, outputs[0], shape, "output 0")


def _geometry(cmd, out):
    """(sh, sw, top, left, bottom, right, Ho, Wo)."""
    (sh, sw), (pt, pl, pb, pr) = cmd.params["stride"], cmd.params["padding"]
    return sh, sw, pt, pl, pb, pr, out.shape[-3], out.shape[-2]


def _conv_ref(cmd, inputs, outputs):
    """The definition: for every kernel offset (i, j) and group, add patch . w[:, i, j, :]^T."""
    x = inputs[0].astype(np.float64)
    w = inputs[1].astype(np.float64)
    bias = inputs[2] if len(inputs) > 2 else None
    out = outputs[0]
    sh, sw, pt, pl, pb, pr, ho, wo = _geometry(cmd, out)
    groups = cmd.params["groups"]
    o, kh, kw, cg = w.shape
    og = o // groups
    h, wd = x.shape[-3], x.shape[-2]
    xp = np.zeros(x.shape[:-3] + (h + pt + pb, wd + pl + pr, x.shape[-1]))
    xp[..., pt:pt + h, pl:pl + wd, :] = x
    acc = np.zeros(out.shape)
    for g in range(groups):
        ci, co = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
        for i in range(kh):
            for j in range(kw):
                # Input pixels under kernel tap (i, j) for every output position.
                patch = xp[..., i:i + sh * (ho - 1) + 1:sh, j:j + sw * (wo - 1) + 1:sw, ci]
                acc[..., co] += patch @ w[co, i, j, :].T
    if bias is not None:
        acc += bias.astype(np.float64)
    if len(inputs) > 3 and inputs[3] is not None:
        acc += inputs[3].astype(np.float64)
    act = cmd.params.get("activation")
    # fmax/fmin would drop a NaN; maximum/minimum keep it, as the C epilogues do.
    if act == "relu":
        np.maximum(acc, 0.0, out=acc)
    elif act == "clamp":
        lo, hi = cmd.params["clamp"]
        np.minimum(np.maximum(acc, lo), hi, out=acc)
    elif act == "hard_swish":
        acc = hard_swish64(acc)
    elif act == "swish":
        acc = swish64(acc)
    out[...] = acc


def register():
    # The residual may be the output itself (out = conv + residual written over it): a
    # memory-bound layer then reads and writes each line once, where a separate output costs
    # a read of every line before it is written (nnc.onnx.load makes such nodes).
    register_command("CONVOLUTION", inplace="none", check=_conv_check, normalize=_conv_normalize,
                     image=True, alias_inputs=(3,))
    register_backend("CONVOLUTION", "CPU_REF", _conv_ref)
