"""Build time of ``nnc.static_schedule`` (policy "rank") on random DAGs, and of ``verify()``.

    python -m benchmarks.schedule [--json] [--sizes 1000,10000,100000] [--repeat R]

Graphs: N NOOP nodes in a random DAG with 4 predecessors drawn per node (numpy, seed 0; a
duplicate draw is one edge, so a node has 4 or slightly fewer). *local*: among the previous 64
nodes; *global*: among all previous nodes. Node 0 is the only source.

For each graph: the schedule build time (median of R timed samples after one warm-up, each
sample timing 100,000 / N builds back to back; the graph compiled beforehand; all graphs timed
in interleaved rounds), per node, and its growth per 10x nodes (median over rounds of the
per-round ratio); the streams, signals and
waits of the result; for N <= 10,000 also ``verify()``'s time and the waits an exact build would
have (CLOCK_SLOTS lifted), to show whether the default clock budget cost any redundant wait.
Targets (docs/schedule.md): a 100k-node build under 1 s; at most 15x the time per 10x nodes.
"""

import sys
import time

import numpy as np

import nnc
from benchmarks import _util
from nnc.schedule import builder as schedule_module

KINDS = {"local": 64, "global": 0}
TARGET_100K_S = 1.0
TARGET_GROWTH = 15.0


def random_dag(n, window, seed=0, k=4):
    """N NOOP nodes; node i gets k predecessors drawn among the previous ``window`` (0: all)."""
    rng = np.random.default_rng(seed)
    i = np.repeat(np.arange(1, n, dtype=np.int64), k)
    lo = np.maximum(0, i - window) if window else np.zeros_like(i)
    p = lo + (rng.random(i.size) * (i - lo)).astype(np.int64)
    pairs = np.unique(p * n + i)
    g = nnc.Graph()
    noop = nnc.Cmd("NOOP")
    nodes = [g.exec(noop) for _ in range(n)]
    concat = g.concat
    for a, b in zip((pairs // n).tolist(), (pairs % n).tolist()):
        concat(nodes[a], nodes[b])
    g.topsort()                 # compile now: the timed builds measure the scheduler alone
    return g, int(pairs.size)


def waits_of(sched):
    return sum(len(sched[e].waits) for e in sched.order)


def run(sizes, repeat, log=print):
    graphs, fns = {}, {}
    for kind, window in KINDS.items():
        for n in sizes:
            log(f"  {kind} {n}: building the graph ...", file=sys.stderr)
            graphs[kind, n] = g, edges = random_dag(n, window)
            number = max(1, 100_000 // n)   # builds per timed sample: ~100k nodes each

            def builds(g=g, number=number):
                for _ in range(number):
                    nnc.static_schedule(g)

            fns[kind, n] = builds
    log("  timing (interleaved rounds) ...", file=sys.stderr)
    samples = _util.measure_interleaved(fns, repeat)
    results = []
    for (kind, n), (g, edges) in graphs.items():
        secs = [t / max(1, 100_000 // n) for t in samples[kind, n]]
        sched = nnc.static_schedule(g)
        prev = samples.get((kind, n // 10))
        growth = None if prev is None else _util.median(
            [a / max(1, 100_000 // n) / (b / max(1, 100_000 // (n // 10)))
             for a, b in zip(samples[kind, n], prev)])
        row = {"kind": kind, "nodes": n, "edges": edges, "build_s": _util.median(secs),
               "min_build_s": min(secs), "samples_s": secs,
               "us_per_node": _util.median(secs) / n * 1e6, "growth_per_10x": growth,
               "streams": sched.stream_count, "signals": sched.signal_count,
               "waits": waits_of(sched), "verify_s": None, "exact_waits": None}
        if n <= 10_000:
            row["verify_s"] = _util.median(_util.measure(sched.verify, max(1, min(repeat, 3))))
            old = schedule_module._set_clock_slots(1 << 20)
            try:
                row["exact_waits"] = waits_of(nnc.static_schedule(g))
            finally:
                schedule_module._set_clock_slots(old)
        results.append(row)
    return results


def targets(results):
    out = []
    for r in results:
        if r["nodes"] == 100_000:
            out.append({"target": f"100k-node build < {TARGET_100K_S:g} s", "kind": r["kind"],
                        "value": r["build_s"], "met": r["build_s"] < TARGET_100K_S})
        if r["growth_per_10x"] is not None:
            out.append({"target": f"growth per 10x nodes <= {TARGET_GROWTH:g}x "
                                  f"({r['nodes'] // 10} -> {r['nodes']})",
                        "kind": r["kind"], "value": r["growth_per_10x"],
                        "met": r["growth_per_10x"] <= TARGET_GROWTH})
    return out


def render(report):
    f = _util.fmt
    rows = [[r["kind"], r["nodes"], r["edges"], f(r["build_s"] * 1e3), f(r["us_per_node"]),
             f(r["growth_per_10x"]), r["streams"], r["signals"], r["waits"],
             "—" if r["exact_waits"] is None else r["exact_waits"],
             f(None if r["verify_s"] is None else r["verify_s"] * 1e3)]
            for r in report["results"]]
    lines = [f"static_schedule build time, median of {report['params']['repeat']} samples of "
             "100k/N builds (graph compiled beforehand)", "",
             _util.table(["graph", "nodes", "edges", "build ms", "µs/node", "x per 10x",
                          "streams", "signals", "waits", "exact waits", "verify ms"], rows),
             "", "Targets:"]
    for t in report["targets"]:
        lines.append(f"  [{'met' if t['met'] else 'MISSED'}] {t['target']} ({t['kind']}: "
                     f"{f(t['value'])})")
    m = report["machine"]
    lines += ["", f"{report['date']}  {m['cpu']} ({m['usable_cpus']} usable CPUs), "
              f"{m['platform']}, Python {m['python']}, numpy {m['numpy']}, nnc {m['nnc']} "
              f"({m['git']})"]
    return "\n".join(lines)


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0], repeat=5)
    p.add_argument("--sizes", default="1000,10000,100000",
                   help="comma-separated node counts (default 1000,10000,100000)")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if not sizes or min(sizes) < 2 or args.repeat < 1:
        p.error("need sizes >= 2 and --repeat >= 1")
    print(f"benchmarks.schedule: sizes {sizes}, {args.repeat} repeats", file=sys.stderr)
    t0 = time.perf_counter()
    results = run(sizes, args.repeat)
    report = {
        "benchmark": "schedule",
        "date": _util.now(),
        "command": _util.command_line(),
        "machine": _util.machine_info(("numpy",)),
        "params": {"sizes": sizes, "repeat": args.repeat, "warmup": 1, "preds_per_node": 4,
                   "builds_per_sample": {n: max(1, 100_000 // n) for n in sizes},
                   "local_window": KINDS["local"], "seed": 0,
                   "clock_slots": schedule_module._set_clock_slots()},
        "results": results,
        "targets": targets(results),
        "wall_s": time.perf_counter() - t0,
    }
    print(render(report))
    if args.json:
        _util.emit_json(report)


if __name__ == "__main__":
    main()
