"""nnc.onnx.load: an ONNX model -> an nnc concrete graph with its input and output tensors.

Three passes over the (topologically sorted) ONNX nodes:

1. plan: every value gets a layout -- "nhwc" (a 4-D activation as nnc's convolutions and pools
   store it) or "plain" (ONNX's own axis order) -- constants are collected, BatchNormalization is
   folded into the Conv before it when that Conv feeds only the BN, and in-place aliases are
   chosen (Relu/Clip after a single-use producer run in place; Identity/Dropout are the value).
2. place: each Concat, consumers first, asks its inputs' producers to write straight into a
   slice of its own buffer (zero-copy, as nnc/models/inception.py does); an input that cannot
   (a graph input, a view, a value placed already) is copied in by a DATA_TRANSFER.
3. emit: nodes are added to the graph with edges from the nodes that make each input readable.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from nnc.cmd import Cmd
from nnc.graph.graph import Graph
from nnc.tensor import Tensor

TO_NHWC = (0, 2, 3, 1)  # internal axis k is ONNX axis TO_NHWC[k]
TO_NCHW = (0, 3, 1, 2)
# Producers whose command accepts a strided output, so they can write into a concat slice.
_STRIDED_WRITERS = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Concat", "Add", "Mul",
                    "Relu", "Clip"}
_INPLACE_UNARY = {"Relu", "Clip"}
_ALIASES = {"Identity", "Dropout"}
_SPATIAL = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization"}


def _err(msg):
    from nnc.onnx import OnnxError

    return OnnxError(msg)


def _attrs(onnx, node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _fix_shapes(onnx, model, input_shapes, inits):
    """A copy of the model whose graph inputs have concrete shapes, with every value's shape
    inferred. A symbolic dimension takes ``input_shapes[name]``'s, else 1 (the batch)."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    unknown = set(input_shapes) - {v.name for v in fixed.graph.input}
    if unknown:
        raise _err(f"input_shapes names {sorted(unknown)}, which are not graph inputs")
    for v in fixed.graph.input:
        if v.name in inits:
            continue
        dims = v.type.tensor_type.shape.dim
        given = input_shapes.get(v.name)
        if given is not None:
            given = tuple(int(d) for d in given)
            if len(given) != len(dims):
                raise _err(f"input_shapes[{v.name!r}] = {given} has {len(given)} dimensions; "
                           f"the model's input has {len(dims)}")
        for k, d in enumerate(dims):
            if given is not None:
                if d.HasField("dim_value") and d.dim_value != given[k]:
                    raise _err(f"input_shapes[{v.name!r}] = {given} disagrees with the model's "
                               f"dimension {k} = {d.dim_value}")
                d.Clear()
                d.dim_value = given[k]
            elif not d.HasField("dim_value"):
                d.Clear()
                d.dim_value = 1
    try:
        return onnx.shape_inference.infer_shapes(fixed, strict_mode=True)
    except Exception as e:  # onnx raises its own InferenceError, not an exported base class
        raise _err(f"invalid ONNX model (shape inference failed): {e}") from e


def load(model, *, input_shapes=None, dtype="float32"):
    """Build an nnc graph from an ONNX model (a path, serialized bytes or an ``onnx.ModelProto``).

    Returns a :class:`LoadedModel`, unpackable as ``g, inputs, outputs``. ``input_shapes``:
    ``{input name: shape}`` for inputs with symbolic dimensions; a symbolic dimension not given
    there is taken as 1 (a batch of one). The model is checked with ``onnx.checker`` and its
    shapes come from ``onnx.shape_inference``. Raises :class:`nnc.onnx.UnsupportedError` listing
    every unsupported operator, :class:`nnc.onnx.OnnxError` for an invalid model.
    """
    from nnc.onnx import _import_onnx

    onnx = _import_onnx()
    if isinstance(model, bytes):
        try:
            model = onnx.load_model_from_string(model)
        except Exception as e:  # protobuf's DecodeError
            raise _err(f"the bytes given are not a serialized ONNX model: {e}") from e
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        try:
            model = onnx.load(model)
        except (OSError, ValueError) as e:
            raise _err(f"cannot read ONNX model {model!r}: {e}") from e
        except Exception as e:  # protobuf's DecodeError has no common base we can name
            raise _err(f"{model!r} is not an ONNX model: {e}") from e
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"load takes a path or an onnx.ModelProto, not {type(model).__name__}")
    if np.dtype(dtype).name not in ("float32", "float64"):
        raise _err(f"dtype must be float32 or float64, not {dtype!r}")
    return _Loader(onnx, model, input_shapes or {}, np.dtype(dtype)).run()


def _check_node(op, attrs, node, consts, ranks):
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
        if attrs.get("allowzero", 0) and 0 in consts[ins[1]]:
            return "allowzero=1 with a zero in the shape"
    elif op == "Dropout":
        if len(ins) > 2 and ins[2] and (ins[2] not in consts or bool(consts[ins[2]])):
            return "training_mode must be a constant False"
        if len([o for o in node.output if o]) > 1:
            return "the mask output"
    elif op == "Constant":
        if not ({"value", "value_float", "value_floats", "value_int", "value_ints"} & set(attrs)):
            return "only dense value/value_float(s)/value_int(s) constants"
    elif op not in _OPS:
        return "no nnc command expresses it"
    return None


_OPS = {"Conv", "Relu", "Clip", "Add", "Mul", "MaxPool", "AveragePool", "GlobalAveragePool",
        "Gemm", "MatMul", "Flatten", "Reshape", "Concat", "BatchNormalization", "Softmax",
        "Identity", "Dropout", "Transpose", "Constant"}
_FOLDABLE = {"Add": np.add, "Mul": np.multiply}


def _perm(shape, perm):
    return tuple(shape[k] for k in perm)


class _Loader:
    def __init__(self, onnx, model, input_shapes, dtype):
        self.onnx = onnx
        self.src = model
        self.input_shapes = input_shapes
        self.dtype = dtype
        self.g = Graph()

    # -- pass 0: validate, constants, shapes ------------------------------------------------
    def run(self):
        onnx = self.onnx
        graph = self.src.graph
        self.opset = next((o.version for o in self.src.opset_import if o.domain in ("", "ai.onnx")),
                          1)
        self.consts = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
        # Inferred first: the checker wants every graph output typed, which inference fills in.
        model = _fix_shapes(onnx, self.src, self.input_shapes, self.consts)
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as e:
            raise _err(f"invalid ONNX model: {e}") from e
        self.shapes = {}
        for v in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
            tt = v.type.tensor_type
            if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
                self.shapes[v.name] = tuple(d.dim_value for d in tt.shape.dim)
        self.nodes = list(model.graph.node)
        self.attrs = [_attrs(onnx, n) for n in self.nodes]
        self._fold_constants()
        problems = {}
        ranks = {k: len(v) for k, v in self.shapes.items()}
        for k, (n, a) in enumerate(zip(self.nodes, self.attrs)):
            if k in self.skip:
                continue
            reason = ("operators outside the default ONNX domain"
                      if n.domain not in ("", "ai.onnx") else _check_node(n.op_type, a, n,
                                                                           self.consts, ranks))
            if reason:
                count, names, _ = problems.get(n.op_type, (0, [], reason))
                problems[n.op_type] = (count + 1, names + [n.name or n.output[0]], reason)
        for v in graph.input:
            if v.name not in self.consts and v.type.tensor_type.elem_type not in (
                    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
                problems.setdefault("(graph input)", (0, [], "inputs must be float or double"))
                c, names, r = problems["(graph input)"]
                problems["(graph input)"] = (c + 1, names + [v.name], r)
        if problems:
            from nnc.onnx import UnsupportedError

            raise UnsupportedError(problems)
        self.graph_inputs = [v.name for v in graph.input if v.name not in self.consts]
        self.graph_outputs = [v.name for v in graph.output]
        for name in self.graph_inputs + self.graph_outputs:
            if name not in self.shapes and name not in self.consts:
                raise _err(f"the shape of {name!r} is unknown after shape inference")
        self._plan()
        self._place()
        return self._emit()

    def _fold_constants(self):
        """Constant nodes, and Add/Mul/Reshape/Flatten/Identity/Transpose of constants only,
        become constants (NumPy computes them once at load)."""
        self.skip = set()
        for k, (n, a) in enumerate(zip(self.nodes, self.attrs)):
            op, ins = n.op_type, list(n.input)
            value = None
            if op == "Constant":
                if "value" in a:
                    value = self.onnx.numpy_helper.to_array(a["value"])
                else:
                    for key, dt in (("value_float", np.float32), ("value_floats", np.float32),
                                    ("value_int", np.int64), ("value_ints", np.int64)):
                        if key in a:
                            value = np.array(a[key], dt)
                if value is None:
                    continue
            elif ins and all(i in self.consts for i in ins if i) and op in (
                    "Add", "Mul", "Reshape", "Flatten", "Identity", "Transpose"):
                x = self.consts[ins[0]]
                if op in _FOLDABLE:
                    value = _FOLDABLE[op](x, self.consts[ins[1]])
                elif op == "Reshape":
                    value = x.reshape(self.shapes.get(n.output[0], ()))
                elif op == "Flatten":
                    axis = a.get("axis", 1) % max(x.ndim, 1)
                    value = x.reshape(int(np.prod(x.shape[:axis])), -1)
                elif op == "Transpose":
                    value = np.transpose(x, a.get("perm"))
                else:
                    value = x
            else:
                continue
            self.consts[n.output[0]] = np.asarray(value)
            self.shapes[n.output[0]] = np.asarray(value).shape
            self.skip.add(k)

    # -- pass 1: layouts, BN folding, in-place aliases --------------------------------------
    def _plan(self):
        self.layout = {name: "plain" for name in self.graph_inputs}
        self.producer = {}
        self.consumers = defaultdict(list)
        for k, n in enumerate(self.nodes):
            if k in self.skip:
                continue
            for i in n.input:
                if i:
                    self.consumers[i].append(k)
            for o in n.output:
                if o:
                    self.producer[o] = k
        self.alias = {}
        self.fold = {}  # Conv node index -> the BatchNormalization node folded into it
        self.folded_names = []
        outs = set(self.graph_outputs)
        for k, n in enumerate(self.nodes):
            if k in self.skip:
                continue
            op, out = n.op_type, n.output[0]
            acts = [i for i in n.input if i and i not in self.consts]
            x = n.input[0]
            if op in _SPATIAL and op != "BatchNormalization":
                lay = "nhwc"
            elif op == "BatchNormalization":
                lay = "nhwc" if len(self.shapes[x]) == 4 else "plain"
                p = self.producer.get(x)
                if (p is not None and self.nodes[p].op_type == "Conv" and p not in self.fold
                        and self.consumers[x] == [k] and x not in outs):
                    self.fold[p] = k
                    self.folded_names.append(n.name or out)
                    self.alias[out] = x
                    self.skip.add(k)
            elif op in _INPLACE_UNARY or op in _ALIASES or op == "Softmax":
                lay = self.layout.get(x, "plain")
                if op in _ALIASES:
                    if x in self.consts:
                        self.consts[out] = self.consts[x]
                    else:
                        self.alias[out] = x
                    self.skip.add(k)
                elif op in _INPLACE_UNARY and self._own(x, k):
                    self.alias[out] = x
            elif op in ("Add", "Mul", "Concat"):
                nhwc = any(self.layout.get(i) == "nhwc" for i in acts)
                lay = "nhwc" if nhwc and len(self.shapes[out]) == 4 else "plain"
            else:
                lay = "plain"
            for o in n.output:
                if o:
                    self.layout[o] = lay

    def _own(self, x, k):
        """True if node k may overwrite x: x is a real (not aliased or viewed) intermediate that
        only node k reads and nobody outside the graph sees."""
        p = self.producer.get(x)
        if x in self.alias and p in self.fold.values():
            # A folded BN's output is its Conv's, which only that BN read.
            return x not in self.graph_outputs and self.consumers[x] == [k]
        return (p is not None and x not in self.consts and x not in self.graph_outputs
                and self.nodes[p].op_type not in ("Flatten", "Reshape")
                and x not in self.alias and self.consumers[x] == [k])

    def root(self, v):
        while v in self.alias:
            v = self.alias[v]
        return v

    # -- pass 2: zero-copy Concat placement --------------------------------------------------
    def _place(self):
        self.placement = {}  # root value -> (concat output, internal axis, offset)
        self.concat_plan = {}  # node index -> [(input, offset, placed)]
        group_out = {self.root(o) for o in self.graph_outputs}
        for k in range(len(self.nodes) - 1, -1, -1):
            n = self.nodes[k]
            if k in self.skip or n.op_type != "Concat":
                continue
            out = n.output[0]
            lay = self.layout[out]
            nd = len(self.shapes[out])
            axis = self.attrs[k]["axis"] % nd
            iaxis = TO_NHWC.index(axis) if lay == "nhwc" else axis
            offset, plan, mine = 0, [], set()
            for i in n.input:
                r = self.root(i)
                p = self.producer.get(r)
                ok = (i not in self.consts and p is not None and r not in self.placement
                      and r not in mine and r != self.root(out) and r not in group_out
                      and self.nodes[p].op_type in _STRIDED_WRITERS
                      and self.layout.get(r) == lay and self.layout.get(i) == lay)
                if ok:
                    self.placement[r] = (out, iaxis, offset)
                    mine.add(r)
                plan.append((i, offset, ok))
                offset += self.shapes[i][axis]
            self.concat_plan[k] = (iaxis, plan)

    # -- pass 3: emit ------------------------------------------------------------------------
    def ishape(self, v):
        shape = self.shapes[v]
        return _perm(shape, TO_NHWC) if self.layout.get(v) == "nhwc" else shape

    def storage(self, v):
        """The tensor that holds value v in its own layout (allocated or sliced on first use)."""
        r = self.root(v)
        t = self.tensors.get(r)
        if t is not None:
            return t
        if r in self.placement:
            parent, axis, offset = self.placement[r]
            t = self._slice(self.storage(parent), axis, offset, self.ishape(r))
        else:
            t = Tensor.empty(self.ishape(r), dtype=self.dtype)
        self.tensors[r] = t
        return t

    @staticmethod
    def _slice(buf, axis, offset, shape):
        strides = tuple(buf.strides)  # in elements
        return buf.view(tuple(shape), offset=offset * strides[axis], strides=strides)

    def const(self, v, layout="plain", like=None):
        """A constant as a tensor; for an element-wise partner ``like`` of rank r, aligned to
        its trailing axes (ONNX broadcasting) and permuted to ``layout``."""
        a = np.asarray(self.consts[v], dtype=self.dtype)
        if like is not None:
            a = a.reshape((1,) * (like - a.ndim) + a.shape)
            if layout == "nhwc":
                a = np.transpose(a, TO_NHWC)
        return Tensor(np.ascontiguousarray(a))

    def get(self, v, layout):
        """(tensor, deps) of value v in ``layout``, converting with one cached TRANSPOSE."""
        if v in self.consts:
            return self.const(v), []
        have = self.layout.get(v, "plain")
        t, deps = self.storage(v), self.deps[self.root(v)]
        if have == layout or len(self.shapes[v]) != 4:
            return t, deps
        key = (v, layout)
        if key not in self.converted:
            perm = TO_NHWC if layout == "nhwc" else TO_NCHW
            out = Tensor.empty(_perm(t.shape, perm), dtype=self.dtype)
            e = self.node(Cmd("TRANSPOSE", perm=perm), [t], [out], f"{v}/to_{layout}", deps)
            self.converted[key] = (out, [e])
        return self.converted[key]

    def node(self, cmd, inputs, outputs, name, deps):
        e = self.g.exec(cmd, inputs, outputs, name=name)
        for d in dict.fromkeys(deps):
            self.g.concat(d, e)
        return e

    def _emit(self):
        self.tensors, self.deps, self.converted = {}, defaultdict(list), {}
        self.concats = {}
        inputs = []
        for name in self.graph_inputs:
            t = Tensor.zeros(self.shapes[name], dtype=self.dtype)
            self.tensors[name] = t
            inputs.append(t)
        for k, (n, a) in enumerate(zip(self.nodes, self.attrs)):
            if k in self.skip:
                continue
            getattr(self, "_op_" + n.op_type)(k, n, a)
        outputs = []
        for name in self.graph_outputs:
            if name in self.consts:
                outputs.append(self.const(name))
                continue
            t, deps = self.get(name, "plain")
            outputs.append(t)
        from nnc.onnx import LoadedModel  # defined above this module in the package

        return LoadedModel(self.g, inputs, outputs, input_names=list(self.graph_inputs),
                           output_names=list(self.graph_outputs), concats=self.concats,
                           folded=list(self.folded_names))

    def _write(self, n, cmd, ins, deps, label=None):
        t_out = self.storage(n.output[0])
        e = self.node(cmd, ins, [t_out], label or n.name or n.output[0], deps)
        self.deps[self.root(n.output[0])] = [e]
        return e

    # -- operators ---------------------------------------------------------------------------
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
        stride = tuple(a.get("strides", [1, 1]))
        pads = self._pads(a, x.shape[1:3], (kh, kw), stride)
        wt = Tensor(np.ascontiguousarray(np.transpose(w, TO_NHWC), dtype=self.dtype))
        bt = Tensor(b.astype(self.dtype))
        self._write(n, Cmd("CONVOLUTION", stride=stride, padding=pads,
                           groups=int(a.get("group", 1))), [x, wt, bt], deps)

    @staticmethod
    def _pads(a, hw, kernel, stride):
        """(top, left, bottom, right) from ONNX pads or auto_pad."""
        mode = a.get("auto_pad", b"NOTSET")
        mode = mode.decode() if isinstance(mode, bytes) else mode
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
        self._write(n, Cmd("RELU"), [x], deps)

    def _op_Clip(self, k, n, a):
        x, deps = self.get(n.input[0], self.layout[n.output[0]])
        lo, hi = a.get("min", math.nan), a.get("max", math.nan)
        if len(n.input) > 1 and n.input[1]:
            lo = float(np.asarray(self.consts[n.input[1]]).reshape(-1)[0])
        if len(n.input) > 2 and n.input[2]:
            hi = float(np.asarray(self.consts[n.input[2]]).reshape(-1)[0])
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
                from nnc.onnx import UnsupportedError

                raise UnsupportedError({n.op_type: (1, [n.name], "broadcasting a lower-rank "
                                                    "activation over an image")})
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
        pads = self._pads(a, x.shape[1:3], size, stride)
        self._write(n, Cmd(name, size=size, stride=stride, padding=pads, **extra), [x], deps)

    def _op_GlobalAveragePool(self, k, n, a):
        x, deps = self.get(n.input[0], "nhwc")
        self._write(n, Cmd("AVG_POOL", size=tuple(x.shape[1:3]), stride=1), [x], deps)

    def _op_BatchNormalization(self, k, n, a):
        # Not folded (its input is not a single-use Conv output): y = x * s + (beta - mean * s).
        lay = self.layout[n.output[0]]
        x, deps = self.get(n.input[0], lay)
        gamma, beta, mean, var = (self.consts[i].astype(np.float64) for i in n.input[1:5])
        s = gamma / np.sqrt(var + a.get("epsilon", 1e-5))
        st = Tensor(s.astype(self.dtype))
        bt = Tensor((beta - mean * s).astype(self.dtype))
        y = self.storage(n.output[0])
        e = self.node(Cmd("MUL"), [x, st], [y], f"{n.name}/scale", deps)
        self._write(n, Cmd("ADD"), [y, bt], [e], f"{n.name}/shift")

    def _op_Gemm(self, k, n, a):
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        ta, tb = bool(a.get("transA", 0)), bool(a.get("transB", 0))
        x, deps = self.get(n.input[0], "plain")
        bname = n.input[1]
        if bname in self.consts and alpha != 1.0:
            w = Tensor(np.ascontiguousarray(self.consts[bname] * alpha, dtype=self.dtype))
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
                bias = Tensor(np.ascontiguousarray(cv, dtype=self.dtype))
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
        axis = a.get("axis", 1) % (len(shape) + 1) if shape else 0
        self._view(n, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))

    def _op_Reshape(self, k, n, a):
        self._view(n, self.shapes[n.output[0]])

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
            from nnc.onnx import UnsupportedError

            raise UnsupportedError({"Softmax": (1, [n.name], "opset < 13 with axis before the "
                                                "last (it flattens the trailing axes)")})
        lay = self.layout[n.output[0]]
        t, deps = self.get(x, lay)
        iaxis = TO_NHWC.index(axis) if lay == "nhwc" and nd == 4 else axis
        if iaxis == nd - 1:
            self._write(n, Cmd("SOFTMAX"), [t], deps)
            return
        # Move the axis last, SOFTMAX in place, move it back.
        perm = tuple(i for i in range(nd) if i != iaxis) + (iaxis,)
        back = tuple(int(i) for i in np.argsort(perm))
        tmp = Tensor.empty(_perm(t.shape, perm), dtype=self.dtype)
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
