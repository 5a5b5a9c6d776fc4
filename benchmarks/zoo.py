"""torchvision's classification zoo through nnc.onnx: which models load, how close they come to
onnxruntime, and how fast they run beside it.

    python -m benchmarks.zoo --export DIR [--exporters ts,dynamo] [--models a,b]
    python -m benchmarks.zoo --dir DIR [--json] [--repeat R] [--threads T] [--models a,b]
                                       [--no-time]

``--export`` needs torch and torchvision (the ``bench`` extra; nothing of nnc is imported, so it
may run in another environment): each model is made with random weights (``weights=None``,
seeded), batch 1, and exported with the TorchScript-based exporter (``dynamo=False``, opset 17)
and the dynamo exporter (``dynamo=True``, opset 18) as ``DIR/<model>.<ts|dynamo>.onnx``.
torchvision zero-initialises ViT's head, which would make every output 0 and the comparison
empty, so it is redrawn from N(0, 0.02) first; GoogLeNet and Inception-V3 get PyTorch's default
init instead of their own, whose small weights leave only the classifier's bias at the output.
A model an exporter refuses is reported and skipped.

``--dir`` then, for every file there, in this process:

- loads it with ``nnc.onnx.InferenceSession(path, schedule=None)`` (refusals are reported with
  their message: the ``UnsupportedError`` names the node and the attribute);
- runs nnc and onnxruntime on the same random input and reports the largest difference over the
  largest |output| of onnxruntime (the issue's bar is 1e-5);
- unless ``--no-time``, times in interleaved rounds (medians): nnc sequential (``g.run()``), nnc
  on the rank schedule (a second session with ``schedule="rank"``), onnxruntime (default graph
  optimisations), and OpenVINO when it is installed, each with T intra-op threads; before each
  timed run it sleeps ``--pause`` seconds and makes one untimed run (``_util.measure_rounds``),
  so one runtime's threads still spinning after its run do not take the core the next one's
  helpers need (without a pause onnxruntime's spinning worker made nnc's MobileNet-V3 small
  take 3.1 ms where alone it takes 1.8).

Without torch (``--export``) or a ``--dir`` with models, it says so and exits with status 2.
"""

import argparse
import glob
import os
import sys

import numpy as np

MODELS = ("resnet18", "resnet34", "resnet50", "resnext50_32x4d", "wide_resnet50_2",
          "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "googlenet", "inception_v3",
          "densenet121", "squeezenet1_0", "squeezenet1_1", "shufflenet_v2_x0_5",
          "shufflenet_v2_x1_0", "efficientnet_b0", "efficientnet_v2_s", "mnasnet1_0",
          "regnet_y_400mf", "regnet_x_400mf", "vgg11", "vgg16_bn", "alexnet", "convnext_tiny",
          "vit_b_16", "swin_t")
EXPORTERS = ("ts", "dynamo")


def export(directory, models, exporters, log=print):
    """Write DIR/<model>.<exporter>.onnx for each model and exporter (torch only)."""
    try:
        import torch
        import torchvision
    except ImportError as e:
        log(f"benchmarks.zoo --export needs torch and torchvision (the bench extra): {e}",
            file=sys.stderr)
        raise SystemExit(2) from e
    import warnings

    os.makedirs(directory, exist_ok=True)
    for name in models:
        for exporter in exporters:
            out = os.path.join(directory, f"{name}.{exporter}.onnx")
            if os.path.exists(out):
                continue
            torch.manual_seed(0)
            # torchvision's own init of these two (a truncated normal of std 0.01) shrinks the
            # activations layer by layer until the output is the classifier's bias, which any
            # runtime computes exactly: PyTorch's default init keeps the comparison meaningful.
            kw = {"aux_logits": False, "init_weights": False} if name in (
                "googlenet", "inception_v3") else {}
            model = getattr(torchvision.models, name)(weights=None, **kw).eval()
            if name == "vit_b_16":
                with torch.no_grad():
                    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
            size = 299 if name == "inception_v3" else 224
            x = torch.randn(1, 3, size, size)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.onnx.export(model, (x,), out, dynamo=exporter == "dynamo",
                                      opset_version=17 if exporter == "ts" else 18,
                                      input_names=["x"], output_names=["y"])
            except Exception as e:  # the exporter's own refusal: reported, the rest go on
                log(f"{name} ({exporter}): the exporter failed: {type(e).__name__}: "
                    f"{str(e)[:200]}")
                continue
            log(f"{name} ({exporter}): {out}")


def _peers(path, feeds, threads):
    """onnxruntime's session (always) and OpenVINO's compiled model bound to ``feeds`` (when
    installed and it compiles the model)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    peers = {"ort": ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])}
    try:
        from nnc.models.peers import OvRun
    except ImportError:
        return peers, None
    try:
        with open(path, "rb") as f:
            ov = OvRun(f.read(), feeds, threads=threads)
    except Exception:  # OpenVINO absent or refusing the model: a missing column, not a failure
        ov = None
    return peers, ov


def check(path, threads, repeat, timed, log=print, pause=0.1):
    """One model file's row."""
    import nnc
    import nnc.onnx
    from benchmarks import _util

    name, exporter = os.path.basename(path)[:-len(".onnx")].rsplit(".", 1)
    row = {"model": name, "exporter": exporter}
    try:
        sess = nnc.onnx.InferenceSession(path, schedule=None)
    except nnc.NNCError as e:
        row["refused"] = f"{type(e).__name__}: {e}"
        return row
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
    feeds = {inp.name: x}
    peers, ov = _peers(path, feeds, threads)
    before = nnc.get_intra_op_threads()
    nnc.set_intra_op_threads(threads)
    try:
        got = sess.run(None, feeds)[0]
        want = peers["ort"].run(None, feeds)[0]
        row["rel_err"] = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
        if not timed:
            return row
        sched = nnc.onnx.InferenceSession(path, schedule="rank")
        fns = {"nnc_seq": lambda: sess.run(None, feeds),
               "nnc_sched": lambda: sched.run(None, feeds),
               "ort": lambda: peers["ort"].run(None, feeds)}
        if ov is not None:
            fns["ov"] = ov
        samples, _ = _util.measure_rounds(fns, repeat, pause=pause)
    finally:
        nnc.set_intra_op_threads(before)
    med = {k: _util.median(v) for k, v in samples.items()}
    row["median_s"] = med
    row["nnc_best"] = min(med["nnc_seq"], med["nnc_sched"])
    row["nnc_vs_ort"] = row["nnc_best"] / med["ort"]
    log(f"{name} ({exporter}): done", file=sys.stderr)
    return row


def render(r):
    from benchmarks import _util

    head = ["model", "exporter", "loads", "max err / max|ort|", "nnc seq", "nnc sched", "ort",
            "ov", "nnc best / ort"]
    body = []
    for x in r["rows"]:
        if "refused" in x:
            # The loader lists each operator it refuses on a line of its own: one line here.
            why = " ".join(x["refused"].split())
            body.append([x["model"], x["exporter"], "no: " + why[:150], "", "", "", "", "", ""])
            continue
        m = x.get("median_s", {})

        def ms(k, m=m):
            return f"{m[k] * 1e3:.2f} ms" if k in m else ""

        body.append([x["model"], x["exporter"], "yes", f"{x['rel_err']:.1e}", ms("nnc_seq"),
                     ms("nnc_sched"), ms("ort"), ms("ov"),
                     f"{x['nnc_vs_ort']:.2f}" if "nnc_vs_ort" in x else ""])
    loaded = [x for x in r["rows"] if "refused" not in x]
    close = [x for x in loaded if x["rel_err"] <= 1e-5]
    return (f"batch 1, {r['threads']} intra-op thread(s), median of {r['repeat']}; "
            f"{len(loaded)} of {len(r['rows'])} files load, {len(close)} within 1e-5 of "
            f"onnxruntime\n" + _util.table(head, body))


def main(argv=None):
    # Not benchmarks._util's parser: that module imports nnc, and --export runs where only
    # torch may be installed.
    p = argparse.ArgumentParser(prog="python -m benchmarks.zoo",
                                description="torchvision's zoo through nnc.onnx against "
                                            "onnxruntime")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on the last line of stdout")
    p.add_argument("--repeat", type=int, default=5,
                   help="timed runs per measurement after one warm-up (default 5)")
    p.add_argument("--export", metavar="DIR", help="export the zoo into DIR (needs torch)")
    p.add_argument("--exporters", default=",".join(EXPORTERS), help="ts, dynamo or both")
    p.add_argument("--dir", help="check and time the models in DIR")
    p.add_argument("--threads", type=int, default=2, help="nnc's and the peers' threads")
    p.add_argument("--pause", type=float, default=0.1,
                   help="seconds of sleep before each timed run (default 0.1): spinning "
                        "thread pools go idle")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    p.add_argument("--no-time", action="store_true", help="load and compare only")
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    bad = set(models) - set(MODELS)
    if bad:
        p.error(f"unknown models {sorted(bad)}; choose from {MODELS}")
    if a.export:
        export(a.export, models, [e for e in a.exporters.split(",") if e])
        return
    files = sorted(f for f in glob.glob(os.path.join(a.dir or "", "*.onnx"))
                   if os.path.basename(f).split(".")[0] in models) if a.dir else []
    if not files:
        print("benchmarks.zoo: no models to check: export them first with --export DIR "
              "(needs torch and torchvision), then pass --dir DIR", file=sys.stderr)
        raise SystemExit(2)
    from benchmarks import _util

    rows = [check(f, a.threads, a.repeat, not a.no_time, pause=a.pause) for f in files]
    report = {"threads": a.threads, "repeat": a.repeat, "pause_s": a.pause, "rows": rows}
    _util.publish(report, "zoo", render, a.json, packages=("numpy", "onnx", "onnxruntime"))


if __name__ == "__main__":
    main()
