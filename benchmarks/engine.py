"""nnc.Engine (MXNet's dependency engine) against dask.threaded and a tracked thread pool.

    python -m benchmarks.engine [--json] [--quick] [--repeat R] [--peer-repeat D]
                                [--ops N] [--randsum-ops M] [--seeds S] [--threads T]
                                [--parts floor,randsum,randsum_sleep,replay]

Three parts, each timed side by side in one process in interleaved rounds (median of R runs;
dask and the thread pool, slower by far, get D runs), with T threads everywhere
(``nnc.set_num_threads(T)``, dask's ``num_workers=T``, the pool's ``max_workers=T``):

1. **floor**: push + completion of N empty ops, per op, in three dependency shapes (``none``:
   no variables; ``chain``: every op mutates one variable; ``randsum``: RandSumExpr's read and
   mutate sets with empty bodies). nnc runs a C no-op (benchmarks/engine_ops.c, compiled at run
   time) and a Python no-op, threaded and naive; dask.threaded and the thread pool run the
   Python no-op on the same dependencies. An untimed run of each executor with bodies that
   log their op checks that every op ran once, after its dependencies.
2. **randsum**: MXNet's RandSumExpr with 1-9 µs of GIL-free C work per op, all in C: nnc
   threaded and naive, the serial C loop, a Python loop of the same C calls, dask and the pool
   (ctypes calls, which drop the GIL). S seeds, each executor's final 100 values compared bit
   for bit with the serial loop's, before timing and after it. Twice: the work busy-waits
   (``randsum``: CPU-bound, so 2 cores can at best halve it while the pushing thread needs one
   of them) and it sleeps (``randsum_sleep``: what MXNet's test does; a sleep of a few µs
   lasts tens of µs on Linux, and pool threads overlap the sleeps).
3. **replay**: the busy-waiting workload pushed inside ``engine.record()``, the recorded graph
   given ``nnc.static_schedule(g, max_streams=T, policy="ios", costs="profile")`` and run with
   ``g.run(stream=s); s.wait()`` (its C ops are ENGINE_CALL nodes, run without the GIL),
   against pushing it again; the values again checked against the serial loop. Then the same
   with empty ops (``replay_empty``): what replaying saves of the engine's own cost. (On T
   cores the busy replay cannot beat the work / T, so it cannot be 2x faster than a push that
   is itself 1.5x faster than the serial loop.)

The default run (N = M = 10,000, R = 7, D = 3, S = 5) takes about 3 minutes on a 2-vCPU VM,
most of it dask's; ``--quick`` (N = M = 500, R = D = 1, S = 2) a few seconds. ``--parts``
runs some parts only (``replay`` is both replays): on a shared 2-vCPU VM one process's median
of the busy RandSumExpr varies by up to 15 % from one process to the next (where the threads
land), so its result is best read over several processes. Results:
docs/benchmarks.md, "Engine".
"""

import functools
import os
import sys
import time

import nnc
from benchmarks import _engine_peers as peers
from benchmarks import _engine_work as work
from benchmarks import _util

SHAPES = ("none", "chain", "randsum")
PARTS = ("floor", "randsum", "randsum_sleep", "replay")
REPLAY_POLICY = "ios"       # the replay's static_schedule policy (costs: g.profile())
TARGET_C_US = 2.0
TARGET_PY_US = 10.0
TARGET_DASK_X = 20.0
TARGET_SERIAL_X = 1.5
TARGET_REPLAY_X = 2.0


def _empty():
    return None


def _shape(name, n, seed):
    if name == "none":
        return work.shape_none(n), 0
    if name == "chain":
        return work.shape_chain(n), 1
    return work.randsum_shape(work.randsum_workloads(n, seed, (0, 0))), work.RANDSUM_VARS


def _pusher(engine, shape, nvars, fns, args=None):
    """A callable pushing op i of ``shape`` as ``fns[i]`` (with ``arg=args[i]`` when given) on
    fresh variables of ``engine``, then waiting for all of them. The per-op lists of variables
    are built here, once, so a timed run costs the pushes and the waits only."""
    var = [engine.new_var() for _ in range(nvars)]
    ops = [([var[r] for r in reads], [var[w] for w in writes]) for reads, writes in shape]
    push = engine.push
    clock = time.perf_counter
    if args is None:
        args = [None] * len(ops)

    def run():
        t0 = clock()
        for fn, (read, mutate), arg in zip(fns, ops, args):
            push(fn, read=read, mutate=mutate, arg=arg)
        run.push_s.append(clock() - t0)
        engine.wait_all()
    # seconds until the last push returned, for every call (warm-ups too): the pushing
    # thread's share of a run
    run.push_s = []
    return run


def _check_order(make, n, deps):
    """Run ``make(bodies)()`` once with bodies that log their op index; True when every op
    ran once and after each of its dependencies."""
    order = []
    make([functools.partial(order.append, i) for i in range(n)])()
    return work.order_respects(order, deps)


def floor(engines, c_ops, cfunc, n, repeat, peer_repeat, threads, seed):
    rows = []
    for name in SHAPES:
        shape, nvars = _shape(name, n, seed)
        deps = work.dependencies(shape)
        pool = peers.FuturesRun([_empty] * n, None, deps, threads)
        try:
            order_ok, samples, push_us = _floor_shape(
                engines, c_ops, cfunc, shape, nvars, deps, pool, repeat, peer_repeat, threads)
        finally:
            pool.close()
        us = {k: _util.median(v) / n * 1e6 for k, v in samples.items()}
        ratios = {}
        if "dask" in us:
            ratios["dask / nnc py"] = us["dask"] / us["nnc py"]
            if "nnc C" in us:
                ratios["dask / nnc C"] = us["dask"] / us["nnc C"]
        ratios["futures / nnc py"] = us["futures"] / us["nnc py"]
        rows.append({"shape": name, "ops": n, "edges": sum(len(d) for d in deps),
                     "us_per_op": us, "push_us_per_op": push_us, "ratios": ratios,
                     "order_ok": order_ok, "samples_s": samples})
    return rows


def _floor_shape(engines, c_ops, cfunc, shape, nvars, deps, pool, repeat, peer_repeat,
                 threads):
    n = len(shape)
    makers = {
        "nnc py": functools.partial(_pusher, engines["nnc"], shape, nvars),
        "naive py": functools.partial(_pusher, engines["naive"], shape, nvars),
        "dask": lambda bodies: peers.DaskRun(bodies, None, deps, threads).run,
        "futures": functools.partial(_with_bodies, pool),
    }
    if peers.dask_missing() is not None:
        del makers["dask"]
    order_ok = {k: _check_order(make, n, deps) for k, make in makers.items()}
    # the timed runs: every body the Python no-op, or the C one
    fns = {k: make([_empty] * n) for k, make in makers.items()}
    if c_ops is not None:
        noop, _ = c_ops.engine_fns(cfunc)
        fns["nnc C"] = _pusher(engines["nnc"], shape, nvars, [noop] * n)
        fns["naive C"] = _pusher(engines["naive"], shape, nvars, [noop] * n)
    repeats = {k: peer_repeat if k in ("dask", "futures") else repeat for k in fns}
    samples = _util.measure_interleaved(fns, repeats)
    return order_ok, samples, _push_us(fns, n)


def _push_us(fns, n):
    """µs per op that the pushing thread spent in push() (median over calls), per pusher."""
    return {k: _util.median(fn.push_s) / n * 1e6 for k, fn in fns.items()
            if getattr(fn, "push_s", None)}


def _with_bodies(pool, bodies):
    """The tracked pool's run with new bodies (one pool per shape: threads start once)."""
    pool.bodies = bodies
    return pool.run


def randsum(engines, c_ops, cfunc, m, repeat, peer_repeat, threads, seeds, sleep=False):
    _, c_randsum = c_ops.engine_fns(cfunc)
    lib_call = c_ops.randsum

    def executors(workloads):
        """name -> (buffers, run) for one workload list, each with its own buffers."""
        shape = work.randsum_shape(workloads)
        deps = work.dependencies(shape)
        out = {}

        def add(name, make):
            buf = work.RandSumBuffers(workloads)
            inner = make(buf)

            def run():
                buf.reset()
                inner()
            run.push_s = getattr(inner, "push_s", None)
            out[name] = (buf, run)

        add("serial C", lambda b: functools.partial(c_ops.serial, b.ops, len(workloads)))
        add("serial py→C", lambda b: functools.partial(_loop, lib_call, b.args))
        add("nnc", lambda b: _pusher(engines["nnc"], shape, work.RANDSUM_VARS,
                                     [c_randsum] * m, b.args))
        add("naive", lambda b: _pusher(engines["naive"], shape, work.RANDSUM_VARS,
                                       [c_randsum] * m, b.args))
        if peers.dask_missing() is None:
            add("dask", lambda b: peers.DaskRun([lib_call] * m, b.args, deps, threads).run)
        pools = []

        def futures(b):
            pools.append(peers.FuturesRun([lib_call] * m, b.args, deps, threads))
            return pools[-1].run
        add("futures", futures)
        return out, pools

    identical = {}
    reference_ok = True
    for seed in seeds:
        workloads = work.randsum_workloads(m, seed, sleep=sleep)
        runs, pools = executors(workloads)
        try:
            for _, run in runs.values():
                run()
        finally:
            for p in pools:
                p.close()
        serial = runs["serial C"][0].values()
        reference_ok &= serial == work.randsum_serial(workloads)
        for name, (buf, _) in runs.items():
            identical[name] = identical.get(name, True) and buf.values() == serial
    workloads = work.randsum_workloads(m, seeds[0], sleep=sleep)
    runs, pools = executors(workloads)
    fns = {name: run for name, (_, run) in runs.items()}
    repeats = {k: peer_repeat if k in ("dask", "futures") else repeat for k in fns}
    try:
        samples = _util.measure_interleaved(fns, repeats)
    finally:
        for p in pools:
            p.close()
    serial = runs["serial C"][0].values()
    for name, (buf, _) in runs.items():   # the last timed run of each, too
        identical[name] = identical[name] and buf.values() == serial
    ms = {k: _util.median(v) * 1e3 for k, v in samples.items()}
    push_us = _push_us(fns, m)
    base = ms["serial C"]
    return {"ops": m, "seeds": list(seeds), "spin_us": [1, 9], "sleep": sleep,
            "work_ms": sum(abs(w[2]) for w in workloads) / 1e6,
            "spin_check_ns": {str(ns): c_ops.spin_check_ns(ns) for ns in (1000, 5000, 9000)},
            "ms": ms, "push_us_per_op": push_us,
            "x_serial": {k: base / v for k, v in ms.items()},
            "bit_identical": identical, "serial_equals_python": reference_ok,
            "samples_s": samples}


def _loop(call, args):
    for a in args:
        call(a)


def replay(engine, c_ops, cfunc, m, repeat, threads, seed, spin_us=(1, 9)):
    _, c_randsum = c_ops.engine_fns(cfunc)
    workloads = work.randsum_workloads(m, seed, spin_us)
    expected = work.randsum_serial(workloads)
    shape = work.randsum_shape(workloads)
    pushed = work.RandSumBuffers(workloads)
    recorded = work.RandSumBuffers(workloads)
    push_again = _pusher(engine, shape, work.RANDSUM_VARS, [c_randsum] * m, pushed.args)
    var = [engine.new_var() for _ in range(work.RANDSUM_VARS)]
    with engine.record() as g:
        for (reads, writes), arg in zip(shape, recorded.args):
            engine.push(c_randsum, read=[var[r] for r in reads],
                        mutate=[var[w] for w in writes], arg=arg)
    engine.wait_all()
    # What a user replaying a recorded region does: measure its nodes once (g.profile()) and
    # let the cost-aware "ios" policy place them on the pool's threads.
    sched = nnc.static_schedule(g, max_streams=threads, policy=REPLAY_POLICY, costs="profile")
    stream = nnc.Stream("cpu")

    def run_push():
        pushed.reset()
        push_again()

    def run_replay():
        recorded.reset()
        g.run(stream=stream)
        stream.wait()

    run_replay()
    first_equal = recorded.values() == expected
    samples = _util.measure_interleaved({"push again": run_push, "replay": run_replay}, repeat)
    equal = first_equal and recorded.values() == expected and pushed.values() == expected
    ms = {k: _util.median(v) * 1e3 for k, v in samples.items()}
    return {"ops": m, "seed": seed, "spin_us": list(spin_us), "nodes": _node_count(g),
            "streams": sched.stream_count,
            "policy": REPLAY_POLICY, "signals": sched.signal_count,
            "ms": ms, "x": ms["push again"] / ms["replay"], "equal": equal,
            "samples_s": samples}


def _node_count(g):
    try:
        return len(g.topsort())
    except Exception:   # a count is only reported; the run itself is what is checked
        return None


def _others_load(fn, *args):
    """``fn(*args)`` and the CPU other processes took meanwhile, in cores (machine busy time
    from /proc/stat minus this process's, per wall second; None without /proc/stat)."""
    busy0, t0, w0 = _util.machine_busy_seconds(), os.times(), time.perf_counter()
    result = fn(*args)
    busy1, t1, w1 = _util.machine_busy_seconds(), os.times(), time.perf_counter()
    if busy0 is None or busy1 is None:
        return result, None
    own = (t1.user + t1.system) - (t0.user + t0.system)
    return result, max(0.0, (busy1 - busy0) - own) / max(w1 - w0, 1e-9)


def targets(report):
    out = []

    def add(name, value, target, higher_is_better):
        met = None if value is None else (value >= target if higher_is_better
                                          else value <= target)
        out.append({"name": name, "value": value, "target": target, "met": met})

    for row in report["floor"] or ():
        us, r = row["us_per_op"], row["ratios"]
        s = row["shape"]
        add(f"floor {s}: nnc C µs/op <= {TARGET_C_US}", us.get("nnc C"), TARGET_C_US, False)
        add(f"floor {s}: nnc py µs/op <= {TARGET_PY_US}", us["nnc py"], TARGET_PY_US, False)
        add(f"floor {s}: dask / nnc py >= {TARGET_DASK_X}", r.get("dask / nnc py"),
            TARGET_DASK_X, True)
    rs = report["randsum"]
    add(f"randsum (spin): serial C / nnc >= {TARGET_SERIAL_X}",
        None if rs is None else rs["x_serial"]["nnc"], TARGET_SERIAL_X, True)
    rs = report["randsum_sleep"]
    add(f"randsum (sleep, MXNet's test): serial C / nnc >= {TARGET_SERIAL_X}",
        None if rs is None else rs["x_serial"]["nnc"], TARGET_SERIAL_X, True)
    rp = report["replay"]
    add(f"replay, 1-9 µs busy ops: push again / replay >= {TARGET_REPLAY_X}",
        None if rp is None else rp["x"], TARGET_REPLAY_X, True)
    rp = report["replay_empty"]
    add(f"replay, empty ops (the engine's own cost): push again / replay >= {TARGET_REPLAY_X}",
        None if rp is None else rp["x"], TARGET_REPLAY_X, True)
    return out


def correct(report):
    """Every correctness flag of the report (timings never enter)."""
    flags = [ok for row in report["floor"] or () for ok in row["order_ok"].values()]
    for key in ("randsum", "randsum_sleep"):
        if report[key] is not None:
            flags += list(report[key]["bit_identical"].values())
            flags.append(report[key]["serial_equals_python"])
    for key in ("replay", "replay_empty"):
        if report[key] is not None:
            flags.append(report[key]["equal"])
    return all(flags)


def render(r):
    f = _util.fmt
    cols = ["nnc C", "nnc py", "naive C", "naive py", "dask", "futures"]
    parts = r.get("parts", PARTS)

    def skipped(key, part):
        return f"{key}: not run (--parts)" if part not in parts else f"{key}: skipped " \
            f"({r['c_missing']})"

    out = []
    if r["floor"] is None:
        out.append("1. " + skipped("floor", "floor"))
    else:
        rows = [[row["shape"], *(f(row["us_per_op"].get(c)) for c in cols),
                 f(row["push_us_per_op"].get("nnc C")), f(row["push_us_per_op"].get("nnc py")),
                 f(row["ratios"].get("dask / nnc py")), f(row["ratios"].get("dask / nnc C")),
                 "yes" if all(row["order_ok"].values()) else "NO"] for row in r["floor"]]
        out += [f"1. floor: push + completion of {r['floor'][0]['ops']} empty ops, µs per op "
                f"(median), {r['threads']} threads; push: the pushing thread's part",
                _util.table(["shape", *cols, "push C", "push py", "dask/nnc py", "dask/nnc C",
                             "order ok"], rows)]
    for key, how in (("randsum", "busy-waiting"), ("randsum_sleep", "sleeping (MXNet's test)")):
        rs = r[key]
        if rs is None:
            out.append("2. " + skipped(key, key))
            continue
        rows = [[k, f(ms), f(ms / rs["ops"] * 1e3), f(rs["push_us_per_op"].get(k)),
                 f(rs["x_serial"][k]), "yes" if rs["bit_identical"][k] else "NO"]
                for k, ms in rs["ms"].items()]
        out += ["", f"2. {key}: {rs['ops']} ops, 1-9 µs of C work each, {how} "
                f"({f(rs['work_ms'])} ms asked for in all), seeds {rs['seeds']}",
                _util.table(["executor", "ms", "µs/op", "push µs/op", "x serial C",
                             "bit-identical"], rows)]
    for key, how in (("replay", "1-9 µs of busy C work each"),
                     ("replay_empty", "empty: the engine's and the runner's own cost")):
        rp = r[key]
        if rp is None:
            out.append("3. " + skipped(key, "replay"))
            continue
        out += ["", f"3. {key}: the same {rp['ops']} RandSumExpr ops ({how}) recorded once, "
                f"static schedule (policy {rp['policy']!r}, costs from g.profile()) on "
                f"{rp['streams']} streams with {rp['signals']} signals",
                _util.table(["run", "ms"], [[k, f(v)] for k, v in rp["ms"].items()]),
                f"push again / replay: {f(rp['x'])}; values equal the serial loop's: "
                f"{'yes' if rp['equal'] else 'NO'}"]
    out += ["", "targets:"]
    for t in r["targets"]:
        state = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        out.append(f"  {t['name']}: {f(t['value'])} ({state})")
    load = ", ".join(f"{k} {f(v, 2)}" for k, v in r["others_cores"].items())
    out.append(f"others' load while timing, cores: {load}")
    for note in r["notes"]:
        out.append(f"note: {note}")
    out.append("all correctness checks passed" if r["ok"] else "CORRECTNESS CHECK FAILED")
    return "\n".join(out)


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0], repeat=7)
    p.set_defaults(repeat=None)   # 7, or 1 with --quick
    p.add_argument("--quick", action="store_true",
                   help="small sizes and one timed run each (a smoke test: seconds)")
    p.add_argument("--peer-repeat", type=int, default=None,
                   help="timed runs of dask and the thread pool (default 3; 1 with --quick)")
    p.add_argument("--ops", type=int, default=None, help="ops of the floor (default 10000)")
    p.add_argument("--randsum-ops", type=int, default=None,
                   help="workloads of RandSumExpr and of the replay (default 10000)")
    p.add_argument("--seeds", type=int, default=None, help="RandSumExpr seeds (default 5)")
    p.add_argument("--threads", type=int, default=2, help="threads of every executor")
    p.add_argument("--parts", default=",".join(PARTS),
                   help=f"comma-separated parts to run, of {', '.join(PARTS)} (default: all)")
    args = p.parse_args(argv)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        p.error(f"--parts: unknown part(s) {', '.join(unknown) or '(none given)'}; "
                f"choose from {', '.join(PARTS)}")
    quick = args.quick
    repeat = args.repeat if args.repeat is not None else (1 if quick else 7)
    peer_repeat = args.peer_repeat if args.peer_repeat is not None else (1 if quick else 3)
    n = args.ops if args.ops is not None else (500 if quick else 10_000)
    m = args.randsum_ops if args.randsum_ops is not None else (500 if quick else 10_000)
    seeds = args.seeds if args.seeds is not None else (2 if quick else 5)
    for name, value in (("--repeat", repeat), ("--peer-repeat", peer_repeat), ("--ops", n),
                        ("--randsum-ops", m), ("--seeds", seeds), ("--threads", args.threads)):
        if value < 1:
            p.error(f"{name} must be at least 1")

    from nnc.engine.engine import CFUNC

    nnc.set_num_threads(args.threads)
    notes = []
    c_ops, c_missing = work.COps.load()
    if c_missing is not None:
        work.warn(c_missing)
        notes.append(c_missing)
    if peers.dask_missing() is not None:
        notes.append(peers.dask_missing())
    engines = {"nnc": nnc.Engine(), "naive": nnc.Engine(naive=True)}
    seed_list = list(range(seeds))
    report = {"quick": quick, "repeat": repeat, "peer_repeat": peer_repeat,
              "threads": args.threads, "c_missing": c_missing, "notes": notes}
    report["parts"] = parts
    load = report["others_cores"] = {}
    for key in ("floor", "randsum", "randsum_sleep", "replay", "replay_empty"):
        report[key] = None
    if "floor" in parts:
        report["floor"], load["floor"] = _others_load(
            floor, engines, c_ops, CFUNC, n, repeat, peer_repeat, args.threads, seed_list[0])
    if c_ops is not None and "randsum" in parts:
        report["randsum"], load["randsum"] = _others_load(
            randsum, engines, c_ops, CFUNC, m, repeat, peer_repeat, args.threads, seed_list)
    if c_ops is not None and "randsum_sleep" in parts:
        report["randsum_sleep"], load["randsum_sleep"] = _others_load(
            randsum, engines, c_ops, CFUNC, m, repeat, peer_repeat, args.threads, seed_list,
            True)
    if c_ops is not None and "replay" in parts:
        report["replay"], load["replay"] = _others_load(
            replay, engines["nnc"], c_ops, CFUNC, m, repeat, args.threads, seed_list[0])
        report["replay_empty"], load["replay_empty"] = _others_load(
            replay, engines["nnc"], c_ops, CFUNC, m, repeat, args.threads, seed_list[0], (0, 0))
    report["targets"] = targets(report)
    report["ok"] = correct(report)
    _util.publish(report, "engine", render, args.json, packages=("numpy", "dask"))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
