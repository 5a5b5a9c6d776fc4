"""Layer 2 command, the upsample family: this module (the definition and CPU_REF), cpu_opt.pyx
(CPU_OPT). No GPU backend.

UPSAMPLE resizes the spatial axes of an image (NNC: cmd/upsample, CCV_NNC_UPSAMPLE_FORWARD,
whose ``upsample.type`` and ``align_corners`` are ``type`` and ``align_corners`` here). One
input [N, H, W, C] or [H, W, C] (an NCHW tensor: [N, C, H, W] or [C, H, W]; an image command,
so CPU_REF gets it as its NHWC view and the C backend takes NHWC only), one output of the
input's format and rank, batch and channels and any Ho, Wo >= 1: the output's shape sets the
scale (NNC's width_scale/height_scale only size the output, which nnc's caller allocates). Per
spatial axis of input size n and output size m the ratio is r = n / m, or (n - 1) / max(1, m - 1)
with ``align_corners``, and output index o reads

- ``type="nearest"``: index min(floor((o + 0.5) * r), n - 1), or min(floor(o * r + 0.5), n - 1)
  with ``align_corners`` (NNC's);
- ``type="bilinear"``: source coordinate s = max((o + 0.5) * r - 0.5, 0), or o * r with
  ``align_corners``; i0 = floor(s), i1 = min(i0 + 1, n - 1), weights 1 - (s - i0) and s - i0,
  applied along H and W (NNC's; NNC does not clamp s, but where it is below 0 both its
  indices truncate to 0, so its two weights fall on the edge pixel, as the clamp does).

NNC asserts the output is at least the input's size; nnc also shrinks (the same formulas sample
the input). Ratios are computed in float64 (NNC: float32). Floats only, one dtype; the output may
not overlap the input.
"""

import numpy as np

from nnc.base.core import CommandError
from nnc.cmd import _check
from nnc.cmd.command import register_backend, register_command

TYPES = ("nearest", "bilinear")


def _normalize(params):
    _check.only("UPSAMPLE", params, ("type", "align_corners"))
    kind = params.get("type")
    if kind not in TYPES:
        raise CommandError(f"UPSAMPLE needs type='nearest' or 'bilinear', not {kind!r}")
    align = params.get("align_corners", False)
    if not isinstance(align, (bool, np.bool_)):
        raise CommandError(f"UPSAMPLE: align_corners must be a bool, not {align!r}")
    return {"type": kind, "align_corners": bool(align)}


def _check_upsample(cmd, inputs, outputs):
    _check.arity(cmd, inputs, outputs, 1, 1)
    _check.present(cmd, inputs, "input", 0)
    _check.present(cmd, outputs, "output", 0)
    _check.same_dtype(cmd, inputs + outputs)
    _check.floating(cmd, inputs + outputs)
    x, y = inputs[0], outputs[0]
    xs = _check.nhwc(cmd, x, "input 0")
    _check.same_format(cmd, x, {"output 0": y})
    ys = _check.nhwc_shape(y)
    if len(ys) != len(xs):
        raise CommandError(f"UPSAMPLE needs an output of the input's rank, not shapes "
                           f"{tuple(x.shape)} and {tuple(y.shape)}")
    lead = len(xs) - 3
    if ys[:lead] + ys[-1:] != xs[:lead] + xs[-1:]:
        raise CommandError(f"UPSAMPLE: output {tuple(y.shape)} must keep the batch and channels "
                           f"of input {tuple(x.shape)} (only H and W change)")
    if y.size and (min(xs[lead:lead + 2]) < 1 or min(ys[lead:lead + 2]) < 1):
        raise CommandError(f"UPSAMPLE of input {tuple(x.shape)} to {tuple(y.shape)}: H and W "
                           "must be >= 1")


def source_index(n, m, kind, align):
    """Per output index 0..m-1 of an axis of n inputs: (i0, i1, w), the input indices and the
    weight of i1 (nearest: i1 = i0, w = 0). The definition, in float64."""
    o = np.arange(m, dtype=np.float64)
    r = (n - 1) / max(1, m - 1) if align else n / m
    if kind == "nearest":
        i0 = np.minimum(np.floor(o * r + 0.5) if align else np.floor((o + 0.5) * r), n - 1)
        i0 = i0.astype(np.intp)
        return i0, i0, np.zeros(m)
    s = o * r if align else np.maximum((o + 0.5) * r - 0.5, 0.0)
    i0 = np.minimum(np.floor(s), n - 1).astype(np.intp)
    return i0, np.minimum(i0 + 1, n - 1), s - i0


def _upsample_ref(cmd, inputs, outputs):
    x, y = inputs[0], outputs[0]
    if y.size == 0:
        return
    lead = x.ndim - 3
    kind, align = cmd.params["type"], cmd.params["align_corners"]
    h0, h1, wh = source_index(x.shape[lead], y.shape[lead], kind, align)
    w0, w1, ww = source_index(x.shape[lead + 1], y.shape[lead + 1], kind, align)
    if kind == "nearest":
        y[...] = x[..., h0, :, :][..., w0, :]         # a copy: exact for any value
        return
    a = x.astype(np.float64)
    wh = wh.reshape(-1, 1, 1)
    ww = ww.reshape(-1, 1)
    rows = a[..., h0, :, :] * (1 - wh) + a[..., h1, :, :] * wh
    y[...] = rows[..., w0, :] * (1 - ww) + rows[..., w1, :] * ww


def register():
    register_command("UPSAMPLE", inplace="none", check=_check_upsample, normalize=_normalize,
                     image=True)
    register_backend("UPSAMPLE", "CPU_REF", _upsample_ref)
