"""``python -m nnc demo``: build Inception-V3 as one concrete graph, run it and profile it.

It prints the graph's size, the commands and backends its nodes use, the median wall time of a
sequential ``run()``, the slowest nodes from ``Graph.profile``, and two numbers that bound what
running independent branches concurrently can gain: the sum of the node times (the work) and the
critical path (the longest chain of node times along the graph's edges). Their ratio is the
speedup an ideal scheduler with unlimited workers could reach from branch concurrency alone.

nnc's commands call a private single-threaded BLAS; parallelism inside a command is nnc's own
(``nnc.set_intra_op_threads``: a large command's parts go to idle threads of nnc's pool). The
plain runs use the defaults (every pool thread may help). The report names the kernel ISA nnc's
own kernels dispatched (``nnc.base.isa``), and counts the NOOPs ``Graph.simplify`` leaves where
it folds each convolution's ReLU into the convolution (they stay in the graph with their edges
and cost nothing).

``--streams`` first measures the machine's limits (``nnc.models.limits``: the FMA peak and
OpenBLAS's SGEMM peak at one thread and at the pool's size, the memory bandwidth;
``--no-limits`` skips it), then compares,
in interleaved rounds, the two sequential configurations (intra-op 1 thread and all of them),
the statically scheduled run (streams, and parts on idle threads) and, where they are installed
(``pip install 'nnc-graph[bench]'``; the report says so where not), ONNX Runtime's and
OpenVINO's sequential configurations at one thread and at the pool's size
(``nnc.models.peers``), on the same weights (``nnc.onnx.save`` of this graph), and checks that
saved model loaded back through ``nnc.onnx.InferenceSession`` (the API ONNX users call) gives the
graph's logits; then puts the intra-op setting back as it was. Each time is also printed as a
multiple of the machine's limit (time / (the graph's GFLOP / the FMA peak at the
configuration's threads)); ratios are medians
of per-round ratios; nnc's best is set against each peer's best. With ``--json`` the last line of
stdout is one JSON object with every number printed above.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from collections import Counter, defaultdict

import numpy as np

#: The runtimes ``--streams`` compares with, and how a report names them.
PEERS = ("onnxruntime", "openvino")
PEER_NAMES = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}
INSTALL_PEERS = "pip install 'nnc-graph[bench]'"    # brings both


def add_arguments(parser):
    """Add the demo's options to an argparse parser (used by ``python -m nnc``)."""
    parser.add_argument("--size", type=int, default=299,
                        help="input height and width, at least 75 (default 299)")
    parser.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="timed runs after one warm-up run, and profile passes (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="weights and input seed")
    parser.add_argument("--autotune", action="store_true",
                        help="time every node's backends first and keep the fastest")
    parser.add_argument("--json", action="store_true",
                        help="also print one JSON object with the results as the last line")
    parser.add_argument("--dot", metavar="FILE",
                        help="write the graph (after autotune, if any) as Graphviz to FILE")
    parser.add_argument("--streams", action="store_true",
                        help="also run it statically scheduled on CPU streams, against ONNX "
                             "Runtime and OpenVINO when installed, each time against the "
                             "machine's measured limits, and write a timeline (see --trace)")
    parser.add_argument("--max-streams", type=int, default=os.cpu_count() or 2,
                        help="cap on the schedule's streams with --streams (default: the core "
                             "count, one worker thread per core; 0: no cap)")
    parser.add_argument("--trace", metavar="FILE", default="run.json",
                        help="with --streams: Chrome-trace / Perfetto file (default run.json)")
    parser.add_argument("--no-ort", dest="ort", action="store_false",
                        help="with --streams: leave onnxruntime out even when it is installed")
    parser.add_argument("--no-openvino", dest="ov", action="store_false",
                        help="with --streams: leave OpenVINO out even when it is installed")
    parser.add_argument("--no-limits", dest="limits", action="store_false",
                        help="with --streams: skip measuring the machine's peaks and "
                             "memory bandwidth (a few seconds), and the x limit figures")
    parser.set_defaults(func=main)


def isa_info():
    """The kernel ISA nnc dispatches to (``nnc.base.isa``), what the CPU supports, and the
    ISA features /proc/cpuinfo reports; changes nothing."""
    from nnc.base import isa
    from nnc.models.limits import cpu_features, cpu_model

    return {"dispatched": isa.get_cpu_isa(), "detected": isa.detected_isa(),
            "supported": list(isa.supported_isas()), "cpu": cpu_model(),
            "features": cpu_features()}


def _isa_line(info):
    pinned = ("" if info["dispatched"] == info["detected"]
              else f", set below the CPU's {info['detected']} by nnc.set_cpu_isa")
    return (f"kernels: nnc's own, dispatched at ISA {info['dispatched']}{pinned} "
            f"({info['cpu']}; nnc kernels for {', '.join(info['supported'])})")


def blas_info():
    """The BLAS nnc's commands call and the threads nnc gives a command; changes nothing."""
    import nnc

    try:
        from nnc.base import openblas
        library = openblas.config
    except ImportError:  # pragma: no cover - an nnc built without its BLAS binding
        library = None
    return {"source": "nnc", "library": library, "blas_threads": 1,
            "pool_threads": nnc.get_num_threads(),
            "intra_op_threads": nnc.get_intra_op_threads()}


def _blas_line(info):
    intra = info["intra_op_threads"]
    intra = f"all {info['pool_threads']}" if intra is None else str(intra)
    return (f"BLAS: {info['library'] or 'unknown'}, one thread inside each command; nnc's pool "
            f"has {info['pool_threads']} threads and a command may split over {intra} "
            f"(intra-op threads)")


def critical_path(graph, seconds):
    """Longest path through ``graph`` weighted by node times; returns (seconds, [GraphExec]).

    ``seconds`` maps GraphExec -> time (nodes missing from it count 0). Computed over the run
    order of ``graph.topsort()`` and the edges ``e.outgoings``.
    """
    order = graph.topsort()
    on_path = set(order)
    finish = {}
    best_pred = {}
    start = defaultdict(float)
    for e in order:
        finish[e] = start[e] + seconds.get(e, 0.0)
        for s in e.outgoings:
            if s in on_path and finish[e] >= start[s]:
                start[s] = finish[e]
                best_pred[s] = e
    if not finish:
        return 0.0, []
    end = max(finish, key=finish.get)
    path = [end]
    while path[-1] in best_pred:
        path.append(best_pred[path[-1]])
    return finish[end], path[::-1]


_STEP = re.compile(r"_\d+[ab]?$")


def _segment(name):
    """'Mixed_5b/branch3x3dbl_2/relu' -> 'Mixed_5b/branch3x3dbl'; stem and head nodes collapse."""
    if name is None:
        return "?"
    parts = name.split("/")
    if parts[0].startswith("Mixed_") and len(parts) > 1:
        return f"{parts[0]}/{_STEP.sub('', parts[1])}"
    if parts[0] in ("avgpool", "fc", "softmax"):
        return "head"
    return "stem"


def _chain(path):
    out = []
    for e in path:
        s = _segment(e.name)
        if not out or out[-1] != s:
            out.append(s)
    return out


def _peer_runs(g, x, outputs, threads, ort, ov):
    """ONNX Runtime's and OpenVINO's sequential configurations, at one thread and at
    ``threads``, on this graph's weights (``nnc.onnx.save`` of it): ({name: runner},
    {peer: why it is left out}, the saved ModelProto or None)."""
    from nnc.models.peers import OrtRun, OvRun, PeerUnavailableError, ort_version, ov_version

    missing = {}
    for peer, wanted, flag, version in (("onnxruntime", ort, "--no-ort", ort_version),
                                        ("openvino", ov, "--no-openvino", ov_version)):
        if not wanted:
            missing[peer] = f"left out ({flag})"
        elif version() is None:
            missing[peer] = f"not installed ({INSTALL_PEERS})"
    if len(missing) == len(PEERS):
        return {}, missing, None
    import nnc.onnx

    try:
        model = nnc.onnx.save(g, None, inputs=[x], outputs=outputs)
    except nnc.onnx.OnnxError as e:
        why = f"the graph could not be exported to ONNX: {e}"
        return {}, {p: missing.get(p, why) for p in PEERS}, None
    feeds = {model.graph.input[0].name: x.numpy()}
    counts = sorted({1, threads})
    runs = {}
    if "onnxruntime" not in missing:
        for n in counts:
            runs[f"ort_seq{n}"] = OrtRun(model, feeds, intra_op=n)
    if "openvino" not in missing:
        try:
            for n in counts:
                runs[f"ov_seq{n}"] = OvRun(model, feeds, threads=n)
        except PeerUnavailableError as e:   # it would not compile at f32: not the same math
            missing["openvino"] = str(e)
            runs = {k: r for k, r in runs.items() if not k.startswith("ov_")}
    return runs, missing, model


def _session_rel_err(model, x, want):
    """The saved model loaded back through nnc.onnx.InferenceSession (the API ONNX users call,
    scheduled): the largest difference of its logits from the graph's, over their largest
    magnitude."""
    import nnc.onnx

    with nnc.onnx.InferenceSession(model, schedule="rank") as sess:
        got = sess.run([model.graph.output[0].name], {model.graph.input[0].name: x})[0]
    return float(np.abs(got - want).max() / np.abs(want).max())


def _rounds(fns, repeat, pause):
    """Interleaved timing (order rotated each round; a pause so spinning thread pools go idle,
    then one untimed call, before each timed call); name -> [seconds]."""
    names = list(fns)
    for name in names:
        fns[name]()
    samples = {name: [] for name in names}
    for k in range(repeat):
        for i in range(len(names)):
            name = names[(i + k) % len(names)]
            time.sleep(pause)
            fns[name]()
            t0 = time.perf_counter()
            fns[name]()
            samples[name].append(time.perf_counter() - t0)
    return samples


def _config_threads(name, threads):
    """The threads a configuration may use: 1 for the one-thread sequential runs, else all."""
    return 1 if name in ("seq1", "ort_seq1", "ov_seq1") else threads


def _peer_label(name, runner):
    n = runner.intra_op if name.startswith("ort_") else runner.threads
    if name.startswith("ort_"):
        return f"onnxruntime {runner.version}, intra-op {n}, ENABLE_ALL"
    return (f"OpenVINO {runner.version.split('-')[0]}, {n} thread{'s' if n > 1 else ''}, "
            f"{runner.precision}")


def run_streams(g, x, output, logits, repeat, max_streams, trace_path, say, ort=True, ov=True,
                limits=None, seed=None):
    """Time nnc's two sequential configurations and the scheduled run against ONNX Runtime's
    and OpenVINO's sequential ones on the same weights (with ``ort`` / ``ov`` and the package
    installed), each as a multiple of the machine's ``limits`` when given (a dict
    ``nnc.models.limits.measure_limits`` returned); write a timeline of the schedule. ``seed``
    is the weights' seed, for the report."""
    import nnc
    from nnc.models import limits as machine

    threads = nnc.get_num_threads()
    before = nnc.get_intra_op_threads()
    expected = output.numpy().copy()
    sched = nnc.static_schedule(g, max_streams=max_streams)
    sched.verify()
    s = nnc.Stream("cpu")

    def sequential(n):
        def run():
            nnc.set_intra_op_threads(n)
            g.run()
        return run

    def scheduled():
        nnc.set_intra_op_threads(None)
        g.run(stream=s)
        s.wait()

    seq_all = f"seq{threads}"
    fns = {"seq1": sequential(1), seq_all: sequential(None), "scheduled": scheduled}
    labels = {"seq1": "sequential, 1 thread per command",
              seq_all: f"sequential, up to {threads} threads per command",
              "scheduled": "scheduled (streams + split commands)"}
    nnc_names = list(fns)
    rel_err = {}
    try:
        identical = True
        for fn in fns.values():
            output.numpy().fill(0)
            fn()
            identical = identical and bool(np.array_equal(output.numpy(), expected))
        runs, missing, model = _peer_runs(g, x, [logits, output], threads, ort, ov)
        want = logits.numpy()
        session_err = None if model is None else _session_rel_err(model, x.numpy(), want)
        for name, r in runs.items():
            r()
            rel_err[name] = float(np.abs(r.outputs[0] - want).max() / np.abs(want).max())
            fns[name] = r
            labels[name] = _peer_label(name, r)
        samples = _rounds(fns, repeat, pause=0.05)
        nnc.set_intra_op_threads(None)
        with nnc.trace(trace_path):
            g.run(stream=s)
    finally:
        nnc.set_intra_op_threads(before)
    ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    gflop = machine.graph_gflop(g)
    x_limit = {k: machine.x_limit(v, gflop, machine.peak_gflops(
        limits, _config_threads(k, threads))) for k, v in ms.items()}

    def ratio(a, b):
        """Median over rounds of time(a) / time(b)."""
        return statistics.median(x / y for x, y in zip(samples[a], samples[b]))

    def best(prefix):
        names = [k for k in ms if k.startswith(prefix)]
        return min(names, key=ms.get) if names else None

    best_seq = min(("seq1", seq_all), key=ms.get)
    speedup = ratio(best_seq, "scheduled")
    fastest = "scheduled" if ms["scheduled"] <= ms[best_seq] else best_seq
    bests = {"onnxruntime": best("ort_"), "openvino": best("ov_"),
             "peer": best(("ort_", "ov_"))}
    say(f"streams: static schedule with {sched.stream_count} streams, {sched.signal_count} "
        f"signals (max_streams={max_streams}); every nnc run's output identical to the first "
        f"sequential run: {identical}")
    if limits:
        say("  " + machine.describe(limits))
    say(f"  interleaved, median of {repeat} round(s), nnc pool of {threads} threads; "
        f"{gflop:.3g} GFLOP per inference; "
        + ("x limit = time / (GFLOP / FMA peak at its threads):" if limits
           else "no x limit (limits not measured: --no-limits):"))
    marks = {best_seq: "<- best sequential", bests["onnxruntime"]: "<- ONNX Runtime best",
             bests["openvino"]: "<- OpenVINO best"}
    marks["scheduled"] = (f"{speedup:.2f}x the best sequential, "
                          f"{ratio('seq1', 'scheduled'):.2f}x seq1")
    for k in fns:
        lim = f"{x_limit[k]:6.2f}x" if x_limit[k] is not None else "      —"
        note = marks.get(k, "")
        say(f"    {labels[k]:<50}{ms[k]:8.1f} ms {lim}{'   ' + note if note else ''}")
    vs = {}
    for peer, name in (("onnxruntime", bests["onnxruntime"]), ("openvino", bests["openvino"])):
        if name is not None:
            vs[peer] = ratio(fastest, name)
    if bests["peer"] is not None:
        vs["peer"] = ratio(fastest, bests["peer"])
        say(f"  nnc's best ({fastest}, {ms[fastest]:.1f} ms) takes " + ", ".join(
            f"{vs[p]:.2f}x the time of {PEER_NAMES[p]}'s best ({bests[p]}, {ms[bests[p]]:.1f} ms)"
            for p in PEERS if p in vs))
    for peer in PEERS:
        if peer in missing:
            say(f"  {PEER_NAMES[peer]}: {missing[peer]}")
    worst = {p: max((v for k, v in rel_err.items() if k.startswith(pre)), default=None)
             for p, pre in (("onnxruntime", "ort_"), ("openvino", "ov_"))}
    agree = ", ".join(f"{worst[p]:.1e} ({PEER_NAMES[p]})" for p in PEERS
                      if worst[p] is not None)
    say("  how to read: ms are medians over the rounds; each ratio is the median of per-round "
        "ratios (a round times every configuration once, in rotated order); "
        + ("x limit 1.0 would be every convolution and GEMM at the measured FMA peak; "
           if limits else "")
        + f"the weights are random{'' if seed is None else f' (seed {seed})'}"
        + (", the same in every runtime (this graph saved with nnc.onnx.save)" if runs else "")
        + (f"; logits agree with nnc's to {agree} of their largest magnitude" if agree else ""))
    if session_err is not None:
        say(f"  the saved model through nnc.onnx.InferenceSession (schedule='rank'): logits "
            f"agree with the graph's to {session_err:.1e} of their largest magnitude")
    say(f"  fastest nnc mode: {fastest}")
    say(f"  timeline: wrote {trace_path} (open it in https://ui.perfetto.dev)")
    peers = {}
    for peer, pre in (("onnxruntime", "ort_"), ("openvino", "ov_")):
        names = [k for k in runs if k.startswith(pre)]
        if names:
            peers[peer] = {"version": runs[names[0]].version,
                           "configs": {k: runs[k].describe() for k in names},
                           "best": bests[peer], "best_ms": ms[bests[peer]],
                           "fastest_vs": vs[peer],
                           "rel_err": max(rel_err[k] for k in names)}
    return {"stream_count": sched.stream_count, "signal_count": sched.signal_count,
            "max_streams": max_streams, "identical": identical, "pool_threads": threads,
            "median_ms": ms["scheduled"], "seq1_ms": ms["seq1"], "seq_all_ms": ms[seq_all],
            "best_sequential": best_seq, "best_sequential_ms": ms[best_seq],
            "speedup": speedup, "speedup_vs_seq1": ratio("seq1", "scheduled"),
            "fastest": fastest, "fastest_ms": ms[fastest],
            "configs": {k: {"label": labels[k], "ms": ms[k], "x_limit": x_limit[k],
                            "threads": _config_threads(k, threads), "nnc": k in nnc_names,
                            "rel_err": rel_err.get(k)} for k in fns},
            "gflop": gflop, "limits": limits, "best_peer": bests["peer"],
            "fastest_vs_best_peer": vs.get("peer"), "peers": peers, "missing": missing,
            "session_rel_err": session_err,
            "trace": trace_path}


def run_demo(size=299, batch=1, repeat=5, seed=0, autotune=False, dot=None, out=None,
             streams=False, max_streams=0, trace="run.json", ort=True, ov=True, limits=True):
    """Build, run and profile Inception-V3; print a report to ``out`` and return it as a dict.

    With ``streams``: ``limits`` True measures the machine's limits
    (``nnc.models.limits.measure_limits`` at one thread and the pool's size) before any run,
    False leaves them out, and a dict is used as measured (tests pass a quick one)."""
    import nnc
    from nnc.models import limits as machine
    from nnc.models.inception import build_inception_v3_model

    out = sys.stdout if out is None else out
    repeat = max(1, int(repeat))

    def say(line=""):
        print(line, file=out, flush=True)

    t0 = time.perf_counter()
    m = build_inception_v3_model(size=size, batch=batch, seed=seed)
    build_s = time.perf_counter() - t0
    g = m.graph
    say(f"nnc demo: Inception-V3 (torchvision layout, no aux head), batch {batch}, "
        f"{size}x{size}x3, {m.dtype}, NHWC; random weights and input (seed {seed}), so the "
        f"classes it prints mean nothing")
    nodes = g.execs
    isa = isa_info()
    say(_isa_line(isa))
    if streams and limits is True:
        limits = machine.measure_limits(threads=(1, nnc.get_num_threads()))
    limits = (limits or None) if streams else None

    # The warm-up run also fills every tensor, so autotune times real data rather than
    # uninitialised memory (which may hold NaNs or denormals that skew the timings).
    t0 = time.perf_counter()
    g.run()
    warmup_s = time.perf_counter() - t0
    tuned = moved = None
    if autotune:
        before = {e: e.backend for e in nodes}
        t0 = time.perf_counter()
        tuned = g.autotune()
        moved = sum(1 for e in nodes if e.backend != before[e])
        say(f"autotune: {time.perf_counter() - t0:.2f} s; Graph.autotune() reports {tuned} "
            f"node(s) changed, {moved} node(s) now show a different backend")

    # Each convolution's in-place ReLU becomes its epilogue (the RELU node a NOOP): one pass
    # over memory less per convolution, and no strided RELU on a concat slice.
    was = [e.cmd.name for e in nodes]
    fused = g.simplify()
    folded = Counter(w for w, e in zip(was, nodes) if e.cmd.name == "NOOP" and w != "NOOP")
    noops = sum(1 for e in nodes if e.cmd.name == "NOOP")
    edges = sum(len(e.outgoings) for e in nodes)
    kinds = " / ".join(f"{c}" + (f" (x{n})" if len(folded) > 1 else "")
                       for c, n in folded.most_common())
    n_folded = sum(folded.values())
    why = (f" {'' if n_folded == noops else f'({n_folded} of them) '}left where Graph.simplify "
           f"folded a {kinds} into the convolution before it (kept with their edges, they cost "
           f"nothing)") if folded else ""
    say(f"graph: {len(nodes)} nodes: {len(nodes) - noops} run, {noops} NOOPs{why}; {edges} "
        f"edges, {len(m.concats)} zero-copy concats; {m.params / 1e6:.2f} M parameters, "
        f"{m.macs / 1e9:.3f} GMAC; built in {build_s:.2f} s")

    commands = {}
    for e in nodes:
        c = commands.setdefault(e.cmd.name, {"count": 0, "backends": Counter()})
        c["count"] += 1
        c["backends"][e.backend] += 1
    say("commands:")
    for name, c in sorted(commands.items(), key=lambda kv: -kv[1]["count"]):
        bk = ", ".join(f"{b} x{n}" for b, n in c["backends"].most_common())
        say(f"  {name:<14} x{c['count']:<4} {bk}")
    blas = blas_info()
    say(_blas_line(blas))

    if dot:
        with open(dot, "w") as f:
            f.write(g.dot())
        say(f"dot: wrote {dot}")

    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        g.run()
        times.append(time.perf_counter() - t0)
    median_s = statistics.median(times)
    # the plain run may split a command over every pool thread: the peak at the pool's size
    gflop = machine.graph_gflop(g)
    run_x_limit = machine.x_limit(median_s * 1e3, gflop,
                                  machine.peak_gflops(limits, nnc.get_num_threads()))
    say(f"run: warm-up {warmup_s * 1e3:.1f} ms; median {median_s * 1e3:.1f} ms per inference "
        f"over {repeat} run(s) (min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}); "
        f"{m.macs / median_s / 1e9:.1f} GMAC/s"
        + (f"; {run_x_limit:.2f}x the limit" if run_x_limit is not None else ""))

    prof = g.profile(repeat)
    node_s = dict(prof)
    total_s = sum(node_s.values())
    cp_s, path = critical_path(g, node_s)
    bound = total_s / cp_s if cp_s > 0 else float("nan")
    say(f"profile (best of {repeat} per node):")
    say(f"  sum of node times   {total_s * 1e3:9.1f} ms")
    say(f"  critical path       {cp_s * 1e3:9.1f} ms ({len(path)} nodes, "
        f"{100 * cp_s / total_s if total_s else 0:.0f} % of the sum)")
    say(f"  sum / critical path {bound:9.2f}x  (bound on the speedup from branch concurrency)")
    chain = _chain(path)
    say("  critical path runs through: " + " -> ".join(chain))
    by_cmd = Counter()
    for e, s in prof:
        by_cmd[e.cmd.name] += s
    say("  time by command: " + ", ".join(
        f"{k} {v * 1e3:.1f} ms ({100 * v / total_s if total_s else 0:.0f} %)"
        for k, v in by_cmd.most_common()))
    top = sorted(prof, key=lambda p: -p[1])[:10]
    say("  slowest nodes:")
    for e, s in top:
        say(f"    {s * 1e3:8.2f} ms  {e.name}  ({e.cmd.name}, {e.backend})")

    streamed = None
    if streams:
        streamed = run_streams(g, m.input, m.output, m.logits, repeat, max_streams, trace,
                               say, ort=ort, ov=ov, limits=limits, seed=seed)

    probs = m.output.numpy()
    top5 = [int(i) for i in np.argsort(-probs[0], kind="stable")[:5]]
    say(f"output: shape {probs.shape}, sum {float(probs[0].sum()):.6f}; top-5 classes {top5} "
        f"(p = {', '.join(f'{probs[0, i]:.4f}' for i in top5)})")

    return {
        "model": "inception_v3",
        "size": size,
        "batch": batch,
        "dtype": m.dtype,
        "seed": seed,
        "nodes": len(nodes),
        "nodes_run": len(nodes) - noops,
        "noops": noops,
        "folded": dict(folded),
        "edges": edges,
        "params": m.params,
        "macs": m.macs,
        "commands": {k: {"count": v["count"], "backends": dict(v["backends"])}
                     for k, v in commands.items()},
        "autotune_changed": tuned,
        "autotune_moved": moved,
        "fused": fused,
        "blas": blas,
        "isa": isa,
        "limits": limits,
        "gflop": gflop,
        "x_limit": run_x_limit,
        "cpus": os.cpu_count(),
        "build_s": build_s,
        "warmup_ms": warmup_s * 1e3,
        "run_ms": [t * 1e3 for t in times],
        "median_ms": median_s * 1e3,
        "sum_node_ms": total_s * 1e3,
        "critical_path_ms": cp_s * 1e3,
        "bound": bound,
        "critical_path": chain,
        "time_by_command_ms": {k: v * 1e3 for k, v in by_cmd.items()},
        "slowest": [{"name": e.name, "command": e.cmd.name, "backend": e.backend,
                     "ms": s * 1e3} for e, s in top],
        "top5": top5,
        "streams": streamed,
    }


def main(args):
    """Entry point for ``python -m nnc demo``; ``args`` is the parsed namespace."""
    from nnc import NNCError

    if args.size < 75:
        print(f"nnc demo: --size must be at least 75, got {args.size}", file=sys.stderr)
        return 2
    if args.repeat < 1 or args.batch < 1:
        print("nnc demo: --repeat and --batch must be at least 1", file=sys.stderr)
        return 2
    try:
        result = run_demo(size=args.size, batch=args.batch, repeat=args.repeat, seed=args.seed,
                          autotune=args.autotune, dot=args.dot, streams=args.streams,
                          max_streams=args.max_streams, trace=args.trace, ort=args.ort,
                          ov=args.ov, limits=args.limits)
    except NNCError as e:
        print(f"nnc demo: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    return 0
