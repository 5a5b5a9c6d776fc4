"""ONNX fuzz: small valid models, mutated, loaded with ``nnc.onnx.load`` (bytes) and run.

    python -m benchmarks.onnx_fuzz [--cases N] [--seed S] [--case C] [--json]

A few models of the operators nnc supports (Conv, BatchNormalization, Relu, Clip, MaxPool,
GlobalAveragePool, Flatten, Gemm, Softmax, Reshape, MatMul, Add, Mul, Sigmoid, Tanh, Concat,
Transpose, ReduceSum, ReduceMax), with initializers, are built in memory and mutated: byte flips,
truncation, dims, attributes, dtypes, opsets, op types, dropped/duplicated/renamed inputs, node
order, external-data entries (which a model given as bytes must never get read). The only
allowed outcomes of a case are an ``nnc.NNCError`` or a correct result: an unmutated model must
match a NumPy reference (and onnxruntime when it is installed); a mutated model that loads and
that onnxruntime also runs must match it too. A case is a function of ``(seed, case index)``
only, so a failure replays with ``--seed S --case C``. ``tests/onnx/test_onnx_fuzz.py`` runs a few
hundred cases; ``python -m benchmarks.soak --onnx`` thousands, in child processes.
"""

import argparse
import importlib
import json
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

import nnc
import nnc.onnx

# A model whose inputs and outputs hold more elements than this loads but is not run: a
# mutated dimension may declare gigabytes, which nnc may allocate lazily and would then fill.
MAX_RUN_ELEMENTS = 1 << 18
# The activations' budget of every load (load's max_bytes): a mutated dimension must be refused
# at load, not fill the memory of a machine the fuzz shares (its default is all of it).
MAX_BYTES = 64 << 20
RTOL = 1e-3


# -- the valid models -------------------------------------------------------------------------

def _init(rng, name, shape, scale=1.0):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _model(name, nodes, inputs, outputs, inits, opset=17):
    g = h.make_graph(nodes, name, [h.make_tensor_value_info(k, TP.FLOAT, s) for k, s in inputs],
                     [h.make_tensor_value_info(k, TP.FLOAT, None) for k in outputs], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _cnn(rng):
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             h.make_node("Relu", ["c"], ["r"], name="relu"),
             h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                         name="pool"),
             h.make_node("Flatten", ["p"], ["f"], axis=1, name="flat"),
             h.make_node("Gemm", ["f", "fc", "fb"], ["g"], transB=1, name="fc"),
             h.make_node("Softmax", ["g"], ["y"], axis=-1, name="softmax")]
    inits = [_init(rng, "w", (4, 3, 3, 3), 0.3), _init(rng, "b", (4,)),
             _init(rng, "fc", (5, 64), 0.2), _init(rng, "fb", (5,))]
    return _model("cnn", nodes, [("x", [1, 3, 8, 8])], ["y"], inits)


def _mlp(rng):
    nodes = [h.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             h.make_node("MatMul", ["r", "w"], ["m"], name="matmul"),
             h.make_node("Add", ["m", "b"], ["a"], name="add"),
             h.make_node("Sigmoid", ["a"], ["s"], name="sigmoid"),
             h.make_node("Concat", ["s", "c"], ["cat"], axis=1, name="concat"),
             h.make_node("Transpose", ["cat"], ["y"], perm=[1, 0], name="transpose")]
    inits = [numpy_helper.from_array(np.array([3, 4], np.int64), "shape"),
             _init(rng, "w", (4, 5)), _init(rng, "b", (5,)), _init(rng, "c", (3, 2))]
    return _model("mlp", nodes, [("x", [2, 6])], ["y"], inits)


def _bn(rng):
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             h.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["n"], name="bn"),
             h.make_node("Clip", ["n", "lo", "hi"], ["k"], name="clip"),
             h.make_node("GlobalAveragePool", ["k"], ["gp"], name="gap"),
             h.make_node("Flatten", ["gp"], ["f"], axis=-3, name="flat"),
             h.make_node("Mul", ["f", "s"], ["y"], name="mul"),
             h.make_node("ReduceMax", ["k", "axes"], ["z"], keepdims=0, name="rmax")]
    var = numpy_helper.from_array(rng.uniform(0.5, 2, 3).astype(np.float32), "var")
    inits = [_init(rng, "w", (3, 2, 1, 1)), _init(rng, "g", (3,)), _init(rng, "be", (3,)),
             _init(rng, "mu", (3,)), var,
             numpy_helper.from_array(np.float32(0), "lo"),
             numpy_helper.from_array(np.float32(1.5), "hi"), _init(rng, "s", (1,)),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    return _model("bn", nodes, [("x", [1, 2, 5, 5])], ["y", "z"], inits, opset=18)


def _axes(rng):
    nodes = [h.make_node("Flatten", ["x"], ["f"], axis=-2, name="flat"),
             h.make_node("Reshape", ["f", "shape"], ["r"], allowzero=0, name="reshape"),
             h.make_node("ReduceSum", ["r", "axes"], ["s"], keepdims=1, name="rsum"),
             h.make_node("Tanh", ["s"], ["t"], name="tanh"),
             h.make_node("Add", ["t", "k"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.array([0, -1, 2], np.int64), "shape"),
             numpy_helper.from_array(np.array([2], np.int64), "axes"), _init(rng, "k", (1,))]
    return _model("axes", nodes, [("x", [2, 3, 4])], ["y", "f"], inits)


MODELS = (_cnn, _mlp, _bn, _axes)


# -- a NumPy reference for the valid models ----------------------------------------------------

def _conv(x, w, b, pads):
    t, l_, bt, r = pads
    x = np.pad(x, ((0, 0), (0, 0), (t, bt), (l_, r)))
    o, _, kh, kw = w.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    y = np.zeros((x.shape[0], o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("nchw,oc->nohw", x[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return y + (0 if b is None else b.reshape(1, -1, 1, 1))


def _reshape(x, shape):
    shape = [x.shape[i] if d == 0 else int(d) for i, d in enumerate(shape)]
    return x.reshape(shape)


def reference(model, feeds):
    """The outputs of one of the valid models above, in float64 NumPy."""
    env = {k: v.astype(np.float64) for k, v in feeds.items()}
    env.update({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
    for n in model.graph.node:
        a = {x.name: h.get_attribute_value(x) for x in n.attribute}
        x = [env[i] for i in n.input]
        op = n.op_type
        if op == "Conv":
            y = _conv(x[0], x[1], x[2] if len(x) > 2 else None, a.get("pads", [0] * 4))
        elif op == "Relu":
            y = np.maximum(x[0], 0)
        elif op == "MaxPool":
            n_, c, hh, ww = x[0].shape
            y = x[0].reshape(n_, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))
        elif op == "Flatten":
            axis = a.get("axis", 1)
            axis += x[0].ndim if axis < 0 else 0
            y = x[0].reshape(math.prod(x[0].shape[:axis]), -1)
        elif op == "Gemm":
            y = x[0] @ (x[1].T if a.get("transB") else x[1]) + x[2]
        elif op == "Softmax":
            e = np.exp(x[0] - x[0].max(axis=-1, keepdims=True))
            y = e / e.sum(axis=-1, keepdims=True)
        elif op == "Reshape":
            y = _reshape(x[0], x[1])
        elif op == "MatMul":
            y = x[0] @ x[1]
        elif op in ("Add", "Mul"):
            y = x[0] + x[1] if op == "Add" else x[0] * x[1]
        elif op in ("Sigmoid", "Tanh"):
            y = 1 / (1 + np.exp(-x[0])) if op == "Sigmoid" else np.tanh(x[0])
        elif op == "Concat":
            y = np.concatenate(x, axis=a["axis"])
        elif op == "Transpose":
            y = np.transpose(x[0], a["perm"])
        elif op == "BatchNormalization":
            s = (x[1] / np.sqrt(x[4] + a.get("epsilon", 1e-5))).reshape(1, -1, 1, 1)
            y = (x[0] - x[3].reshape(1, -1, 1, 1)) * s + x[2].reshape(1, -1, 1, 1)
        elif op == "Clip":
            y = np.minimum(np.maximum(x[0], x[1]), x[2])
        elif op == "GlobalAveragePool":
            y = x[0].mean(axis=(2, 3), keepdims=True)
        elif op in ("ReduceMax", "ReduceSum"):
            f = np.max if op == "ReduceMax" else np.sum
            y = f(x[0], axis=tuple(int(i) for i in x[1]), keepdims=bool(a.get("keepdims", 1)))
        else:
            raise AssertionError(f"reference: no {op}")
        env[n.output[0]] = y
    return [env[o.name] for o in model.graph.output]


# -- mutations -------------------------------------------------------------------------------

_DIMS = (0, 1, 2, 3, 7, -1, -5, 1 << 31, 1 << 40, 1 << 62)
_INTS = (0, 1, -1, 2, -2, 3, 5, -7, 64, 1 << 31, -(1 << 40), 1 << 62)
_FLOATS = (0.0, -1.0, 1e-30, 1e30, math.inf, -math.inf, math.nan)
_LOCATIONS = ("secret.bin", "../secret.bin", "/etc/hostname", "/dev/zero", "/proc/self/environ",
              "a/../../secret.bin", "", ".", "x\x00y", "C:\\secret.bin", "\\\\host\\share\\x")
_OPS = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Flatten", "Reshape", "Identity",
        "Softmax", "Transpose", "Concat", "Add", "Mul", "MatMul", "Gemm", "Conv", "MaxPool",
        "AveragePool", "GlobalAveragePool", "ReduceMax", "ReduceSum", "ReduceMean", "Clip",
        "Dropout", "BatchNormalization", "Sin", "If", "Constant")


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _mut_dims(m, rng):
    pool = [("initializer", t.name, t.dims) for t in m.graph.initializer]
    pool += [(kind, v.name, v.type.tensor_type.shape.dim)
             for kind, vs in (("input", m.graph.input), ("output", m.graph.output))
             for v in vs]
    kind, name, dims = _pick(rng, pool)
    how = int(rng.integers(3))
    if kind == "initializer":
        if how == 0 and len(dims):
            dims[int(rng.integers(len(dims)))] = _pick(rng, _DIMS)
        elif how == 1:
            dims.append(_pick(rng, _DIMS))
        elif len(dims):
            del dims[int(rng.integers(len(dims)))]
    else:
        if how == 0 and len(dims):
            d = dims[int(rng.integers(len(dims)))]
            d.Clear()
            d.dim_value = _pick(rng, _DIMS)
        elif how == 1:
            dims.add().dim_value = _pick(rng, _DIMS)
        elif len(dims):
            del dims[int(rng.integers(len(dims)))]
    return f"dims of {kind} {name!r}"


def _mut_attribute(m, rng):
    n = _pick(rng, list(m.graph.node))
    how = int(rng.integers(5))
    if how == 0 or not len(n.attribute):
        name = _pick(rng, ("axis", "perm", "pads", "strides", "kernel_shape", "keepdims",
                           "allowzero", "transA", "transB", "group", "epsilon", "alpha",
                           "dilations", "auto_pad", "ceil_mode", "noop_with_empty_axes", "junk"))
        value = _pick(rng, (_pick(rng, _INTS), [int(_pick(rng, _INTS)) for _ in range(4)],
                            _pick(rng, _FLOATS), "SAME_UPPER", b"\xff\xfe"))
        for k in range(len(n.attribute) - 1, -1, -1):
            if n.attribute[k].name == name and rng.integers(2):
                del n.attribute[k]
        n.attribute.append(h.make_attribute(name, value))
        return f"attribute {name}={value!r} on node {n.name!r}"
    a = n.attribute[int(rng.integers(len(n.attribute)))]
    if how == 1:
        a.type = _pick(rng, list(onnx.AttributeProto.AttributeType.values()))
    elif how == 2:
        if a.ints:
            a.ints[int(rng.integers(len(a.ints)))] = _pick(rng, _INTS)
        else:
            a.i = _pick(rng, _INTS)
    elif how == 3:
        a.f = _pick(rng, _FLOATS)
        a.s = bytes(rng.integers(0, 256, int(rng.integers(4)), dtype=np.uint8))
    else:
        del a.ints[int(rng.integers(len(a.ints) + 1)):]
    return f"attribute {a.name!r} of node {n.name!r} ({how})"


def _mut_dtype(m, rng):
    codes = list(TP.DataType.values()) + [99, -1]
    if rng.integers(2) and len(m.graph.initializer):
        t = _pick(rng, list(m.graph.initializer))
        t.data_type = _pick(rng, codes)
        return f"dtype of initializer {t.name!r}"
    v = _pick(rng, list(m.graph.input) + list(m.graph.output))
    v.type.tensor_type.elem_type = _pick(rng, codes)
    return f"dtype of value {v.name!r}"


def _mut_inputs(m, rng):
    n = _pick(rng, list(m.graph.node))
    names = [v.name for v in m.graph.input] + [t.name for t in m.graph.initializer] + \
        [o for k in m.graph.node for o in k.output] + ["", "nowhere"]
    how = int(rng.integers(6))
    ins = list(n.input)
    if how == 0 and ins:
        del ins[int(rng.integers(len(ins)))]
    elif how == 1 and ins:
        ins.insert(int(rng.integers(len(ins) + 1)), _pick(rng, ins))
    elif how == 2 and ins:
        ins[int(rng.integers(len(ins)))] = _pick(rng, names)
    elif how == 3:
        rng.shuffle(ins)
    elif how == 4:
        n.output[0] = _pick(rng, names)
    else:
        ins.append(_pick(rng, names))
    del n.input[:]
    n.input.extend(ins)
    return f"inputs of node {n.name!r} ({how})"


def _mut_external(m, rng):
    t = _pick(rng, list(m.graph.initializer))
    nbytes = 4 * math.prod(t.dims)  # what the dims declare, were it float32
    t.ClearField("external_data")
    t.ClearField("raw_data")
    for field in ("float_data", "int64_data", "int32_data", "double_data"):
        t.ClearField(field)
    t.data_location = TP.EXTERNAL
    t.external_data.add(key="location", value=_pick(rng, _LOCATIONS))
    if rng.integers(2):
        t.external_data.add(key="offset", value=str(_pick(rng, (0, 8, -1, 1 << 62))))
    if rng.integers(2):
        t.external_data.add(key="length", value=str(_pick(rng, (nbytes, 0, -3, 1 << 62))))
    return f"external data for initializer {t.name!r}"


def _mut_op(m, rng):
    n = _pick(rng, list(m.graph.node))
    n.op_type = _pick(rng, _OPS)
    return f"op_type of node {n.name!r} -> {n.op_type}"


def _mut_opset(m, rng):
    m.opset_import[0].version = _pick(rng, (1, 6, 11, 12, 13, 17, 18, 21, 99, 0, -1))
    return f"opset {m.opset_import[0].version}"


def _mut_order(m, rng):
    nodes = list(m.graph.node)
    rng.shuffle(nodes)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return "node order"


_MUTATIONS = (_mut_dims, _mut_attribute, _mut_dtype, _mut_inputs, _mut_external, _mut_op,
              _mut_opset, _mut_order)


def _bytes_mutation(data, rng):
    if rng.integers(2):
        cut = int(rng.integers(len(data)))
        return data[:cut], f"truncated to {cut} of {len(data)} bytes"
    b = bytearray(data)
    k = int(rng.integers(1, 9))
    for _ in range(k):
        i = int(rng.integers(len(b)))
        b[i] = b[i] ^ (1 << int(rng.integers(8))) if rng.integers(2) else int(rng.integers(256))
    return bytes(b), f"{k} byte(s) flipped"


def make_case(seed, case):
    """(model before mutation, serialized model, what was mutated or None), from (seed, case)."""
    rng = np.random.default_rng([seed, case])
    base = _pick(rng, MODELS)(rng)
    m = onnx.ModelProto()
    m.CopyFrom(base)
    what = []
    kind = int(rng.integers(10))
    if kind == 0:
        return base, m.SerializeToString(), None
    for _ in range(1 if kind < 7 else int(rng.integers(2, 4))):
        what.append(_pick(rng, _MUTATIONS)(m, rng))
    data = m.SerializeToString()
    if kind in (5, 6, 9):
        data, how = _bytes_mutation(data, rng)
        what.append(how)
    return base, data, "; ".join(what)


# -- running a case --------------------------------------------------------------------------

def _ort():
    try:
        return importlib.import_module("onnxruntime")
    except ImportError:
        return None


def _ort_run(ort, data, feeds):
    """onnxruntime's outputs for the serialized model, or None where it refuses the model."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    try:
        s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        return s.run(None, feeds)
    except Exception:  # onnxruntime's Fail/InvalidGraph/...: a model it refuses, not ours
        return None


def _mismatch(got, want):
    """Why nnc's outputs differ from the expected ones, or None."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w, np.float64)
        if g.shape != w.shape:
            return f"output {k} has shape {g.shape}, expected {w.shape}"
        g = g.astype(np.float64)
        if not np.array_equal(np.isnan(g), np.isnan(w)):
            return f"output {k}: NaN where the expected output has none, or the reverse"
        fin = np.isfinite(w)
        if not np.array_equal(g[~fin & ~np.isnan(w)], w[~fin & ~np.isnan(w)]):
            return f"output {k}: infinities differ"
        if fin.any():
            scale = max(float(np.abs(w[fin]).max()), 1.0)
            err = float(np.abs(g[fin] - w[fin]).max())
            if err > RTOL * scale:
                return f"output {k}: max|diff| {err} > {RTOL} * {scale}"
    return None


def run_case(seed, case, ort=None):
    """One case: "loaded" (ran and matched, or too large to run), "nnc_error", or a failure
    message (a string starting with "FAIL")."""
    base, data, what = make_case(seed, case)
    try:
        loaded = nnc.onnx.load(data, max_bytes=MAX_BYTES)
    except nnc.NNCError as e:
        if what is None:
            return f"FAIL: the unmutated model does not load: {e!r}"
        return "nnc_error"
    except Exception as e:
        return f"FAIL: load raised {e!r} (mutation: {what})"
    if what is not None and "external data" in what:
        return f"FAIL: a model given as bytes loaded with external data (mutation: {what})"
    size = sum(math.prod(t.shape) for t in list(loaded.inputs) + list(loaded.outputs))
    if size > MAX_RUN_ELEMENTS:
        return "loaded"
    rng = np.random.default_rng([seed, case, 1])
    feeds = {n: rng.standard_normal(t.shape).astype(np.float32)
             for n, t in zip(loaded.input_names, loaded.inputs)}
    try:
        for n, t in zip(loaded.input_names, loaded.inputs):
            t.numpy()[...] = feeds[n]
        loaded.graph.run()
        got = [np.array(t.numpy()) for t in loaded.outputs]
    except nnc.NNCError as e:
        if what is None:
            return f"FAIL: the unmutated model does not run: {e!r}"
        return "nnc_error"
    except Exception as e:
        return f"FAIL: run raised {e!r} (mutation: {what})"
    if what is None:
        why = _mismatch(got, reference(base, feeds))
        if why:
            return f"FAIL: the unmutated model differs from the NumPy reference: {why}"
    if ort is not None:
        want = _ort_run(ort, data, feeds)
        if want is None and what is None:
            return "FAIL: onnxruntime refuses the unmutated model"
        why = _mismatch(got, want) if want is not None else None
        if why:
            return f"FAIL: nnc differs from onnxruntime: {why} (mutation: {what})"
    return "loaded"


def fuzz(cases: int, seed: int = 0) -> dict:
    """Run cases 0..cases-1 of ``seed``; see the module's docstring for what passes."""
    ort = _ort()
    loaded = errors = 0
    failures = []
    for case in range(cases):
        try:
            out = run_case(seed, case, ort)
        except Exception as e:  # a bug of the fuzz itself or of the reference: still reported
            out = f"FAIL: the case raised {e!r}"
        if out == "loaded":
            loaded += 1
        elif out == "nnc_error":
            errors += 1
        else:
            failures.append({"seed": seed, "case": case, "error": out})
    return {"cases": cases, "loaded": loaded, "nnc_errors": errors, "failures": failures}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--case", type=int, default=None, help="replay this one case, verbosely")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.case is not None:
        _, _, what = make_case(args.seed, args.case)
        print(f"seed {args.seed} case {args.case}: mutation {what}")
        print(run_case(args.seed, args.case, _ort()))
        return 0
    result = fuzz(args.cases, args.seed)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['cases']} cases: {result['loaded']} loaded, {result['nnc_errors']} "
              f"NNCErrors, {len(result['failures'])} failures")
        for f in result["failures"]:
            print(f"  seed {f['seed']} case {f['case']}: {f['error']}")
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
