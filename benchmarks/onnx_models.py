"""ResNet-50, Inception-V3, MobileNet-V2 (batch 1, random weights) from ONNX: nnc vs onnxruntime.

    python -m benchmarks.onnx_models [--json] [--repeat R] [--threads T] [--models a,b]

Each network is built by nnc/models/onnx_zoo.py and loaded with ``nnc.onnx.load``; on the same
ONNX model and the same input, timed in interleaved rounds in one process:

- ``nnc_seq``: ``g.run()`` on the calling thread;
- ``nnc_streams``: ``g.run(stream=s); s.wait()`` under ``nnc.static_schedule(g)``;
- ``ort``: an onnxruntime CPU session (intra-op threads = T, inter-op 1, default graph
  optimisations, which fold BatchNormalization and fuse Conv + Relu).

nnc's intra-op threads are set to T (``nnc.set_intra_op_threads``: nnc's C backends call a
private single-threaded BLAS and split commands over nnc's pool). ``benchmarks.streams`` is the
fuller comparison (more configurations, quiet rounds, targets). Reported: median wall time per
inference and nnc / ort ratios. Informative only (docs/benchmarks.md); nothing is tuned here.
"""

import sys

import numpy as np

import nnc
import nnc.onnx
from benchmarks import _util

MODELS = ("resnet50", "inception_v3", "mobilenet_v2")


def run(models, repeat, threads, log=print):
    try:
        import onnxruntime as ort

        from nnc.models import onnx_zoo
    except ImportError as e:  # pragma: no cover - pip install -e '.[test,bench]'
        raise SystemExit(f"benchmarks.onnx_models needs onnx, onnxruntime: {e}") \
            from e
    rows = []
    for name in models:
        m = getattr(onnx_zoo, name)()
        loaded = nnc.onnx.load(m)
        g, inputs, outputs = loaded
        x = np.random.default_rng(0).standard_normal(inputs[0].shape).astype(np.float32)
        inputs[0].numpy()[...] = x
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(m.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        feeds = {loaded.input_names[0]: x}
        sched = nnc.static_schedule(g)
        s = nnc.Stream("cpu")

        def seq(g=g):
            g.run()

        def streams(g=g, s=s):
            g.run(stream=s)
            s.wait()

        def onnxruntime(sess=sess, feeds=feeds):
            sess.run(None, feeds)

        before = nnc.get_intra_op_threads()
        nnc.set_intra_op_threads(threads)
        try:
            want = sess.run(None, feeds)[0]
            g.run()
            err = float(np.abs(outputs[0].numpy() - want).max() / np.abs(want).max())
            samples = _util.measure_interleaved(
                {"nnc_seq": seq, "nnc_streams": streams, "ort": onnxruntime}, repeat)
        finally:
            nnc.set_intra_op_threads(before)
        med = {k: _util.median(v) for k, v in samples.items()}
        rows.append({"model": name, "streams": sched.stream_count, "rel_err": err,
                     "median_s": med, "samples_s": samples,
                     "seq_vs_ort": med["nnc_seq"] / med["ort"],
                     "streams_vs_ort": med["nnc_streams"] / med["ort"]})
        log(f"{name}: done", file=sys.stderr)
    return {"threads": threads, "repeat": repeat, "rows": rows}


def render(r):
    head = ["model", "nnc seq", "nnc streams", "ort", "seq/ort", "streams/ort", "streams",
            "max err / max|ort|"]
    body = [[x["model"], f"{x['median_s']['nnc_seq'] * 1e3:.0f} ms",
             f"{x['median_s']['nnc_streams'] * 1e3:.0f} ms",
             f"{x['median_s']['ort'] * 1e3:.0f} ms", f"{x['seq_vs_ort']:.1f}x",
             f"{x['streams_vs_ort']:.1f}x", x["streams"], f"{x['rel_err']:.1e}"]
            for x in r["rows"]]
    return (f"batch 1, {r['threads']} thread(s) per command for nnc and onnxruntime, median of "
            f"{r['repeat']}\n" + _util.table(head, body))


def main(argv=None):
    p = _util.parser("ONNX networks: nnc vs onnxruntime", repeat=5)
    p.add_argument("--threads", type=int, default=2, help="nnc and ORT intra-op threads")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    bad = set(models) - set(MODELS)
    if bad:
        p.error(f"unknown models {sorted(bad)}; choose from {MODELS}")
    report = run(models, a.repeat, a.threads, log=lambda *x, **k: print(*x, **k))
    _util.publish(report, "onnx_models", render, a.json,
                  packages=("numpy", "onnx", "onnxruntime"))


if __name__ == "__main__":
    main()
