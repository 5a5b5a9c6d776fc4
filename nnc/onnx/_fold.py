"""nnc.onnx.load, shape arithmetic and views: what the loader computes at load rather than runs.

Input shapes are fixed at load, so the shape arithmetic exporters write (``Shape -> Gather ->
Div -> Unsqueeze -> Concat -> Reshape``, ``ConstantOfShape``, ``Range``, ...) has constant
inputs once ``Shape`` of an activation is its known shape: ``fold`` computes every such node
with NumPy, following ONNX's definitions (integer Div truncates, Mod's two modes, negative
axes and indices, Slice's clamping, the opset's spelling of axes and split sizes), and keeps
the result as a constant of its ONNX dtype (integers and bools included: they exist only while
folding, or are converted to the model's float dtype where a command reads them). A fold
that gives later values a shape shape inference could not see (a Reshape to a computed shape)
runs ``onnx.shape_inference`` again with the folded values as initializers, until nothing more
folds.

Slice, Split, Squeeze and Unsqueeze of an activation with constant starts/ends/axes/steps and
split sizes are views (``ViewEmitter``, mixed into the loader): a strided view of the input's
tensor, in the input's layout for Slice and Split (an NHWC image's axes are mapped), ONNX's
order for Squeeze and Unsqueeze. A command that needs a contiguous input gets a strided one
through its reference backend, and Flatten/Reshape copy it once (``_contiguous``).

A channel shuffle of an NHWC image (ShuffleNet's ``Reshape -> Transpose -> Reshape``) is planned
here too (``ViewEmitter._plan_shuffle``): one TRANSPOSE within each pixel, the image staying NHWC.
"""

from __future__ import annotations

import math

import numpy as np

from nnc.cmd.command import Cmd
from nnc.onnx._ops import (
    TO_NHWC,
    _invalid,
    _unsupported,
    flatten_axis,
    reshape_shape,
)
from nnc.onnx._read import tensor_array
from nnc.tensor.tensor import Tensor

# Operators computed at load when every input is a constant (Shape and Size: when their input's
# shape is known); on a runtime value they are another command's, or refused.
FOLD_OPS = {
    "Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Add", "Sub", "Mul",
    "Div", "Mod", "Neg", "Abs", "Min", "Max", "ConstantOfShape", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Where", "Expand", "Range", "Reshape",
    "Flatten", "Transpose", "Slice", "Split", "ReduceProd", "ReduceMin", "ReduceSum",
    "ReduceMax", "ReduceMean", "Identity", "Sqrt", "Reciprocal", "Exp", "Log", "Floor", "Ceil",
    "Relu", "Sigmoid", "Tanh", "ScatterND",
}
# Float math on constants (a scale of 1 / sqrt(head_dim) computed from a shape), in the value's
# own dtype, as the runtime commands would compute it.
_FLOAT_UNARY = {"Sqrt": np.sqrt, "Reciprocal": np.reciprocal, "Exp": np.exp, "Log": np.log,
                "Floor": np.floor, "Ceil": np.ceil, "Relu": lambda x: np.maximum(x, 0),
                "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Tanh": np.tanh}
# Of the views of a runtime value (VIEW_OPS), those that keep their input's layout.
SAME_LAYOUT_VIEWS = {"Slice", "Split"}

# Reductions the loader also runs as commands on float values (REDUCE_*): folded only for
# integer and bool constants, whose result the float command would change to the model's dtype.
_REDUCE_RUNTIME = {"ReduceSum", "ReduceMax", "ReduceMean"}
_REDUCE_FN = {"ReduceProd": np.prod, "ReduceMin": np.min, "ReduceSum": np.sum,
              "ReduceMax": np.max, "ReduceMean": np.mean}
_COMPARE = {"Equal": np.equal, "Less": np.less, "Greater": np.greater,
            "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal}
_LOGICAL = {"And": np.logical_and, "Or": np.logical_or}
# Cast targets the fold computes: bool and the whole-byte numbers NumPy holds exactly as ONNX.
_CAST_TO = {"BOOL", "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64",
            "FLOAT16", "FLOAT", "DOUBLE"}


def _name(n):
    return n.name or (n.output[0] if n.output else "")


def fold(loader, model):
    """Fold every node whose inputs are constants (``loader.consts``) into constants, and
    Shape/Size of activations into their known shapes, to a fixed point: a fold that lets
    shape inference see more shapes runs it again (``_reinfer``). Folded nodes join
    ``loader.skip``; their outputs' values are in ``loader.consts`` and shapes in
    ``loader.shapes``."""
    loader._fold_constants()    # Constant nodes and the operators folded since the start
    while True:
        changed = False
        for k, (n, a) in enumerate(zip(loader.nodes, loader.attrs)):
            if k in loader.skip or n.domain not in ("", "ai.onnx") or n.op_type not in FOLD_OPS:
                continue
            loader.at(n)
            values = fold_node(loader, n, a)
            if values is None:
                continue
            for o, v in zip(n.output, values):
                if o:
                    loader.consts[o] = v
                    loader.shapes[o] = v.shape
            loader.skip.add(k)
            changed = True
        if not changed or not _shapes_missing(loader):
            return
        _reinfer(loader, model)


def _shapes_missing(loader):
    for k, n in enumerate(loader.nodes):
        if k not in loader.skip and any(o and o not in loader.shapes for o in n.output):
            return True
    return False


def _reinfer(loader, model):
    """Shape inference again on the model with the folded nodes replaced by their values (as
    initializers), so a Reshape to a computed shape, and what follows it, gets its shape."""
    onnx = loader.onnx
    loader.where = "the model (shape inference after constant folding)"
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    keep = [n for k, n in enumerate(loader.nodes) if k not in loader.skip]
    del g.node[:]
    g.node.extend(keep)
    del g.value_info[:]
    have = {t.name for t in g.initializer}
    needed = {i for n in keep for i in n.input if i} | {o.name for o in g.output}
    for name in sorted(needed):
        if name in loader.consts and name not in have:
            g.initializer.append(onnx.numpy_helper.from_array(
                # np.array, not np.ascontiguousarray: that makes a scalar one-dimensional.
                np.array(loader.consts[name], order="C"), name))
    try:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    except Exception as e:  # onnx raises its own InferenceError, not an exported base class
        from nnc.onnx import OnnxError

        raise OnnxError(f"invalid ONNX model (shape inference after constant folding failed): "
                        f"{e}") from e
    for v in list(g.input) + list(m.graph.value_info) + list(m.graph.output):
        tt = v.type.tensor_type
        if v.name in loader.shapes or not tt.HasField("shape") or not all(
                d.HasField("dim_value") for d in tt.shape.dim):
            continue
        shape = tuple(d.dim_value for d in tt.shape.dim)
        if any(d < 0 for d in shape):
            from nnc.onnx import OnnxError

            raise OnnxError(f"invalid ONNX model: value {v.name!r} has the shape {shape}, with "
                            f"a negative dimension")
        loader.shapes[v.name] = shape
    if loader.max_bytes is not None:
        total = sum(math.prod(s) for name, s in loader.shapes.items()
                    if name not in loader.consts) * loader.dtype.itemsize
        if total > loader.max_bytes:
            from nnc.onnx import OnnxError

            raise OnnxError(f"the model's activations, their shapes known after constant "
                            f"folding, take {total} bytes, more than max_bytes "
                            f"({loader.max_bytes}: by default this machine's memory)")


def _room(loader, n, shape, dtype):
    """Refuse a folded value larger than the activation budget before allocating it (a
    ConstantOfShape of a few bytes may ask for any size)."""
    nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
    if loader.max_bytes is not None and nbytes > loader.max_bytes:
        raise _invalid(n, f"its output of shape {tuple(int(d) for d in shape)} would take "
                          f"{nbytes} bytes, more than max_bytes ({loader.max_bytes})")


def _ints(n, what, value):
    """A constant of axes, indices, sizes or a shape as a list of Python ints."""
    a = np.asarray(value)
    if a.dtype.kind not in "iu" or a.ndim > 1:
        raise _invalid(n, f"{what} must be a scalar or 1-D integer tensor, not {a.dtype} of "
                          f"shape {a.shape}")
    return [int(v) for v in a.reshape(-1)]


def _axes(n, what, axes, rank):
    """Axes in [-rank, rank) as [0, rank), each once (ONNX's rule for every axes list)."""
    out = []
    for ax in axes:
        if not -rank <= ax < rank:
            raise _invalid(n, f"{what} {axes} has {ax}, outside [{-rank}, {rank}) for rank {rank}")
        out.append(ax % rank)
    if len(set(out)) != len(out):
        raise _invalid(n, f"{what} {axes} repeats an axis")
    return out


def _input_or_attr(loader, n, a, index, attr, since):
    """An operand ONNX moved from attribute to input at opset ``since``: the constant input from
    then on (None if absent), the attribute before. A non-constant input raises."""
    if loader.opset >= since:
        name = n.input[index] if len(n.input) > index else ""
        if not name:
            return None
        if name not in loader.consts:
            raise _unsupported(n, f"input {index} ({attr!r}) is a runtime value; it must be a "
                                  f"constant (computable at load)")
        return _ints(n, f"input {attr!r}", loader.consts[name])
    return [int(v) for v in a[attr]] if attr in a else None


def squeeze_axes(loader, n, a, shape):
    """Squeeze's axes in [0, rank): the given ones (each of size 1), or every size-1 axis."""
    axes = _input_or_attr(loader, n, a, 1, "axes", 13)
    if axes is None:
        return [i for i, d in enumerate(shape) if d == 1]
    axes = _axes(n, "'axes'", axes, len(shape))
    for ax in axes:
        if shape[ax] != 1:
            raise _invalid(n, f"'axes' names axis {ax} of size {shape[ax]} (shape "
                              f"{tuple(shape)}); Squeeze removes axes of size 1 only")
    return axes


def unsqueeze_axes(loader, n, a, rank):
    """Unsqueeze's axes in the output's [0, rank + len(axes))."""
    axes = _input_or_attr(loader, n, a, 1, "axes", 13)
    if axes is None:
        raise _invalid(n, "has no 'axes'")
    return sorted(_axes(n, "'axes'", axes, rank + len(axes)))


def slice_plan(loader, n, a, shape):
    """[(axis, start, count, step)] of a Slice by ONNX's rules: negative starts/ends count from
    the dimension, then clamp to [0, dim] (step > 0) or [0, dim - 1] / [-1, dim - 1] (step < 0);
    starts/ends/axes/steps are inputs from opset 10 on, attributes (no steps) before."""
    rank = len(shape)
    if loader.opset >= 10:
        vals = []
        for idx, what in ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")):
            name = n.input[idx] if len(n.input) > idx else ""
            if not name:
                vals.append(None)
                continue
            if name not in loader.consts:
                raise _unsupported(n, f"input {idx} ({what!r}) is a runtime value; it must be a "
                                      f"constant (computable at load)")
            vals.append(_ints(n, f"input {what!r}", loader.consts[name]))
        starts, ends, axes, steps = vals
    else:
        starts, ends, axes, steps = a.get("starts"), a.get("ends"), a.get("axes"), None
        starts = None if starts is None else [int(v) for v in starts]
        ends = None if ends is None else [int(v) for v in ends]
        axes = None if axes is None else [int(v) for v in axes]
    if starts is None or ends is None or len(starts) != len(ends):
        raise _invalid(n, f"starts {starts} and ends {ends} must be given, of one length")
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if len(axes) != len(starts) or len(steps) != len(starts):
        raise _invalid(n, f"starts, ends, axes and steps have lengths {len(starts)}, "
                          f"{len(ends)}, {len(axes)}, {len(steps)}; they must be one")
    axes = _axes(n, "'axes'", axes, rank)
    plan = []
    for ax, start, end, step in zip(axes, starts, ends, steps):
        dim = shape[ax]
        if step == 0:
            raise _invalid(n, f"a step of 0 on axis {ax}")
        start += dim if start < 0 else 0
        end += dim if end < 0 else 0
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            count = max(0, -(-(end - start) // step))
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            count = max(0, -(-(start - end) // -step))
        plan.append((ax, start if count else 0, count, step))
    return plan


def split_sizes(loader, n, a, dim):
    """Split's part sizes along its axis: the 'split' input (opset >= 13) or attribute (before);
    else ``num_outputs`` parts of ceil(dim / num_outputs) (opset >= 18, the last smaller), or as
    many equal parts as outputs."""
    sizes = _input_or_attr(loader, n, a, 1, "split", 13)
    outs = len(n.output)
    if sizes is None:
        if "num_outputs" in a and loader.opset >= 18:
            parts = int(a["num_outputs"])
            if parts < 1 or parts != outs:
                raise _invalid(n, f"'num_outputs' = {parts} is not its {outs} outputs")
            size = -(-dim // parts)
            sizes = [min(size, max(dim - i * size, 0)) for i in range(parts)]
        else:
            if dim % outs:
                raise _invalid(n, f"an axis of size {dim} does not split into {outs} equal "
                                  f"parts (give 'split')")
            sizes = [dim // outs] * outs
    if len(sizes) != outs or any(s < 0 for s in sizes) or sum(sizes) != dim:
        raise _invalid(n, f"'split' {sizes} must be {outs} sizes >= 0 summing to the axis' {dim}")
    return sizes


def _int_div(n, x, y):
    if np.any(y == 0):
        raise _invalid(n, "an integer division by zero")
    q = np.abs(x) // np.abs(y)      # ONNX's (and C's) integer Div truncates toward zero
    return np.where((x < 0) != (y < 0), -q, q).astype(np.result_type(x, y))


def fold_node(loader, n, a):
    """The values of node n's outputs when it can be computed at load, else None."""
    op, consts = n.op_type, loader.consts
    ins = list(n.input)
    if op in ("Shape", "Size"):
        x = ins[0]
        shape = consts[x].shape if x in consts else loader.shapes.get(x)
        if shape is None:
            return None
        if op == "Size":
            return [np.array(math.prod(shape), np.int64)]
        rank = len(shape)
        start, end = int(a.get("start", 0)), int(a.get("end", rank))
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        return [np.array(shape[start:end], np.int64)]
    if not ins or any(i and i not in consts for i in ins):
        return None
    v = [consts[i] if i else None for i in ins]
    x = v[0]
    if op in ("Add", "Sub", "Mul", "Div", "Mod", "Min", "Max", "Where", "Expand") or \
            op in _COMPARE or op in _LOGICAL:
        shapes = [np.shape(t) for t in v if t is not None]
        if op == "Expand":
            shapes[1] = tuple(_ints(n, "input 'shape'", v[1]))
        try:
            out_shape = np.broadcast_shapes(*shapes)
        except ValueError:
            raise _invalid(n, f"its inputs' shapes {shapes} do not broadcast") from None
        _room(loader, n, out_shape, x.dtype if op != "Where" else v[1].dtype)
    if op in ("Add", "Sub", "Mul"):
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op]
        with np.errstate(all="ignore"):     # integers wrap and floats overflow as in ONNX
            return [np.asarray(fn(x, v[1])).astype(x.dtype, copy=False)]
    if op == "Div":
        if x.dtype.kind in "iu":
            return [_int_div(n, x, v[1])]
        with np.errstate(all="ignore"):
            return [np.asarray(np.divide(x, v[1])).astype(x.dtype, copy=False)]
    if op == "Mod":
        fmod = int(a.get("fmod", 0))
        if x.dtype.kind == "f" and not fmod:
            raise _invalid(n, "'fmod' = 0 on floating-point inputs (ONNX requires fmod=1)")
        if x.dtype.kind in "iu" and np.any(v[1] == 0):
            raise _invalid(n, "an integer Mod by zero")
        with np.errstate(all="ignore"):
            return [np.asarray((np.fmod if fmod else np.mod)(x, v[1])).astype(x.dtype)]
    if op in ("Min", "Max"):
        fn = np.minimum if op == "Min" else np.maximum
        out = x
        for t in v[1:]:
            out = fn(out, t)
        return [np.asarray(out).astype(x.dtype, copy=False)]
    if op in _FLOAT_UNARY:
        if x.dtype.kind != "f":
            raise _invalid(n, f"{op} of a {x.dtype} value (ONNX defines it on floats)")
        with np.errstate(all="ignore"):
            return [np.asarray(_FLOAT_UNARY[op](x)).astype(x.dtype, copy=False)]
    if op in ("Neg", "Abs"):
        return [np.asarray(np.negative(x) if op == "Neg" else np.abs(x)).astype(x.dtype)]
    if op in _COMPARE:
        return [np.asarray(_COMPARE[op](x, v[1]))]
    if op in _LOGICAL:
        return [np.asarray(_LOGICAL[op](x, v[1]))]
    if op == "Not":
        return [np.logical_not(x)]
    if op == "Where":
        return [np.asarray(np.where(x.astype(bool), v[1], v[2])).astype(v[1].dtype)]
    if op == "Expand":
        return [np.array(np.broadcast_to(x, out_shape))]
    if op == "Identity":
        return [x]
    if op == "ScatterND":
        return [_scatter_nd(n, a, x, v[1], v[2])]
    if op == "Cast":
        onnx = loader.onnx
        to = int(a.get("to", 0))
        name = onnx.TensorProto.DataType.Name(to) if to in \
            onnx.TensorProto.DataType.values() else str(to)
        if name not in _CAST_TO:
            raise _unsupported(n, f"attribute 'to' = {name}: a Cast at load computes bool, "
                                  f"integers, float16, float and double only")
        if x.dtype.kind not in "biuf":
            raise _unsupported(n, f"a Cast of a {x.dtype} constant")
        with np.errstate(all="ignore"):
            return [np.asarray(x).astype(onnx.helper.tensor_dtype_to_np_dtype(to))]
    if op == "ConstantOfShape":
        shape = _ints(n, "input 'input' (the shape)", x)
        if any(d < 0 for d in shape):
            raise _invalid(n, f"the shape {shape} has a negative dimension")
        fill = np.zeros(1, np.float32)
        if "value" in a:
            fill = np.asarray(tensor_array(loader.onnx, a["value"],
                                           f"{loader.where} attribute 'value'"))
            if fill.size != 1:
                raise _invalid(n, f"attribute 'value' holds {fill.size} elements, not one")
        _room(loader, n, shape, fill.dtype)
        return [np.full(shape, fill.reshape(-1)[0], fill.dtype)]
    if op == "Range":
        if any(np.ndim(t) != 0 and np.size(t) != 1 for t in v):
            raise _invalid(n, "start, limit and delta must be scalars")
        start, limit, delta = (np.asarray(t).reshape(-1)[0] for t in v)
        if delta == 0:
            raise _invalid(n, "a delta of 0")
        count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
        if x.dtype.kind in "iu":   # exact in integers (a float quotient may round)
            count = max(-(-(int(limit) - int(start)) // int(delta)), 0)
        _room(loader, n, (count,), x.dtype)
        # ONNX defines Range as a loop adding delta to the previous value, in the input's type.
        steps = np.full(count, delta, x.dtype)
        if count:
            steps[0] = start
        with np.errstate(all="ignore"):
            return [np.add.accumulate(steps, dtype=x.dtype)]
    if op == "Gather":
        axis = _axes(n, "'axis'", [int(a.get("axis", 0))], x.ndim)[0]
        idx = np.asarray(v[1])
        if idx.dtype.kind not in "iu":
            raise _invalid(n, f"indices of dtype {idx.dtype}")
        dim = x.shape[axis]
        if idx.size and (idx.min() < -dim or idx.max() >= dim):
            raise _invalid(n, f"an index outside [{-dim}, {dim}) for axis {axis} of size {dim}")
        _room(loader, n, x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)
        return [np.take(x, np.where(idx < 0, idx + dim, idx), axis=axis)]
    if op == "Concat":
        parts = [t for t in v if t is not None]
        if any(np.ndim(t) != np.ndim(parts[0]) for t in parts) or not np.ndim(parts[0]):
            raise _invalid(n, "inputs of different ranks, or scalars")
        axis = _axes(n, "'axis'", [int(a.get("axis", 0))], np.ndim(parts[0]))[0]
        try:
            return [np.concatenate(parts, axis=axis)]
        except (ValueError, TypeError) as e:
            raise _invalid(n, f"its inputs do not concatenate: {e}") from e
    if op == "Unsqueeze":
        out = x
        for ax in unsqueeze_axes(loader, n, a, x.ndim):
            out = np.expand_dims(out, ax)
        return [out]
    if op == "Squeeze":
        return [np.squeeze(x, axis=tuple(squeeze_axes(loader, n, a, x.shape)))]
    if op == "Reshape":
        return [x.reshape(reshape_shape(n, x.shape, v[1], a.get("allowzero", 0)))]
    if op == "Flatten":
        axis = flatten_axis(n, a, x.ndim)
        return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]
    if op == "Transpose":
        perm = [int(p) for p in a.get("perm", range(x.ndim - 1, -1, -1))]
        if sorted(perm) != list(range(x.ndim)):
            raise _invalid(n, f"'perm' {perm} is no permutation of {x.ndim} axes")
        return [np.transpose(x, perm)]
    if op == "Slice":
        out = x
        for ax, start, count, step in slice_plan(loader, n, a, x.shape):
            out = np.take(out, start + step * np.arange(count), axis=ax)
        return [out]
    if op == "Split":
        axis = _axes(n, "'axis'", [int(a.get("axis", 0))], x.ndim)[0]
        sizes = split_sizes(loader, n, a, x.shape[axis])
        cuts = np.cumsum(sizes)[:-1]
        return list(np.split(x, cuts, axis=axis))
    if op in _REDUCE_FN:
        if op in _REDUCE_RUNTIME and x.dtype.kind == "f":
            return None     # a REDUCE_* command of the loaded graph computes it
        since = 13 if op == "ReduceSum" else 18
        axes = _input_or_attr(loader, n, a, 1, "axes", since)
        if not axes:
            if a.get("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(x.ndim))
        axes = _axes(n, "'axes'", axes, x.ndim)
        keep = bool(a.get("keepdims", 1))
        if any(x.shape[ax] == 0 for ax in axes) and op in ("ReduceMin", "ReduceMax", "ReduceMean"):
            if x.dtype.kind != "f" or op == "ReduceMean":
                raise _unsupported(n, f"{op} over an empty axis of a {x.dtype} constant (no "
                                      f"value is defined for it)")
            fill = np.inf if op == "ReduceMin" else -np.inf
            shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)
                          if keep or i not in axes)
            return [np.full(shape, fill, x.dtype)]
        with np.errstate(all="ignore"):
            out = _REDUCE_FN[op](x, axis=tuple(axes), keepdims=keep)
        return [np.asarray(out).astype(x.dtype)]
    return None


def not_folded(op, node, consts):
    """Why a node of an operator nnc only computes at load (``FOLD_OPS`` less the runtime
    ones) could not be: which input is a runtime value. Other operators: none expresses it."""
    if op not in FOLD_OPS:
        return "no nnc command expresses it"
    if op in ("Shape", "Size"):
        return (f"the shape of input {node.input[0]!r} is not known at load (it is computed "
                f"only from fixed input shapes)")
    runtime = [i for i in node.input if i and i not in consts]
    return (f"computed only at load, from constant inputs: input {runtime[0]!r} is a runtime "
            f"value (it would need an nnc command for {op} on tensors)" if runtime else
            "no nnc command expresses it")


def check_view(op, node, consts):
    """Why nnc cannot make this Slice/Split/Squeeze/Unsqueeze of a runtime value a view, or
    None: its starts/ends/axes/steps or split sizes must be constants."""
    names = {"Slice": ["starts", "ends", "axes", "steps"], "Split": ["split"],
             "Squeeze": ["axes"], "Unsqueeze": ["axes"]}[op]
    for idx, what in enumerate(names, 1):
        name = node.input[idx] if len(node.input) > idx else ""
        if name and name not in consts:
            return (f"input {idx} ({what!r}) is a runtime value; a view needs it constant "
                    f"(computable at load)")
    return None


class ViewEmitter:
    """``_op_Slice``/``_op_Split``/``_op_Squeeze``/``_op_Unsqueeze`` of a runtime value: views
    of its tensor (no node), mixed into ``_load._Loader`` as ``OpEmitter`` is."""

    def _view_of(self, n, out, t, deps, shape, offset, strides):
        self.tensors[out] = t.view(tuple(int(d) for d in shape), offset=int(offset),
                                   strides=tuple(int(s) for s in strides))
        self.deps[out] = list(deps)

    def _op_Slice(self, k, n, a):
        x, out = n.input[0], n.output[0]
        lay = self.layout[out]
        t, deps = self.get(x, lay)
        nhwc = lay == "nhwc" and len(self.shapes[x]) == 4
        shape, strides, offset = list(t.shape), list(t.strides), 0
        for ax, start, count, step in slice_plan(self, n, a, self.shapes[x]):
            i = TO_NHWC.index(ax) if nhwc else ax
            offset += start * strides[i]
            strides[i] *= step
            shape[i] = count
        self._view_of(n, out, t, deps, shape, offset, strides)

    def _op_Split(self, k, n, a):
        x = n.input[0]
        lay = self.layout[n.output[0]]
        t, deps = self.get(x, lay)
        rank = len(self.shapes[x])
        axis = _axes(n, "'axis'", [int(a.get("axis", 0))], rank)[0]
        sizes = split_sizes(self, n, a, self.shapes[x][axis])
        i = TO_NHWC.index(axis) if lay == "nhwc" and rank == 4 else axis
        start = 0
        for o, size in zip(n.output, sizes):
            if o:
                shape = list(t.shape)
                shape[i] = size
                self._view_of(n, o, t, deps, shape, start * t.strides[i], t.strides)
            start += size

    def _plan_shuffle(self, k, n):
        """True if Reshape node k starts a channel shuffle of an NHWC image x, rewritten:
        ``Reshape [N, C, H, W] -> [N, g, C/g, H, W]``, ``Transpose (0, 2, 1, 3, 4)``,
        ``Reshape -> [N, C, H, W]``, each the only reader of the one before. In ONNX's order it
        would cost a TRANSPOSE to NCHW, the shuffle and a TRANSPOSE back per reader; on NHWC it
        is one TRANSPOSE of each pixel's channels, [N*H*W, g, C/g] -> [N*H*W, C/g, g], whose
        output stays NHWC (its channel slices are views a convolution reads). Node k and the
        Transpose are skipped; the last Reshape becomes a "ChannelShuffle" node of x (attribute
        "group") that ``_op_ChannelShuffle`` emits."""
        x, mid = n.input[0], n.output[0]
        shape, outs = self.shapes.get(x), set(self.graph_outputs)
        if (self.layout.get(x) != "nhwc" or shape is None or len(shape) != 4
                or mid in outs or len(self.consumers[mid]) != 1):
            return False
        nb, c, h, w = shape
        split = self.shapes.get(mid)
        if split is None or len(split) != 5 or (split[0], split[3], split[4]) != (nb, h, w) \
                or split[1] * split[2] != c or split[1] < 2:
            return False
        kt = self.consumers[mid][0]
        t = self.nodes[kt]
        if t.op_type != "Transpose" or tuple(self.attrs[kt].get("perm", ())) != (0, 2, 1, 3, 4) \
                or t.output[0] in outs or len(self.consumers[t.output[0]]) != 1:
            return False
        kr = self.consumers[t.output[0]][0]
        r = self.nodes[kr]
        if r.op_type != "Reshape" or r.input[0] != t.output[0] \
                or tuple(self.shapes.get(r.output[0], ())) != tuple(shape):
            return False
        self.skip |= {k, kt}
        self.nodes[kr] = self.onnx.helper.make_node("ChannelShuffle", [x], [r.output[0]],
                                                    name=r.name)
        self.attrs[kr] = {"group": int(split[1])}
        self.consumers[x] = [kr if i == k else i for i in self.consumers[x]]
        return True

    def _op_ChannelShuffle(self, k, n, a):
        x, out, g = n.input[0], n.output[0], a["group"]
        t, deps = self.get(x, "nhwc")
        label = n.name or out
        if not t.is_contiguous:
            # A slice of a Concat's buffer, say: copied once into the TRANSPOSE's form.
            packed = Tensor.empty(tuple(t.shape), dtype=self.dtype)
            deps = [self.node(Cmd("DATA_TRANSFER"), [t], [packed], f"{label}/contiguous", deps)]
            t = packed
        y = self.storage(out)
        pixels, c = math.prod(t.shape[:3]), t.shape[3]
        e = self.node(Cmd("TRANSPOSE", perm=(0, 2, 1)), [t.view((pixels, g, c // g))],
                      [y.view((pixels, c // g, g))], label, deps)
        self.deps[self.root(out)] = [e]

    def _op_Squeeze(self, k, n, a):
        x, out = n.input[0], n.output[0]
        t, deps = self.get(x, "plain")
        axes = squeeze_axes(self, n, a, self.shapes[x])
        keep = [i for i in range(len(t.shape)) if i not in axes]
        self._view_of(n, out, t, deps, [t.shape[i] for i in keep], 0,
                      [t.strides[i] for i in keep])

    def _op_Unsqueeze(self, k, n, a):
        x, out = n.input[0], n.output[0]
        t, deps = self.get(x, "plain")
        axes = unsqueeze_axes(self, n, a, len(t.shape))
        shape, strides, src = [], [], 0
        for i in range(len(t.shape) + len(axes)):
            if i in axes:
                shape.append(1)
                strides.append(1)   # a size-1 axis: its stride is never used
            else:
                shape.append(t.shape[src])
                strides.append(t.strides[src])
                src += 1
        self._view_of(n, out, t, deps, shape, 0, strides)


_SCATTER_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_nd(n, a, data, indices, updates):
    """ONNX's ScatterND: a copy of ``data`` with the slices ``indices[..., :]`` address replaced
    by (or, with ``reduction``, combined with) ``updates``, in index order (a repeated index:
    the last write wins, as the reference does). Swin's shifted-window mask is built so."""
    reduction = a.get("reduction", "none")
    if isinstance(reduction, bytes):
        reduction = reduction.decode("utf-8", "replace")
    if reduction != "none" and reduction not in _SCATTER_REDUCE:
        raise _invalid(n, f"attribute 'reduction' = {reduction!r} (ONNX has none, add, mul, "
                          "max, min)")
    if indices.dtype.kind not in "iu":
        raise _invalid(n, f"indices of type {indices.dtype} (ONNX wants int64)")
    q = indices.shape[-1] if indices.ndim else 0
    if indices.ndim == 0 or q > data.ndim or \
            updates.shape != indices.shape[:-1] + data.shape[q:]:
        raise _invalid(n, f"indices of shape {indices.shape} and updates of shape "
                          f"{updates.shape} do not address data of shape {data.shape}")
    out = np.array(data)
    for pos in np.ndindex(*indices.shape[:-1]):
        idx = tuple(int(i) for i in indices[pos])
        if any(not -d <= i < d for i, d in zip(idx, data.shape)):
            raise _invalid(n, f"index {idx} is outside data of shape {data.shape}")
        if reduction == "none":
            out[idx] = updates[pos]
        else:
            out[idx] = _SCATTER_REDUCE[reduction](out[idx], updates[pos])
    return out
