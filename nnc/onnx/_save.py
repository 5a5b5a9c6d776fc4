"""nnc.onnx.save: an nnc concrete graph -> an ONNX model of the same computation.

nnc tensors are memory, ONNX values are names: every write makes a new version of the memory it
writes (a node running in place gets a fresh output name), and a read takes the latest version
of exactly that memory. A read of memory no node wrote exactly is, in this order: a tiling of
slices nodes wrote (a zero-copy concat buffer -> one Concat), the same contiguous memory in
another shape (a view -> Reshape), elements of one written tensor (a Slice, Split, Squeeze or
Unsqueeze view -> Slice, then Transpose/Reshape), such elements of a Concat of written slices
(a view of a concat buffer), or else a constant (weights -> an initializer holding the tensor's
current contents). Memory a node or graph input writes is never a constant: a read of it that
none of these expresses raises UnsupportedError.

Layout: nnc's CONVOLUTION and pools are NHWC, ONNX's Conv and pools NCHW, so each is written as
Transpose -> Conv/Pool -> Transpose, with weights stored as OIHW initializers; every other value
keeps nnc's shape. A graph loaded from an NCHW model therefore saves with the same NCHW inputs
and outputs (its own TRANSPOSE nodes at the edges are written as Transpose).
"""

from __future__ import annotations

import math

import numpy as np

from nnc.base.core import NNCError
from nnc.onnx._ops_math import ELEMENTARY, PARAMETERISED
from nnc.onnx._save_misc import MISC_SAVABLE, MiscSaver
from nnc.tensor.tensor import Tensor

_TO_NCHW = [0, 3, 1, 2]
_TO_NHWC = [0, 2, 3, 1]
_ELEM = {"float32": 1, "float64": 11, "float16": 10, "int32": 6, "int64": 7, "uint8": 2}


def _key(t):
    return (t.data_ptr, tuple(t.shape), tuple(t.strides), str(t.dtype))


def _shares(a, b):
    """Do tensors a and b have an element in common? Exact, so the channel slices of one
    Concat buffer (interleaved, disjoint) do not; a case too costly to decide counts as yes."""
    if a.device != "cpu" or b.device != "cpu":
        return a.device == b.device     # no host view to decide with: their ranges overlap
    try:
        return bool(np.shares_memory(a.numpy(), b.numpy(), max_work=1 << 20))
    except np.exceptions.TooHardError:
        return True


def _slice_plan(w, off, axes):
    """(starts, ends, steps, order) of a Slice of w over all its axes whose elements, with its
    size-1 axes dropped, are a view's: ``off`` the view's first element in elements from w's,
    ``axes`` its (size, stride) pairs of size > 1, ``order`` the axis of w each one steps along.
    None if w's strides are not nested (each axis' stride spans every later axis, as in a
    C-contiguous tensor or a slice of one) or no such Slice exists."""
    dims = [j for j in range(w.ndim) if w.shape[j] > 1]
    for a, b in zip(dims, dims[1:]):
        if w.strides[b] <= 0 or w.strides[a] < w.strides[b] * w.shape[b]:
            return None
    starts = [0] * w.ndim
    for j in dims:
        starts[j], off = divmod(off, w.strides[j])
        if starts[j] >= w.shape[j]:
            return None
    if off:
        return None
    steps, order = [1] * w.ndim, []

    def assign(i):
        # Each view axis steps along its own axis of w and stays inside it: then every element's
        # address is the Slice's (a small search: a stride can divide several of w's).
        if i == len(axes):
            return True
        n, s = axes[i]
        for j in dims:
            if j in order or s % w.strides[j]:
                continue
            step = s // w.strides[j]
            if step and 0 <= starts[j] + step * (n - 1) < w.shape[j]:
                order.append(j)
                steps[j] = step
                if assign(i + 1):
                    return True
                order.pop()
                steps[j] = 1
        return False

    if not assign(0):
        return None
    sizes = dict(zip(order, (n for n, _ in axes)))
    # An end below 0 counts from the axis' end: a negative step's "before 0" is the most
    # negative int64 (ONNX clamps it to -1).
    ends = [starts[j] + steps[j] * sizes.get(j, 1) for j in range(w.ndim)]
    ends = [e if e >= 0 else -(1 << 63) for e in ends]
    return starts, ends, steps, order


class _Saver(MiscSaver):
    def __init__(self, onnx, graph, opset):
        self.onnx = onnx
        self.h = onnx.helper
        self.graph = graph
        self.opset = opset
        self.nodes, self.inits = [], []
        self.current = {}  # memory key -> ONNX name of its latest version
        self.tensors = {}  # memory key -> Tensor, for the keys in current
        self.written = []  # every graph input and node output: memory the inputs decide
        self.reader = ("output", "")  # the command (or graph output) reading, for errors
        self.n = 0

    def name(self, base="v"):
        self.n += 1
        return f"{base}_{self.n}"

    def node(self, op, ins, n_out=1, **attrs):
        outs = [self.name(op) for _ in range(n_out)]
        self.nodes.append(self.h.make_node(op, ins, outs, name=self.name("/" + op), **attrs))
        return outs[0] if n_out == 1 else outs

    def init(self, array, base="c"):
        name = self.name(base)
        self.inits.append(self.onnx.numpy_helper.from_array(np.array(array, order="C"), name))
        return name

    def scalar(self, value, dtype):
        return self.init(np.array(value, dtype=dtype))

    def write(self, t, name, clobber=True):
        """t now holds ONNX value ``name``. A node's write (``clobber``) also forgets every
        other tensor over memory t overlaps: their values are gone (a later value reusing a
        dead one's memory, a slice written after its buffer was read whole), so no Concat or
        Reshape may be assembled from them. A value assembled for a read keeps its parts."""
        k = _key(t)
        if clobber:
            lo, hi = self._lo_hi(t)
            for other in [o for o, w in self.tensors.items() if o != k]:
                w = self.tensors[other]
                wlo, whi = self._lo_hi(w)
                if wlo < hi and lo < whi and _shares(t, w):
                    del self.tensors[other]
                    del self.current[other]
        self.current[k] = name
        self.tensors[k] = t

    def _lo_hi(self, t):
        item = t.dtype.itemsize
        lo = t.data_ptr + item * sum(s * (n - 1) for s, n in zip(t.strides, t.shape) if s < 0)
        hi = t.data_ptr + item * (1 + sum(s * (n - 1) for s, n in zip(t.strides, t.shape)
                                          if s > 0))
        return lo, hi

    def read(self, t):
        k = _key(t)
        if k in self.current:
            return self.current[k]
        name = self._concat(t) or self._reshape(t) or self._view(t) or self._hull(t)
        if name is None:
            self._check_constant(t)
            name = self.init(t.numpy(), "w")
        self.write(t, name, clobber=False)
        return name

    def _check_constant(self, t):
        """Refuse to write t as an initializer if a node or a graph input writes any of its
        memory: its contents at save time are one run's, wrong for every other input."""
        from nnc.onnx import UnsupportedError

        if self._is_written(t):
            op, name = self.reader
            raise UnsupportedError({op: (1, [name], (
                f"it reads a view (shape {tuple(t.shape)}, strides {tuple(t.strides)}) of "
                f"memory the graph writes that no Slice, Reshape, Transpose or Concat of "
                f"written values expresses; an initializer would hold one run's values"))},
                "nnc graph")

    def _is_written(self, t):
        """Does a graph input or any node's output share an element with t?"""
        lo, hi = self._lo_hi(t)
        for w in self.written:
            wlo, whi = self._lo_hi(w)
            if wlo < hi and lo < whi and _shares(t, w):
                return True
        return False

    def _concat(self, t):
        """One Concat of written slices that tile t along one axis, or None."""
        lo, hi = self._lo_hi(t)
        parts = []
        for k, w in self.tensors.items():
            if (w.ndim == t.ndim and tuple(w.strides) == tuple(t.strides) and k != _key(t)
                    and str(w.dtype) == str(t.dtype) and lo <= w.data_ptr < hi):
                diff = [a for a in range(t.ndim) if w.shape[a] != t.shape[a]]
                if len(diff) == 1:
                    parts.append((diff[0], w))
        axes = {a for a, _ in parts}
        for axis in axes:
            step = t.strides[axis] * t.dtype.itemsize
            chosen, at = [], t.data_ptr
            for w in sorted((w for a, w in parts if a == axis), key=lambda w: w.data_ptr):
                if w.data_ptr == at:
                    chosen.append(w)
                    at += w.shape[axis] * step
            if chosen and sum(w.shape[axis] for w in chosen) == t.shape[axis]:
                return self.node("Concat", [self.current[_key(w)] for w in chosen], axis=axis)
        return None

    def _reshape(self, t):
        if not t.is_contiguous:
            return None
        for k, w in self.tensors.items():
            if w.data_ptr == t.data_ptr and w.is_contiguous and w.size == t.size \
                    and str(w.dtype) == str(t.dtype):
                return self.node("Reshape", [self.current[k],
                                             self.init(np.array(t.shape, np.int64), "shape")])
        return None

    def _view(self, t):
        """t as a Slice of one written tensor w, then a Transpose where t's axes run in another
        order than w's and a Reshape where the ranks differ: the loader's Slice and Split views
        and their Squeeze/Unsqueeze (size-1 axes in or out), or None."""
        if not t.size:
            return None     # holds nothing: its initializer is empty, right for every input
        item = t.dtype.itemsize
        axes = [(n, s) for n, s in zip(t.shape, t.strides) if n > 1]
        for k, w in list(self.tensors.items()):
            if (k == _key(t) or not w.size or str(w.dtype) != str(t.dtype)
                    or t.data_ptr < w.data_ptr or (t.data_ptr - w.data_ptr) % item):
                continue
            plan = _slice_plan(w, (t.data_ptr - w.data_ptr) // item, axes)
            if plan is None:
                continue
            starts, ends, steps, order = plan
            out = self.node("Slice", [
                self.current[k], self.init(np.array(starts, np.int64), "starts"),
                self.init(np.array(ends, np.int64), "ends"),
                self.init(np.arange(w.ndim, dtype=np.int64), "axes"),
                self.init(np.array(steps, np.int64), "steps")])
            sliced = [1] * w.ndim
            for (n, _), j in zip(axes, order):
                sliced[j] = n
            if order != sorted(order):
                # Unmapped (size-1) axes first, then w's axes in t's order.
                perm = [j for j in range(w.ndim) if j not in order] + order
                out = self.node("Transpose", [out], perm=perm)
                sliced = [sliced[j] for j in perm]
            if tuple(sliced) != tuple(t.shape):
                out = self.node("Reshape", [out, self.init(np.array(t.shape, np.int64),
                                                           "shape")])
            return out
        return None

    def _hull(self, t):
        """A Concat of written tensors that tile, along one axis, a box covering t's memory
        (the loader's zero-copy concat buffer, read through a view of another shape or a part
        straddling two slices): written as that Concat, then t as a view of it; or None."""
        lo, hi = self._lo_hi(t)
        parts = [w for w in self.tensors.values()
                 if str(w.dtype) == str(t.dtype) and w.size and self._lo_hi(w)[0] < hi
                 and lo < self._lo_hi(w)[1]]
        for w in parts:
            for axis in range(w.ndim):
                step = w.strides[axis] * w.dtype.itemsize
                if step <= 0:
                    continue
                # The longest chain of slices that follow w along axis, each beginning where
                # the previous one ends (same rank, strides and other dimensions).
                total, at = w.shape[axis], w.data_ptr + w.shape[axis] * step
                while True:
                    nxt = [p for p in self.tensors.values() if p.data_ptr == at
                           and str(p.dtype) == str(w.dtype) and p.ndim == w.ndim
                           and tuple(p.strides) == tuple(w.strides)
                           and all(p.shape[a] == w.shape[a] for a in range(w.ndim)
                                   if a != axis)]
                    if not nxt:
                        break
                    total += nxt[0].shape[axis]
                    at += nxt[0].shape[axis] * step
                if total == w.shape[axis]:
                    continue
                shape = list(w.shape)
                shape[axis] = total
                try:
                    box = w.view(tuple(shape), strides=tuple(w.strides))
                except NNCError:
                    continue
                blo, bhi = self._lo_hi(box)
                if not (blo <= lo and hi <= bhi) or _key(box) == _key(t):
                    continue
                name = self._concat(box)
                if name is None:
                    continue
                self.write(box, name, clobber=False)
                return self._reshape(t) or self._view(t)
        return None

    def weight(self, t, perm):
        """A weight: an initializer in ONNX's layout if neither a node nor a graph input writes
        its memory, else a Transpose of its value (a weight computed from the inputs)."""
        if _key(t) in self.current or self._is_written(t):
            return self.node("Transpose", [self.read(t)], perm=perm)
        return self.init(np.transpose(t.numpy(), perm), "w")

    # -- commands ----------------------------------------------------------------------------
    def _math(self, name, p, x):
        """One command of _MATH as its ONNX operator."""
        if name == "MISH" and self.opset < 18:
            return self.node("Mul", [x, self.node("Tanh", [self.node("Softplus", [x])])])
        attrs = {key: p[param] for key, param in _MATH_ATTRS.get(name, {}).items()}
        return self.node(_MATH[name], [x], **attrs)

    def _conv_epilogue(self, out, p, ins, dt):
        """Graph.simplify's fused epilogue as the nodes it folded: + residual, then the
        activation (NHWC, after the transpose back)."""
        if len(ins) > 3 and ins[3] is not None:
            out = self.node("Add", [out, self.read(ins[3])])
        if p.get("activation") == "relu":
            out = self.node("Relu", [out])
        elif p.get("activation") == "clamp":
            lo, hi = p["clamp"]
            args = [out, "" if lo == -math.inf else self.scalar(lo, dt),
                    "" if hi == math.inf else self.scalar(hi, dt)]
            while args[-1] == "":
                args.pop()
            out = self.node("Clip", args)
        elif p.get("activation") == "hard_swish":
            out = self.node("HardSwish", [out])
        elif p.get("activation") == "swish":
            # As SWISH itself is written: ONNX has no SiLU operator.
            out = self.node("Mul", [out, self.node("Sigmoid", [out])])
        return out

    def emit(self, e):
        cmd, ins, outs = e.cmd, list(e.inputs), list(e.outputs)
        self.reader = (cmd.name, e.name or cmd.name)
        p = cmd.params
        dt = np.dtype(str(outs[0].dtype)) if outs and outs[0] is not None else np.float32
        name = cmd.name
        if name == "NOOP":
            return
        if name == "DATA_TRANSFER":
            for x, y in zip(ins, outs):
                self.write(y, self.node("Identity", [self.read(x)]))
            return
        if name == "SET":
            for y in outs:
                self.write(y, self.init(np.full(y.shape, p["value"], dtype=str(y.dtype))))
            return
        y = outs[0]
        if name == "CONVOLUTION_TRANSPOSE":
            # nnc's weights [C, kh, kw, O/groups] are ONNX's [C, O/groups, kH, kW] transposed.
            args = [self.node("Transpose", [self.read(ins[0])], perm=_TO_NCHW),
                    self.weight(ins[1], _TO_NCHW)]
            if len(ins) > 2 and ins[2] is not None:
                args.append(self.read(ins[2]))
            z = self.node("ConvTranspose", args, group=p["groups"],
                          kernel_shape=list(ins[1].shape[1:3]), pads=list(p["padding"]),
                          strides=list(p["stride"]), dilations=list(p["dilation"]),
                          output_padding=list(p["output_padding"]))
            self.write(y, self.node("Transpose", [z], perm=_TO_NHWC))
            return
        if name in ("CONVOLUTION", "MAX_POOL", "AVG_POOL"):
            x = self.node("Transpose", [self.read(ins[0])], perm=_TO_NCHW)
            top, left, bottom, right = p["padding"]
            pads = [top, left, bottom, right]
            if name == "CONVOLUTION":
                args = [x, self.weight(ins[1], _TO_NCHW)]
                if len(ins) > 2 and ins[2] is not None:
                    args.append(self.read(ins[2]))
                kh, kw = ins[1].shape[1:3]
                z = self.node("Conv", args, group=p["groups"], kernel_shape=[kh, kw], pads=pads,
                              strides=list(p["stride"]), dilations=[1, 1])
            elif name == "MAX_POOL":
                z = self.node("MaxPool", [x], kernel_shape=list(p["size"]), pads=pads,
                              strides=list(p["stride"]),
                              **({"ceil_mode": 1} if p.get("ceil_mode") else {}))
            else:
                z = self.node("AveragePool", [x], kernel_shape=list(p["size"]), pads=pads,
                              strides=list(p["stride"]),
                              count_include_pad=int(p["count_include_pad"]),
                              **({"ceil_mode": 1} if p.get("ceil_mode") else {}))
            out = self.node("Transpose", [z], perm=_TO_NHWC)
            if name == "CONVOLUTION":
                out = self._conv_epilogue(out, p, ins, dt)
        elif name == "SOFTMAX" and ins[0].ndim >= 3:
            # Each batch entry is one row (nnc's SOFTMAX): Flatten to [N, rest], Softmax over
            # the last axis, Reshape back.
            flat = self.node("Flatten", [self.read(ins[0])], axis=1)
            z = self.node("Softmax", [flat], axis=-1)
            out = self.node("Reshape", [z, self.init(np.array(ins[0].shape, np.int64), "shape")])
        elif name in _UNARY:
            op = _UNARY[name]
            out = self.node(op, [self.read(ins[0])], **({"axis": -1} if op == "Softmax" else {}))
        elif name in _REDUCE:
            out = self._reduce(name, p["axes"], ins[0])
            if y.ndim != ins[0].ndim:
                # An output lined up from the right (NNC's rule) has another rank: the kept
                # dimensions reshaped to it.
                out = self._shape(out, tuple(y.shape))
        elif name == "CLAMP":
            lo, hi = p["min"], p["max"]
            args = [self.read(ins[0]), "" if math.isnan(lo) else self.scalar(lo, dt),
                    "" if math.isnan(hi) else self.scalar(hi, dt)]
            while args[-1] == "":
                args.pop()
            out = self.node("Clip", args)
        elif name == "ADD" and len(ins) > 1 and ins[1] is not None and p["p"] == 1.0 \
                and p["q"] == -1.0:
            out = self.node("Sub", [self.read(ins[0]), self.read(ins[1])])
        elif name in ("ADD", "MUL"):
            out = self._scaled(self.read(ins[0]), p["p"], dt)
            b = ins[1] if len(ins) > 1 else None
            if b is not None:
                other = self.read(b)
                if name == "ADD":
                    out = self.node("Add", [out, self._scaled(other, p["q"], dt)])
                else:
                    out = self.node("Mul", [out, other])
        elif name in ("EWSUM", "EWPROD"):
            names = [self.read(x) for x in ins]
            out = self.node("Sum", names) if name == "EWSUM" else names[0]
            if name == "EWPROD":
                for other in names[1:]:
                    out = self.node("Mul", [out, other])
                if len(names) == 1:
                    out = self.node("Identity", [out])
        elif name == "EWDIV":
            b = self.read(ins[1])
            out = self.node("Reciprocal", [b]) if ins[0] is None else \
                self.node("Div", [self.read(ins[0]), b])
        elif name == "SCALAR_MUL" and p["a"] == -1.0:
            out = self.node("Neg", [self.read(ins[0])])
        elif name == "SCALAR_MUL":
            out = self.node("Mul", [self.read(ins[0]), self.scalar(p["a"], dt)])
        elif name == "TRANSPOSE":
            from nnc.cmd.transpose import permutation

            out = self.node("Transpose", [self.read(ins[0])],
                            perm=list(permutation(cmd, ins[0].ndim)))
        elif name == "GEMM":
            out = self._gemm(cmd, ins)
        elif name in _ACTIVATIONS:
            out = self.node(_ACTIVATIONS[name], [self.read(x) for x in ins])
        elif name in _MATH:
            out = self._math(name, p, self.read(ins[0]))
        elif name == "HARD_SIGMOID":
            out = self.node("HardSigmoid", [self.read(ins[0])], alpha=p["alpha"], beta=p["beta"])
        elif name == "SWISH":
            x = self.read(ins[0])
            out = self.node("Mul", [x, self.node("Sigmoid", [x])])
        elif name == "GELU":
            out = self._gelu(self.read(ins[0]), p["tanh"], dt)
        elif name == "LRN":
            # ONNX's LRN normalises axis 1: nnc's channels (the last axis) moved there and back.
            nd = ins[0].ndim
            perm = [0, nd - 1] + list(range(1, nd - 1))
            z = self.node("LRN", [self.node("Transpose", [self.read(ins[0])], perm=perm)],
                          size=p["size"], alpha=p["alpha"], beta=p["beta"], bias=p["bias"])
            out = self.node("Transpose", [z], perm=[int(i) for i in np.argsort(perm)])
        elif name in _NORMS:
            out = self._norm(cmd, ins, outs, dt)
        elif name in MISC_SAVABLE:
            out = self.save_misc(cmd, ins, y, dt)
        else:  # pragma: no cover - save() checks every command first
            raise AssertionError(name)
        self.write(y, out)

    def _reduce(self, name, axes, x):
        """REDUCE_* keeps the reduced axes (keepdims=1), on nnc's own shape like every value
        here; ``axes`` is an attribute up to opset 17 (ReduceSum: 12), an input after."""
        axes = [int(ax) % x.ndim for ax in ((axes,) if isinstance(axes, int) else axes)]
        op = _REDUCE[name]
        if self.opset >= (13 if op == "ReduceSum" else 18):
            return self.node(op, [self.read(x), self.init(np.array(axes, np.int64), "axes")],
                             keepdims=1)
        return self.node(op, [self.read(x)], axes=axes, keepdims=1)

    def _mean(self, v, axes):
        """ReduceMean of ONNX value v over axes, kept (axes an input from opset 18)."""
        if self.opset >= 18:
            return self.node("ReduceMean", [v, self.init(np.array(axes, np.int64), "axes")],
                             keepdims=1)
        return self.node("ReduceMean", [v], axes=list(axes), keepdims=1)

    def _norm(self, cmd, ins, outs, dt):
        """LAYER_NORM over trailing axes with a scale and bias of the normalised shape, and no
        saved outputs: ONNX's LayerNormalization. Otherwise (GROUP_NORM, RMSNORM, other axes,
        saved_mean / saved_inv_std written) the definition in ReduceMean, Sub, Mul, Sqrt, Div,
        the group axis split by a Reshape."""
        from nnc.cmd.norm import saved_shape

        p = cmd.params
        x = ins[0]
        nd = x.ndim
        shape = tuple(x.shape)
        saved = [t for t in outs[1:] if t is not None]
        if cmd.name == "LAYER_NORM" and not saved and len(ins) == 3 and self.opset >= 17:
            axes = sorted(a % nd for a in p["axis"])
            inner = shape[axes[0]:]
            if axes == list(range(axes[0], nd)) and all(
                    tuple(t.shape) == inner for t in ins[1:]):
                return self.node("LayerNormalization", [self.read(t) for t in ins],
                                 axis=axes[0], epsilon=p["epsilon"])
        v = self.read(x)
        if cmd.name == "GROUP_NORM":
            g = p["group_axis"] % nd
            split = shape[:g] + (p["groups"], shape[g] // p["groups"]) + shape[g + 1:]
            v = self.node("Reshape", [v, self.init(np.array(split, np.int64), "shape")])
            axes = sorted([a % nd + (a % nd > g) for a in p["reduce_axis"]] + [g + 1])
        else:
            axes = sorted(a % nd for a in p["axis"])
        mean = None
        if cmd.name == "RMSNORM":
            d = v
        else:
            mean = self._mean(v, axes)
            d = self.node("Sub", [v, mean])
        var = self._mean(self.node("Mul", [d, d]), axes)
        inv_std = self.node("Div", [self.scalar(1, dt), self.node(
            "Sqrt", [self.node("Add", [var, self.scalar(p["epsilon"], dt)])])])
        out = self.node("Mul", [d, inv_std])
        if cmd.name == "GROUP_NORM":
            out = self.node("Reshape", [out, self.init(np.array(shape, np.int64), "shape")])
        if len(ins) > 1:
            out = self.node("Mul", [out, self.read(ins[1])])
        if len(ins) > 2:
            out = self.node("Add", [out, self.read(ins[2])])
        stats = [inv_std] if cmd.name == "RMSNORM" else [mean, inv_std]
        rshape = np.array(saved_shape(cmd, shape), np.int64)
        for t, value in zip(outs[1:], stats):
            if t is not None:
                self.write(t, self.node("Reshape", [value, self.init(rshape, "shape")]))
        return out

    def _gelu(self, x, tanh, dt):
        """GELU: ONNX's Gelu from opset 20, its definition in Erf or Tanh before."""
        if self.opset >= 20:
            return self.node("Gelu", [x], approximate="tanh" if tanh else "none")
        if tanh:
            cube = self.node("Mul", [self.node("Mul", [x, x]), x])
            inner = self.node("Add", [x, self.node("Mul", [cube, self.scalar(0.044715, dt)])])
            t = self.node("Tanh", [self.node("Mul", [inner,
                                                      self.scalar(math.sqrt(2 / math.pi), dt)])])
        else:
            t = self.node("Erf", [self.node("Div", [x, self.scalar(math.sqrt(2), dt)])])
        half = self.node("Mul", [x, self.scalar(0.5, dt)])
        return self.node("Mul", [half, self.node("Add", [t, self.scalar(1.0, dt)])])

    def _scaled(self, x, factor, dt):
        return x if factor == 1.0 else self.node("Mul", [x, self.scalar(factor, dt)])

    def _gemm(self, cmd, ins):
        ta, tb = cmd.params["transpose_a"], cmd.params["transpose_b"]
        a, w = ins[0], ins[1]
        bias = ins[2] if len(ins) > 2 else None
        if a.ndim == 2 and w.ndim == 2:
            args = [self.read(a), self.read(w)] + ([self.read(bias)] if bias is not None else [])
            return self.node("Gemm", args, transA=int(ta), transB=int(tb))
        an, wn = self.read(a), self.read(w)

        def swap(name, nd):
            perm = list(range(nd))
            perm[-1], perm[-2] = perm[-2], perm[-1]
            return self.node("Transpose", [name], perm=perm)

        if ta:
            an = swap(an, a.ndim)
        if tb:
            wn = swap(wn, w.ndim)
        out = self.node("MatMul", [an, wn])
        return out if bias is None else self.node("Add", [out, self.read(bias)])


_UNARY = {"RELU": "Relu", "EWEXP": "Exp", "EWLOG": "Log", "EWSQRT": "Sqrt", "SIGMOID": "Sigmoid",
          "TANH": "Tanh", "SOFTMAX": "Softmax"}
_REDUCE = {"REDUCE_SUM": "ReduceSum", "REDUCE_MEAN": "ReduceMean", "REDUCE_MAX": "ReduceMax",
           "REDUCE_LOGSUMEXP": "ReduceLogSumExp"}
_REDUCE.update(REDUCE_MIN="ReduceMin", REDUCE_PROD="ReduceProd", REDUCE_NORM2="ReduceL2")
SAVABLE = {"NOOP", "DATA_TRANSFER", "SET", "CONVOLUTION", "MAX_POOL", "AVG_POOL", "CLAMP", "ADD",
           "MUL", "EWSUM", "EWPROD", "EWDIV", "SCALAR_MUL", "TRANSPOSE", "GEMM"} | set(_UNARY) \
    | set(_REDUCE)
SAVABLE |= {"CONVOLUTION_TRANSPOSE"}
# The element-wise family's other commands: one ONNX operator each (GELU before opset 20, and
# SWISH, as their definitions).
_ACTIVATIONS = {"ERF": "Erf", "EWABS": "Abs", "HARD_SWISH": "HardSwish", "EWPOW": "Pow",
                "MIN": "Min", "MAX": "Max", "PRELU": "PRelu"}
SAVABLE |= {"HARD_SIGMOID", "SWISH", "GELU"} | set(_ACTIVATIONS)
SAVABLE |= {"LRN"}
_NORMS = {"LAYER_NORM", "GROUP_NORM", "RMSNORM"}
SAVABLE |= _NORMS
SAVABLE |= MISC_SAVABLE
# The elementary functions and the activations of nnc/onnx/_ops_math.py: the operator of each, and
# the attributes from its parameters (MISH before opset 18, which has no Mish, as its definition).
_MATH = {cmd: op for op, cmd in ELEMENTARY.items()}
_MATH.update({cmd: op for op, (cmd, _) in PARAMETERISED.items()})
_MATH_ATTRS = {cmd: {key: param for key, (param, _) in keys.items()}
               for cmd, keys in PARAMETERISED.values()}
SAVABLE |= set(_MATH)


def save(graph, path, *, inputs, outputs, input_names=None, output_names=None, opset=17):
    """Write ``graph`` as an ONNX model to ``path`` (or nowhere, if ``path`` is None) and return
    the ``onnx.ModelProto``.

    ``inputs``/``outputs``: the tensors the model's graph inputs fill and its outputs read (for a
    loaded model, ``inputs`` and ``outputs`` of :func:`nnc.onnx.load`). ``input_names`` /
    ``output_names``: their ONNX names (default ``input_0``, ... / ``output_0``, ...). Running
    the saved model on the values the inputs hold gives what ``graph.run()`` leaves in the
    outputs. Raises :class:`nnc.onnx.UnsupportedError` listing every command with no ONNX form
    (CUSTOM, WHILE, CASE_OF, ...), or for 3-D convolution / pooling inputs or UPSAMPLE below
    opset 11 (ONNX's Resize with sizes), or naming the
    command that reads a view of memory the graph writes that no Slice, Transpose, Reshape or
    Concat of written values expresses (never an initializer of one run's values).
    """
    from nnc.onnx import OnnxError, OnnxTypeError, UnsupportedError, _import_onnx

    onnx = _import_onnx()
    inputs, outputs = list(inputs), list(outputs)
    for what, items in (("inputs", inputs), ("outputs", outputs)):
        for t in items:
            if not isinstance(t, Tensor):
                raise OnnxTypeError(f"save: {what} must be nnc.Tensor objects, not "
                                f"{type(t).__name__}")
    input_names = list(input_names or [f"input_{k}" for k in range(len(inputs))])
    output_names = list(output_names or [f"output_{k}" for k in range(len(outputs))])
    if len(input_names) != len(inputs) or len(output_names) != len(outputs):
        raise OnnxError("save: one name per input and per output")
    if len(set(input_names + output_names)) != len(input_names) + len(output_names):
        raise OnnxError("save: input and output names must be distinct")
    order = graph.topsort()
    problems = {}
    for e in order:
        name = e.cmd.name
        reason = None
        if name not in SAVABLE:
            reason = "no ONNX operator expresses it"
        elif (name in ("CONVOLUTION", "MAX_POOL", "AVG_POOL", "CONVOLUTION_TRANSPOSE")
              and e.inputs[0].ndim != 4):
            reason = "only [N, H, W, C] inputs"
        elif name == "LRN" and e.inputs[0].ndim < 3:
            reason = "only inputs of rank >= 3 (ONNX's LRN takes [N, C, spatial...])"
        elif name == "UPSAMPLE" and opset < 11:
            reason = "only at opset >= 11 (ONNX's Resize with sizes)"
        elif name == "INDEX_SELECT" and str(e.inputs[1].dtype) == "float32":
            reason = "only integer indices (ONNX's Gather does not interpolate between rows)"
        if reason is None and e.cmd.info.image and any(
                t is not None and t.format == "NCHW" and t.ndim in (3, 4)
                for t in list(e.inputs) + list(e.outputs)):
            # The writers below read every image as NHWC; Graph.simplify moves such nodes.
            reason = "only NHWC tensors (Graph.simplify moves NCHW nodes to NHWC)"
        if reason:
            count, names, _ = problems.get(name, (0, [], reason))
            problems[name] = (count + 1, names + [e.name or name], reason)
    if problems:
        raise UnsupportedError(problems, "nnc graph")
    s = _Saver(onnx, graph, opset)
    h = onnx.helper
    graph_inputs = []
    for t, n in zip(inputs, input_names):
        if str(t.dtype) not in _ELEM:
            raise OnnxError(f"save: input {n!r} has dtype {t.dtype}, which ONNX cannot hold")
        s.write(t, n)
        s.written.append(t)
        graph_inputs.append(h.make_tensor_value_info(n, _ELEM[str(t.dtype)], list(t.shape)))
    s.written += [t for e in order for t in e.outputs if t is not None]
    for e in order:
        s.emit(e)
    graph_outputs = []
    for t, n in zip(outputs, output_names):
        s.reader = ("output", n)
        s.nodes.append(h.make_node("Identity", [s.read(t)], [n], name=f"/{n}/Identity"))
        graph_outputs.append(h.make_tensor_value_info(n, _ELEM.get(str(t.dtype), 1),
                                                      list(t.shape)))
    model = h.make_model(h.make_graph(s.nodes, "nnc", graph_inputs, graph_outputs, s.inits),
                         opset_imports=[h.make_opsetid("", opset)], producer_name="nnc")
    model.ir_version = 8
    onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, path)
    return model
