"""``python -m nnc demo``: build Inception-V3 as one concrete graph, run it and profile it.

It prints the graph's size, the commands and backends its nodes use, the median wall time of a
sequential ``run()``, the slowest nodes from ``Graph.profile``, and two numbers that bound what
running independent branches concurrently can gain: the sum of the node times (the work) and the
critical path (the longest chain of node times along the graph's edges). Their ratio is the
speedup an ideal scheduler with unlimited workers could reach from branch concurrency alone.

Nothing global is changed: BLAS threads are whatever the environment says (the demo reports it).
With ``--json`` the last line of stdout is one JSON object with every number printed above.
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
                        help="also run it statically scheduled on CPU streams and write a "
                             "timeline (see --trace)")
    parser.add_argument("--max-streams", type=int, default=os.cpu_count() or 2,
                        help="cap on the schedule's streams with --streams (default: the core "
                             "count, one worker thread per core; 0: no cap)")
    parser.add_argument("--trace", metavar="FILE", default="run.json",
                        help="with --streams: Chrome-trace / Perfetto file (default run.json)")
    parser.set_defaults(func=main)


def blas_info():
    """How many threads NumPy's BLAS may use, without changing anything."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        pass
    else:
        pools = [
            {"api": p.get("internal_api"), "threads": p.get("num_threads"),
             "version": p.get("version")}
            for p in threadpool_info() if p.get("user_api") == "blas"
        ]
        return {"source": "threadpoolctl", "pools": pools}
    name = None
    try:
        name = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:
        pass
    return {"source": "environment", "blas": name,
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")}


def _blas_line(info):
    if info["source"] == "threadpoolctl":
        pools = ", ".join(f"{p['api']} {p['version']}: {p['threads']} threads"
                          for p in info["pools"]) or "no BLAS pool found"
        return f"BLAS (threadpoolctl): {pools}"
    value = info["OPENBLAS_NUM_THREADS"]
    value = "unset (OpenBLAS then uses one thread per core)" if value is None else repr(value)
    return (f"BLAS: {info['blas'] or 'unknown'}; threadpoolctl is not installed; "
            f"OPENBLAS_NUM_THREADS={value}; {os.cpu_count()} CPUs")


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


def run_streams(g, output, sequential_ms, repeat, max_streams, trace_path, say):
    """Schedule g on CPU streams, time it against the sequential median, write a timeline."""
    import nnc

    expected = output.numpy().copy()
    sched = nnc.static_schedule(g, max_streams=max_streams)
    sched.verify()
    s = nnc.Stream("cpu")
    output.numpy().fill(0)
    g.run(stream=s)
    s.wait()
    identical = bool(np.array_equal(output.numpy(), expected))
    # One BLAS thread per stream (each stream is a thread); the fair sequential comparison
    # is then also at one BLAS thread. The default sequential run above used BLAS's default.
    from threadpoolctl import threadpool_limits

    seq1, times = [], []
    with threadpool_limits(1, "blas"):
        for _ in range(repeat):
            t0 = time.perf_counter()
            g.run()
            seq1.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            g.run(stream=s)
            s.wait()
            times.append(time.perf_counter() - t0)
        with nnc.trace(trace_path):
            g.run(stream=s)
    median_ms = statistics.median(times) * 1e3
    seq1_ms = statistics.median(seq1) * 1e3
    say(f"streams: static schedule with {sched.stream_count} streams, {sched.signal_count} "
        f"signals (max_streams={max_streams}); output identical to sequential: {identical}")
    say(f"  at 1 BLAS thread: median {median_ms:.1f} ms per inference on streams, "
        f"{seq1_ms:.1f} ms sequential ({seq1_ms / median_ms:.2f}x) over {repeat} run(s); "
        f"the default sequential run above: {sequential_ms:.1f} ms")
    say(f"  timeline: wrote {trace_path} (open it in https://ui.perfetto.dev)")
    return {"stream_count": sched.stream_count, "signal_count": sched.signal_count,
            "max_streams": max_streams, "identical": identical, "median_ms": median_ms,
            "sequential_1blas_ms": seq1_ms, "speedup": seq1_ms / median_ms, "trace": trace_path}


def run_demo(size=299, batch=1, repeat=5, seed=0, autotune=False, dot=None, out=None,
             streams=False, max_streams=0, trace="run.json"):
    """Build, run and profile Inception-V3; print a report to ``out`` and return it as a dict."""
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
        f"{size}x{size}x3, {m.dtype}, NHWC")
    nodes = g.execs
    edges = sum(len(e.outgoings) for e in nodes)
    say(f"graph: {len(nodes)} nodes, {edges} edges, {len(m.concats)} zero-copy concats; "
        f"{m.params / 1e6:.2f} M parameters, {m.macs / 1e9:.3f} GMAC; built in {build_s:.2f} s")

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
    say(f"run: warm-up {warmup_s * 1e3:.1f} ms; median {median_s * 1e3:.1f} ms per inference "
        f"over {repeat} run(s) (min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}); "
        f"{m.macs / median_s / 1e9:.1f} GMAC/s")

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
        streamed = run_streams(g, m.output, median_s * 1e3, repeat, max_streams, trace, say)

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
        "edges": edges,
        "params": m.params,
        "macs": m.macs,
        "commands": {k: {"count": v["count"], "backends": dict(v["backends"])}
                     for k, v in commands.items()},
        "autotune_changed": tuned,
        "autotune_moved": moved,
        "blas": blas,
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
                          max_streams=args.max_streams, trace=args.trace)
    except NNCError as e:
        print(f"nnc demo: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    return 0
