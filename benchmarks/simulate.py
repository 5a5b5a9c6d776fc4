"""The schedule simulator against measured runs: Inception-V3 on CPU streams, batch 1.

    python -m benchmarks.simulate [--json] [--repeat R] [--size {299,75}]... [--threads T]
                                  [--profiles P] [--pause S]

Networks: Inception-V3 as nnc's own graph (``nnc.models.inception``) at each ``--size`` (default
75 and 299). nnc's pool has T threads (``--threads``, default the usable cores) and every run is
at intra-op 1 (``nnc.set_intra_op_threads(1)``), so that a node holds one core, as the
simulator's model says. Per network, two copies of the graph:

- ``rank_T``: ``nnc.static_schedule(g, max_streams=T)``, run with ``g.run(stream=s); s.wait()``;
- ``rank``: the uncapped schedule (``max_streams=0``), run the same way;
- ``seq``: ``g.run()`` on the first copy (one thread, the order of the run).

Costs: each node's mean over P ``g.profile()`` passes (one node at a time, in the calling
thread), per copy, measured *in every round* beside the runs (a shared machine's load drifts:
costs from one moment and wall times from another do not compare). Simulated:
``sched.simulate(costs, cores=T)`` for the scheduled runs and ``streams_overlap=False`` for
``seq``, with the round's costs. Measured (``_util.measure_rounds``): interleaved rounds, order
rotated each round, a pause before each timed call and one untimed call right before it; medians
over the quiet rounds. ``sim / measured`` is the median over those rounds of the per-round
ratio. Target: the simulated makespan within 15 % of the measured wall time
for the CPU runs; a miss prints MISS (the exit status stays 0: it is a measurement, not a
check). Also reported: each node's host overhead, (measured seq - sum of costs) / nodes, and the
scheduled runs simulated again with that overhead added to every node's cost.
"""

import os
import sys

import numpy as np

import nnc
from benchmarks import _util

SIZES = (75, 299)
TARGET = 0.15


def _usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _profiler(g, passes, out):
    """A callable that appends node index -> mean seconds over ``passes`` profile passes to
    ``out`` (timed in the rounds, so each round has costs measured next to its runs). The mean,
    not the median: a run's time is the sum of its nodes', and on a busy machine a per-node
    median drops the preemptions that every whole run pays (the sum of the means is the mean
    of the sums)."""
    def fn():
        runs = [dict((e.index, t) for e, t in g.profile()) for _ in range(passes)]
        out.append({i: float(np.mean([r[i] for r in runs])) for i in runs[0]})
    return fn


def run_size(size, threads, repeat, passes, pause, log):
    from nnc.models.inception import build_inception_v3_model

    log(f"  Inception-V3 {size}: building and scheduling ...", file=sys.stderr)
    nnc.set_intra_op_threads(1)
    graphs = {"rank_T": build_inception_v3_model(size=size).graph,
              "rank": build_inception_v3_model(size=size).graph}
    scheds = {"rank_T": nnc.static_schedule(graphs["rank_T"], max_streams=threads),
              "rank": nnc.static_schedule(graphs["rank"])}
    s = nnc.Stream("cpu")

    def scheduled(g):
        def fn():
            g.run(stream=s)
            s.wait()
        return fn

    profiles = {name: [] for name in graphs}
    fns = {"seq": graphs["rank_T"].run, "rank_T": scheduled(graphs["rank_T"]),
           "rank": scheduled(graphs["rank"])}
    fns.update({f"profile_{name}": _profiler(g, passes, profiles[name])
                for name, g in graphs.items()})
    log(f"  Inception-V3 {size}: timing {repeat} rounds (profiles in each) ...",
        file=sys.stderr)
    samples, others = _util.measure_rounds(fns, repeat, pause=pause)
    quiet = _util.quiet_rounds(others)
    nodes = len(scheds["rank_T"].order)
    # Round k's profile is its timed call's: after the warm-up and 2k + 1 calls.
    costs = {name: [p[2 * k + 2] for k in range(repeat)] for name, p in profiles.items()}

    def simulate(name, k, extra=0.0):
        sched = scheds["rank_T" if name == "seq" else name]
        c = costs["rank_T" if name == "seq" else name][k]
        if extra:
            c = {i: t + extra for i, t in c.items()}
        if name == "seq":
            return sched.simulate(c, streams_overlap=False)
        return sched.simulate(c, cores=threads)

    # Per-node overhead of a real run that profile() does not see: from the sequential runs.
    overhead = max(0.0, _util.median([(samples["seq"][k] - simulate("seq", k).work) / nodes
                                      for k in quiet]))
    rows = []
    for name in ("seq", "rank_T", "rank"):
        sims = [simulate(name, k) for k in range(repeat)]
        measured = _util.median([samples[name][k] for k in quiet])
        row = {"config": name, "streams": scheds["rank_T" if name == "seq" else name]
               .stream_count,
               "simulated_ms": _util.median([sims[k].makespan for k in quiet]) * 1e3,
               "measured_ms": measured * 1e3, "samples_ms": [t * 1e3 for t in samples[name]],
               "sim_over_measured": _util.median([sims[k].makespan / samples[name][k]
                                                  for k in quiet]),
               "critical_path_ms": _util.median([sims[k].critical_path for k in quiet]) * 1e3,
               "work_ms": _util.median([sims[k].work for k in quiet]) * 1e3,
               "simulated_overhead_ms": None, "overhead_ratio": None}
        if name != "seq":
            ovh = [simulate(name, k, overhead).makespan for k in range(repeat)]
            row["simulated_overhead_ms"] = _util.median([ovh[k] for k in quiet]) * 1e3
            row["overhead_ratio"] = _util.median([ovh[k] / samples[name][k] for k in quiet])
            row["within_target"] = abs(row["sim_over_measured"] - 1.0) <= TARGET
        rows.append(row)
    return {"size": size, "nodes": nodes, "threads": threads, "quiet_rounds": quiet,
            "others_cores": others, "host_overhead_us_per_node": overhead * 1e6, "rows": rows}


def render(report):
    out = [f"Simulated vs measured makespan, Inception-V3 batch 1, CPU streams, "
           f"{report['threads']} threads, intra-op 1 ({report['date']})"]
    for r in report["results"]:
        out.append(f"\nInception-V3 {r['size']}x{r['size']}: {r['nodes']} nodes, host overhead "
                   f"{_util.fmt(r['host_overhead_us_per_node'])} us/node, quiet rounds "
                   f"{len(r['quiet_rounds'])}/{len(r['others_cores'])}")
        table = []
        for row in r["rows"]:
            verdict = ""
            if "within_target" in row:
                verdict = "ok" if row["within_target"] else "MISS"
            table.append([row["config"], row["streams"], _util.fmt(row["critical_path_ms"]),
                          _util.fmt(row["work_ms"]), _util.fmt(row["simulated_ms"]),
                          _util.fmt(row["measured_ms"]), _util.fmt(row["sim_over_measured"]),
                          verdict, _util.fmt(row["simulated_overhead_ms"]),
                          _util.fmt(row["overhead_ratio"])])
        out.append(_util.table(["config", "streams", "crit ms", "work ms", "sim ms",
                                "measured ms", "sim/meas", "15%", "sim+ovh ms", "ratio"],
                               table))
    return "\n".join(out)


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0], repeat=9)
    p.add_argument("--size", type=int, action="append", choices=SIZES,
                   help="Inception-V3 input size (repeatable; default 75 and 299)")
    p.add_argument("--threads", type=int, default=None, help="pool threads (default: cores)")
    p.add_argument("--profiles", type=int, default=5, help="profile passes per graph")
    p.add_argument("--pause", type=float, default=0.1, help="seconds before each timed run")
    args = p.parse_args(argv)
    threads = args.threads or _usable_cpus()
    if args.repeat < 1 or args.profiles < 1 or threads < 1 or args.pause < 0:
        p.error("need --repeat, --profiles, --threads >= 1 and --pause >= 0")
    nnc.set_num_threads(threads)
    sizes = args.size or list(SIZES)
    results = [run_size(n, threads, args.repeat, args.profiles, args.pause, print)
               for n in sizes]
    report = {"threads": threads, "repeat": args.repeat, "profiles": args.profiles,
              "target": TARGET, "results": results}
    _util.publish(report, "simulate", render, args.json)


if __name__ == "__main__":
    main()
