"""The new command families against onnxruntime, one operator at a time, on the shapes the
torchvision zoo runs them at, one thread, in one process.

    python -m benchmarks.commands [--json] [--repeat R] [--family a,b]

Each case is a one-node ONNX model (its constant operands as initializers), loaded by
``nnc.onnx.load`` and by an onnxruntime session (intra_op_num_threads=1, the CPU provider);
both get the same input. Before any timing the two outputs must agree within 1e-5 of the
largest output (a case that does not is reported with its difference and not timed). nnc runs
``Graph.run()`` on its loaded graph (inputs written once); onnxruntime runs ``run`` with the
input fed (its output allocation included, as a session call does). Interleaved rounds
(``_util.measure_interleaved``), each call repeated to take about two milliseconds; the median
per call, nnc / ort (below 1: nnc is faster; the target is at most 1.5), and the backend that
ran each of nnc's nodes (a CPU_REF on one of these hot paths is a finding).

Two ratios per case. "model": the whole one-node model, as a user running it would see it.
"command": the family's own node(s) alone, run as a graph of just those nodes (same command,
backend and tensors, so the same data in the same cache) in the same interleaved rounds, over
the same onnxruntime time. They differ where the loader adds layout TRANSPOSE nodes: nnc keeps
images NHWC, so a one-operator NCHW model gets an NCHW -> NHWC transpose at its input and one
back at its output (Resize, Pad, ConvTranspose, GroupNormalization). In a real network these
sit once at the graph's edges, not around every operator, so the command ratio is the one that
says how the command's kernel compares; the model ratio counts the edge copies too.

Families (``--family``): activation, binary, norm, matmul, resize, pad, transpose,
conv_transpose, reduce, softmax.
"""

import sys
import time

import numpy as np

import nnc
from benchmarks import _util

TOLERANCE = 1e-5
MB_SE = (1, 672, 14, 14)   # a late MobileNet-V3 / EfficientNet-B0 stage, where SE blocks run
MB_EARLY = (1, 16, 112, 112)  # an early MobileNet-V3 stage


def _act(op, shape, **attrs):
    return {"op": op, "inputs": [("x", shape)], "attrs": attrs}


def _bin(op, shape, other):
    return {"op": op, "inputs": [("x", shape), ("w", other)], "consts": ("w",)}


def _pow_by(shape, e):
    """Pow by one constant exponent (a scalar initializer)."""
    return {"op": "Pow", "inputs": [("x", shape), ("e", ())], "consts": ("e",),
            "values": {"e": e}}


# (family, case, node spec): "inputs" are (name, shape); names in "consts" are initializers
# (random, positive where the operator needs it), the others are fed.
CASES = (
    ("activation", "HardSwish MobileNet-V3", _act("HardSwish", MB_EARLY)),
    ("activation", "HardSwish MobileNet-V3 SE", _act("HardSwish", MB_SE)),
    ("activation", "HardSigmoid MobileNet-V3", _act("HardSigmoid", MB_EARLY, alpha=1 / 6)),
    ("activation", "Sigmoid EfficientNet", _act("Sigmoid", MB_SE)),
    ("activation", "Gelu ViT MLP", _act("Gelu", (1, 197, 3072))),
    ("activation", "Erf ViT MLP", _act("Erf", (1, 197, 3072))),
    ("activation", "LeakyRelu", _act("LeakyRelu", MB_EARLY, alpha=0.1)),
    ("activation", "Softplus", _act("Softplus", MB_EARLY)),
    ("activation", "Mish", _act("Mish", MB_EARLY)),
    ("binary", "Div SE broadcast", _bin("Div", MB_SE, (1, 672, 1, 1))),
    ("binary", "Sub SE broadcast", _bin("Sub", MB_SE, (1, 672, 1, 1))),
    ("binary", "Pow SE broadcast", _bin("Pow", MB_SE, (1, 672, 1, 1))),
    ("binary", "Pow by 2", _pow_by(MB_SE, 2.0)),
    ("binary", "Pow by 0.5", _pow_by(MB_SE, 0.5)),
    ("binary", "Pow by 1.7", _pow_by(MB_SE, 1.7)),
    ("binary", "Min SE broadcast", _bin("Min", MB_SE, (1, 672, 1, 1))),
    ("binary", "Max SE broadcast", _bin("Max", MB_SE, (1, 672, 1, 1))),
    ("norm", "LayerNormalization ViT",
     {"op": "LayerNormalization", "inputs": [("x", (1, 197, 768)), ("s", (768,)), ("b", (768,))],
      "consts": ("s", "b"), "attrs": {"axis": -1}}),
    ("norm", "LayerNormalization ConvNeXt",
     {"op": "LayerNormalization", "inputs": [("x", (1, 56, 56, 96)), ("s", (96,)), ("b", (96,))],
      "consts": ("s", "b"), "attrs": {"axis": -1}}),
    ("norm", "GroupNormalization g=32",
     {"op": "GroupNormalization",
      "inputs": [("x", (1, 64, 56, 56)), ("s", (64,)), ("b", (64,))],
      "consts": ("s", "b"), "attrs": {"num_groups": 32}}),
    ("matmul", "MatMul ViT attention QK",
     {"op": "MatMul", "inputs": [("x", (1, 12, 197, 64)), ("y", (1, 12, 64, 197))]}),
    ("matmul", "MatMul ConvNeXt MLP",
     {"op": "MatMul", "inputs": [("x", (1, 56, 56, 96)), ("w", (96, 384))], "consts": ("w",)}),
    ("resize", "Resize nearest 2x",
     {"op": "Resize", "inputs": [("x", (1, 64, 56, 56)), ("", None), ("scales", (4,))],
      "consts": ("scales",), "values": {"scales": [1, 1, 2, 2]},
      "attrs": {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                "nearest_mode": "floor"}}),
    ("resize", "Resize bilinear 2x",
     {"op": "Resize", "inputs": [("x", (1, 64, 56, 56)), ("", None), ("scales", (4,))],
      "consts": ("scales",), "values": {"scales": [1, 1, 2, 2]},
      "attrs": {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}}),
    ("pad", "Pad reflect 1",
     {"op": "Pad", "inputs": [("x", (1, 64, 56, 56)), ("pads", (8,))], "consts": ("pads",),
      "values": {"pads": [0, 0, 1, 1, 0, 0, 1, 1]}, "attrs": {"mode": "reflect"}}),
    ("transpose", "Transpose channel shuffle",
     {"op": "Transpose", "inputs": [("x", (1, 2, 58, 28, 28))],
      "attrs": {"perm": [0, 2, 1, 3, 4]}}),
    ("conv_transpose", "ConvTranspose 64->32 k4 s2",
     {"op": "ConvTranspose", "inputs": [("x", (1, 64, 28, 28)), ("w", (64, 32, 4, 4)),
                                        ("b", (32,))],
      "consts": ("w", "b"), "attrs": {"kernel_shape": [4, 4], "strides": [2, 2],
                                      "pads": [1, 1, 1, 1]}}),
    ("reduce", "ReduceMin spatial",
     {"op": "ReduceMin", "inputs": [("x", MB_SE), ("axes", (2,))], "consts": ("axes",),
      "values": {"axes": [2, 3]}, "attrs": {"keepdims": 1}}),
    ("reduce", "ReduceMax spatial",
     {"op": "ReduceMax", "inputs": [("x", MB_SE), ("axes", (2,))], "consts": ("axes",),
      "values": {"axes": [2, 3]}, "attrs": {"keepdims": 1}}),
    ("reduce", "ReduceMin channels NHWC-like",
     {"op": "ReduceMin", "inputs": [("x", (1, 56, 56, 64)), ("axes", (1,))], "consts": ("axes",),
      "values": {"axes": [1]}, "attrs": {"keepdims": 1}}),
    ("reduce", "ReduceL2 spatial",
     {"op": "ReduceL2", "inputs": [("x", MB_SE), ("axes", (2,))], "consts": ("axes",),
      "values": {"axes": [2, 3]}, "attrs": {"keepdims": 1}}),
    ("softmax", "Softmax ViT attention",
     {"op": "Softmax", "inputs": [("x", (1, 12, 197, 197))], "attrs": {"axis": -1}}),
)
FAMILIES = tuple(dict.fromkeys(c[0] for c in CASES))
_POSITIVE = {"Pow"}                 # operators whose input x must be positive (Pow's base)
_INT_CONSTS = {"pads", "axes"}      # int64 initializers (ONNX's type for them)


def _arrays(spec, rng):
    """name -> array for each of ``spec``'s inputs, initializers included."""
    out = {}
    for name, shape in spec["inputs"]:
        if not name:
            continue
        if name in spec.get("values", {}):
            dtype = np.int64 if name in _INT_CONSTS else np.float32
            out[name] = np.asarray(spec["values"][name], dtype=dtype)
            continue
        a = rng.standard_normal(shape).astype(np.float32)
        if spec["op"] in _POSITIVE:
            a = np.abs(a) + np.float32(0.5) if name == "x" else a.clip(-2, 2)
        out[name] = a
    return out


def _model(onnx, spec, arrays, out_shape=None):
    """The one-node model of ``spec`` (opset 21) and its feeds (name -> array): ``arrays``
    less the initializers. nnc's loader checks the model, which wants the output's shape: the
    first model, without it, is onnxruntime's, which tells it."""
    h = onnx.helper
    consts = spec.get("consts", ())
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in arrays.items() if n in consts]
    feeds = {n: a for n, a in arrays.items() if n not in consts}
    infos = [h.make_tensor_value_info(n, 1, list(a.shape)) for n, a in feeds.items()]
    node = h.make_node(spec["op"], [n for n, _ in spec["inputs"]], ["out"],
                       **spec.get("attrs", {}))
    out = h.make_tensor_value_info("out", 1, None if out_shape is None else list(out_shape))
    g = h.make_graph([node], "one", infos, [out], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    m.ir_version = 10
    return m.SerializeToString(), feeds


def _ort(ort, blob):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])


def _loop(fn, n):
    def run():
        for _ in range(n):
            fn()
    return run


def _nodes(g):
    """``command:backend`` of each node nnc runs, in order."""
    return [f"{e.cmd.name}:{e.backend}" for e in g.topsort()]


def _own_nodes(g, spec):
    """The nodes of the case's own command(s): every node but the layout TRANSPOSEs the loader
    adds around an NCHW operator (all of them for an ONNX Transpose)."""
    nodes = g.topsort()
    if spec["op"] == "Transpose":
        return nodes
    return [e for e in nodes if e.cmd.name != "TRANSPOSE"]


def _command_graph(nodes):
    """A graph of just ``nodes`` (in order, each after the one before), with their commands,
    backends and tensors."""
    g = nnc.Graph()
    prev = None
    for e in nodes:
        n = g.exec(e.cmd, e.inputs, e.outputs)
        n.backend = e.backend
        if prev is not None:
            g.concat(prev, n)
        prev = n
    return g


def _case(onnx, ort, family, label, spec, repeat, rng):
    arrays = _arrays(spec, rng)
    blob, feeds = _model(onnx, spec, arrays)
    row = {"family": family, "case": label, "op": spec["op"],
           "shape": [list(s) for n, s in spec["inputs"] if n in feeds]}
    sess = _ort(ort, blob)
    want = sess.run(None, feeds)[0]
    g, ins, outs = nnc.onnx.load(_model(onnx, spec, arrays, want.shape)[0])
    for t, name in zip(ins, feeds):
        t.numpy()[...] = feeds[name]
    g.run()
    got = outs[0].numpy()
    row["nodes"] = _nodes(g)
    row["backends"] = sorted({n.split(":", 1)[1] for n in row["nodes"]})
    row["out_shape"] = list(want.shape)
    if got.size != want.size:
        row["max_rel_diff"] = None
        row["error"] = f"nnc's output is {list(got.shape)}, onnxruntime's {list(want.shape)}"
        return row
    rel = float(np.abs(got.reshape(want.shape) - want).max() / max(np.abs(want).max(), 1e-30))
    row["max_rel_diff"] = rel
    if not rel <= TOLERANCE:
        row["error"] = f"outputs differ: {rel:.3g} of max|out| (tolerance {TOLERANCE:g})"
        return row
    own = _own_nodes(g, spec)
    row["command_nodes"] = [f"{e.cmd.name}:{e.backend}" for e in own]
    cmd_call = _command_graph(own).run
    calls = {"nnc": g.run, "command": cmd_call, "ort": lambda: sess.run(None, feeds)}
    t0 = time.perf_counter()
    for _ in range(3):
        for fn in calls.values():
            fn()
    each = (time.perf_counter() - t0) / 9
    inner = max(1, int(2e-3 / max(each, 1e-7)))
    s = _util.measure_interleaved({k: _loop(fn, inner) for k, fn in calls.items()}, repeat)
    t = {k: _util.median(v) / inner for k, v in s.items()}
    row.update(nnc_s=t["nnc"], ort_s=t["ort"], ratio=t["nnc"] / t["ort"], command_s=t["command"],
               command_ratio=t["command"] / t["ort"], inner=inner,
               samples={k: [x / inner for x in v] for k, v in s.items()})
    return row


def run(repeat, families=FAMILIES, log=print):
    import onnx
    import onnxruntime as ort

    nnc.set_num_threads(1)
    nnc.set_intra_op_threads(1)
    rng = np.random.default_rng(0)
    rows = []
    for family, label, spec in CASES:
        if family not in families:
            continue
        row = _case(onnx, ort, family, label, spec, repeat, rng)
        rows.append(row)
        if "error" in row:
            log(f"{label}: {row['error']}")
        else:
            log(f"{label}: nnc {row['nnc_s'] * 1e3:.3f} ms, command "
                f"{row['command_s'] * 1e3:.3f} ms, ort {row['ort_s'] * 1e3:.3f} ms, nnc/ort "
                f"{row['ratio']:.2f} (model) {row['command_ratio']:.2f} (command) "
                f"({' '.join(row['nodes'])})")
    summary = {}
    for family in families:
        mine = [r for r in rows if r["family"] == family]
        timed = [r for r in mine if "error" not in r]
        summary[family] = {
            "cases": len(mine), "worst_ratio": max((r["ratio"] for r in timed), default=None),
            "worst_command_ratio": max((r["command_ratio"] for r in timed), default=None),
            "meets_1_5x": bool(timed) and len(timed) == len(mine)
            and all(r["ratio"] <= 1.5 for r in timed),
            "command_meets_1_5x": bool(timed) and len(timed) == len(mine)
            and all(r["command_ratio"] <= 1.5 for r in timed),
            "backends": sorted({b for r in mine for b in r["backends"]})}
    return {"rows": rows, "families": summary, "repeat": repeat,
            "ok": all("error" not in r for r in rows)}


def render(report):
    return _util.table(
        ["family", "case", "shape (ONNX)", "nnc model (ms)", "nnc command (ms)",
         "onnxruntime (ms)", "model / ort", "command / ort", "nnc backend", "max rel diff"],
        [[r["family"], r["case"], " ".join("x".join(map(str, s)) for s in r["shape"]),
          _util.fmt(r.get("nnc_s", 0) * 1e3) if "nnc_s" in r else r["error"],
          _util.fmt(r["command_s"] * 1e3) if "command_s" in r else "—",
          _util.fmt(r["ort_s"] * 1e3) if "ort_s" in r else "—",
          _util.fmt(r.get("ratio")), _util.fmt(r.get("command_ratio")), " ".join(r["nodes"]),
          _util.fmt(r["max_rel_diff"])]
         for r in report["rows"]])


def main(argv=None):
    p = _util.parser("the new command families' nnc backends against onnxruntime", repeat=9)
    p.add_argument("--family", default=",".join(FAMILIES),
                   help=f"comma-separated families to run (default all: {','.join(FAMILIES)})")
    args = p.parse_args(argv)
    families = tuple(f for f in args.family.split(",") if f)
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        p.error(f"unknown famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}; "
                f"known: {', '.join(FAMILIES)}")
    report = run(args.repeat, families, log=(lambda *a: None) if args.json else print)
    _util.publish(report, "commands", render, args.json, packages=("numpy", "onnxruntime"))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
