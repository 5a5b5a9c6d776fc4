"""nnc.onnx.save: UPSAMPLE, PAD, INDEX_SELECT, ARGMAX/ARGMIN, DATATYPE_CONVERSION and
SCALED_DOT_PRODUCT_ATTENTION as ONNX operators (the methods _save._Saver inherits; the other
commands are in _save). Every value keeps nnc's shape and layout, as in _save.
"""

from __future__ import annotations

import numpy as np

from nnc.cmd.upsample import source_index

_TO_NCHW = [0, 3, 1, 2]
_TO_NHWC = [0, 2, 3, 1]
_ELEM = {"float32": 1, "float64": 11, "float16": 10, "int32": 6, "int64": 7, "uint8": 2}
# (coordinate_transformation_mode, nearest_mode) pairs tried for UPSAMPLE nearest, most robust
# first: asymmetric + floor divides by an exact scale for integer factors.
_NEAREST_MODES = (("asymmetric", "floor"), ("half_pixel", "round_prefer_ceil"),
                  ("align_corners", "round_prefer_ceil"))
MISC_SAVABLE = {"UPSAMPLE", "PAD", "INDEX_SELECT", "ARGMAX", "ARGMIN", "DATATYPE_CONVERSION",
                "SCALED_DOT_PRODUCT_ATTENTION"}


def _onnx_nearest_f32(n, m, coord, nearest_mode):
    """ONNX Runtime's nearest source index per output index: Resize given ``sizes``, its scale
    m / n and coordinates in float32 (its arithmetic), or None for another mode."""
    o = np.arange(m, dtype=np.float32)
    s = np.float32(m) / np.float32(n)
    if coord == "asymmetric":
        x = o / s
    elif coord == "half_pixel":
        x = (o + np.float32(0.5)) / s - np.float32(0.5)
    elif coord == "align_corners":
        x = o * np.float32(n - 1) / np.float32(m - 1) if m > 1 else np.zeros(m, np.float32)
    else:
        return None
    i = np.floor(x) if nearest_mode == "floor" else np.floor(x + np.float32(0.5))
    return np.clip(i, 0, n - 1).astype(np.intp)


def nearest_modes(n, m, align):
    """The (coordinate_transformation_mode, nearest_mode) pairs with which ONNX's Resize (in
    its reference definition, float64, and in ONNX Runtime's float32 arithmetic) picks the
    pixels UPSAMPLE nearest picks along an axis of n inputs and m outputs, most robust first."""
    from nnc.onnx._ops_misc import _onnx_nearest

    want = source_index(n, m, "nearest", align)[0]
    return [(coord, mode) for coord, mode in _NEAREST_MODES
            if np.array_equal(_onnx_nearest(n, m, m / n, coord, mode), want)
            and np.array_equal(_onnx_nearest_f32(n, m, coord, mode), want)]


class MiscSaver:
    """The save methods of MISC_SAVABLE (mixed into _save._Saver, which supplies ``node``,
    ``init``, ``read``, ``scalar`` and ``opset``)."""

    def _shape(self, name, shape):
        return self.node("Reshape", [name, self.init(np.array(shape, np.int64), "shape")])

    def save_misc(self, cmd, ins, y, dt):
        """The ONNX value of command ``cmd``'s output y."""
        name = cmd.name
        if name == "UPSAMPLE":
            return self._upsample(cmd, ins[0], y)
        if name == "PAD":
            return self._pad(cmd, ins[0], dt)
        if name == "INDEX_SELECT":
            return self.node("Gather", [self.read(ins[0]), self.read(ins[1])], axis=0)
        if name in ("ARGMAX", "ARGMIN"):
            from nnc.cmd.argmax import axis_of

            op = "ArgMax" if name == "ARGMAX" else "ArgMin"
            out = self.node(op, [self.read(ins[0])], axis=axis_of(cmd, ins[0].ndim), keepdims=1)
            if str(y.dtype) != "int64":
                out = self.node("Cast", [out], to=_ELEM[str(y.dtype)])
            return out
        if name == "DATATYPE_CONVERSION":
            return self.node("Cast", [self.read(ins[0])], to=_ELEM[str(y.dtype)])
        return self._attention(cmd, ins, dt)

    def _upsample(self, cmd, x, y):
        """Resize of the NCHW image (Transpose in and out, as Conv), to ``sizes``: nearest with
        the coordinate and rounding modes that pick UPSAMPLE's pixels (nearest_mode), else two
        Gathers of those pixels; bilinear as linear with half_pixel coordinates (align_corners
        with NNC's align_corners). [H, W, C] goes through [1, H, W, C]."""
        kind, align = cmd.params["type"], cmd.params["align_corners"]
        v = self.read(x)
        xs, ys = tuple(x.shape), tuple(y.shape)
        if x.ndim == 3:
            xs, ys = (1,) + xs, (1,) + ys
            v = self._shape(v, xs)
        (n_h, n_w), (m_h, m_w) = xs[1:3], ys[1:3]
        if kind == "nearest":
            along_w = nearest_modes(n_w, m_w, align)
            modes = [c for c in nearest_modes(n_h, m_h, align) if c in along_w]
            if modes:
                coord, rounding = modes[0]
                attrs = {"coordinate_transformation_mode": coord, "nearest_mode": rounding}
            else:
                # No one Resize picks these pixels: index them directly (exact, any sizes).
                for axis, (n, m) in ((1, (n_h, m_h)), (2, (n_w, m_w))):
                    idx = source_index(n, m, "nearest", align)[0].astype(np.int64)
                    v = self.node("Gather", [v, self.init(idx, "indices")], axis=axis)
                return v if x.ndim == 4 else self._shape(v, tuple(y.shape))
        else:
            attrs = {"mode": "linear",
                     "coordinate_transformation_mode": "align_corners" if align else "half_pixel"}
        z = self.node("Transpose", [v], perm=_TO_NCHW)
        sizes = self.init(np.array([ys[0], ys[3], m_h, m_w], np.int64), "sizes")
        none = np.zeros(0, np.float32)
        z = self.node("Resize", [z, self.init(none, "roi"), self.init(none, "scales"), sizes],
                      **attrs)
        out = self.node("Transpose", [z], perm=_TO_NHWC)
        return out if x.ndim == 4 else self._shape(out, tuple(y.shape))

    def _pad(self, cmd, x, dt):
        """Pad: its pads and value inputs from opset 11, attributes before."""
        p = cmd.params
        pads = [int(b) for b in p["begin"]] + [int(e) for e in p["end"]]
        if self.opset < 11:
            return self.node("Pad", [self.read(x)], mode=p["mode"], pads=pads,
                             value=float(p["value"]))
        args = [self.read(x), self.init(np.array(pads, np.int64), "pads")]
        if p["mode"] == "constant":
            args.append(self.scalar(p["value"], dt))
        return self.node("Pad", args, mode=p["mode"])

    def _attention(self, cmd, ins, dt):
        """SCALED_DOT_PRODUCT_ATTENTION as its definition: q and k moved heads-first (k
        transposed), MatMul, Mul by scale, Add the mask (and the causal mask, -inf where a key
        is hidden), Softmax over the keys, MatMul by v, the heads moved back. Grouped-query
        heads broadcast: q as [B, Hk, group, Sq, D] against k's [B, Hk, 1, D, Sk]. A causal row
        left with no key gives 0, as the command's does."""
        q, k, v = ins[:3]
        mask = ins[3] if len(ins) > 3 else None
        p = cmd.params
        if q.ndim == 4:
            b, sq, h, d = q.shape
            _, sk, hk, _ = k.shape
            dv = v.shape[3]
            qn = self.node("Transpose", [self.read(q)], perm=[0, 2, 1, 3])
            kn = self.node("Transpose", [self.read(k)], perm=[0, 2, 3, 1])
            vn = self.node("Transpose", [self.read(v)], perm=[0, 2, 1, 3])
        else:
            (b, sq, d), (_, sk, _), dv = q.shape, k.shape, v.shape[2]
            h = hk = 1
            qn = self._shape(self.read(q), (b, 1, sq, d))
            kn = self._shape(self.node("Transpose", [self.read(k)], perm=[0, 2, 1]),
                             (b, 1, d, sk))
            vn = self._shape(self.read(v), (b, 1, sk, dv))
        group = h // hk
        if group > 1:
            qn = self._shape(qn, (b, hk, group, sq, d))
            kn = self._shape(kn, (b, hk, 1, d, sk))
            vn = self._shape(vn, (b, hk, 1, sk, dv))
        s = self.node("Mul", [self.node("MatMul", [qn, kn]), self.scalar(p["scale"], dt)])
        if group > 1:
            s = self._shape(s, (b, h, sq, sk))
        if mask is not None:
            s = self.node("Add", [s, self.read(mask)])
        keep = np.ones((sq, sk), bool)
        if p["is_causal"]:
            keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
            s = self.node("Add", [s, self.init(np.where(keep, 0, -np.inf).astype(dt), "causal")])
        s = self.node("Softmax", [s], axis=-1)
        if not keep.any(axis=-1).all():
            s = self.node("Where", [self.init(keep.any(axis=-1, keepdims=True), "rows"), s,
                                    self.scalar(0, dt)])
        if group > 1:
            s = self._shape(s, (b, hk, group, sq, sk))
        out = self._shape(self.node("MatMul", [s, vn]), (b, h, sq, dv))
        if q.ndim == 4:
            return self.node("Transpose", [out], perm=[0, 2, 1, 3])
        return self._shape(out, (b, sq, dv))
