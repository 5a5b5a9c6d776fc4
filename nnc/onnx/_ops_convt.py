"""nnc.onnx.load: ConvTranspose (the check and the ``_op_ConvTranspose`` method OpEmitter
inherits; the other operators are in _ops) as CONVOLUTION_TRANSPOSE on the NHWC image."""

from __future__ import annotations

import numpy as np

from nnc.cmd.command import Cmd

CONVT_OPS = {"ConvTranspose"}


def check_convt(attrs, node, consts, ranks):
    """Why nnc cannot run this ConvTranspose node, or None: 2-D ([N, C, H, W] input), constant
    weights and bias."""
    ins = list(node.input)
    if ranks.get(ins[0]) != 4 or len(ins) < 2 or ins[1] not in consts or \
            np.ndim(consts[ins[1]]) != 4:
        return "only 2-D transposed convolutions ([N, C, H, W] input) with constant weights"
    if len(ins) > 2 and ins[2] and ins[2] not in consts:
        return "the bias must be a constant"
    return None


def _invalid(n, why):
    from nnc.onnx._ops import _invalid as invalid  # _ops imports this module

    return invalid(n, why)


def _pair(n, a, key, default, minimum):
    v = list(a.get(key, default))
    if len(v) != 2 or any(not isinstance(e, int) or e < minimum for e in v):
        raise _invalid(n, f"attribute {key!r} = {v} must be two ints >= {minimum}")
    return tuple(v)


def convt_pads(n, a, hw, kernel, stride, dilation, extra):
    """ONNX's (top, left, bottom, right) and output padding: ``pads`` as given, or from
    ``output_shape`` (or, with SAME_UPPER / SAME_LOWER, the input's size times the stride), the
    total the full scatter must lose split as ONNX says (SAME_UPPER: the smaller half at the
    start). An output larger than the scatter grows the output padding instead."""
    mode = a.get("auto_pad", b"NOTSET")
    mode = mode.decode("utf-8", "replace") if isinstance(mode, bytes) else mode
    if mode not in ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise _invalid(n, f"attribute 'auto_pad' = {mode!r} is none of NOTSET, VALID, "
                          f"SAME_UPPER, SAME_LOWER")
    shape = a.get("output_shape")
    if shape is not None:
        shape = list(shape)[-2:]
        if len(shape) != 2 or any(not isinstance(e, int) or e < 1 for e in shape):
            raise _invalid(n, f"attribute 'output_shape' = {a['output_shape']} must end in two "
                              f"ints >= 1 (H, W)")
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        shape = [h * s for h, s in zip(hw, stride)]
    if shape is None:
        if mode == "VALID":
            return (0, 0, 0, 0), extra
        p = list(a.get("pads", [0, 0, 0, 0]))
        if len(p) != 4 or any(not isinstance(e, int) or e < 0 for e in p):
            raise _invalid(n, f"attribute 'pads' = {p} must be four ints >= 0")
        return (p[0], p[1], p[2], p[3]), extra
    lo, hi, more = [], [], list(extra)
    for i, (h, k, s, d, e, want) in enumerate(zip(hw, kernel, stride, dilation, extra, shape)):
        total = s * (h - 1) + e + (k - 1) * d + 1 - want
        if total < 0:
            # Rows past the scatter's end: the output padding, which only the bias reaches.
            lo.append(0)
            hi.append(0)
            more[i] = e - total
            continue
        small = total // 2
        lo.append(small if mode == "SAME_UPPER" else total - small)
        hi.append(total - lo[-1])
    return (lo[0], lo[1], hi[0], hi[1]), tuple(more)


class ConvtEmitter:
    """ConvTranspose's emit method, mixed into _ops.OpEmitter (which supplies ``get``,
    ``constant``, ``_write`` and the plan's ``shapes`` and ``consts``)."""

    def _op_ConvTranspose(self, k, n, a):
        """CONVOLUTION_TRANSPOSE: ONNX's weights [C, M/group, kH, kW] become nnc's [C, kH,
        kW, M/group]; dilations, group, output_padding and output_shape as ONNX defines
        them. An output padding nnc's command refuses (one no tap reaches: >= the stride and
        the dilation) is refused as the command does."""
        x, deps = self.get(n.input[0], "nhwc")
        w = np.asarray(self.consts[n.input[1]], np.float64)
        c, og, kh, kw = w.shape
        if "kernel_shape" in a and tuple(a["kernel_shape"]) != (kh, kw):
            raise _invalid(n, f"attribute 'kernel_shape' = {a['kernel_shape']} is not the "
                              f"weights' window ({kh}, {kw})")
        groups = a.get("group", 1)
        if not isinstance(groups, int) or groups < 1 or c % groups or x.shape[3] != c:
            raise _invalid(n, f"attribute 'group' = {groups!r} must be >= 1 and divide the "
                              f"input's {x.shape[3]} channels, which the weights' {c} must be")
        o = og * groups
        b = (np.asarray(self.consts[n.input[2]], np.float64)
             if len(n.input) > 2 and n.input[2] else np.zeros(o))
        if b.shape != (o,):
            raise _invalid(n, f"the bias has shape {b.shape}, not ({o},)")
        stride = _pair(n, a, "strides", [1, 1], 1)
        dilation = _pair(n, a, "dilations", [1, 1], 1)
        extra = _pair(n, a, "output_padding", [0, 0], 0)
        pads, extra = convt_pads(n, a, x.shape[1:3], (kh, kw), stride, dilation, extra)
        cmd = Cmd("CONVOLUTION_TRANSPOSE", stride=stride, padding=pads, groups=groups,
                  dilation=dilation, output_padding=extra)
        wt = self.constant(np.transpose(w, (0, 2, 3, 1)))
        self._write(n, cmd, [x, wt, self.constant(b)], deps)
