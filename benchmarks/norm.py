"""The normalisation family's CPU_OPT against onnxruntime on the zoo's shapes, one thread, in
one process: LayerNormalization over ViT-B/16's tokens ([1, 197, 768]) and ConvNeXt-T's first
stage ([1, 56, 56, 96], channels last), GroupNormalization with 32 groups and
InstanceNormalization on a [1, 64, 56, 56] image (nnc's NHWC GROUP_NORM against onnxruntime's
NCHW node, as each runs it after a Conv).

    python -m benchmarks.norm [--json] [--repeat R]

nnc: ``Backend.exec`` of CPU_OPT on preallocated tensors; onnxruntime: a one-node model with
intra_op_num_threads=1, ``run`` with the input fed (its output allocation included, as a
session call does). Interleaved rounds (``_util.measure_interleaved``), each call repeated to
take about a millisecond; the median per call, ort / nnc (above 1: nnc is faster) and the largest
difference between the two, relative to the largest output.
"""

import functools
import sys

import numpy as np

import nnc
from benchmarks import _util

CASES = (("LayerNormalization ViT", (1, 197, 768), None),
         ("LayerNormalization ConvNeXt", (1, 56, 56, 96), None),
         ("GroupNormalization g=32", (1, 64, 56, 56), 32),
         ("InstanceNormalization", (1, 64, 56, 56), 64))


def _loop(fn, n):
    def run():
        for _ in range(n):
            fn()
    return run


def _ort(onnx, ort, op, shape, groups, scale, bias):
    h = onnx.helper
    inits = [onnx.numpy_helper.from_array(scale, "s"), onnx.numpy_helper.from_array(bias, "b")]
    attrs = {} if groups is None or op == "InstanceNormalization" else {"num_groups": groups}
    op = "LayerNormalization" if groups is None else op
    node = h.make_node(op, ["x", "s", "b"], ["y"], **({"axis": -1} if groups is None else attrs))
    g = h.make_graph([node], "n", [h.make_tensor_value_info("x", 1, list(shape))],
                     [h.make_tensor_value_info("y", 1, list(shape))], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    m.ir_version = 10
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run(repeat, log=print):
    import onnx
    import onnxruntime as ort

    nnc.set_num_threads(1)
    nnc.set_intra_op_threads(1)
    rng = np.random.default_rng(0)
    rows = []
    for label, shape, groups in CASES:
        x = rng.standard_normal(shape).astype(np.float32)
        c = shape[-1] if groups is None else shape[1]
        scale = rng.standard_normal(c).astype(np.float32)
        bias = rng.standard_normal(c).astype(np.float32)
        op = label.split()[0]
        sess = _ort(onnx, ort, op, shape, groups, scale, bias)
        if groups is None:
            cmd, xin = nnc.Cmd("LAYER_NORM", axis=(-1,)), x
        else:
            cmd = nnc.Cmd("GROUP_NORM", groups=groups, reduce_axis=(1, 2))
            xin = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        xt, st, bt = nnc.Tensor(xin), nnc.Tensor(scale), nnc.Tensor(bias)
        yt = nnc.Tensor.empty(xin.shape, dtype="float32")
        backend = next(b for b in nnc.command_info(cmd.name).backends if b.name == "CPU_OPT")
        inner = max(1, 250_000 // x.size)
        feeds = {"x": x}
        nnc_call = functools.partial(backend.exec, cmd, [xt, st, bt], [yt])
        ort_call = functools.partial(sess.run, None, feeds)
        s = _util.measure_interleaved({"nnc": _loop(nnc_call, inner),
                                       "ort": _loop(ort_call, inner)}, repeat)
        t = {k: _util.median(v) / inner for k, v in s.items()}
        want = sess.run(None, feeds)[0]
        got = yt.numpy() if groups is None else yt.numpy().transpose(0, 3, 1, 2)
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        rows.append({"case": label, "shape": list(shape), "nnc_s": t["nnc"], "ort_s": t["ort"],
                     "ratio": t["ort"] / t["nnc"], "max_rel_diff": rel})
        log(f"{label} {shape}: nnc {t['nnc'] * 1e6:.1f} us, ort {t['ort'] * 1e6:.1f} us")
    return {"rows": rows, "repeat": repeat}


def render(report):
    return _util.table(
        ["case", "shape (ONNX)", "nnc CPU_OPT (us)", "onnxruntime (us)", "ort / nnc",
         "max rel diff"],
        [[r["case"], "x".join(map(str, r["shape"])), _util.fmt(r["nnc_s"] * 1e6),
          _util.fmt(r["ort_s"] * 1e6), _util.fmt(r["ratio"]), _util.fmt(r["max_rel_diff"])]
         for r in report["rows"]])


def main(argv=None):
    p = _util.parser("LAYER_NORM / GROUP_NORM CPU_OPT against onnxruntime", repeat=9)
    args = p.parse_args(argv)
    report = run(args.repeat, log=(lambda *a: None) if args.json else print)
    _util.publish(report, "norm", render, args.json, packages=("numpy", "onnxruntime"))


if __name__ == "__main__":
    sys.exit(main())
