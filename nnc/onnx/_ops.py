"""nnc.onnx.load, per operator: which ONNX nodes nnc can run (``check_node``) and the nnc nodes
each one becomes (``OpEmitter``, the operator half of the loader's emit pass; the passes
themselves, and the value/layout bookkeeping the methods here call, are in ``_load``).
"""

from __future__ import annotations

import math

import numpy as np

from nnc.cmd.command import Cmd
from nnc.tensor.constant import frozen_copy
from nnc.tensor.tensor import Tensor

TO_NHWC = (0, 2, 3, 1)  # internal axis k is ONNX axis TO_NHWC[k]
TO_NCHW = (0, 3, 1, 2)
UNARY = {"Relu": "RELU", "Sigmoid": "SIGMOID", "Tanh": "TANH", "Sqrt": "EWSQRT", "Exp": "EWEXP",
         "Log": "EWLOG"}
_REDUCE = {"ReduceSum": "REDUCE_SUM", "ReduceMean": "REDUCE_MEAN", "ReduceMax": "REDUCE_MAX"}


def perm_shape(shape, perm):
    return tuple(shape[k] for k in perm)


def reduce_axes(attrs, node, consts):
    """A Reduce* node's ``axes`` as given (the second input from ReduceSum-13 and opset 18 on,
    the attribute before); empty means all axes, or none with ``noop_with_empty_axes``."""
    if len(node.input) > 1 and node.input[1]:
        return [int(ax) for ax in np.asarray(consts[node.input[1]]).reshape(-1)]
    return [int(ax) for ax in attrs.get("axes", [])]


def _unsupported(n, reason):
    from nnc.onnx import UnsupportedError

    return UnsupportedError({n.op_type: (1, [n.name or n.output[0]], reason)})


def _invalid(n, why):
    """The OnnxError for node n of an invalid model (an attribute or input ONNX forbids)."""
    from nnc.onnx import OnnxError

    return OnnxError(f"invalid ONNX model: node {n.name or n.output[0]!r} ({n.op_type}): {why}")


def flatten_axis(n, attrs, rank):
    """Flatten's ``axis`` in [0, rank]: ONNX allows [-rank, rank], a negative one counting from
    the rank (-1 keeps the last axis alone on the right)."""
    axis = attrs.get("axis", 1)
    if not isinstance(axis, int) or not -rank <= axis <= rank:
        raise _invalid(n, f"attribute 'axis' = {axis!r} is outside [{-rank}, {rank}] for an "
                          f"input of rank {rank}")
    return axis + rank if axis < 0 else axis


def reshape_shape(n, in_shape, target, allowzero):
    """Reshape's output shape, by ONNX's rules: a 0 copies the input's dimension at that index
    (with ``allowzero=1`` it is a real 0), one -1 is inferred; the element count must stay the
    same (onnxruntime refuses a change, and a view of another size would read past or short)."""
    target = np.asarray(target)
    if target.dtype.kind not in "iu" or target.ndim != 1:
        raise _invalid(n, f"the shape input must be a 1-D integer tensor, not {target.dtype} of "
                          f"shape {target.shape}")
    out = [int(d) for d in target]
    if any(d < -1 for d in out):
        raise _invalid(n, f"the shape {out} has a dimension below -1")
    if out.count(-1) > 1:
        raise _invalid(n, f"the shape {out} has more than one -1")
    if allowzero and 0 in out and -1 in out:
        raise _invalid(n, f"allowzero=1 with both a 0 and a -1 in the shape {out} (the -1 cannot "
                          f"be inferred)")
    for i, d in enumerate(out):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise _invalid(n, f"the shape {out} copies dimension {i} (a 0), which an input "
                                  f"of shape {tuple(in_shape)} lacks")
            out[i] = in_shape[i]
    total = math.prod(in_shape)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            raise _invalid(n, f"the input's {total} elements (shape {tuple(in_shape)}) cannot "
                              f"take the shape {list(target)}: the -1 cannot be inferred")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise _invalid(n, f"the input's {total} elements (shape {tuple(in_shape)}) cannot take "
                          f"the shape {list(target)} ({math.prod(out)} elements)")
    return tuple(out)


def check_node(op, attrs, node, consts, ranks):
    """Why nnc cannot run this node, or None if it can."""
    ins = [i for i in node.input]
    if op == "Conv":
        if any(d != 1 for d in attrs.get("dilations", [1])):
            return "dilations other than 1"
        if len(ins) < 2 or ins[1] not in consts or consts[ins[1]].ndim != 4:
            return "only 2-D convolutions with constant weights"
        if len(ins) > 2 and ins[2] and ins[2] not in consts:
            return "the bias must be a constant"
    elif op in ("MaxPool", "AveragePool"):
        if attrs.get("ceil_mode", 0):
            return "ceil_mode=1"
        if any(d != 1 for d in attrs.get("dilations", [1])):
            return "dilations other than 1"
        if len(attrs.get("kernel_shape", [])) != 2:
            return "only 2-D pooling"
        if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", b"VALID", "NOTSET", "VALID"):
            return "auto_pad SAME_*"
        if len([o for o in node.output if o]) > 1:
            return "the Indices output"
    elif op == "GlobalAveragePool":
        if ranks.get(ins[0]) != 4:
            return "only 4-D (NCHW) inputs"
    elif op == "Clip":
        if any(n and n not in consts for n in ins[1:]):
            return "min and max must be constants"
    elif op == "BatchNormalization":
        if any(n not in consts for n in ins[1:5]):
            return "scale, bias, mean and var must be constants"
        if attrs.get("training_mode", 0) or len([o for o in node.output if o]) > 1:
            return "training mode"
        if ranks.get(ins[0]) not in (2, 4):
            return "only [N, C] and [N, C, H, W] inputs"
    elif op == "Reshape":
        if len(ins) < 2 or ins[1] not in consts:
            return "the shape must be a constant"
    elif op == "MatMul":
        if ranks.get(ins[0], np.ndim(consts.get(ins[0], 0))) not in (1, 2, 3) or \
                ranks.get(ins[1], np.ndim(consts.get(ins[1], 0))) not in (2, 3):
            return "only the operand shapes GEMM takes: [K], [M, K] or [B, M, K] times [K, N] " \
                   "or [B, K, N]"
    elif op == "Dropout":
        if len(ins) > 2 and ins[2] and (ins[2] not in consts or bool(consts[ins[2]])):
            return "training_mode must be a constant False"
        if len([o for o in node.output if o]) > 1:
            return "the mask output"
    elif op == "Constant":
        if not ({"value", "value_float", "value_floats", "value_int", "value_ints"} & set(attrs)):
            return "only dense value/value_float(s)/value_int(s) constants"
    elif op in _REDUCE:
        if len(ins) > 1 and ins[1] and ins[1] not in consts:
            return "the axes input must be a constant"
        if attrs.get("keepdims", 1) not in (0, 1):
            return "keepdims other than 0 or 1"
        nd = ranks.get(ins[0], np.ndim(consts.get(ins[0], 0)))
        axes = reduce_axes(attrs, node, consts)
        if any(not -nd <= ax < nd for ax in axes) or len({ax % nd for ax in axes}) != len(axes):
            return "axes out of range or repeated"
    elif op in VIEW_OPS:
        from nnc.onnx._fold import check_view  # _fold imports this module

        return check_view(op, node, consts)
    elif op not in _OPS:
        from nnc.onnx._fold import not_folded

        return not_folded(op, node, consts)
    return None


# Views of a runtime value (no node; nnc.onnx._fold makes them).
VIEW_OPS = {"Slice", "Split", "Squeeze", "Unsqueeze"}
_OPS = {"Conv", "Relu", "Clip", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool",
        "Gemm", "MatMul", "Flatten", "Reshape", "Concat", "BatchNormalization", "Softmax",
        "Identity", "Dropout", "Transpose", "Constant", "Sigmoid", "Tanh", "Sqrt", "Exp", "Log"}


class OpEmitter:
    """The ``_op_<OpType>(k, node, attrs)`` methods the loader's emit pass calls, one per ONNX
    operator, mixed into ``_load._Loader`` (which supplies ``get``, ``storage``, ``node``,
    ``_write``, ``const`` and the plan's ``layout``/``shapes``/``consts``)."""

    def constant(self, a):
        """A tensor holding ``a`` in the model's dtype, made with one copy: in frozen memory
        (read-only; kernels may keep packed copies) unless the load said ``freeze=False``."""
        if self.freeze:
            return Tensor(frozen_copy(a, self.dtype))
        return Tensor(np.ascontiguousarray(a, dtype=self.dtype))

    def _op_Conv(self, k, n, a):
        x, deps = self.get(n.input[0], "nhwc")
        w = self.consts[n.input[1]].astype(np.float64)
        o = w.shape[0]
        b = (self.consts[n.input[2]].astype(np.float64) if len(n.input) > 2 and n.input[2]
             else np.zeros(o))
        if k in self.fold:
            bn = self.nodes[self.fold[k]]
            gamma, beta, mean, var = (self.consts[i].astype(np.float64) for i in bn.input[1:5])
            eps = self.attrs[self.fold[k]].get("epsilon", 1e-5)
            s = gamma / np.sqrt(var + eps)
            w = w * s[:, None, None, None]
            b = (b - mean) * s + beta
        kh, kw = w.shape[2:]
        if "kernel_shape" in a and tuple(a["kernel_shape"]) != (kh, kw):
            raise _invalid(n, f"attribute 'kernel_shape' = {a['kernel_shape']} is not the "
                              f"weights' window ({kh}, {kw})")
        groups = a.get("group", 1)
        if not isinstance(groups, int) or groups < 1 or x.shape[3] % groups or o % groups:
            raise _invalid(n, f"attribute 'group' = {groups!r} must be >= 1 and divide the "
                              f"input's {x.shape[3]} and the output's {o} channels")
        stride = tuple(a.get("strides", [1, 1]))
        pads = self._pads(n, a, x.shape[1:3], (kh, kw), stride)
        wt = self.constant(np.transpose(w, TO_NHWC))
        bt = self.constant(b)
        self._write(n, Cmd("CONVOLUTION", stride=stride, padding=pads, groups=groups),
                    [x, wt, bt], deps)

    @staticmethod
    def _pads(n, a, hw, kernel, stride):
        """(top, left, bottom, right) from ONNX pads or auto_pad."""
        mode = a.get("auto_pad", b"NOTSET")
        mode = mode.decode("utf-8", "replace") if isinstance(mode, bytes) else mode
        if mode not in ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"):
            raise _invalid(n, f"attribute 'auto_pad' = {mode!r} is none of NOTSET, VALID, "
                              f"SAME_UPPER, SAME_LOWER")
        if mode in ("NOTSET", ""):
            p = list(a.get("pads", [0, 0, 0, 0]))
            return (p[0], p[1], p[2], p[3])
        if mode == "VALID":
            return (0, 0, 0, 0)
        lo, hi = [], []
        for n_in, k_, s in zip(hw, kernel, stride):
            total = max((math.ceil(n_in / s) - 1) * s + k_ - n_in, 0)
            small = total // 2
            lo.append(small if mode == "SAME_UPPER" else total - small)
            hi.append(total - lo[-1])
        return (lo[0], lo[1], hi[0], hi[1])

    def _op_Relu(self, k, n, a):
        x, deps = self.get(n.input[0], self.layout[n.output[0]])
        self._write(n, Cmd(UNARY[n.op_type]), [x], deps)

    _op_Sigmoid = _op_Tanh = _op_Sqrt = _op_Exp = _op_Log = _op_Relu

    def _op_Clip(self, k, n, a):
        x, deps = self.get(n.input[0], self.layout[n.output[0]])
        lo, hi = a.get("min", math.nan), a.get("max", math.nan)
        if len(n.input) > 1 and n.input[1]:
            lo = float(np.asarray(self.consts[n.input[1]]).reshape(-1)[0])
        if len(n.input) > 2 and n.input[2]:
            hi = float(np.asarray(self.consts[n.input[2]]).reshape(-1)[0])
        if lo > hi:
            # ONNX's Clip is min(max(x, lo), hi): every element becomes hi (CLAMP refuses
            # min > max, so the lower bound moves up to hi, which gives the same).
            lo = hi
        self._write(n, Cmd("CLAMP", min=lo, max=hi), [x], deps)

    def _binary(self, n, name):
        out = n.output[0]
        lay, rank = self.layout[out], len(self.shapes[out])
        ins, deps = [], []
        for i in n.input:
            if i in self.consts:
                ins.append(self.const(i, lay, rank))
                continue
            if lay == "nhwc" and len(self.shapes[i]) != 4:
                raise _unsupported(n, "broadcasting a lower-rank activation over an image")
            t, d = self.get(i, lay)
            ins.append(t)
            deps += d
        self._write(n, Cmd(name), ins, deps)

    def _op_Add(self, k, n, a):
        self._binary(n, "ADD")

    def _op_Mul(self, k, n, a):
        self._binary(n, "MUL")

    def _op_MaxPool(self, k, n, a):
        self._pool(n, a, "MAX_POOL")

    def _op_AveragePool(self, k, n, a):
        self._pool(n, a, "AVG_POOL", count_include_pad=bool(a.get("count_include_pad", 0)))

    def _pool(self, n, a, name, **extra):
        x, deps = self.get(n.input[0], "nhwc")
        size = tuple(a["kernel_shape"])
        stride = tuple(a.get("strides", [1, 1]))
        pads = self._pads(n, a, x.shape[1:3], size, stride)
        self._write(n, Cmd(name, size=size, stride=stride, padding=pads, **extra), [x], deps)

    def _op_GlobalAveragePool(self, k, n, a):
        # REDUCE_MEAN over H, W rather than an AVG_POOL with the image as its window: 4.5-10x
        # faster on the three networks' last feature maps (docs/benchmarks.md).
        x, deps = self.get(n.input[0], "nhwc")
        self._write(n, Cmd("REDUCE_MEAN", axes=(1, 2)), [x], deps)

    def _op_BatchNormalization(self, k, n, a):
        # Not folded (its input is not a single-use Conv output): y = x * s + (beta - mean * s).
        lay = self.layout[n.output[0]]
        x, deps = self.get(n.input[0], lay)
        gamma, beta, mean, var = (self.consts[i].astype(np.float64) for i in n.input[1:5])
        s = gamma / np.sqrt(var + a.get("epsilon", 1e-5))
        st = self.constant(s)
        bt = self.constant(beta - mean * s)
        y = self.storage(n.output[0])
        e = self.node(Cmd("MUL"), [x, st], [y], f"{n.name}/scale", deps)
        self._write(n, Cmd("ADD"), [y, bt], [e], f"{n.name}/shift")

    def _op_Gemm(self, k, n, a):
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        ta, tb = bool(a.get("transA", 0)), bool(a.get("transB", 0))
        x, deps = self.get(n.input[0], "plain")
        bname = n.input[1]
        if bname in self.consts and alpha != 1.0:
            w = self.constant(self.consts[bname] * alpha)
            alpha = 1.0
        else:
            w, d = self.get(bname, "plain")
            deps = deps + d
        m_n = self.shapes[n.output[0]]
        bias, extra = None, None
        if len(n.input) > 2 and n.input[2] and beta != 0.0:
            c = n.input[2]
            if c in self.consts and alpha == 1.0 and np.asarray(self.consts[c]).size in (
                    1, m_n[1]) and np.asarray(self.consts[c]).ndim <= 2 and (
                    np.asarray(self.consts[c]).ndim < 2 or self.consts[c].shape[0] == 1):
                cv = np.broadcast_to(np.asarray(self.consts[c], np.float64).reshape(-1),
                                     (m_n[1],)) * beta
                bias = self.constant(cv)
            else:
                extra, d = (self.const(c, "plain", 2), []) if c in self.consts else \
                    self.get(c, "plain")
                deps = deps + d
        ins = [x, w] + ([bias] if bias is not None else [])
        e = self._write(n, Cmd("GEMM", transpose_a=ta, transpose_b=tb), ins, deps)
        y = self.storage(n.output[0])
        if extra is not None or alpha != 1.0:
            # alpha * (A B) + beta * C where C is not a plain bias row: one ADD, in place.
            cmd = Cmd("ADD", p=alpha, q=beta if extra is not None else 0.0)
            self._write(n, cmd, [y, extra] if extra is not None else [y], [e], f"{n.name}/add_c")

    def _op_MatMul(self, k, n, a):
        x, deps = self.get(n.input[0], "plain")
        w, d = self.get(n.input[1], "plain")
        self._write(n, Cmd("GEMM"), [x, w], deps + d)

    def _contiguous(self, v, n):
        """(tensor, deps) of v in ONNX order and contiguous, copying once if it is not."""
        t, deps = self.get(v, "plain")
        if t.is_contiguous:
            return t, deps
        c = Tensor.empty(t.shape, dtype=self.dtype)
        e = self.node(Cmd("DATA_TRANSFER"), [t], [c], f"{n.name}/contiguous", deps)
        return c, [e]

    def _view(self, n, shape):
        t, deps = self._contiguous(n.input[0], n)
        out = n.output[0]
        self.tensors[out] = t.view(tuple(int(d) for d in shape))
        self.deps[out] = list(deps)

    def _op_Flatten(self, k, n, a):
        shape = self.shapes[n.input[0]]
        axis = flatten_axis(n, a, len(shape))
        self._view(n, (math.prod(shape[:axis]), math.prod(shape[axis:])))

    def _op_Reshape(self, k, n, a):
        self._view(n, reshape_shape(n, self.shapes[n.input[0]], self.consts[n.input[1]],
                                    a.get("allowzero", 0)))

    def _op_Transpose(self, k, n, a):
        x = n.input[0]
        nd = len(self.shapes[x])
        perm = tuple(a.get("perm", range(nd - 1, -1, -1)))
        lay = self.layout.get(x, "plain") if x not in self.consts else "plain"
        t, deps = self.get(x, lay)
        if lay == "nhwc":
            perm = tuple(TO_NCHW[p] for p in perm)
        self._write(n, Cmd("TRANSPOSE", perm=perm), [t], deps)

    def _op_Softmax(self, k, n, a):
        x = n.input[0]
        nd = len(self.shapes[x])
        axis = a.get("axis", -1 if self.opset >= 13 else 1) % nd
        if self.opset < 13 and axis != nd - 1:
            raise _unsupported(n, "opset < 13 with axis before the last (it flattens the "
                                  "trailing axes)")
        lay = self.layout[n.output[0]]
        t, deps = self.get(x, lay)
        iaxis = TO_NHWC.index(axis) if lay == "nhwc" and nd == 4 else axis
        if iaxis == nd - 1:
            self._write(n, Cmd("SOFTMAX"), [t], deps)
            return
        # Move the axis last, SOFTMAX in place, move it back.
        perm = tuple(i for i in range(nd) if i != iaxis) + (iaxis,)
        back = tuple(int(i) for i in np.argsort(perm))
        tmp = Tensor.empty(perm_shape(t.shape, perm), dtype=self.dtype)
        e = self.node(Cmd("TRANSPOSE", perm=perm), [t], [tmp], f"{n.name}/to_last", deps)
        e = self.node(Cmd("SOFTMAX"), [tmp], [tmp], f"{n.name}/softmax", [e])
        self._write(n, Cmd("TRANSPOSE", perm=back), [tmp], [e], f"{n.name}/back")

    def _op_Concat(self, k, n, a):
        out = n.output[0]
        lay = self.layout[out]
        buf = self.storage(out)
        iaxis, plan = self.concat_plan[k]
        deps, slices = [], []
        for i, offset, placed in plan:
            shape = list(buf.shape)
            shape[iaxis] = self.shapes[i][TO_NHWC[iaxis] if lay == "nhwc" else iaxis]
            view = self._slice(buf, iaxis, offset, shape)
            if placed:
                t, d = self.get(i, lay)
                deps += d
                slices.append(t)
                continue
            src, d = (self.const(i, lay, len(shape)), []) if i in self.consts else \
                self.get(i, lay)
            e = self.node(Cmd("DATA_TRANSFER"), [src], [view], f"{n.name}/copy_{i}", d)
            deps.append(e)
            slices.append(view)
        self.deps[self.root(out)] = deps
        self.concats[n.name or out] = (buf, slices)

    def _op_ReduceSum(self, k, n, a):
        x, out = n.input[0], n.output[0]
        nd = len(self.shapes[x]) if x not in self.consts else np.ndim(self.consts[x])
        axes = sorted({ax % nd for ax in reduce_axes(a, n, self.consts)}) or list(range(nd))
        lay = self.layout.get(x, "plain") if x not in self.consts else "plain"
        t, deps = self.get(x, lay)
        iaxes = [TO_NHWC.index(ax) for ax in axes] if lay == "nhwc" else axes
        cmd = Cmd(_REDUCE[n.op_type], axes=tuple(sorted(iaxes)))
        ins = [t]
        if n.op_type == "ReduceMax" and any(t.shape[i] == 0 for i in iaxes):
            # The maximum of no elements: ONNX defines it as -inf (REDUCE_MAX refuses it).
            cmd, ins = Cmd("SET", value=-math.inf), []
        if a.get("keepdims", 1):
            self._write(n, cmd, ins, deps)
            return
        # keepdims=0: reduce into a private kept-dims tensor; the output is a free view of it
        # without the size-1 axes, once the axes left are in ONNX's order (an NHWC image whose
        # C and H or W both remain is transposed back, after the reduction made it small).
        kept = Tensor.empty(tuple(1 if i in iaxes else d for i, d in enumerate(t.shape)),
                            dtype=self.dtype)
        label = n.name or out
        e = self.node(cmd, ins, [kept], f"{label}/keepdims", deps)
        left = [TO_NHWC[i] for i in range(nd) if i not in iaxes] if lay == "nhwc" else []
        if left != sorted(left):
            plain = Tensor.empty(perm_shape(kept.shape, TO_NCHW), dtype=self.dtype)
            e = self.node(Cmd("TRANSPOSE", perm=TO_NCHW), [kept], [plain], f"{label}/to_plain",
                          [e])
            kept = plain
        self.tensors[out] = kept.view(tuple(int(d) for d in self.shapes[out]))
        self.deps[out] = [e]

    _op_ReduceMean = _op_ReduceMax = _op_ReduceSum
