"""Layer 2 command, the convolution family: CONVOLUTION_TRANSPOSE's definition and CPU_REF (its
CPU_OPT is conv_transpose_opt.pyx). NHWC (NNC: cmd/convolution/ccv_nnc_conv_transpose_cpu_ref.c,
the command's shape rule in ccv_nnc_convolution.c).

The transposed convolution (a "deconvolution", ONNX's ConvTranspose): every input pixel
scatters its channels through the kernel into the output. Inputs ``(x, w)`` or ``(x, w, bias)``
(bias may be None), one output:

- x: [N, H, W, C] or [H, W, C],
- w: [C, kh, kw, O // groups] (NNC's NHWC layout for this command: input channels first),
- bias: [O],
- out: [N, Ho, Wo, O] (or [Ho, Wo, O]), Ho = (H - 1) * sh + (kh - 1) * dh + 1 - top - bottom
  + output_padding_h, likewise Wo (NNC's and ONNX's rule),

with out[n, ih * sh - top + i * dh, iw * sw - left + j * dw, g * og + o] += x[n, ih, iw, g * cg
+ c] * w[g * cg + c, i, j, o] for every input pixel, tap (i, j), group g (cg = C // groups
input channels, og = O // groups output channels each) and c < cg, o < og, wherever that
position lies inside the output; then + bias. Padding crops the full scatter at the top-left
and bottom-right; output padding adds rows and columns at the bottom and right that only
taps reaching past the cropped end (or none: then the bias alone) land in.

Parameters ``stride`` (int or (sh, sw), >= 1), ``padding`` (int, (ph, pw) or (top, left,
bottom, right), >= 0), ``groups`` (>= 1, dividing C and O), ``dilation`` (int or (dh, dw),
>= 1: the taps are dh rows apart) and ``output_padding`` (int or pair, 0 <= it < max(stride,
dilation) on its axis, PyTorch's and ONNX's rule: a larger one would only add rows no tap
reaches). Floats only, one dtype, and the output may not overlap an input.

NNC's CPU reference reads every input channel for every output channel whatever ``groups``
is; its tests' expected values (and cuDNN) are those of the grouped definition above.
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

NAME = "CONVOLUTION_TRANSPOSE"


def _convt_normalize(params):
    _check.only(NAME, params, ("stride", "padding", "groups", "dilation", "output_padding"))
    groups = params.get("groups", 1)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise CommandError(f"{NAME}: groups must be an int >= 1, not {groups!r}")
    stride = _check.pair(NAME, params.get("stride", 1), "stride", 1)
    dilation = _check.pair(NAME, params.get("dilation", 1), "dilation", 1)
    extra = _check.pair(NAME, params.get("output_padding", 0), "output_padding", 0)
    for e, s, d, axis in zip(extra, stride, dilation, ("height", "width")):
        if e >= max(s, d):
            raise CommandError(
                f"{NAME}: output_padding {e} on the {axis} must be smaller than its stride "
                f"({s}) or its dilation ({d})"
            )
    return {
        "stride": stride,
        "padding": _check.padding(NAME, params.get("padding", 0)),
        "groups": int(groups),
        "dilation": dilation,
        "output_padding": extra,
    }


def conv_transpose_shape(cmd, x_shape, w_shape):
    """The output shape for these x and w shapes, or CommandError saying why there is none."""
    groups = cmd.params["groups"]
    c = x_shape[-1]
    if len(w_shape) != 4:
        raise CommandError(f"{NAME}: w must be [C, kh, kw, O/groups], got shape {w_shape}")
    wc, kh, kw, og = w_shape
    if wc != c:
        raise CommandError(f"{NAME}: w {w_shape} has {wc} input channels but x has C={c}")
    if c % groups:
        raise CommandError(f"{NAME}: groups={groups} must divide the input channels C={c}")
    if kh < 1 or kw < 1:
        raise CommandError(f"{NAME}: the kernel must be at least 1x1, w has shape {w_shape}")
    (sh, sw), (dh, dw) = cmd.params["stride"], cmd.params["dilation"]
    pt, pl, pb, pr = cmd.params["padding"]
    eh, ew = cmd.params["output_padding"]
    ho = (x_shape[-3] - 1) * sh + (kh - 1) * dh + 1 - pt - pb + eh
    wo = (x_shape[-2] - 1) * sw + (kw - 1) * dw + 1 - pl - pr + ew
    if x_shape[-3] < 1 or x_shape[-2] < 1 or ho < 1 or wo < 1:
        raise CommandError(
            f"{NAME}: x {x_shape} with a {kh}x{kw} kernel, stride {(sh, sw)}, dilation "
            f"{(dh, dw)}, padding {(pt, pl, pb, pr)} and output padding {(eh, ew)} leaves no "
            f"output ({ho}x{wo})"
        )
    return tuple(x_shape[:-3]) + (ho, wo, og * groups)


def _convt_check(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, (2, 3), 1)
    _check.present(cmd, inputs, "input", 0, 1)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    x, w = inputs[0], inputs[1]
    x_shape = _check.nhwc(cmd, x, "x (input 0)")
    _check.same_format(cmd, x, {"w (input 1)": w, "output 0": outputs[0]})
    shape = conv_transpose_shape(cmd, x_shape, _check.nhwc_shape(w))
    if len(inputs) > 2 and inputs[2] is not None:
        _check.expect_shape(cmd, inputs[2], shape[-1:], "bias")
    _check.expect_image_shape(cmd, outputs[0], shape, "output 0")


def _convt_ref(cmd, inputs, outputs):
    """The definition: for every tap (i, j) and group, the input's pixels times w[:, i, j, :]
    land on a strided grid of the uncropped output, which is then cropped by the padding."""
    x = inputs[0].astype(np.float64)
    w = inputs[1].astype(np.float64)
    bias = inputs[2] if len(inputs) > 2 else None
    out = outputs[0]
    (sh, sw), (dh, dw) = cmd.params["stride"], cmd.params["dilation"]
    pt, pl = cmd.params["padding"][:2]
    groups = cmd.params["groups"]
    c, kh, kw, og = w.shape
    cg = c // groups
    h, wd = x.shape[-3], x.shape[-2]
    ho, wo = out.shape[-3], out.shape[-2]
    # The uncropped output, tall and wide enough for every tap and for the output padding.
    full = np.zeros(x.shape[:-3] + (max((h - 1) * sh + (kh - 1) * dh + 1, pt + ho),
                                    max((wd - 1) * sw + (kw - 1) * dw + 1, pl + wo),
                                    og * groups))
    for g in range(groups):
        ci, co = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
        for i in range(kh):
            for j in range(kw):
                full[..., i * dh:i * dh + (h - 1) * sh + 1:sh,
                     j * dw:j * dw + (wd - 1) * sw + 1:sw, co] += x[..., ci] @ w[ci, i, j, :]
    acc = full[..., pt:pt + ho, pl:pl + wo, :]
    if bias is not None:
        acc = acc + bias.astype(np.float64)
    out[...] = acc


def register():
    register_command(NAME, inplace="none", check=_convt_check, normalize=_convt_normalize,
                     image=True)
    register_backend(NAME, "CPU_REF", _convt_ref)
