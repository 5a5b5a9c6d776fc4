"""nnc.onnx.load, per operator: which ONNX nodes nnc can run (``check_node``) and the nnc nodes
each one becomes (``OpEmitter``, the operator half of the loader's emit pass; the passes
themselves, and the value/layout bookkeeping the methods here call, are in ``_load``).
"""

from __future__ import annotations

import math

import numpy as np

from nnc.cmd.command import Cmd
from nnc.cmd.pooling import pool_shape
from nnc.onnx._ops_convt import CONVT_OPS, ConvtEmitter, check_convt
from nnc.onnx._ops_math import MATH_OPS, MathEmitter, check_math
from nnc.onnx._ops_misc import MISC_OPS, MiscEmitter
from nnc.onnx._ops_norm import NORM_OPS, NormEmitter, check_norm
from nnc.tensor.constant import frozen_copy
from nnc.tensor.tensor import Tensor

TO_NHWC = (0, 2, 3, 1)  # internal axis k is ONNX axis TO_NHWC[k]
TO_NCHW = (0, 3, 1, 2)
UNARY = {"Relu": "RELU", "Sigmoid": "SIGMOID", "Tanh": "TANH", "Sqrt": "EWSQRT", "Exp": "EWEXP",
         "Log": "EWLOG"}
_REDUCE = {"ReduceSum": "REDUCE_SUM", "ReduceMean": "REDUCE_MEAN", "ReduceMax": "REDUCE_MAX"}
_REDUCE.update(ReduceMin="REDUCE_MIN", ReduceProd="REDUCE_PROD", ReduceL2="REDUCE_NORM2",
               ReduceLogSumExp="REDUCE_LOGSUMEXP")
# The element-wise family's operators without parameters (nnc/cmd/elementwise/activation.py)
# and its broadcasting binary ones (binary.py; Sub is ADD with q=-1, NNC having no EWSUB).
ACTIVATIONS = {"Erf": "ERF", "Abs": "EWABS", "HardSwish": "HARD_SWISH"}
BROADCAST = {"Div": "EWDIV", "Pow": "EWPOW", "Min": "MIN", "Max": "MAX", "Sub": "ADD",
             "PRelu": "PRELU"}


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
        return check_pool(attrs, node, ranks)
    elif op in ("GlobalAveragePool", "GlobalMaxPool"):
        if ranks.get(ins[0], 0) < 3:
            return "only [N, C, ...] inputs with at least one spatial axis"
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
        # GEMM broadcasts batch dimensions of any rank as MatMul does; its w has a K and an N.
        if ranks.get(ins[0], np.ndim(consts.get(ins[0], 0))) < 1 or \
                ranks.get(ins[1], np.ndim(consts.get(ins[1], 0))) < 2:
            return "a vector B (rank 1): GEMM takes [K] or [..., M, K] times [K, N] or " \
                   "[..., K, N]"
    elif op == "Dropout":
        if len(ins) > 2 and ins[2] and (ins[2] not in consts or bool(consts[ins[2]])):
            return "training_mode must be a constant False"
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
    elif op == "Gelu":
        approximate = attrs.get("approximate", "none")
        if isinstance(approximate, bytes):
            approximate = approximate.decode("utf-8", "replace")
        if approximate not in ("none", "tanh"):
            return f"attribute 'approximate' = {approximate!r} (GELU has 'none' and 'tanh')"
    elif op == "HardSigmoid":
        for key in ("alpha", "beta"):
            if key in attrs and not (isinstance(attrs[key], (int, float))
                                     and math.isfinite(attrs[key])):
                return f"attribute {key!r} = {attrs[key]!r} (HARD_SIGMOID needs a finite number)"
    elif op == "LRN":
        if ranks.get(ins[0]) != 4:
            return "only [N, C, H, W] inputs (nnc's LRN normalises an NHWC image's channels)"
        if not isinstance(attrs.get("size"), int) or attrs["size"] < 1:
            return f"attribute 'size' = {attrs.get('size')!r}: LRN needs an int >= 1"
    elif op in NORM_OPS:
        return check_norm(op, attrs, node, consts, ranks)
    elif op in MATH_OPS:
        return check_math(op, attrs, node, consts, ranks)
    elif op in CONVT_OPS:
        return check_convt(attrs, node, consts, ranks)
    elif op in ("Min", "Max", "Sum", "Mean"):
        if not [i for i in ins if i]:
            return "no inputs"
    elif op in VIEW_OPS:
        from nnc.onnx._fold import check_view  # _fold imports this module

        return check_view(op, node, consts)
    elif op not in _OPS:
        from nnc.onnx._fold import not_folded

        return not_folded(op, node, consts)
    return None


def check_pool(attrs, node, ranks):
    """Why nnc cannot run this MaxPool / AveragePool node, or None: 1-D, 2-D and 3-D windows
    (nnc's pools are 2-D: a 1-D pool is one with H = 1, a 3-D one a 2-D pool over (H, W) then
    one over D, exact for both max and average), any pads, auto_pad and ceil_mode."""
    dil = list(attrs.get("dilations", []))
    if any(d != 1 for d in dil):
        return (f"attribute 'dilations' = {dil}: nnc's MAX_POOL and AVG_POOL have no dilation "
                "(a window with gaps would need one)")
    kernel = list(attrs.get("kernel_shape", []))
    rank = ranks.get(node.input[0])
    if len(kernel) not in (1, 2, 3) or rank != len(kernel) + 2:
        return (f"attribute 'kernel_shape' = {kernel} on an input of rank {rank}: nnc pools "
                "1-D, 2-D and 3-D windows over [N, C, spatial...] inputs")
    if len([o for o in node.output if o]) > 1:
        return "the Indices output (nnc's MAX_POOL returns the values only)"
    return None


# Views of a runtime value (no node; nnc.onnx._fold makes them).
VIEW_OPS = {"Slice", "Split", "Squeeze", "Unsqueeze"}
_OPS = {"Conv", "Relu", "Clip", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool",
        "Gemm", "MatMul", "Flatten", "Reshape", "Concat", "BatchNormalization", "Softmax",
        "Identity", "Dropout", "Transpose", "Constant", "Sigmoid", "Tanh", "Sqrt", "Exp", "Log"}
_OPS |= {"Gelu", "HardSigmoid", "Neg"} | set(ACTIVATIONS) | set(BROADCAST)
_OPS |= {"GlobalMaxPool", "Sum", "Mean", "LRN"}
_OPS |= NORM_OPS | MATH_OPS | CONVT_OPS
_OPS |= MISC_OPS    # checked by _ops_misc.check_misc, which needs the shapes and the opset


class OpEmitter(MiscEmitter, NormEmitter, MathEmitter, ConvtEmitter):
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
        ins = [x, wt, bt]
        if k in self.residual_of:
            # conv + bias + residual written over the residual (_Loader._plan_residuals).
            r, r_deps = self.get(self.residual_of[k], "nhwc")
            ins.append(r)
            deps = deps + r_deps
        self._write(n, Cmd("CONVOLUTION", stride=stride, padding=pads, groups=groups), ins,
                    deps)

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

    def _operands(self, n):
        """Node n's present inputs in its output's layout (constants aligned to the output's
        rank, as ONNX broadcasting reads them) and what they wait on."""
        out = n.output[0]
        lay, rank = self.layout[out], len(self.shapes[out])
        ins, deps = [], []
        for i in n.input:
            if not i:
                continue
            if i in self.consts:
                ins.append(self.const(i, lay, rank))
                continue
            if lay == "nhwc" and len(self.shapes[i]) != 4:
                raise _unsupported(n, "broadcasting a lower-rank activation over an image")
            t, d = self.get(i, lay)
            ins.append(t)
            deps += d
        return ins, deps

    def _binary(self, n, name, **params):
        ins, deps = self._operands(n)
        self._write(n, Cmd(name, **params), ins, deps)

    def _op_Add(self, k, n, a):
        self._binary(n, "ADD")

    def _op_Mul(self, k, n, a):
        self._binary(n, "MUL")

    def _op_Div(self, k, n, a):
        self._binary(n, "EWDIV")

    def _op_Pow(self, k, n, a):
        self._binary(n, "EWPOW")

    def _op_Sub(self, k, n, a):
        self._binary(n, "ADD", q=-1.0)

    def _op_PRelu(self, k, n, a):
        # The slope broadcasts to x (ONNX's unidirectional rule; PRELU's check holds it).
        self._binary(n, "PRELU")

    def _op_Min(self, k, n, a):
        """Min and Max take 1 or more inputs: folded pairwise, MIN(MIN(x0, x1), x2) ..., each
        step into a tensor of its operands' broadcast shape, the last into the output. One
        input is MIN(x0, x0) = x0."""
        from nnc.cmd.elementwise.binary import broadcast_shape

        name = BROADCAST[n.op_type]
        out = n.output[0]
        lay, rank = self.layout[out], len(self.shapes[out])
        ins = [i for i in n.input if i]
        if len(ins) == 2:
            self._binary(n, name)
            return
        operands = []
        for i in ins:
            if i in self.consts:
                operands.append((self.const(i, lay, rank), []))
            elif lay == "nhwc" and len(self.shapes[i]) != 4:
                raise _unsupported(n, "broadcasting a lower-rank activation over an image")
            else:
                operands.append(self.get(i, lay))
        (acc, deps), rest = operands[0], operands[1:] or operands[:1]
        label = n.name or out
        for step, (t, d) in enumerate(rest):
            if step == len(rest) - 1:
                self._write(n, Cmd(name), [acc, t], deps + d)
                return
            shape = broadcast_shape(name, acc.shape, t.shape)
            tmp = Tensor.empty(shape, dtype=self.dtype)
            e = self.node(Cmd(name), [acc, t], [tmp], f"{label}/{step}", deps + d)
            acc, deps = tmp, [e]

    _op_Max = _op_Min

    def _op_Erf(self, k, n, a):
        x, deps = self.get(n.input[0], self.layout[n.output[0]])
        self._write(n, Cmd(ACTIVATIONS[n.op_type]), [x], deps)

    _op_Abs = _op_HardSwish = _op_Erf

    def _op_Neg(self, k, n, a):
        # NNC's negation is SCALAR_MUL by -1 (exact: only the sign bit changes).
        x, deps = self.get(n.input[0], self.layout[n.output[0]])
        self._write(n, Cmd("SCALAR_MUL", a=-1.0), [x], deps)

    def _op_HardSigmoid(self, k, n, a):
        x, deps = self.get(n.input[0], self.layout[n.output[0]])
        self._write(n, Cmd("HARD_SIGMOID", alpha=a.get("alpha", 0.2), beta=a.get("beta", 0.5)),
                    [x], deps)

    def _op_Gelu(self, k, n, a):
        x, deps = self.get(n.input[0], self.layout[n.output[0]])
        approximate = a.get("approximate", "none")
        if isinstance(approximate, bytes):
            approximate = approximate.decode("utf-8", "replace")
        self._write(n, Cmd("GELU", tanh=approximate == "tanh"), [x], deps)

    def _op_MaxPool(self, k, n, a):
        self._pool(n, a, "MAX_POOL")

    def _op_AveragePool(self, k, n, a):
        self._pool(n, a, "AVG_POOL", count_include_pad=bool(a.get("count_include_pad", 0)))

    def _pool(self, n, a, name, **extra):
        if a.get("ceil_mode", 0) not in (0, 1):
            raise _invalid(n, f"attribute 'ceil_mode' = {a['ceil_mode']!r} is neither 0 nor 1")
        if a.get("ceil_mode", 0):
            extra["ceil_mode"] = True
        if len(self.shapes[n.input[0]]) != 4:
            self._pool_nd(n, a, name, extra)
            return
        x, deps = self.get(n.input[0], "nhwc")
        size = tuple(a["kernel_shape"])
        stride = tuple(a.get("strides", [1, 1]))
        pads = self._pads(n, a, x.shape[1:3], size, stride)
        self._write(n, Cmd(name, size=size, stride=stride, padding=pads, **extra), [x], deps)

    def _pool_nd(self, n, a, name, extra):
        """A 1-D or 3-D pool through the 2-D commands, on the plain [N, C, spatial...] value:
        channels moved last, then 1-D: one pool of [N, 1, L, C] with H = 1; 3-D: a pool over
        (H, W) of [N * D, H, W, C], then one over D of [N, D, Ho * Wo, C] (a max of maxima, or
        a mean of means over windows of equal size, so both are exact), channels moved back."""
        x, deps = self.get(n.input[0], "plain")
        nd = len(x.shape) - 2
        spatial = tuple(x.shape[2:])
        size = tuple(int(v) for v in a["kernel_shape"])
        stride = tuple(int(v) for v in a.get("strides", [1] * nd))
        if len(size) != nd or len(stride) != nd:
            raise _invalid(n, f"attributes 'kernel_shape' = {list(size)} and 'strides' = "
                              f"{list(stride)} must have one value per spatial axis ({nd})")
        pads = list(a.get("pads", [0] * 2 * nd))
        if len(pads) != 2 * nd:
            raise _invalid(n, f"attribute 'pads' = {pads} must have {2 * nd} values")
        # Per axis (begin, end), auto_pad resolved by _pads one pair of axes at a time.
        axes = []
        for i in range(nd):
            one = dict(a, pads=[0, pads[i], 0, pads[nd + i]])
            _, lo, _, hi = self._pads(n, one, (1, spatial[i]), (1, size[i]), (1, stride[i]))
            axes.append((lo, hi))
        label = n.name or n.output[0]
        perm = (0,) + tuple(range(2, nd + 2)) + (1,)
        last = Tensor.empty(perm_shape(x.shape, perm), dtype=self.dtype)
        e = self.node(Cmd("TRANSPOSE", perm=perm), [x], [last], f"{label}/to_channels_last",
                      deps)
        batch, channels = x.shape[0], x.shape[1]
        if nd == 1:
            (lo, hi), = axes
            src = last.view((batch, 1, spatial[0], channels))
            cmd = Cmd(name, size=(1, size[0]), stride=(1, stride[0]), padding=(0, lo, 0, hi),
                      **extra)
        else:
            (dlo, dhi), (tlo, thi), (llo, lhi) = axes
            cmd = Cmd(name, size=size[1:], stride=stride[1:], padding=(tlo, llo, thi, lhi),
                      **extra)
            src = last.view((batch * spatial[0],) + spatial[1:] + (channels,))
            plane = Tensor.empty(pool_shape(cmd, src.shape), dtype=self.dtype)
            e = self.node(cmd, [src], [plane], f"{label}/pool_hw", [e])
            ho, wo = plane.shape[1:3]
            src = plane.view((batch, spatial[0], ho * wo, channels))
            cmd = Cmd(name, size=(size[0], 1), stride=(stride[0], 1), padding=(dlo, 0, dhi, 0),
                      **extra)
        pooled = Tensor.empty(pool_shape(cmd, src.shape), dtype=self.dtype)
        e = self.node(cmd, [src], [pooled], f"{label}/pool", [e])
        out_shape = self.shapes[n.output[0]]
        moved = pooled.view((batch,) + tuple(out_shape[2:]) + (channels,))
        back = tuple(int(i) for i in np.argsort(perm))
        self._write(n, Cmd("TRANSPOSE", perm=back), [moved], [e], f"{label}/to_channels_first")

    def _op_GlobalAveragePool(self, k, n, a):
        if len(self.shapes[n.input[0]]) != 4:
            # [N, C, L] or [N, C, D, H, W]: a reduction of the plain value's spatial axes.
            x, deps = self.get(n.input[0], "plain")
            red = "REDUCE_MEAN" if n.op_type == "GlobalAveragePool" else "REDUCE_MAX"
            self._write(n, Cmd(red, axes=tuple(range(2, len(x.shape)))), [x], deps)
            return
        if n.op_type == "GlobalMaxPool":
            x, deps = self.get(n.input[0], "nhwc")
            self._write(n, Cmd("REDUCE_MAX", axes=(1, 2)), [x], deps)
            return
        # REDUCE_MEAN over H, W rather than an AVG_POOL with the image as its window: 4.5-10x
        # faster on the three networks' last feature maps (docs/benchmarks.md).
        x, deps = self.get(n.input[0], "nhwc")
        self._write(n, Cmd("REDUCE_MEAN", axes=(1, 2)), [x], deps)

    _op_GlobalMaxPool = _op_GlobalAveragePool

    def _op_LRN(self, k, n, a):
        x, deps = self.get(n.input[0], "nhwc")
        cmd = Cmd("LRN", size=a["size"], alpha=a.get("alpha", 1e-4), beta=a.get("beta", 0.75),
                  bias=a.get("bias", 1.0))
        self._write(n, cmd, [x], deps)

    def _op_Sum(self, k, n, a):
        """Sum (and Mean, then scaled by 1 / n in place): one EWSUM when every input has the
        output's shape, else ADDs (which broadcast) into the output, one input at a time."""
        out = n.output[0]
        ins, deps = self._operands(n)
        y = self.storage(out)
        label = n.name or out
        if len(ins) == 1:
            e = self._write(n, Cmd("DATA_TRANSFER"), ins, deps)
        elif all(tuple(t.shape) == tuple(y.shape) for t in ins):
            e = self._write(n, Cmd("EWSUM"), ins, deps)
        else:
            e = self._write(n, Cmd("ADD"), ins[:2], deps)
            for j, t in enumerate(ins[2:]):
                e = self._write(n, Cmd("ADD"), [y, t], [e], f"{label}/add_{j + 2}")
        if n.op_type == "Mean" and len(ins) > 1:
            self._write(n, Cmd("SCALAR_MUL", a=1 / len(ins)), [y], [e], f"{label}/mean")

    _op_Mean = _op_Sum

    def _op_BatchNormalization(self, k, n, a):
        # Not folded (its input is not a single-use Conv output): y = x * s + (beta - mean * s).
        lay = self.layout[n.output[0]]
        x, deps = self.get(n.input[0], lay)
        gamma, beta, mean, var = (self.consts[i].astype(np.float64) for i in n.input[1:5])
        s = gamma / np.sqrt(var + a.get("epsilon", 1e-5))
        if lay == "nhwc" and np.dtype(self.dtype) == np.float32 and s.shape == (x.shape[3],):
            # An image's BN as a depthwise 1x1 CONVOLUTION, weight s and bias beta - mean * s:
            # one pass (MUL then ADD were two, and a ReLU after it a third that
            # Graph.simplify now folds in), and it reads any pixel strides, so a slice of a
            # Concat's buffer needs no copy (DenseNet's BN -> ReLU after each Concat, as
            # onnxruntime runs it too). The same two roundings as MUL then ADD: x * s, then
            # + b (the depthwise kernel adds the bias after the taps' sum).
            c = x.shape[3]
            self._write(n, Cmd("CONVOLUTION", groups=c),
                        [x, self.constant(s.reshape(c, 1, 1, 1)),
                         self.constant(beta - mean * s)], deps)
            return
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
            self._softmax_last(n, t, self.storage(n.output[0]), deps, n.name or n.output[0])
            return
        # Move the axis last, SOFTMAX in place, move it back.
        perm = tuple(i for i in range(nd) if i != iaxis) + (iaxis,)
        back = tuple(int(i) for i in np.argsort(perm))
        tmp = Tensor.empty(perm_shape(t.shape, perm), dtype=self.dtype)
        e = self.node(Cmd("TRANSPOSE", perm=perm), [t], [tmp], f"{n.name}/to_last", deps)
        e = self._softmax_last(n, tmp, tmp, [e], f"{n.name}/softmax")
        self._write(n, Cmd("TRANSPOSE", perm=back), [tmp], [e], f"{n.name}/back")

    def _softmax_last(self, n, t, y, deps, label):
        """SOFTMAX of t over its last axis into y (ONNX's axis = -1), returning the node. nnc's
        SOFTMAX makes each entry of the first axis one row, so a tensor of rank >= 3 goes as the
        [rows, C] view of contiguous memory (a copy first where t or y is not contiguous)."""
        if t.ndim < 3:
            e = self.node(Cmd("SOFTMAX"), [t], [y], label, deps)
            self.deps[self.root(n.output[0])] = [e]
            return e
        flat = (math.prod(t.shape[:-1]), t.shape[-1])
        if not t.is_contiguous:
            c = Tensor.empty(t.shape, dtype=self.dtype)
            deps = [self.node(Cmd("DATA_TRANSFER"), [t], [c], f"{label}/contiguous", deps)]
            t = c
        out = y if y.is_contiguous else Tensor.empty(y.shape, dtype=self.dtype)
        e = self.node(Cmd("SOFTMAX"), [t.view(flat)], [out.view(flat)], label, deps)
        if out is not y:
            e = self.node(Cmd("DATA_TRANSFER"), [out], [y], f"{label}/place", [e])
        self.deps[self.root(n.output[0])] = [e]
        return e

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
        if n.op_type == "ReduceMin" and any(t.shape[i] == 0 for i in iaxes):
            cmd, ins = Cmd("SET", value=math.inf), []
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
    _op_ReduceMin = _op_ReduceProd = _op_ReduceL2 = _op_ReduceLogSumExp = _op_ReduceSum
