"""nnc.onnx.load: an ONNX model -> an nnc concrete graph with its input and output tensors.

One file of ~870 lines because its passes share one loader object (values, layouts, aliases,
placements, buffers); what each operator becomes is already apart (``_ops``), as are the
placement of Concat inputs in their Concat's buffer (``_concat``), the plan of shortcuts added
in place (``_residual``), the runs of nodes that are one command
(``_patterns``) and reading the model's tensors and external data (``_read``).

Three passes over the (topologically sorted) ONNX nodes:

1. plan: every value gets a layout -- "nhwc" (a 4-D activation as nnc's convolutions and pools
   store it) or "plain" (ONNX's own axis order) -- constants are collected, BatchNormalization is
   folded into the Conv before it when that Conv feeds only the BN, and in-place aliases are
   chosen (element-wise nodes after a single-use producer run in place, an Add into such an
   operand of its own shape; Identity/Dropout, and a Reduce* with no axes and
   noop_with_empty_axes, are the value).
2. place: each Concat, consumers first, asks its inputs' producers to write straight into a
   slice of its own buffer (zero-copy, as nnc/models/inception.py does); an input that cannot
   (a graph input, a view, a value placed already) is copied in by a DATA_TRANSFER. Then the
   other intermediate values are given buffers they share where the edges allow it
   (``_plan_memory``; docs/onnx.md, "Memory reuse").
3. emit: nodes are added to the graph with edges from the nodes that make each input readable;
   what each ONNX operator becomes is in ``_ops`` (mixed into the loader here).
"""

from __future__ import annotations

import math
import numbers
import os
from collections import defaultdict

import numpy as np

from nnc.base.core import NNCError
from nnc.cmd.command import Cmd
from nnc.graph.graph import Graph
from nnc.onnx._concat import ConcatPlanner
from nnc.onnx._fold import SAME_LAYOUT_VIEWS, ViewEmitter, fold
from nnc.onnx._ops import (
    BROADCAST,
    TO_NCHW,
    TO_NHWC,
    VIEW_OPS,
    OpEmitter,
    _unsupported,
    check_node,
    flatten_axis,
    perm_shape,
    reduce_axes,
    reshape_shape,
)
from nnc.onnx._ops_math import MATH_OPS
from nnc.onnx._ops_misc import MISC_OPS, check_misc
from nnc.onnx._patterns import biased_matmul, gelu_of
from nnc.onnx._read import _err, _external_read, _memory_bytes, tensor_array
from nnc.onnx._residual import ResidualPlanner
from nnc.tensor.tensor import Tensor

# Producers whose command accepts a strided output, so they can write into a concat slice.
# The element-wise ones (contiguous-only C loops) fall back to CPU_REF on such a slice.
_INPLACE_UNARY = {"Relu", "Clip", "Sigmoid", "Tanh", "Sqrt", "Exp", "Log"}
_INPLACE_UNARY |= {"Gelu", "HardSigmoid", "HardSwish", "Erf", "Abs", "Neg"} | MATH_OPS
_STRIDED_WRITERS = {"Conv", "MaxPool", "AveragePool", "Concat", "Add", "Mul"} | _INPLACE_UNARY
_REDUCE = {"ReduceSum", "ReduceMean", "ReduceMax"}
_REDUCE |= {"ReduceMin", "ReduceProd", "ReduceL2", "ReduceLogSumExp"}
_ALIASES = {"Identity", "Dropout"}
_SPATIAL = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization",
            "GlobalMaxPool", "LRN"}
# NHWC for 4-D images (channels last, GROUP_NORM's fast path), ONNX's order otherwise.
_SPATIAL |= {"GroupNormalization", "InstanceNormalization"}
_SPATIAL |= {"Resize", "Upsample", "Pad"}   # an [N, C, H, W] input is resized/padded as NHWC
_SPATIAL |= {"ConvTranspose"}


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
        inferred = onnx.shape_inference.infer_shapes(fixed, strict_mode=True)
    except Exception as e:  # onnx raises its own InferenceError, not an exported base class
        raise _err(f"invalid ONNX model (shape inference failed): {e}") from e
    return _ceil_pool_shapes(onnx, fixed, inferred)


def _value_shapes(model):
    return {v.name: tuple(d.dim_value if d.HasField("dim_value") else None
                          for d in v.type.tensor_type.shape.dim)
            for v in list(model.graph.input) + list(model.graph.value_info)
            + list(model.graph.output) if v.type.tensor_type.HasField("shape")}


def _ceil_output(node, attrs, x_shape):
    """The output shape of a ceil_mode MaxPool / AveragePool with explicit pads by ONNX's
    rule, which onnxruntime and ONNX's reference follow: a last window that would start in the
    end padding is dropped. None where the node is not one (or its input shape is unknown)."""
    if (node.op_type not in ("MaxPool", "AveragePool") or attrs.get("ceil_mode", 0) != 1
            or not x_shape or None in x_shape):
        return None
    mode = attrs.get("auto_pad", b"NOTSET")
    mode = mode.decode("utf-8", "replace") if isinstance(mode, bytes) else mode
    nd = len(x_shape) - 2
    kernel = list(attrs.get("kernel_shape", []))
    strides = list(attrs.get("strides", [1] * nd))
    pads = [0] * (2 * nd) if mode == "VALID" else list(attrs.get("pads", [0] * (2 * nd)))
    if (mode not in ("NOTSET", "", "VALID") or len(kernel) != nd or len(strides) != nd
            or len(pads) != 2 * nd or any(d != 1 for d in attrs.get("dilations", [1]))):
        return None
    out = list(x_shape[:2])
    for n, k, s, lo, hi in zip(x_shape[2:], kernel, strides, pads[:nd], pads[nd:]):
        if s < 1 or n + lo + hi < k:
            return None
        o = -(-(n + lo + hi - k) // s) + 1
        out.append(o - 1 if (o - 1) * s >= n + lo else o)
    return tuple(out)


def _ceil_pool_shapes(onnx, fixed, inferred):
    """``inferred`` with each ceil_mode pool's output shape by ONNX's rule (onnx's shape
    inference rounds up without dropping a last window that would start in the end padding,
    so it can name one row or column more than onnxruntime computes), and the shapes after it
    inferred again from there. The model was inferred strictly once already, so the second
    inference runs leniently, keeping the corrected shapes it is given."""
    fix = {}
    for _ in range(len(fixed.graph.node)):
        shapes = _value_shapes(inferred)
        for n in inferred.graph.node:
            want = _ceil_output(n, _attrs(onnx, n), shapes.get(n.input[0]) if n.input else None)
            if want is not None and n.output[0] in shapes and shapes[n.output[0]] != want:
                fix[n.output[0]] = want
                break
        else:
            return inferred
        types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
        model = onnx.ModelProto()
        model.CopyFrom(fixed)
        outs = {v.name for v in model.graph.output}
        for v in model.graph.output:
            if v.name in fix:
                v.type.tensor_type.ClearField("shape")
        keep = [v for v in model.graph.value_info if v.name not in fix]
        del model.graph.value_info[:]
        model.graph.value_info.extend(keep)
        for name, shape in fix.items():
            if name not in outs:
                model.graph.value_info.append(onnx.helper.make_tensor_value_info(
                    name, types.get(name, onnx.TensorProto.FLOAT), list(shape)))
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception as e:  # onnx's InferenceError, as above
            raise _err(f"invalid ONNX model (shape inference failed): {e}") from e
        for v in inferred.graph.output:
            if v.name in fix:
                v.type.CopyFrom(onnx.helper.make_tensor_type_proto(
                    v.type.tensor_type.elem_type, list(fix[v.name])))
    return inferred


def load(model, *, input_shapes=None, dtype="float32", base_dir=None, max_bytes=None,
         freeze=True):
    """Build an nnc graph from an ONNX model (a path, serialized bytes or an ``onnx.ModelProto``).

    Returns a :class:`LoadedModel`, unpackable as ``g, inputs, outputs``. ``input_shapes``:
    ``{input name: shape}`` for inputs with symbolic dimensions; a symbolic dimension not given
    there is taken as 1 (a batch of one). The model is checked with ``onnx.checker`` and its
    shapes come from ``onnx.shape_inference``. External data is read from inside ``base_dir``
    only: by default the model file's folder for a path, and none at all for bytes or a
    ModelProto (docs/onnx.md, "Trust model"). ``max_bytes``: the most memory the declared
    activations (inputs, intermediate values, outputs) may take together, checked before any is
    allocated; by default the machine's physical memory (nnc gives each value its own memory, so
    a model past it could not run). ``freeze``: the initializers (weights, biases, other
    constants) are made constant, directly in frozen memory (``nnc.Tensor.freeze``: read-only,
    so kernels may keep packed copies of them); ``freeze=False`` leaves them writable, for
    code that changes weights between runs. Raises :class:`nnc.onnx.UnsupportedError` listing
    every unsupported operator, :class:`nnc.onnx.OnnxError` for an invalid model.
    """
    from nnc.onnx import OnnxError, OnnxTypeError, _import_onnx

    onnx = _import_onnx()
    if base_dir is not None:
        if not isinstance(base_dir, str) and not hasattr(base_dir, "__fspath__"):
            raise OnnxTypeError(f"base_dir must be a path, not {type(base_dir).__name__}")
        base_dir = os.fspath(base_dir)
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        path = os.fspath(model)
        try:
            with open(path, "rb") as f:
                model = f.read()
        except (OSError, ValueError) as e:  # ValueError: a NUL in the path
            raise _err(f"cannot read ONNX model {path!r}: {e}") from e
        if base_dir is None:
            base_dir = os.path.dirname(os.path.abspath(path))
        source = repr(path)
    else:
        source = "the bytes given"
    if isinstance(model, bytes):
        try:
            model = onnx.load_model_from_string(model)
        except Exception as e:  # protobuf's DecodeError has no common base we can name
            raise _err(f"{source} are not a serialized ONNX model: {e}"
                       if source == "the bytes given" else
                       f"{source} is not an ONNX model: {e}") from e
    if not isinstance(model, onnx.ModelProto):
        raise OnnxTypeError(
            f"load takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")
    if np.dtype(dtype).name not in ("float32", "float64"):
        raise _err(f"dtype must be float32 or float64, not {dtype!r}")
    if max_bytes is None:
        max_bytes = _memory_bytes() or None     # None: the OS does not say; no budget
    elif (not isinstance(max_bytes, numbers.Integral) or isinstance(max_bytes, bool)
          or max_bytes < 0):
        raise OnnxTypeError(f"max_bytes must be an int >= 0 or None, not {max_bytes!r}")
    loader = _Loader(onnx, model, input_shapes or {}, np.dtype(dtype), base_dir,
                     None if max_bytes is None else int(max_bytes), bool(freeze))
    try:
        return loader.run()
    except OnnxError:
        raise
    except Exception as e:
        # A model that gets past every check where a value is read and still makes the loader
        # (or onnx, or an nnc command) raise: an OnnxError that names the node being built,
        # with the original exception, type and message kept, so an nnc bug stays visible.
        raise _err(f"cannot build {loader.where}: {type(e).__name__}: {e}") from e


_FOLDABLE = {"Add": np.add, "Mul": np.multiply}

def _product_command(node, attrs):
    """The nnc command x * node(x) is, when node is a Sigmoid (SWISH) or a HardSigmoid of
    alpha 1/6 (as float32 rounds it) and beta 0.5 (HARD_SWISH); else None."""
    if node.domain not in ("", "ai.onnx") or len(node.input) != 1:
        return None
    if node.op_type == "Sigmoid":
        return "SWISH"
    if (node.op_type == "HardSigmoid" and abs(attrs.get("alpha", 0.2) - 1 / 6) <= 1e-7
            and attrs.get("beta", 0.5) == 0.5):
        return "HARD_SWISH"
    return None


# ONNX integer types a graph output comes back in (TensorProto number -> nnc dtype): those nnc
# tensors hold. Others (int8, int16, uint16, uint32, uint64) stay in the model's dtype.
_INT_OUTPUTS = {7: "int64", 6: "int32", 2: "uint8"}


class _Loader(OpEmitter, ViewEmitter, ConcatPlanner, ResidualPlanner):
    strided_writers = _STRIDED_WRITERS  # operators whose output may be a slice (ConcatPlanner)

    def __init__(self, onnx, model, input_shapes, dtype, base_dir, max_bytes, freeze):
        self.onnx = onnx
        self.freeze = freeze  # constants go to frozen memory (OpEmitter.constant)
        self.max_bytes = max_bytes  # the declared activations' budget; None: none
        self.src = model
        self.base_dir = base_dir
        self.input_shapes = input_shapes
        self.dtype = dtype
        self.g = Graph()
        self.where = "the model"  # what is being read or built, for an error's message

    def at(self, n):
        """Note that node n is being read or built (named in any error from here on)."""
        self.where = f"node {n.name or (n.output[0] if n.output else '')!r} ({n.op_type})"

    # -- pass 0: validate, constants, shapes ------------------------------------------------
    def run(self):
        onnx = self.onnx
        self.where = "the model's external data"
        self.src = _external_read(onnx, self.src, self.base_dir)
        graph = self.src.graph
        self.opset = next((o.version for o in self.src.opset_import if o.domain in ("", "ai.onnx")),
                          1)
        self.consts = {}
        for t in graph.initializer:
            self.where = f"initializer {t.name!r}"
            self.consts[t.name] = tensor_array(onnx, t, self.where)
        self.where = "the model"
        # Inferred first: the checker wants every graph output typed, which inference fills in.
        model = _fix_shapes(onnx, self.src, self.input_shapes, self.consts)
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as e:
            raise _err(f"invalid ONNX model: {e}") from e
        self.shapes = {}
        total = 0           # bytes of every declared activation: what nnc allocates, at most
        for v in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
            tt = v.type.tensor_type
            if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
                shape = tuple(d.dim_value for d in tt.shape.dim)
                # Refused before anything is allocated: a declared shape costs the model a few
                # bytes, and nnc the memory it names.
                if any(d < 0 for d in shape):
                    raise _err(f"invalid ONNX model: value {v.name!r} has the shape {shape}, "
                               f"with a negative dimension")
                if v.name not in self.consts and v.name not in self.shapes:
                    total += math.prod(shape) * self.dtype.itemsize
                    if self.max_bytes is not None and total > self.max_bytes:
                        raise _err(
                            f"value {v.name!r} of shape {shape} takes the model's activations "
                            f"to {total} bytes, more than max_bytes ({self.max_bytes}: by "
                            "default this machine's memory)")
                self.shapes[v.name] = shape
        self.nodes = list(model.graph.node)
        self.attrs = []
        for n in self.nodes:
            self.at(n)
            self.attrs.append(_attrs(onnx, n))
        self._dropout_masks()
        fold(self, model)  # shape arithmetic too, to a fixed point (_fold)
        self._activation_products()
        for name, value in self.consts.items():
            self.shapes.setdefault(name, np.shape(value))
        problems = {}
        ranks = {k: len(v) for k, v in self.shapes.items()}
        for k, (n, a) in enumerate(zip(self.nodes, self.attrs)):
            if k in self.skip:
                continue
            self.at(n)
            reason = ("operators outside the default ONNX domain"
                      if n.domain not in ("", "ai.onnx") else check_node(n.op_type, a, n,
                                                                           self.consts, ranks))
            if not reason and n.op_type in MISC_OPS and n.domain in ("", "ai.onnx"):
                reason = check_misc(n.op_type, a, n, self.consts, ranks, self.shapes, self.opset)
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
        # Each graph output's ONNX element type (inferred where the model leaves it out).
        self.output_types = {v.name: v.type.tensor_type.elem_type for v in model.graph.output}
        for name in self.graph_inputs + self.graph_outputs:
            if name not in self.shapes and name not in self.consts:
                raise _err(f"the shape of {name!r} is unknown after shape inference")
        self._plan()
        self._place()
        self._plan_residuals()
        self._plan_memory()
        return self._emit()

    def _dropout_masks(self):
        """A Dropout's mask output is a constant: all true in inference mode (check_node
        refuses training mode), so nodes that read it fold or take it as a constant. nnc has no
        bool tensors: a graph output that is a mask is a uint8 tensor of ones."""
        for n in self.nodes:
            if n.op_type == "Dropout" and len(n.output) > 1 and n.output[1]:
                x = n.input[0]
                shape = self.shapes.get(x, np.shape(self.consts.get(x, ())))
                self.consts[n.output[1]] = np.ones(shape, bool)
                self.shapes[n.output[1]] = tuple(shape)

    def _activation_products(self):
        """x * Sigmoid(x) (SiLU) and x * HardSigmoid(x) with alpha = 1/6, beta = 0.5
        (HardSwish), the Mul's operands in either order and the Sigmoid's output read by that
        Mul alone (and no graph output): the Mul becomes one SWISH / HARD_SWISH of x and the
        Sigmoid is skipped, so the activation can run in place on a convolution's output and
        Graph.simplify fold it there (EfficientNet's and MobileNet-V3's exports spell them so).
        Likewise GELU spelled out as x * 0.5 * (1 + erf(x / sqrt 2)) (nnc.onnx._patterns).
        Fills ``self.products``: Mul node index -> (x, nnc command)."""
        self.products = {}
        producer, readers = {}, defaultdict(int)
        for k, n in enumerate(self.nodes):
            if k in self.skip:
                continue
            for i in n.input:
                readers[i] += 1
            for o in n.output:
                producer[o] = k
        outs = {v.name for v in self.src.graph.output}

        def single(name):               # read by one node alone, and no graph output
            return readers[name] == 1 and name not in outs

        for k, n in enumerate(self.nodes):
            if (k in self.skip or n.op_type != "Mul" or n.domain not in ("", "ai.onnx")
                    or len(n.input) != 2 or n.input[0] == n.input[1]):
                continue
            for x, s in (n.input, n.input[::-1]):
                j = producer.get(s)
                act = None if j is None else _product_command(self.nodes[j], self.attrs[j])
                if act and x not in self.consts and self.nodes[j].input[0] == x and single(s):
                    self.products[k] = (x, act)
                    self.skip.add(j)
                    break
        # x * 0.5 * (1 + erf(x / sqrt 2)): one GELU at the last Mul (nnc.onnx._patterns).
        for k, n in enumerate(self.nodes):
            if k in self.skip or k in self.products or n.op_type != "Mul":
                continue
            found = gelu_of(k, self.nodes, self.skip, self.consts, producer, single)
            if found is not None:
                self.products[k] = (found[0], "GELU")
                self.skip.update(found[1])
        # MatMul + Add of a constant bias row: one GEMM with the bias, at the Add.
        self.biased = {}
        for k, n in enumerate(self.nodes):
            if k in self.skip or n.op_type != "Add":
                continue
            found = biased_matmul(k, self.nodes, self.skip, self.consts, producer, single,
                                  self.shapes)
            if found is not None:
                self.biased[k] = (self.nodes[found[0]], found[1])
                self.skip.add(found[0])

    def _emit_product(self, k, n, a):
        """Mul node k recognised by _activation_products: its activation of x."""
        x, name = self.products[k]
        t, deps = self.get(x, self.layout[n.output[0]])
        self._write(n, Cmd(name), [t], deps)

    def _emit_biased(self, k, n, a):
        """Add node k recognised by _activation_products: its MatMul's GEMM with the bias."""
        mm, b_name = self.biased[k]
        x, deps = self.get(mm.input[0], "plain")
        w, d = self.get(mm.input[1], "plain")
        bias = self.constant(np.asarray(self.consts[b_name], np.float64).reshape(-1))
        self._write(n, Cmd("GEMM"), [x, w, bias], deps + d)

    def _fold_constants(self):
        """Constant nodes, and Add/Mul/Reshape/Flatten/Identity/Transpose of constants only,
        become constants (NumPy computes them once at load)."""
        self.skip = set()
        for k, (n, a) in enumerate(zip(self.nodes, self.attrs)):
            self.at(n)
            op, ins = n.op_type, list(n.input)
            value = None
            if op == "Constant":
                if "value" in a:
                    value = tensor_array(self.onnx, a["value"], f"{self.where} attribute 'value'")
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
                    value = x.reshape(reshape_shape(n, x.shape, self.consts[ins[1]],
                                                    a.get("allowzero", 0)))
                elif op == "Flatten":
                    axis = flatten_axis(n, a, x.ndim)
                    value = x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
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
        self.inplace_adds = set()  # Add nodes writing into an operand (their output's alias)
        self.fold = {}  # Conv node index -> the BatchNormalization node folded into it
        self.folded_names = []
        outs = set(self.graph_outputs)
        for k, n in enumerate(self.nodes):
            if k in self.skip:
                continue
            self.at(n)
            op, out = n.op_type, n.output[0]
            acts = [i for i in n.input if i and i not in self.consts]
            x = n.input[0]
            if k in self.products:
                # An activation of x (SWISH, HARD_SWISH): in place, as the unary operators.
                x = self.products[k][0]
                lay = self.layout.get(x, "plain")
                if self._own(x, k):
                    self.alias[out] = x
            elif op in _SPATIAL and op != "BatchNormalization" and len(self.shapes[x]) != 4:
                lay = "plain"   # 1-D and 3-D pools, global pools of them: ONNX's axis order
            elif op in _SPATIAL and op != "BatchNormalization":
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
            elif op in _REDUCE:
                lay = self._plan_reduce(k, n)
            elif op in BROADCAST or op in ("Sum", "Mean"):
                # As Add and Mul: NHWC when an operand is an NHWC image and the output 4-D.
                nhwc = any(self.layout.get(i) == "nhwc" for i in acts)
                lay = "nhwc" if nhwc and len(self.shapes[out]) == 4 else "plain"
            elif op in SAME_LAYOUT_VIEWS:
                lay = self.layout.get(x, "plain")
            elif op == "Reshape" and self._plan_shuffle(k, n):
                continue    # node k is skipped: the shuffle's last Reshape writes the value
            elif op == "ChannelShuffle":
                lay = "nhwc"
            elif op in ("Add", "Mul", "Concat"):
                nhwc = any(self.layout.get(i) == "nhwc" for i in acts)
                lay = "nhwc" if nhwc and len(self.shapes[out]) == 4 else "plain"
                if op == "Add":
                    # In place into an operand only this Add reads, of the output's shape and
                    # layout: a Conv's output then carries the sum, which Graph.simplify folds
                    # into the Conv as its residual (ResNet's shortcut, MobileNet's skip).
                    for i in acts:
                        if (self.shapes.get(i) == self.shapes.get(out)
                                and self.layout.get(i) == lay and self._own(i, k)):
                            self.alias[out] = i
                            self.inplace_adds.add(k)
                            break
            else:
                lay = "plain"
            for o in n.output:
                if o:
                    self.layout[o] = lay

    def _plan_reduce(self, k, n):
        """The output layout of Reduce* node k: its input's with keepdims=1 (an NHWC image stays
        NHWC, its axes mapped when emitted), plain otherwise (a view of the kept-dims result).
        With no axes and ``noop_with_empty_axes`` (or a scalar input) it is its input, as
        Identity is."""
        a, x, out = self.attrs[k], n.input[0], n.output[0]
        shape = self.shapes[x] if x not in self.consts else np.shape(self.consts[x])
        axes = reduce_axes(a, n, self.consts)
        if not axes and (a.get("noop_with_empty_axes", 0) or not shape):
            if x in self.consts:
                self.consts[out] = self.consts[x]
            else:
                self.alias[out] = x
            self.skip.add(k)
            self.shapes[out] = tuple(shape)
            return self.layout.get(x, "plain")
        if out not in self.shapes:  # axes from a Constant node: inference may not see them
            nd = len(shape)
            red = {ax % nd for ax in axes} if axes else set(range(nd))
            keep = a.get("keepdims", 1)
            self.shapes[out] = tuple(1 if i in red else d for i, d in enumerate(shape)
                                     if keep or i not in red)
        return self.layout.get(x, "plain") if a.get("keepdims", 1) else "plain"

    def _own(self, x, k):
        """True if node k may overwrite x: x is a real (not aliased or viewed) intermediate that
        only node k reads and nobody outside the graph sees."""
        p = self.producer.get(x)
        if x in self.alias and (p in self.fold.values() or p in self.inplace_adds):
            # A folded BN's output is its Conv's, which only that BN read; an in-place Add's
            # is the operand it overwrote, which only that Add read.
            return x not in self.graph_outputs and self.consumers[x] == [k]
        return (p is not None and x not in self.consts and x not in self.graph_outputs
                and self.nodes[p].op_type not in ("Flatten", "Reshape", *VIEW_OPS)
                and x not in self.alias and self.consumers[x] == [k])

    def root(self, v):
        while v in self.alias:
            v = self.alias[v]
        return v

    def _views(self):
        """Each value a Reshape, Flatten or view operator makes -> the value it views."""
        view_of = {}
        for k, n in enumerate(self.nodes):
            if k not in self.skip and n.op_type in ("Reshape", "Flatten"):
                view_of[n.output[0]] = n.input[0]
            elif k not in self.skip and n.op_type in VIEW_OPS:
                view_of.update((o, n.input[0]) for o in n.output if o)
        return view_of

    def _ancestors(self):
        """Per node, a bit mask of the nodes it depends on along the ONNX data edges."""
        anc = [0] * len(self.nodes)
        for k, n in enumerate(self.nodes):
            a = 0
            for i in n.input:
                p = self.producer.get(i) if i and i not in self.consts else None
                if p is not None:
                    a |= anc[p] | (1 << p)
            anc[k] = a
        return anc

    # -- pass 2b: memory reuse ---------------------------------------------------------------
    def _plan_memory(self):
        """Let intermediate values share memory where the graph orders every use of one before
        the write of the next, so the network's working set stays in cache (an output written
        into memory nothing else touched for a while costs a read of every line from DRAM
        first). Each plain-allocated root value (not a graph input or output, not part of a
        Concat's buffer) goes, in node order, into the smallest buffer whose last value is
        dead for it: every node that wrote or read that value (through aliases and Reshape or
        Flatten views too) is an ancestor of this value's writer along the ONNX data edges,
        which nnc's edges follow, so a schedule that keeps the edges never lets the two
        meet. A buffer is as large as its largest value."""
        nodes = self.nodes
        view_of = self._views()

        def proot(v):
            # Aliases and views both point back to earlier nodes' values: this ends.
            v = self.root(v)
            while v in view_of:
                v = self.root(view_of[v])
            return v

        anc = self._ancestors()
        access, values = defaultdict(int), set(self.producer) | set(self.consumers)
        for v in values:
            if v in self.consts:
                continue
            r, mask = proot(v), 0
            p = self.producer.get(v)
            if p is not None:
                mask |= 1 << p
            for c in self.consumers.get(v, ()):
                mask |= 1 << c
            access[r] |= mask
        banned = {proot(v) for v in self.graph_inputs + self.graph_outputs if v not in self.consts}
        banned |= set(self.placement)
        for k in self.concat_plan:
            banned.add(proot(nodes[k].output[0]))
        roots = sorted((r for r in access if r not in banned and r not in self.consts
                        and r == self.root(r) and r not in view_of
                        and self.producer.get(r) is not None and r in self.shapes),
                       key=lambda r: self.producer[r])
        self.arena = {}             # root value -> buffer index
        self.arena_bytes = []       # buffer index -> bytes (its largest value)
        last = []                   # buffer index -> its latest root value
        itemsize = np.dtype(self.dtype).itemsize
        for r in roots:
            need = math.prod(self.ishape(r)) * itemsize
            before = anc[self.producer[r]]
            best = None
            for b, u in enumerate(last):
                if access[u] & ~before:
                    continue
                # The smallest buffer that holds it, else the largest (which then grows).
                fit = (self.arena_bytes[b] < need, abs(self.arena_bytes[b] - need))
                if best is None or fit < best[0]:
                    best = (fit, b)
            if best is None:
                self.arena_bytes.append(need)
                last.append(r)
                self.arena[r] = len(last) - 1
                continue
            b = best[1]
            self.arena_bytes[b] = max(self.arena_bytes[b], need)
            last[b] = r
            self.arena[r] = b
        self.arena_tensors = [None] * len(self.arena_bytes)

    # -- pass 3: emit ------------------------------------------------------------------------
    def ishape(self, v):
        shape = self.shapes[v]
        return perm_shape(shape, TO_NHWC) if self.layout.get(v) == "nhwc" else shape

    def storage(self, v):
        """The tensor that holds value v in its own layout (allocated or sliced on first use)."""
        r = self.root(v)
        t = self.tensors.get(r)
        if t is not None:
            return t
        if r in self.placement:
            parent, axis, offset = self.placement[r]
            t = self._slice(self.storage(parent), axis, offset, self.ishape(r))
        elif r in self.arena:
            b = self.arena[r]
            if self.arena_tensors[b] is None:
                n = self.arena_bytes[b] // np.dtype(self.dtype).itemsize
                self.arena_tensors[b] = Tensor.empty((max(n, 1),), dtype=self.dtype)
            t = self.arena_tensors[b].view(tuple(self.ishape(r)))   # C-contiguous at 0
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
        return self.constant(a)

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
            moved = [p for p in perm if t.shape[p] != 1]
            if t.is_contiguous and moved == sorted(moved):
                # Only size-1 axes move (an image with H = W = 1, as after a global pool):
                # the other layout is the same memory.
                return t.view(perm_shape(t.shape, perm)), deps
            out = Tensor.empty(perm_shape(t.shape, perm), dtype=self.dtype)
            e = self.node(Cmd("TRANSPOSE", perm=perm), [t], [out], f"{v}/to_{layout}", deps)
            self.converted[key] = (out, [e])
        return self.converted[key]

    def node(self, cmd, inputs, outputs, name, deps):
        e = self.g.exec(cmd, inputs, outputs, name=name)
        for d in dict.fromkeys(deps):
            self.g.concat(d, e)
        return e

    def _emit(self):
        from nnc.onnx import OnnxError

        self.tensors, self.deps, self.converted = {}, defaultdict(list), {}
        self.concats = {}
        inputs = []
        for name in self.graph_inputs:
            t = Tensor.zeros(self.shapes[name], dtype=self.dtype)
            self.tensors[name] = t
            inputs.append(t)
        for k in range(len(self.nodes)):
            # A Conv adding an Add's other operand in place runs where that Add was
            # (_plan_residuals): the operand is ready there.
            todo = [self.deferred[k]] if k in self.deferred else []
            if k not in self.skip and k not in self.residual_of:
                todo.append(k)
            for j in todo:
                n = self.nodes[j]
                self.at(n)
                try:
                    emit = (self._emit_product if j in self.products
                            else self._emit_biased if j in self.biased
                            else getattr(self, "_op_" + n.op_type))
                    emit(j, n, self.attrs[j])
                except NNCError as e:
                    if isinstance(e, OnnxError):
                        raise
                    # An nnc command refused what this node asks of it (shapes, parameters).
                    raise _unsupported(n, f"nnc's command refuses it: {e}") from e
        self.where = "the graph outputs"
        outputs = []
        for name in self.graph_outputs:
            if name in self.consts:
                outputs.append(self._const_output(name))
                continue
            t, deps = self.get(name, "plain")
            outputs.append(self._typed_output(name, t, deps))
        from nnc.onnx import LoadedModel  # defined above this module in the package

        return LoadedModel(self.g, inputs, outputs, input_names=list(self.graph_inputs),
                           output_names=list(self.graph_outputs), concats=self.concats,
                           folded=list(self.folded_names))

    def _const_output(self, name):
        """A graph output that is a constant: a bool one (a Dropout mask) as uint8, nnc having
        no bool tensors; an integer one in its ONNX type where nnc has it (_INT_OUTPUTS); any
        other in the model's dtype."""
        a = np.asarray(self.consts[name])
        if a.dtype == np.bool_:
            return Tensor(a.astype(np.uint8))
        to = _INT_OUTPUTS.get(self.output_types.get(name))
        if to is not None:
            return Tensor(a.astype(to))
        return self.const(name)

    def _typed_output(self, name, t, deps):
        """Graph output ``name`` (held in the model's dtype as t) in its ONNX integer type where
        nnc has that dtype (ArgMax's int64 indices, a Cast to int32): one DATATYPE_CONVERSION
        after its writers. The value is an integer already (ArgMax's index, a Cast's
        truncation), so the conversion is exact. Other types stay in the model's dtype."""
        to = _INT_OUTPUTS.get(self.output_types.get(name))
        if to is None:
            return t
        out = Tensor.empty(tuple(t.shape), dtype=to)
        self.node(Cmd("DATATYPE_CONVERSION"), [t], [out], f"{name}/to_{to}", deps)
        return out

    def _write(self, n, cmd, ins, deps, label=None):
        t_out = self.storage(n.output[0])
        e = self.node(cmd, ins, [t_out], label or n.name or n.output[0], deps)
        self.deps[self.root(n.output[0])] = [e]
        return e

