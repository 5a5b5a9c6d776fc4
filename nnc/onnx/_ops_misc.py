"""nnc.onnx.load: Resize/Upsample, Pad, Gather of a runtime value, Cast, ArgMax/ArgMin (the
checks and the ``_op_<OpType>`` methods OpEmitter inherits; the other operators are in _ops).
"""

from __future__ import annotations

import math

import numpy as np

from nnc.cmd.command import Cmd
from nnc.cmd.upsample import source_index
from nnc.tensor.tensor import Tensor

MISC_OPS = {"Resize", "Upsample", "Pad", "Gather", "Cast", "ArgMax", "ArgMin"}
TO_NHWC = (0, 2, 3, 1)
# ONNX TensorProto data types a runtime Cast reaches: nnc's float and integer dtypes.
_CAST_DTYPES = {1: "float32", 10: "float16", 11: "float64", 6: "int32", 7: "int64", 2: "uint8"}
_PAD_MODES = ("constant", "reflect", "edge")


def _text(value, default):
    value = default if value is None else value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _input(node, consts, i):
    """Constant input i of node as an array, or None when it is absent."""
    if len(node.input) > i and node.input[i]:
        return np.asarray(consts[node.input[i]])
    return None


def _runtime_input(node, consts, *idx):
    for i in idx:
        if len(node.input) > i and node.input[i] and node.input[i] not in consts:
            return i
    return None


def resize_plan(op, attrs, node, consts, in_shape, out_shape):
    """(type, align_corners) of the UPSAMPLE that computes this Resize/Upsample node exactly,
    or a str saying why none does. Only H and W of an [N, C, H, W] input may change."""
    mode = _text(attrs.get("mode"), "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        return f"attribute 'mode' = {mode!r}: UPSAMPLE has nearest and (bi)linear"
    if op == "Resize":
        coord = _text(attrs.get("coordinate_transformation_mode"), "half_pixel")
        nearest_mode = _text(attrs.get("nearest_mode"), "round_prefer_floor")
        for key in ("antialias", "exclude_outside"):
            if attrs.get(key, 0):
                return f"attribute {key!r} = {attrs[key]}: UPSAMPLE samples without a filter"
        policy = _text(attrs.get("keep_aspect_ratio_policy"), "stretch")
        if policy != "stretch":
            return f"attribute 'keep_aspect_ratio_policy' = {policy!r}: only 'stretch'"
        if coord == "tf_crop_and_resize":
            return "attribute 'coordinate_transformation_mode' = 'tf_crop_and_resize'"
        scales = _input(node, consts, 2)
        if scales is None or scales.size == 0:
            scales = None
    else:  # Upsample (deprecated): asymmetric coordinates, nearest rounds down
        coord, nearest_mode = "asymmetric", "floor"
        scales = _input(node, consts, 1) if len(node.input) > 1 else \
            np.asarray(attrs.get("scales", []), np.float32)
    if len(in_shape) != 4 or in_shape[:2] != out_shape[:2]:
        return (f"input {list(in_shape)} to output {list(out_shape)}: UPSAMPLE resizes H and W "
                "of an [N, C, H, W] image only")
    axes = attrs.get("axes")
    if scales is not None and axes is not None:
        full = [1.0] * 4
        for ax, s in zip(axes, scales.reshape(-1)):
            full[ax % 4] = float(s)
        scales = np.asarray(full)
    plan = []
    for k in (2, 3):
        n, m = int(in_shape[k]), int(out_shape[k])
        if n < 1 or m < 1:
            return f"an empty axis ({n} to {m})"
        s = float(scales.reshape(-1)[k]) if scales is not None else m / n
        plan.append((n, m, s))
    if mode == "nearest":
        for align in (False, True):
            if all(np.array_equal(source_index(n, m, "nearest", align)[0],
                                  _onnx_nearest(n, m, s, coord, nearest_mode))
                   for n, m, s in plan):
                return ("nearest", align)
        return (f"attributes coordinate_transformation_mode = {coord!r} and nearest_mode = "
                f"{nearest_mode!r} at these sizes pick other pixels than UPSAMPLE nearest "
                "(half-pixel or align-corners, rounding up)")
    for n, m, s in plan:
        # With scales, ONNX's coordinates use n * s (not the output's size m = floor(n * s)).
        if scales is not None and n * s != m:
            return (f"scale {s} to output size {m} of {n} with mode = {mode!r} (UPSAMPLE's "
                    "ratio is the sizes': needs n * scale = output size)")
    if coord == "align_corners":
        return ("bilinear", True)
    if coord in ("half_pixel", "pytorch_half_pixel"):
        if coord == "pytorch_half_pixel" and any(m == 1 for _, m, _ in plan):
            return "attribute coordinate_transformation_mode = 'pytorch_half_pixel' to size 1"
        return ("bilinear", False)
    return (f"attribute 'coordinate_transformation_mode' = {coord!r} with mode = {mode!r} "
            "(UPSAMPLE bilinear takes half_pixel, pytorch_half_pixel and align_corners)")


def _onnx_nearest(n, m, s, coord, nearest_mode):
    """ONNX Resize's nearest source index per output index (its reference definition)."""
    o = np.arange(m, dtype=np.float64)
    length = n * s      # ONNX's length_resized: the scaled size, not the output's
    if coord == "half_pixel":
        x = (o + 0.5) / s - 0.5
    elif coord == "pytorch_half_pixel":
        x = (o + 0.5) / s - 0.5 if length > 1 else np.zeros(m)
    elif coord == "align_corners":
        x = o * (n - 1) / (length - 1) if length != 1 else np.zeros(m)
    elif coord == "asymmetric":
        x = o / s
    elif coord == "half_pixel_symmetric":
        adj = m / (s * n)
        x = (n / 2) * (1 - adj) + (o + 0.5) / s - 0.5
    else:
        return None
    if nearest_mode == "floor":
        i = np.floor(x)
    elif nearest_mode == "ceil":
        i = np.ceil(x)
    elif nearest_mode == "round_prefer_ceil":
        i = np.floor(x + 0.5)
    elif nearest_mode == "round_prefer_floor":
        i = np.ceil(x - 0.5)
    else:
        return None
    return np.clip(i, 0, n - 1).astype(np.intp)


def pad_plan(attrs, node, consts, rank, opset):
    """(mode, begin, end, value) of this Pad node in ONNX axis order, or a str saying why not."""
    mode = _text(attrs.get("mode"), "constant")
    if mode not in _PAD_MODES:
        return f"attribute 'mode' = {mode!r}: PAD has {', '.join(_PAD_MODES)}"
    if opset < 11:
        pads, value = list(attrs.get("pads", [])), float(attrs.get("value", 0.0))
        axes = list(range(rank))
    else:
        if _runtime_input(node, consts, 1, 2, 3) is not None:
            i = _runtime_input(node, consts, 1, 2, 3)
            return f"input {i} ({['pads', 'constant_value', 'axes'][i - 1]!r}) is a runtime value"
        pads = [int(p) for p in _input(node, consts, 1).reshape(-1)]
        cv = _input(node, consts, 2)
        value = float(cv.reshape(-1)[0]) if cv is not None and cv.size else 0.0
        ax = _input(node, consts, 3)
        axes = [int(a) % rank for a in ax.reshape(-1)] if ax is not None else list(range(rank))
    if len(pads) != 2 * len(axes):
        return f"pads {pads} for {len(axes)} axes"
    begin, end = [0] * rank, [0] * rank
    for j, a in enumerate(axes):
        begin[a], end[a] = pads[j], pads[j + len(axes)]
    if min(begin + end, default=0) < 0:
        return f"negative pads {pads} (cropping)"
    if mode != "constant" and not math.isfinite(value):
        value = 0.0
    return mode, begin, end, value if mode == "constant" else 0.0


def check_misc(op, attrs, node, consts, ranks, shapes, opset):
    """Why nnc cannot run this node of MISC_OPS, or None."""
    x = node.input[0]
    if op in ("Resize", "Upsample"):
        if _runtime_input(node, consts, 1, 2, 3) is not None:
            return f"input {_runtime_input(node, consts, 1, 2, 3)} (roi/scales/sizes) is a " \
                   "runtime value"
        if x not in shapes or node.output[0] not in shapes:
            return "the input's and output's shapes must be known at load"
        plan = resize_plan(op, attrs, node, consts, tuple(shapes[x]),
                           tuple(shapes[node.output[0]]))
        return plan if isinstance(plan, str) else None
    if op == "Pad":
        plan = pad_plan(attrs, node, consts, ranks.get(x, 0), opset)
        return plan if isinstance(plan, str) else None
    if op == "Gather":
        if len(node.input) < 2 or node.input[1] not in consts:
            return "input 1 ('indices') is a runtime value; nnc gathers with constant indices"
        return None
    if op == "Cast":
        to = attrs.get("to")
        if to not in _CAST_DTYPES:
            return f"attribute 'to' = {to!r}: a runtime Cast reaches {sorted(_CAST_DTYPES)}"
        return None
    if op in ("ArgMax", "ArgMin"):
        if attrs.get("select_last_index", 0):
            return "attribute 'select_last_index' = 1 (ARGMAX/ARGMIN return the first index)"
        return None
    return None


class MiscEmitter:
    """The ``_op_<OpType>`` methods of MISC_OPS (mixed into _ops.OpEmitter)."""

    def _op_Resize(self, k, n, a):
        kind, align = resize_plan(n.op_type, a, n, self.consts, tuple(self.shapes[n.input[0]]),
                                  tuple(self.shapes[n.output[0]]))
        x, deps = self.get(n.input[0], "nhwc")
        self._write(n, Cmd("UPSAMPLE", type=kind, align_corners=align), [x], deps)

    _op_Upsample = _op_Resize

    def _op_Pad(self, k, n, a):
        lay = self.layout[n.output[0]]
        rank = len(self.shapes[n.input[0]])
        mode, begin, end, value = pad_plan(a, n, self.consts, rank, self.opset)
        x, deps = self.get(n.input[0], lay)
        if lay == "nhwc":
            begin, end = [begin[p] for p in TO_NHWC], [end[p] for p in TO_NHWC]
        self._write(n, Cmd("PAD", begin=begin, end=end, mode=mode, value=value), [x], deps)

    def _op_Gather(self, k, n, a):
        """Constant indices into a runtime value: INDEX_SELECT over axis 0, else one
        DATA_TRANSFER per index from the strided slice at that index (a view on both sides)."""
        shape = tuple(self.shapes[n.input[0]])
        rank = len(shape)
        axis = a.get("axis", 0)
        axis = axis + rank if axis < 0 else axis
        idx = np.asarray(self.consts[n.input[1]]).astype(np.int64)
        from nnc.onnx._ops import _invalid

        if not 0 <= axis < rank or ((idx < -shape[axis]) | (idx >= shape[axis])).any():
            raise _invalid(n, f"indices {idx.reshape(-1).tolist()} or axis {axis} out of range "
                              f"for an input of shape {list(shape)}")
        idx = np.where(idx < 0, idx + shape[axis], idx)
        x, deps = self._contiguous(n.input[0], n)
        y = self.storage(n.output[0])
        label = n.name or n.output[0]
        if axis == 0 and idx.ndim >= 1:
            table = x.view((shape[0], math.prod(shape[1:])))
            rows = Tensor(np.ascontiguousarray(idx.reshape(-1)))
            out = y.view((idx.size, math.prod(shape[1:])))
            e = self.node(Cmd("INDEX_SELECT"), [table, rows], [out], label, deps)
            self.deps[self.root(n.output[0])] = [e]
            return
        inner = math.prod(shape[axis + 1:])
        src = x.view((math.prod(shape[:axis]), shape[axis], inner))
        dst = y.view((math.prod(shape[:axis]), idx.size, inner))
        es = []
        for j, i in enumerate(idx.reshape(-1)):
            s = src.view((src.shape[0], inner), offset=int(i) * inner,
                         strides=(shape[axis] * inner, 1))
            d = dst.view((dst.shape[0], inner), offset=j * inner, strides=(idx.size * inner, 1))
            es.append(self.node(Cmd("DATA_TRANSFER"), [s], [d], f"{label}/{j}", deps))
        self.deps[self.root(n.output[0])] = es

    def _op_Cast(self, k, n, a):
        """The model computes in one dtype: a Cast to it is a copy; to another it rounds there
        and back (DATATYPE_CONVERSION twice), so what follows sees the value ONNX Runtime
        computes (float16 rounding, integer truncation) in the model's dtype."""
        lay = self.layout[n.output[0]]
        x, deps = self.get(n.input[0], lay)
        to = _CAST_DTYPES[a["to"]]
        if np.dtype(to) == np.dtype(self.dtype):
            self._write(n, Cmd("DATA_TRANSFER"), [x], deps)
            return
        tmp = Tensor.empty(tuple(x.shape), dtype=to)
        label = n.name or n.output[0]
        e = self.node(Cmd("DATATYPE_CONVERSION"), [x], [tmp], f"{label}/to_{to}", deps)
        self._write(n, Cmd("DATATYPE_CONVERSION"), [tmp], [e])

    def _op_ArgMax(self, k, n, a):
        """Into an int64 tensor, then the model's dtype (nnc's loaded graph holds one dtype;
        indices below 2 ** 24 are exact in float32)."""
        x, deps = self.get(n.input[0], "plain")
        rank = len(x.shape)
        axis = a.get("axis", 0)
        axis = axis + rank if axis < 0 else axis
        kept = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
        tmp = Tensor.empty(kept, dtype="int64")
        label = n.name or n.output[0]
        e = self.node(Cmd(n.op_type.upper(), axis=axis), [x], [tmp], f"{label}/index", deps)
        y = self.storage(n.output[0])
        e = self.node(Cmd("DATATYPE_CONVERSION"), [tmp], [y.view(kept)], label, [e])
        self.deps[self.root(n.output[0])] = [e]

    _op_ArgMin = _op_ArgMax
