"""The scheduling policies side by side: build time, streams, signals, waits,
simulated and measured makespan, per policy of ``nnc.schedule.schedule.POLICIES``.

    python -m benchmarks.policies [--json] [--quick] [--repeat R] [--threads T] [--nets a,b]
                                  [--dags 10000,100000] [--profiles P] [--pause S]

Networks (batch 1, each simplified with ``g.simplify()`` as the CPU benchmarks do):
Inception-V3 at 299 and 75 (``nnc.models.inception``) and ResNet-50 224 (``onnx_zoo.resnet50``
loaded with ``nnc.onnx.load``; skipped, with the reason, without the ``onnx`` package). T
(``--threads``, default the usable cores) is nnc's pool size. Per network, every registered
policy at ``max_streams`` T and 0 (uncapped):

- build: the median of several ``nnc.static_schedule(g, policy=p, max_streams=m, costs=c)``
  calls (c: the mean of P ``g.profile()`` passes, measured once before; every policy gets the
  same costs, and those that do not use them ignore them), then streams, signals, total waits
  and ``verify()``;
- measured: ``g.run(stream=s); s.wait()`` at intra-op threads 1 and 2
  (``nnc.set_intra_op_threads``), and ``g.run()`` at intra-op 1 (``seq``), in interleaved rounds
  whose order rotates each round; before each timed run the policy's schedule is made the
  graph's default again (a rebuild: untimed), a pause, and one untimed run (so each run starts
  with its own data in cache). Medians over the quiet rounds (``_util.quiet_rounds``);
- ``sim0``: ``sched.simulate(costs0, cores=T)`` with the costs the policies were given (what a
  cost-aware policy optimises);
- simulated: ``sched.simulate(costs, cores=T)`` with costs measured *in every round* (the mean of
  P profile passes at intra-op 1), as benchmarks/simulate.py does, so costs and wall times share
  the machine's load; ``sim/meas`` is the median over the quiet rounds of the per-round ratio.
  The simulator's model holds one core per node, so the intra-op-1 column is the one the target's
  target (within 15 %) is about; the intra-op-2 ratio is shown for what it says about the model.

Random DAGs (benchmarks/schedule.py's *local* graphs: N NOOP nodes, 4 predecessors among the
previous 64, seed 0), N from ``--dags``: per policy and cap, the build time (median of 3
builds, fewer once they took 5 s), streams, signals, waits, ``verify()`` (N <= 10,000) and the
simulated makespan with deterministic pseudo-random costs (1-100 us per node, seed 1) on T
cores. Target: every policy schedules the 100k-node graph in under 2 s.

No timing is asserted; misses print MISS. A GPU section needs a lent GPU: without one the
benchmark prints ``no GPU: <reason>`` (JSON ``"gpu": null``), as benchmarks/gpu.py does.
``--quick`` (a smoke run, under 40 s): Inception-V3 75 only, one round, 2 profile passes, and a
10,000-node DAG.
"""

import os
import sys
import time

import numpy as np

import nnc
from benchmarks import _util
from benchmarks.schedule import random_dag
from nnc.schedule.schedule import POLICIES

NETS = ("inception_v3_299", "inception_v3_75", "resnet50")
DAGS = (10_000, 100_000)
TARGET_BUILD_S = 2.0        # 100k-node DAG, every policy
TARGET_SIM = 0.15           # |simulated / measured - 1|, intra-op 1
QUICK = {"nets": ("inception_v3_75",), "dags": (10_000,), "repeat": 1, "profiles": 2}


def _usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def make_net(name):
    """(label, graph) of a network, simplified; None for the graph and a reason when it
    cannot be built here."""
    if name.startswith("inception_v3_"):
        from nnc.models.inception import build_inception_v3_model

        size = int(name.rsplit("_", 1)[1])
        g = build_inception_v3_model(size=size).graph
        label = f"Inception-V3 {size}x{size} (nnc's own graph)"
    else:
        from nnc.models import onnx_zoo

        try:
            model = onnx_zoo.resnet50(seed=0)
        except ImportError as e:
            return "ResNet-50 224x224", None, f"onnx missing: {e}"
        g = nnc.onnx.load(model)[0]
        label = "ResNet-50 224x224 (onnx_zoo via nnc.onnx.load)"
    g.simplify()
    return label, g, None


def waits_of(sched):
    return sum(len(sched[e].waits) for e in sched.order)


def profile_costs(g, passes):
    """Node index -> mean seconds over ``passes`` ``g.profile()`` passes (the mean, not the
    median: see benchmarks/simulate.py)."""
    runs = [dict((e.index, t) for e, t in g.profile()) for _ in range(passes)]
    return {i: float(np.mean([r[i] for r in runs])) for i in runs[0]}


def _describe(sched):
    return {"streams": sched.stream_count, "signals": sched.signal_count,
            "waits": waits_of(sched)}


def _build_times(build, number, budget=5.0):
    """Seconds of up to ``number`` builds; fewer (at least one) once they took ``budget``
    seconds, so that a slow policy (a search over a 100k-node DAG) keeps the run bounded."""
    out = []
    for _ in range(number):
        t0 = time.perf_counter()
        build()
        out.append(time.perf_counter() - t0)
        if sum(out) >= budget:
            break
    return out


def run_net(name, threads, repeat, passes, pause, log):
    label, g, reason = make_net(name)
    if g is None:
        log(f"  {label}: skipped ({reason})", file=sys.stderr)
        return {"net": name, "label": label, "skipped": reason}
    log(f"  {label}: profiling and building the schedules ...", file=sys.stderr)
    nnc.set_intra_op_threads(1)
    g.run()
    costs0 = profile_costs(g, passes)
    caps = (threads, 0) if threads > 0 else (0,)
    intra = (1, 2) if threads > 1 else (1,)
    configs, rows = {}, {}
    for policy in POLICIES:
        for cap in caps:
            def build(policy=policy, cap=cap):
                return nnc.static_schedule(g, max_streams=cap, policy=policy, costs=costs0)
            sched = build()
            sched.verify()
            secs = _build_times(build, 5)
            rows[policy, cap] = dict(policy=policy, max_streams=cap, **_describe(sched),
                                     build_ms=_util.median(secs) * 1e3, verified=True)
            configs[policy, cap] = (build, sched)
    s = nnc.Stream("cpu")

    def scheduled(build, n):
        def prepare():
            build()                     # make this policy's schedule the graph's default
            nnc.set_intra_op_threads(n)

        def fn():
            g.run(stream=s)
            s.wait()
        return prepare, fn

    def seq_prepare():
        nnc.set_intra_op_threads(1)

    fns = {"seq": (seq_prepare, g.run)}
    for (policy, cap), (build, _) in configs.items():
        for n in intra:
            fns[policy, cap, n] = scheduled(build, n)
    log(f"  {label}: {len(fns)} configurations x {repeat} rounds ...", file=sys.stderr)
    costs = []

    def round_start():              # this round's costs, measured beside its runs
        nnc.set_intra_op_threads(1)
        costs.append(profile_costs(g, passes))

    samples, others = _util.measure_rounds(
        {name: fn for name, (_, fn) in fns.items()}, repeat, pause=pause,
        prepare={name: prep for name, (prep, _) in fns.items()}, round_start=round_start)
    quiet = _util.quiet_rounds(others)
    seq_sim = [configs[next(iter(configs))][1].simulate(c, streams_overlap=False).makespan
               for c in costs]
    seq0 = configs[next(iter(configs))][1].simulate(costs0, streams_overlap=False).makespan
    out_rows = [{"policy": "seq", "max_streams": None, "streams": 1, "signals": 0, "waits": 0,
                 "build_ms": None, "verified": None,
                 "simulated_ms": _util.median([seq_sim[k] for k in quiet]) * 1e3,
                 "simulated_build_costs_ms": seq0 * 1e3,
                 "measured_ms": {"1": _util.median([samples["seq"][k] for k in quiet]) * 1e3},
                 "sim_over_measured": {"1": _util.median([seq_sim[k] / samples["seq"][k]
                                                          for k in quiet])}}]
    for (policy, cap), (_, sched) in configs.items():
        sims = [sched.simulate(c, cores=threads) for c in costs]
        row = rows[policy, cap]
        row["simulated_ms"] = _util.median([sims[k].makespan for k in quiet]) * 1e3
        # With the costs the policies were given: what a cost-aware policy optimises.
        row["simulated_build_costs_ms"] = sched.simulate(costs0, cores=threads).makespan * 1e3
        row["critical_path_ms"] = _util.median([sims[k].critical_path for k in quiet]) * 1e3
        row["measured_ms"], row["sim_over_measured"], row["samples_ms"] = {}, {}, {}
        for n in intra:
            got = samples[policy, cap, n]
            row["measured_ms"][str(n)] = _util.median([got[k] for k in quiet]) * 1e3
            row["sim_over_measured"][str(n)] = _util.median([sims[k].makespan / got[k]
                                                             for k in quiet])
            row["samples_ms"][str(n)] = [t * 1e3 for t in got]
        row["within_target"] = abs(row["sim_over_measured"]["1"] - 1.0) <= TARGET_SIM
        out_rows.append(row)
    nnc.set_intra_op_threads(None)
    return {"net": name, "label": label, "nodes": len(g.schedule.order), "threads": threads,
            "intra_op": list(intra), "quiet_rounds": quiet, "others_cores": others,
            "rows": out_rows}


def run_dag(n, threads, repeat, log):
    log(f"  random DAG {n}: building the graph ...", file=sys.stderr)
    g, edges = random_dag(n, 64)
    rng = np.random.default_rng(1)
    cost = (1e-6 + rng.random(n) * 99e-6).tolist()
    costs = dict(enumerate(cost))
    rows = []
    for policy in POLICIES:
        for cap in (threads, 0):
            log(f"  random DAG {n}: {policy}, max_streams={cap} ...", file=sys.stderr)

            def build(policy=policy, cap=cap):
                return nnc.static_schedule(g, max_streams=cap, policy=policy, costs=costs)
            secs = _build_times(build, repeat)
            sched = build()
            if n <= 10_000:
                sched.verify()
            sim = sched.simulate(cost, cores=threads)
            build_s = _util.median(secs)
            rows.append(dict(policy=policy, max_streams=cap, build_s=build_s,
                             samples_s=secs, **_describe(sched),
                             verified=n <= 10_000, simulated_ms=sim.makespan * 1e3,
                             critical_path_ms=sim.critical_path * 1e3,
                             within_target=build_s < TARGET_BUILD_S if n >= 100_000 else None))
    return {"nodes": n, "edges": edges, "work_ms": sum(cost) * 1e3, "rows": rows}


def gpu_reason():
    """Why there are no GPU numbers: no GPU (nnc.cuda's reason), or, with one, that the CUDA
    streams section is not written yet (no GPU was lent to the task that wrote this)."""
    from nnc import cuda

    if not cuda.available():
        return f"no GPU: {cuda.unavailable_reason()}"
    return "GPU present, but the CUDA-streams section is not part of this benchmark yet"


def _ratio(row, n):
    v = row["sim_over_measured"].get(n)
    return _util.fmt(v)


def render(report):
    intra = "/".join(str(n) for n in report["intra_op"])
    out = [f"Scheduling policies side by side ({report['date']}): {report['threads']} pool "
           f"threads, intra-op {intra}, policies {', '.join(report['policies'])}"]
    for r in report["nets"]:
        if "skipped" in r:
            out.append(f"\n{r['label']}: skipped ({r['skipped']})")
            continue
        out.append(f"\n{r['label']}: {r['nodes']} nodes, quiet rounds "
                   f"{len(r['quiet_rounds'])}/{len(r['others_cores'])}")
        heads = ["policy", "cap", "streams", "signals", "waits", "build ms", "sim0 ms", "sim ms"]
        for n in r["intra_op"]:
            heads += [f"meas ms i{n}", f"sim/meas i{n}"]
        heads.append("15%")
        table = []
        for row in r["rows"]:
            cells = [row["policy"], "—" if row["max_streams"] is None else row["max_streams"],
                     row["streams"], row["signals"], row["waits"], _util.fmt(row["build_ms"]),
                     _util.fmt(row["simulated_build_costs_ms"]), _util.fmt(row["simulated_ms"])]
            for n in r["intra_op"]:
                cells += [_util.fmt(row["measured_ms"].get(str(n))), _ratio(row, str(n))]
            verdict = row.get("within_target")
            cells.append("" if verdict is None else "ok" if verdict else "MISS")
            table.append(cells)
        out.append(_util.table(heads, table))
    for d in report["dags"]:
        out.append(f"\nRandom DAG, {d['nodes']} NOOP nodes, {d['edges']} edges (work "
                   f"{_util.fmt(d['work_ms'])} ms of pseudo-random costs)")
        table = []
        for row in d["rows"]:
            verdict = row["within_target"]
            table.append([row["policy"], row["max_streams"], _util.fmt(row["build_s"]),
                          row["streams"], row["signals"], row["waits"],
                          _util.fmt(row["simulated_ms"]), _util.fmt(row["critical_path_ms"]),
                          "" if verdict is None else "ok" if verdict else "MISS"])
        out.append(_util.table(["policy", "cap", "build s", "streams", "signals", "waits",
                                "sim ms", "crit ms", "< 2 s"], table))
    out.append("\n" + report["gpu_reason"])
    return "\n".join(out)


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0], repeat=5)
    p.add_argument("--quick", action="store_true", help="a smoke run (under 40 s)")
    p.add_argument("--threads", type=int, default=None, help="pool threads (default: cores)")
    p.add_argument("--nets", default=None, help=f"comma-separated, of {', '.join(NETS)}")
    p.add_argument("--dags", default=None, help="comma-separated DAG sizes (default "
                   "10000,100000; empty: none)")
    p.add_argument("--profiles", type=int, default=3, help="profile passes per round")
    p.add_argument("--pause", type=float, default=0.05, help="seconds before each timed run")
    args = p.parse_args(argv)
    nets = QUICK["nets"] if args.quick else NETS
    if args.nets is not None:
        nets = tuple(n for n in args.nets.split(",") if n)
        unknown = sorted(set(nets) - set(NETS))
        if unknown:
            p.error(f"unknown nets {unknown}; expected some of {', '.join(NETS)}")
    dags = QUICK["dags"] if args.quick else DAGS
    if args.dags is not None:
        try:
            dags = tuple(int(n) for n in args.dags.split(",") if n)
        except ValueError:
            p.error(f"--dags needs comma-separated integers, not {args.dags!r}")
    repeat = QUICK["repeat"] if args.quick else args.repeat
    passes = QUICK["profiles"] if args.quick else args.profiles
    threads = args.threads or _usable_cpus()
    if repeat < 1 or passes < 1 or threads < 1 or args.pause < 0 or any(n < 2 for n in dags):
        p.error("need --repeat, --profiles, --threads >= 1, --pause >= 0 and DAGs of >= 2 "
                "nodes")
    nnc.set_num_threads(threads)
    results = [run_net(n, threads, repeat, passes, args.pause, print) for n in nets]
    dag_results = [run_dag(n, threads, 1 if args.quick else 3, print) for n in dags]
    report = {"threads": threads, "intra_op": [1, 2] if threads > 1 else [1],
              "repeat": repeat, "profiles": passes, "quick": args.quick,
              "policies": list(POLICIES), "target_build_s": TARGET_BUILD_S,
              "target_sim": TARGET_SIM, "nets": results, "dags": dag_results,
              "gpu": None, "gpu_reason": gpu_reason()}
    _util.publish(report, "policies", render, args.json)


if __name__ == "__main__":
    main()
