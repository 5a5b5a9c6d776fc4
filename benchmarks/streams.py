"""nnc's sequential and scheduled runs against what a user would pick instead, batch 1 on CPU.

    python -m benchmarks.streams [--json] [--repeat R] [--size {299,75}]... [--models a,b]
                                 [--threads T] [--max-streams S] [--pause P] [--no-limits]

Networks: Inception-V3 as nnc's own graph (``nnc.models.inception``) at each ``--size``
(default 299 and 75), and ResNet-50 and MobileNet-V2 at 224 from ``nnc/models/onnx_zoo.py``
loaded with ``nnc.onnx.load``. T (``--threads``) is the usable core count by default; nnc's
pool is sized to T (``nnc.set_num_threads``). Configurations, per network:

- ``seq1``: ``g.run()`` with ``nnc.set_intra_op_threads(1)``: one thread does everything;
- ``seqT`` (``seq2`` on 2 cores): ``g.run()`` with intra-op T: each large command splits its
  work over the caller and T-1 pool threads (the best sequential run on T cores);
- ``sched``: ``g.run(stream=s); s.wait()`` under ``nnc.static_schedule(g, max_streams=S)``
  (S = T by default) with the default intra-op setting: branches on streams, and a command
  whose stream finds a pool thread idle splits onto it;
- ``sched_nosplit``: the same schedule at intra-op 1: branch concurrency alone;
- each of the four again as ``*_tuned`` on copies of the graph after ``g.autotune()``: the
  1-thread ones (``seq1_tuned``, ``sched_nosplit_tuned``) on a copy tuned at intra-op 1, the
  T-thread ones (``seqT_tuned``, ``sched_tuned``) on a copy tuned at intra-op T (autotune
  times at the setting it runs under), when autotune moves any node to another backend (the
  report lists them, with the setting);
- when onnxruntime is installed, on the same weights (Inception: ``nnc.onnx.save`` of the
  graph above; the others: the ONNX model nnc loaded), ``ORT_ENABLE_ALL`` with IOBinding:
  ``ort_seq1`` and ``ort_seqT`` (sequential mode, intra-op 1 / T, inter-op 1) and ``ort_par``
  (parallel execution mode, inter-op T, intra-op 1);
- when openvino is installed, on the same ONNX model as ORT (``nnc.models.peers.OvRun``):
  ``ov_seq1`` and ``ov_seqT``, each a CPU compiled model with ``INFERENCE_NUM_THREADS`` 1 / T,
  ``NUM_STREAMS`` 1, the LATENCY hint and f32 inference precision (never bf16, which OpenVINO
  picks by itself on a CPU with AVX-512-BF16: not the same math), one infer request with its
  tensors bound once over preallocated arrays;
- when ``import torch`` works, ``torch_eager`` (benchmarks/_torch_eager.py, T threads).

A peer that is not installed is left out with a line saying so and how to add it
(``pip install 'nnc-graph[bench]'`` brings onnxruntime and OpenVINO).

Timing (``_util.measure_rounds``): interleaved rounds in one process, order rotated every
round, a pause before each timed run so spinning pools go idle, and one untimed run right
before it. Figures are medians over the *quiet* rounds (other processes used at most 0.1 core
during the round, else the quieter half); ratios are medians of per-round ratios over the same
rounds: ``x best seq`` = best sequential time / this time (above 1: faster than nnc's best
sequential configuration), ``/ ORT best`` = this time / ORT's best configuration's time,
``/ peer best`` = this time / the best time of any ORT or OpenVINO configuration (the fastest
other runtime on the same weights).

The report's head names the kernel ISA nnc's own kernels dispatched (``nnc.base.isa``).

Against the machine: before the networks, ``benchmarks._limits.measure_limits`` measures in this
process the FMA peak at 1 and T threads (``nnc.base.isa.fma_gflops``: independent FMA chains at
the kernel ISA, no memory traffic), OpenBLAS's SGEMM peak (a large square GEMM, T at once) and
the memory bandwidth. ``x limit`` = this time / (the network's GFLOP / the FMA peak at the
configuration's thread count): 1.0 would be every convolution and GEMM at the FMA peak and
everything else free. A network's GFLOP are 2*M*N*K over its CONVOLUTION and GEMM nodes
(``_limits.graph_gflop``); ``seq1``, ``ort_seq1`` and ``ov_seq1`` (and the ``_tuned`` forms)
count at the 1-thread peak, every other configuration at the T-thread one. ``--no-limits`` skips it.

Checks (a failed check prints FAIL and makes the exit status 1): every nnc configuration on the
untuned graph gives the same bits as ``seq1``, and so does every tuned configuration as
``seq1_tuned``; the tuned graph's outputs are within 1e-3 x max|output| of the untuned ones
(Winograd rounds differently); ORT's, OpenVINO's and PyTorch's outputs are within
1e-4 x max|output| of nnc's (float32 summed in other orders; measured differences are near
1e-6).

Targets (Inception-V3, 2 cores): at 299 the best scheduled configuration is at least
1.05x faster than the best sequential one, and nnc's best mode takes at most 1.25x ORT's best
time; at 75 nnc's best takes at most 1.5x ORT's best and scheduled is no slower than sequential.
"""

import os
import sys
from collections import Counter

import numpy as np

import nnc
import nnc.onnx
from benchmarks import _limits, _util
from nnc.base import isa
from nnc.models.peers import OrtRun, OvRun, PeerUnavailableError, ort_version, ov_version

MODELS = ("inception_v3", "resnet50", "mobilenet_v2")
SIZES = (299, 75)
TOL_PEER = 1e-4      # ORT / OpenVINO / PyTorch vs nnc, relative to max|output|
INSTALL_PEERS = "pip install 'nnc-graph[bench]'"   # onnxruntime and OpenVINO
TOL_TUNED = 1e-3     # tuned graph vs untuned, relative to max|output|
TARGETS = {          # size -> (scheduled / best sequential speedup, nnc best / ORT best time)
    299: (1.05, 1.25),
    75: (1.0, 1.5),
}


def _usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class Net:
    """One network: ``make()`` builds a fresh nnc graph -> (graph, input tensor, outputs);
    ``onnx_model`` is the same network and weights for the peers."""

    def __init__(self, name, label, make, onnx_model=None):
        self.name, self.label, self.make, self.onnx_model = name, label, make, onnx_model


def _inception(size, seed):
    from nnc.models.inception import build_inception_v3_model

    def make():
        m = build_inception_v3_model(size=size, seed=seed)
        return m.graph, m.input, [m.logits, m.output]

    return Net(f"inception_v3_{size}", f"Inception-V3 {size}x{size} (nnc's own graph)", make)


def _zoo(name, seed):
    from nnc.models import onnx_zoo

    model = getattr(onnx_zoo, name)(seed=seed)

    def make():
        g, inputs, outputs = nnc.onnx.load(model)
        return g, inputs[0], list(outputs)

    label = {"resnet50": "ResNet-50 224x224", "mobilenet_v2": "MobileNet-V2 224x224"}[name]
    return Net(name, f"{label} (onnx_zoo via nnc.onnx.load)", make, model)


def _rel_err(got, want):
    scale = max(float(np.abs(want).max()), 1e-30)
    return float(np.abs(got.astype(np.float64) - want).max() / scale)


def _backend_changes(g, before):
    """Counter of 'COMMAND: old -> new' over the nodes autotune moved."""
    return Counter(f"{e.cmd.name}: {before[i]} -> {e.backend}"
                   for i, e in enumerate(g.execs) if e.backend != before[i])


def _nnc_configs(g, outputs, threads, max_streams, suffix, checks, say):
    """The four nnc configurations of one graph, checked bit for bit against its seq1 run."""
    sched = nnc.static_schedule(g, max_streams=max_streams)
    s = nnc.Stream("cpu")

    def seq(n):
        def run():
            nnc.set_intra_op_threads(n)
            g.run()
        return run

    def scheduled(n):
        def run():
            nnc.set_intra_op_threads(n)
            g.run(stream=s)
            s.wait()
        return run

    fns = {f"seq1{suffix}": seq(1)}
    if threads > 1:
        fns[f"seq{threads}{suffix}"] = seq(threads)
    fns[f"sched{suffix}"] = scheduled(None)
    fns[f"sched_nosplit{suffix}"] = scheduled(1)
    want = None
    for name, fn in fns.items():
        for t in outputs:
            t.numpy().fill(np.nan)
        fn()
        got = [t.numpy().copy() for t in outputs]
        if want is None:
            want = got
            continue
        same = all(np.array_equal(a, b) for a, b in zip(got, want))
        checks.append({"check": f"{name} bit-identical to seq1{suffix}", "ok": same})
    say(f"  schedule{suffix}: {sched.stream_count} streams, {sched.signal_count} signals "
        f"(max_streams={max_streams})")
    return fns, want, {"streams": sched.stream_count, "signals": sched.signal_count}


def _peer_configs(net, x, want, threads, checks, say):
    """ORT, OpenVINO (and PyTorch) on the same weights; (fns, {name: description},
    {peer: why not})."""
    fns, about, missing = {}, {}, {}
    feeds = {net.onnx_model.graph.input[0].name: x.numpy()}

    def add(name, r):
        r()
        err = _rel_err(r.outputs[0], want[0])
        checks.append({"check": f"{name} output within {TOL_PEER:g} of nnc's",
                       "ok": err <= TOL_PEER, "rel_err": err})
        fns[name] = r
        about[name] = r.describe()

    if ort_version() is None:
        missing["onnxruntime"] = f"not installed ({INSTALL_PEERS})"
    else:
        runs = {"ort_seq1": dict(intra_op=1)}
        if threads > 1:
            runs[f"ort_seq{threads}"] = dict(intra_op=threads)
            runs["ort_par"] = dict(intra_op=1, inter_op=threads, parallel=True)
        for name, kw in runs.items():
            add(name, OrtRun(net.onnx_model, feeds, **kw))
    if ov_version() is None:
        missing["openvino"] = f"not installed ({INSTALL_PEERS})"
    else:
        try:
            for n in sorted({1, threads}):
                add(f"ov_seq{n}", OvRun(net.onnx_model, feeds, threads=n))
        except PeerUnavailableError as e:   # it would not compile at f32
            missing["openvino"] = str(e)
    from benchmarks._torch_eager import TorchEager, torch_version

    if torch_version() is None:
        missing["torch"] = "not installed"
    else:
        try:
            t = TorchEager(net.onnx_model, {net.onnx_model.graph.input[0].name: x.numpy()},
                           threads)
            t()
        except NotImplementedError as e:
            missing["torch"] = f"unsupported: {e}"
        else:
            err = _rel_err(t.outputs[0], want[0])
            checks.append({"check": f"torch_eager output within {TOL_PEER:g} of nnc's",
                           "ok": err <= TOL_PEER, "rel_err": err})
            fns["torch_eager"] = t
            about["torch_eager"] = t.describe()
    for peer, why in missing.items():
        say(f"  {peer}: {why}; its configurations are left out")
    return fns, about, missing


def _summarise(samples, others):
    """Quiet-round medians, per-round ratios, best configurations."""
    quiet = _util.quiet_rounds(others)
    ms = {k: _util.median([v[i] for i in quiet]) * 1e3 for k, v in samples.items()}

    def best(pred):
        names = [k for k in ms if pred(k)]
        return min(names, key=ms.get) if names else None

    best_seq = best(lambda k: k.startswith("seq"))
    best_sched = best(lambda k: k.startswith("sched"))
    best_nnc = best(lambda k: k.startswith(("seq", "sched")))
    best_ort = best(lambda k: k.startswith("ort_"))
    best_ov = best(lambda k: k.startswith("ov_"))
    best_peer = best(lambda k: k.startswith(("ort_", "ov_")))

    def ratio(num, den):
        return _util.median([samples[num][i] / samples[den][i] for i in quiet])

    vs_seq = {k: ratio(best_seq, k) for k in samples}
    vs_ort = {k: ratio(k, best_ort) for k in samples} if best_ort else None
    vs_peer = {k: ratio(k, best_peer) for k in samples} if best_peer else None
    return {
        "quiet_rounds": quiet,
        "others_cores": others,
        "ms": ms,
        "samples_ms": {k: [t * 1e3 for t in v] for k, v in samples.items()},
        "best": {"sequential": best_seq, "scheduled": best_sched, "nnc": best_nnc,
                 "ort": best_ort, "ov": best_ov, "peer": best_peer},
        "x_best_seq": vs_seq,
        "per_ort_best": vs_ort,
        "per_peer_best": vs_peer,
    }


def _config_threads(name, threads):
    """The threads configuration ``name`` may use: 1 for the single-threaded sequential runs,
    else the pool's T (a schedule at intra-op 1 still runs T streams)."""
    return 1 if name.removesuffix("_tuned") in ("seq1", "ort_seq1", "ov_seq1") else threads


def _sched_bound(summary, threads):
    """The most a schedule can gain over the best sequential run: the best one-thread
    sequential time spread perfectly over ``threads`` cores, against the best sequential run
    (median of per-round ratios over the quiet rounds); None without a one-thread run. Where a
    sequential run already splits every large command over the cores, this is near 1 and no
    schedule can reach a target above it."""
    ms, quiet = summary["samples_ms"], summary["quiet_rounds"]
    one = [k for k in ("seq1", "seq1_tuned") if k in ms]
    best_seq = summary["best"]["sequential"]
    if not one or threads < 2 or best_seq is None:
        return None
    return _util.median([ms[best_seq][i] / (min(ms[k][i] for k in one) / threads)
                         for i in quiet])


def _targets(net, size, summary, threads):
    if not net.name.startswith("inception_v3") or size not in TARGETS:
        return {}
    speedup_min, ort_max = TARGETS[size]
    b = summary["best"]
    sched = summary["x_best_seq"][b["scheduled"]]
    out = {f"scheduled >= {speedup_min}x best sequential": {
        "value": sched, "ok": sched >= speedup_min,
        "bound": _sched_bound(summary, threads)}}
    key = f"nnc best <= {ort_max}x ORT best"
    if b["ort"] is None:
        out[key] = {"value": None, "ok": None, "why": "onnxruntime not installed"}
    else:
        v = summary["per_ort_best"][b["nnc"]]
        out[key] = {"value": v, "ok": v <= ort_max}
    return out


def run_net(net, size, repeat, threads, max_streams, pause, seed, say, limits=None):
    say(f"{net.label}: building")
    g, x, outputs = net.make()
    gflop = _limits.graph_gflop(g)
    x.numpy()[...] = np.random.default_rng(seed).standard_normal(x.shape).astype(x.dtype)
    if net.onnx_model is None:
        try:
            net.onnx_model = nnc.onnx.save(g, None, inputs=[x], outputs=outputs)
        except nnc.onnx.OnnxMissingError:
            pass  # no onnx: no peers either (reported below)
    # nnc's best form of the graph: each convolution with the residual ADD and the ReLU/ReLU6
    # after it folded in (Graph.simplify).
    say(f"  simplify: folded {g.simplify()} ADD/RELU/CLAMP node(s) into their convolutions")
    checks = []
    fns, want, sched_info = _nnc_configs(g, outputs, threads, max_streams, "", checks, say)

    # Autotune times backends at the intra-op setting it runs under, so the 1-thread
    # configurations run a copy tuned at intra-op 1 and the T-thread ones a copy tuned at T
    # (a backend that wins on one thread can lose on two: Winograd's transformed weights are
    # read from memory at a rate two threads saturate).
    changes, tuned_info = Counter(), None
    for tune_at, names in ((1, ("seq1", "sched_nosplit")),
                           (threads, (f"seq{threads}", "sched"))) if threads > 1 else (
                               (1, ("seq1", "sched", "sched_nosplit")),):
        g_t, x_t, out_t = net.make()
        g_t.simplify()
        x_t.numpy()[...] = x.numpy()
        nnc.set_intra_op_threads(tune_at)
        g_t.run()
        before = [e.backend for e in g_t.execs]
        moved = g_t.autotune()
        moved_here = _backend_changes(g_t, before)
        if not moved_here:
            say(f"  autotune at intra-op {tune_at}: every node keeps its backend (reported "
                f"{moved} change(s))")
            del g_t, x_t, out_t         # not timed: its weights would stay held meanwhile
            continue
        changes.update({f"{k} (intra-op {tune_at})": n for k, n in moved_here.items()})
        say(f"  autotune at intra-op {tune_at} moved {sum(moved_here.values())} node(s): "
            + ", ".join(f"{k} x{n}" for k, n in moved_here.most_common()))
        t_fns, t_want, info = _nnc_configs(g_t, out_t, threads, max_streams, "_tuned", checks,
                                           say)
        if "sched" in names:
            tuned_info = info           # the schedule sched_tuned runs
        err = _rel_err(t_want[0], want[0])
        checks.append({"check": f"tuned (intra-op {tune_at}) output within {TOL_TUNED:g} of "
                       "untuned", "ok": err <= TOL_TUNED, "rel_err": err})
        fns.update({f"{name}_tuned": t_fns[f"{name}_tuned"] for name in names})

    if net.onnx_model is None:
        peer_fns, about = {}, {}
        missing = {p: "onnx not installed" for p in ("onnxruntime", "openvino", "torch")}
    else:
        peer_fns, about, missing = _peer_configs(net, x, want, threads, checks, say)
    fns.update(peer_fns)
    for c in checks:
        if not c["ok"]:
            say(f"  FAIL: {c['check']}" + (f" (rel err {c['rel_err']:.2e})"
                                           if "rel_err" in c else ""))
    say(f"  timing {len(fns)} configurations, {repeat} rounds")
    samples, others = _util.measure_rounds(fns, repeat, pause=pause)
    nnc.set_intra_op_threads(None)
    summary = _summarise(samples, others)
    x_limit = {k: _limits.x_limit(ms, gflop,
                                  _limits.peak_gflops(limits, _config_threads(k, threads)))
               for k, ms in summary["ms"].items()} if limits else None
    return {
        "net": net.name,
        "label": net.label,
        "size": size,
        "nodes": len(g),
        "gflop": gflop,
        "x_limit": x_limit,
        "schedule": sched_info,
        "schedule_tuned": tuned_info,
        "autotune_changes": dict(changes),
        "peers": about,
        "missing": missing,
        "checks": checks,
        **summary,
        "targets": _targets(net, size, summary, threads),
    }


def run(models, sizes, repeat, threads, max_streams, pause, seed=0, say=print, limits=True):
    """``limits``: True to measure the machine's limits first (at 1 and ``threads``
    threads), False for none, or a dict ``_limits.measure_limits`` returned."""
    nnc.set_num_threads(threads)
    if limits is True:
        say("measuring the machine's limits")
        limits = _limits.measure_limits(threads=(1, threads))
    limits = limits or None
    rows = []
    for name in models:
        if name == "inception_v3":
            for size in sizes:
                rows.append(run_net(_inception(size, seed), size, repeat, threads, max_streams,
                                    pause, seed, say, limits))
        else:
            rows.append(run_net(_zoo(name, seed), 224, repeat, threads, max_streams, pause,
                                seed, say, limits))
    return {"threads": threads, "max_streams": max_streams, "repeat": repeat, "pause_s": pause,
            "isa": isa.get_cpu_isa(), "limits": limits,
            "tolerances": {"peer": TOL_PEER, "tuned": TOL_TUNED}, "rows": rows,
            "ok": all(c["ok"] for r in rows for c in r["checks"])}


def _x(v):
    return "—" if v is None else f"{v:.2f}x"


def render(r):
    m = r["machine"]
    out = [f"machine: {m['cpu']}, {m['usable_cpus']} usable CPUs; nnc {m['nnc']} "
           f"({m['git']}), pool {r['threads']} threads, max_streams {r['max_streams']}; "
           f"nnc kernel ISA {r['isa']}; nnc BLAS: {m['nnc_blas']}; numpy {m['numpy']}, "
           f"onnx {m['onnx']}, "
           f"onnxruntime {m['onnxruntime'] or 'not installed'}, "
           f"openvino {m['openvino'] or 'not installed'}, torch {m['torch'] or 'not installed'}",
           _limits.describe(r["limits"]) if r["limits"] else "limits: not measured (--no-limits)"]
    for row in r["rows"]:
        q = row["quiet_rounds"]
        loads = [o for o in row["others_cores"] if o is not None]
        out.append("")
        out.append(f"{row['label']}: {row['nodes']} nodes, {_util.fmt(row['gflop'])} GFLOP; "
                   f"{len(q)} quiet of "
                   f"{len(row['others_cores'])} rounds"
                   + (f" (others used {min(loads):.2f}-{max(loads):.2f} cores)" if loads
                      else ""))
        best = row["best"]
        body = []
        marks = {best["sequential"]: "best sequential", best["scheduled"]: "best scheduled",
                 best["ort"]: "ORT best", best.get("ov"): "OpenVINO best"}
        for k, ms in row["ms"].items():
            mark = f" <- {marks[k]}" if k in marks else ""
            vs_ort = row["per_ort_best"][k] if row["per_ort_best"] else None
            vs_peer = row["per_peer_best"][k] if row["per_peer_best"] else None
            line = [k + mark, _util.fmt(ms), _x(row["x_best_seq"][k]), _x(vs_ort), _x(vs_peer)]
            if row["x_limit"]:
                line.append(_x(row["x_limit"][k]))
            body.append(line)
        out.append(_util.table(["config", "ms (quiet median)", "x best seq", "/ ORT best",
                                "/ peer best"] + (["x limit"] if row["x_limit"] else []), body))
        if row["per_peer_best"]:
            out.append(f"nnc best ({best['nnc']}) / peer best ({best['peer']}): "
                       f"{_x(row['per_peer_best'][best['nnc']])}")
        if row["autotune_changes"]:
            out.append("autotune: " + ", ".join(f"{k} x{n}"
                                                for k, n in row["autotune_changes"].items()))
        for peer, why in row["missing"].items():
            out.append(f"{peer}: {why}")
        for name, t in row["targets"].items():
            verdict = "not measured" if t["ok"] is None else ("pass" if t["ok"] else "FAIL")
            bound = (f" (bound: {_x(t['bound'])}, the best one-thread run spread perfectly "
                     f"over the cores)" if t.get("bound") else "")
            out.append(f"target {name}: {_x(t['value'])} {verdict}{bound}")
        bad = [c for c in row["checks"] if not c["ok"]]
        out.append(f"checks: {len(row['checks']) - len(bad)} of {len(row['checks'])} pass"
                   + "".join(f"; FAIL {c['check']}" for c in bad))
    return "\n".join(out)


def main(argv=None):
    p = _util.parser("nnc sequential / scheduled vs onnxruntime, OpenVINO and PyTorch",
                     repeat=9)
    p.add_argument("--size", type=int, action="append", choices=SIZES,
                   help="Inception-V3 input size; repeat for several (default: 299 and 75)")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    cpus = _usable_cpus()
    p.add_argument("--threads", type=int, default=cpus,
                   help=f"nnc pool size, intra-op threads of seqT, ORT's and OpenVINO's "
                        f"threads (default "
                        f"{cpus}, the usable cores)")
    p.add_argument("--max-streams", type=int, default=None,
                   help="the schedule's stream cap (default: --threads)")
    p.add_argument("--pause", type=float, default=0.1,
                   help="seconds of idle before each timed run (default 0.1)")
    p.add_argument("--no-limits", action="store_true",
                   help="skip measuring the machine's peaks and bandwidth (a few seconds)")
    a = p.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    bad = set(models) - set(MODELS)
    if bad:
        p.error(f"unknown models {sorted(bad)}; choose from {MODELS}")
    if a.threads < 1 or a.repeat < 1 or a.pause < 0:
        p.error("--threads and --repeat must be at least 1, --pause at least 0")
    sizes = a.size or list(SIZES)
    max_streams = a.threads if a.max_streams is None else a.max_streams
    say = (lambda *x: print(*x, file=sys.stderr)) if a.json else print
    report = run(models, sizes, a.repeat, a.threads, max_streams, a.pause, say=say,
                 limits=not a.no_limits)
    _util.publish(report, "streams", render, a.json,
                  packages=("numpy", "onnx", "onnxruntime", "openvino", "torch"))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
