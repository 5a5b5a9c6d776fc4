"""Pipeline throughput: a network split into stages by ``nnc.pipeline.split``, run by
the local and the Ray executors, against nnc's best single-inference configurations.

    python -m benchmarks.pipeline [--json] [--quick] [--repeat R] [--batch N] [--stages K]
                                  [--nets a,b] [--no-ray] [--pause S]

Networks (batch 1, simplified with ``g.simplify()`` as the other CPU benchmarks do):
Inception-V3 299 (``nnc.models.inception``) and ResNet-50 224 (``onnx_zoo.resnet50`` through
``nnc.onnx.load``; skipped, with the reason, without the ``onnx`` package). Per network:

- the split: ``pipeline.split(g, stages=K, costs=c)`` with c the mean of 3 ``g.profile()`` passes;
  ``bound`` = total cost / largest stage cost, the most a K-stage pipeline can gain over running
  the same nodes one after another (``pipeline.partition`` on the same costs);
- each configuration pushes ``N`` inferences (``--batch``) and is timed as a whole: ``seq``
  (``g.run()`` at intra-op threads 1 and 2: ``nnc.set_intra_op_threads``), ``sched``
  (``nnc.static_schedule`` with policies "rank" and "list", ``max_streams`` = cores, then
  ``g.run(stream=s); s.wait()`` at intra-op 1 and 2), ``local`` (``pipeline.build(cfg)``,
  intra-op 1, ``depth`` inputs in flight) and ``ray`` (``build(cfg, executor="ray")``);
  rounds interleave every configuration (``_util.measure_rounds``), medians over the rounds;
- throughput = N / median seconds; for the pipelines also the *steady* rate, (N - 1) / (last -
  first output's arrival), which leaves out the fill (the first input's way through every
  stage: with N = 12 and 2 stages the fill alone caps N / seconds at 12/13 of the bound);
  ``% of bound`` = local steady rate / (``seq`` at intra-op 1 x bound), and the same with
  the whole-batch rate beside it; targets: >= 90 % of the bound and (whole-batch rate) above
  the best single-inference throughput (``seq`` and ``sched`` rows); Ray >= 70 % of local
  (steady rates).

Hand-off overhead: a pipeline of H empty function stages (each returns its 4-float input) moves
4N inputs through, one at a time (depth 1: the latency of a hop) and 4 at a time; seconds per
input per hop, local and Ray (the stages do no work), beside ``raw ray``: the same chain of
plain Ray actor calls passing ObjectRefs, without nnc (what Ray itself costs per hop).
Ray needs the ``ray`` package (the ``ray`` extra): without it the Ray columns read
``ray missing``. ``--quick`` (a smoke run, about a minute): Inception-V3 at 75x75 only, one
round, N = 4, H = 2.
"""

import sys
import time

import numpy as np

import nnc
from benchmarks import _util
from nnc import pipeline

NETS = ("inception_v3_299", "resnet50")
TARGET_BOUND = 0.90
TARGET_RAY = 0.70
DEPTH = 4
QUICK = {"nets": ("inception_v3_75",), "repeat": 1, "batch": 4, "hops": 2}


def make_net(name):
    """(label, graph, {input name: Tensor}, [output Tensor], reason): None graph if skipped."""
    if name.startswith("inception_v3_"):
        from nnc.models.inception import build_inception_v3_model

        size = int(name.rsplit("_", 1)[1])
        m = build_inception_v3_model(size=size)
        m.graph.simplify()
        return (f"Inception-V3 {size}x{size}", m.graph, {"data": m.input}, [m.output], None)
    from nnc.models import onnx_zoo

    try:
        model = onnx_zoo.resnet50(seed=0)
        g, ins, outs = nnc.onnx.load(model)
    except ImportError as e:
        return "ResNet-50 224x224", None, None, None, f"onnx missing: {e}"
    g.simplify()
    return "ResNet-50 224x224", g, {"data": ins[0]}, list(outs), None


def profile_costs(g, passes=3):
    runs = [dict((e.index, t) for e, t in g.profile()) for _ in range(passes)]
    return {i: float(np.mean([r[i] for r in runs])) for i in runs[0]}


def ray_reason():
    """None when Ray can be imported, else why not."""
    try:
        import ray  # noqa: F401
    except ImportError as e:
        return f"ray missing: {e}"
    return None


def pump(pm, name, x, n, depth=DEPTH, arrivals=None):
    """Push n inputs through a built pipeline, keeping up to ``depth`` in flight; returns the
    outputs of the last input. ``arrivals``: a list that gets each output's arrival time."""
    sent = got = 0
    last = None
    while got < n:
        while sent < n and pm.num_executing() < depth:
            pm.set_input(name, x)
            pm.run()
            sent += 1
        last = pm.get_output(block=True)
        if arrivals is not None:
            arrivals.append(time.perf_counter())
        got += 1
    return last


def steady_rate(arrivals):
    """Outputs per second once the pipeline is full: (n - 1) / (last - first arrival), which
    leaves out the fill (the first input's way through every stage) and the drain."""
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])


def _pumped(pm, name, x, n, rates):
    def fn():
        arrivals = []
        pump(pm, name, x, n, arrivals=arrivals)
        rates.append(steady_rate(arrivals))
    return fn


def _intra(k, fn):
    def run():
        nnc.set_intra_op_threads(k)
        fn()
    return run


def run_net(name, args, log):
    label, g, inputs, outputs, reason = make_net(name)
    if g is None:
        log(f"  {label}: skipped ({reason})", file=sys.stderr)
        return {"net": name, "label": label, "skipped": reason}
    (in_name, in_tensor), = inputs.items()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(in_tensor.shape).astype(in_tensor.dtype)
    in_tensor.numpy()[...] = x
    nnc.set_intra_op_threads(1)
    costs = profile_costs(g)
    order = g.topsort()
    cost_list = [costs[e.index] for e in order]
    cuts = pipeline.partition(cost_list, args.stages)
    bounds = [0, *cuts, len(order)]
    stage_costs = [sum(cost_list[a:b]) for a, b in zip(bounds, bounds[1:])]
    bound = sum(stage_costs) / max(stage_costs)
    t0 = time.perf_counter()
    cfg = pipeline.split(g, stages=args.stages, costs=costs, inputs=inputs, outputs=outputs)
    split_s = time.perf_counter() - t0
    g.run()
    want = [o.numpy().copy() for o in outputs]

    n = args.batch
    fns, prepare = {}, {}
    s = nnc.Stream("cpu")

    def sched_run():
        for _ in range(n):
            g.run(stream=s)
            s.wait()

    for k in (1, 2):
        fns[f"seq intra-op {k}"] = lambda: [g.run() for _ in range(n)]
        prepare[f"seq intra-op {k}"] = _intra(k, lambda: None)
        for policy in ("rank", "list"):
            # static_schedule makes its schedule the graph's default: untimed, before each round
            key = f"sched {policy} intra-op {k}"
            fns[key] = sched_run
            prepare[key] = _intra(k, lambda policy=policy: nnc.static_schedule(
                g, max_streams=args.cores, policy=policy, costs=costs))
    local = pipeline.build(cfg, depth=DEPTH)
    checks = {}
    got = pump(local, in_name, x, 1)
    checks["local_equal"] = all(np.array_equal(a, b) for a, b in zip(got, want))
    steady = {"local": [], "ray": []}
    fns["local"] = _pumped(local, in_name, x, n, steady["local"])
    prepare["local"] = _intra(1, lambda: None)
    remote = None
    rreason = None if args.no_ray else ray_reason()
    if args.no_ray:
        rreason = "--no-ray"
    if rreason is None:
        remote = pipeline.build(cfg, depth=DEPTH, executor="ray")
        got = pump(remote, in_name, x, 1)
        checks["ray_equal"] = all(np.array_equal(a, b) for a, b in zip(got, want))
        fns["ray"] = _pumped(remote, in_name, x, n, steady["ray"])
        prepare["ray"] = _intra(1, lambda: None)
    try:
        samples, others = _util.measure_rounds(fns, args.repeat, pause=args.pause,
                                                prepare=prepare)
    finally:
        local.close()
        if remote is not None:
            remote.close()
        nnc.set_intra_op_threads(1)
    rows = {k: n / _util.median(v) for k, v in samples.items()}
    # The pipelines' steady rate (the rounds were the same as for `samples`; medians too).
    steady_rows = {k: _util.median(v) for k, v in steady.items() if v}
    best_single = max(v for k, v in rows.items() if k.startswith(("seq", "sched")))
    seq1 = rows["seq intra-op 1"]
    pct = steady_rows["local"] / (seq1 * bound)
    pct_whole = rows["local"] / (seq1 * bound)
    ray_ratio = steady_rows["ray"] / steady_rows["local"] if "ray" in steady_rows else None
    out = {"net": name, "label": label, "nodes": len(order), "stages": args.stages,
           "stage_costs_s": stage_costs, "bound": bound, "split_s": split_s,
           "throughput": rows, "steady": steady_rows, "best_single": best_single,
           "pct_of_bound": pct, "pct_of_bound_whole": pct_whole,
           "above_single": rows["local"] > best_single, "ray_vs_local": ray_ratio,
           "ray_reason": rreason, "checks": checks,
           "samples": samples, "others": others}
    log(f"  {label}: bound {bound:.2f}, local {rows['local']:.3g}/s "
        f"({pct:.0%} of bound), best single {best_single:.3g}/s", file=sys.stderr)
    return out



def _identity(x):
    return x


def hop_chain(hops):
    """A config of ``hops`` function stages passing a 4-float array along."""
    spec = ("float32", (4,))
    mods = [pipeline.Module.function(_identity, inputs={"x": spec}, outputs=[spec],
                                     name=f"hop{i}") for i in range(hops)]
    cfg = pipeline.PipelineConfig()
    cfg.inputs["x"] = (mods[0], "x")
    for a, b in zip(mods, mods[1:]):
        cfg.connect(a, 0, b, "x")
    cfg.outputs.append((mods[-1], 0))
    return cfg


class _Echo:
    def echo(self, x):
        return x


def _raw_ray_chain(hops):
    """Ray alone, for comparison: one input through ``hops`` trivial actors, each call taking
    the previous call's ObjectRef, then ``ray.get`` of the last (what one pipeline input costs
    Ray without nnc's front end)."""
    import ray

    actors = [ray.remote(_Echo).options(num_cpus=0).remote() for _ in range(hops)]

    def one(x):
        ref = x
        for a in actors:
            ref = a.echo.remote(ref)
        return ray.get(ref)

    one(np.zeros(4, np.float32))
    return one


def run_hops(args, log):
    """Seconds per input per hop through empty stages, one input at a time (latency) and
    ``DEPTH`` at a time (the hand-off cost when stages overlap)."""
    x = np.arange(4, dtype=np.float32)
    n = args.batch * 4
    executors = ["local"]
    rreason = "--no-ray" if args.no_ray else ray_reason()
    if rreason is None:
        executors.append("ray")
    built = {ex: pipeline.build(hop_chain(args.hops), depth=DEPTH, executor=ex)
             for ex in executors}
    try:
        checks = {ex: bool(np.array_equal(pump(pm, "x", x, 1)[0], x))
                  for ex, pm in built.items()}
        fns = {}
        for ex, pm in built.items():
            fns[f"{ex} depth 1"] = lambda pm=pm: pump(pm, "x", x, n, depth=1)
            fns[f"{ex} depth {DEPTH}"] = lambda pm=pm: pump(pm, "x", x, n)
        raw = _raw_ray_chain(args.hops) if "ray" in built else None
        if raw is not None:
            fns["raw ray depth 1"] = lambda: [raw(x) for _ in range(n)]
        samples, _ = _util.measure_rounds(fns, args.repeat, pause=args.pause)
    finally:
        for pm in built.values():
            pm.close()
    per_hop = {k: _util.median(v) / n / args.hops for k, v in samples.items()}
    log(f"  hand-off: {', '.join(f'{k} {v * 1e6:.0f} us' for k, v in per_hop.items())}",
        file=sys.stderr)
    return {"hops": args.hops, "inputs": n, "per_hop_s": per_hop, "checks": checks,
            "ray_reason": rreason, "samples": samples}


def render(report):
    out = [f"Pipeline throughput, {report['stages']} stages, {report['cores']} cores, "
           f"N = {report['batch']} inferences per timing, {report['repeat']} rounds "
           "(inferences/s, medians)"]
    for r in report["nets"]:
        if "skipped" in r:
            out.append(f"\n{r['label']}: skipped ({r['skipped']})")
            continue
        out.append(f"\n{r['label']}: {r['nodes']} nodes; stage costs "
                   f"{', '.join(f'{c * 1e3:.1f}' for c in r['stage_costs_s'])} ms; bound "
                   f"{r['bound']:.2f}x; split took {r['split_s'] * 1e3:.0f} ms")
        rows = [[k, _util.fmt(v), _util.fmt(r["steady"].get(k))]
                for k, v in r["throughput"].items()]
        out.append(_util.table(["configuration", "inferences/s", "steady /s"], rows))
        pct = r["pct_of_bound"]
        out.append(f"local: steady {pct:.0%} of bound, {r['pct_of_bound_whole']:.0%} with fill "
                   f"and drain (target >= {TARGET_BOUND:.0%}: "
                   f"{'ok' if pct >= TARGET_BOUND else 'MISS'}); "
                   f"{'above' if r['above_single'] else 'MISS: not above'} the best "
                   f"single-inference configuration ({_util.fmt(r['best_single'])}/s)")
        if r["ray_vs_local"] is not None:
            ok = r["ray_vs_local"] >= TARGET_RAY
            out.append(f"ray: {r['ray_vs_local']:.0%} of local (target >= {TARGET_RAY:.0%}: "
                       f"{'ok' if ok else 'MISS'})")
        else:
            out.append(f"ray: {r['ray_reason']}")
        out.append(f"outputs equal to g.run(): {r['checks']}")
        load = [o for o in r["others"] if o is not None]
        if load:
            out.append(f"load: other processes took {min(load):.1f}-{max(load):.1f} cores "
                       "during the rounds (from /proc/stat)")
    h = report["hops"]
    out.append(f"\nHand-off through {h['hops']} empty function stages (us per input per hop):")
    out.append(_util.table(["executor", "us/hop"],
                           [[k, _util.fmt(v * 1e6)] for k, v in h["per_hop_s"].items()]))
    if h["ray_reason"]:
        out.append(f"ray: {h['ray_reason']}")
    return "\n".join(out)


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0], repeat=5)
    p.add_argument("--quick", action="store_true", help="a smoke run (about a minute)")
    p.add_argument("--nets", default=None, help=f"comma-separated, of {', '.join(NETS)} "
                   "(or inception_v3_SIZE)")
    p.add_argument("--batch", type=int, default=16, help="inferences per timed call")
    p.add_argument("--stages", type=int, default=2, help="pipeline stages")
    p.add_argument("--hops", type=int, default=4, help="empty stages for the hand-off cost")
    p.add_argument("--no-ray", action="store_true", help="skip the Ray executor")
    p.add_argument("--pause", type=float, default=0.05, help="seconds before each timed run")
    args = p.parse_args(argv)
    nets = QUICK["nets"] if args.quick else NETS
    if args.nets is not None:
        nets = tuple(n for n in args.nets.split(",") if n)
        bad = [n for n in nets if n not in NETS and not n.startswith("inception_v3_")]
        if bad:
            p.error(f"unknown nets {bad}; expected some of {', '.join(NETS)}")
    if args.quick:
        args.repeat, args.batch, args.hops = QUICK["repeat"], QUICK["batch"], QUICK["hops"]
    if args.repeat < 1 or args.batch < 1 or args.stages < 1 or args.hops < 1 \
            or args.pause < 0:
        p.error("need --repeat, --batch, --stages, --hops >= 1 and --pause >= 0")
    args.cores = nnc.get_num_threads()
    results = [run_net(n, args, print) for n in nets]
    hops = run_hops(args, print)
    if ray_reason() is None and not args.no_ray:
        import ray

        ray.shutdown()
    report = {"stages": args.stages, "cores": args.cores, "batch": args.batch,
              "depth": DEPTH, "repeat": args.repeat, "quick": args.quick,
              "target_bound": TARGET_BOUND, "target_ray": TARGET_RAY,
              "nets": results, "hops": hops}
    _util.publish(report, "pipeline", render, args.json)


if __name__ == "__main__":
    main()
