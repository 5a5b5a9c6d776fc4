"""Soak: the stress mixes of tests/ (graph, engine, pipeline) and the ONNX fuzz, in a loop of
child processes, for N minutes.

    python -m benchmarks.soak --minutes N [--graph] [--engine] [--pipeline] [--onnx]
                              [--seed S] [--cases C] [--onnx-cases C] [--ray-every K] [--json]

The mixes (docs/dev.md, "Stress and soak"); with no mix named, every available one, in turn:

- graph (tests/stress/_stress_mix.py): random DAGs x schedules x injected errors x graphs and
  streams dropped mid-run x concurrent waiters x while / case..of;
- engine (tests/stress/_stress_engine.py): random push programs on nnc.Engine, threaded and naive,
  with injected failures of every kind, waits with timeouts and closes mid-flight, checked against a
  serial replay;
- pipeline (tests/stress/_stress_pipeline.py): chains of function and graph stages on the local
  executor with failures of every kind and random timeouts; with Ray installed, every K-th
  pipeline child (--ray-every, default 4; 0: never) also runs 2 cases on executor="ray", in a
  cluster of its own;
- onnx (benchmarks/_soak_onnx.py): ``benchmarks.onnx_fuzz.fuzz(cases, seed)``, mutated ONNX
  models that must load and run or raise an nnc.NNCError; where that module is missing the mix
  is reported unavailable and skipped.

Each child runs C cases drawn from its own seed (S, S+1, ... per mix). Every other child of a
mix runs with NNC_DEBUG=1, so it also checks the C state's invariants and that its live-object
counters balance at its end. Children run one at a time, so a crash is counted, not fatal, and
the numbers are the mix's own.

Reported, per mix and in total: children, cases run, errors raised (expected ones: an injected
failure reported as a clear nnc.NNCError), failed cases (a wrong result, an unclear or missing
error), crashes (a child killed by a signal or exiting non-zero without a failed case), hangs (a
child's own faulthandler timer fired, or the child outlived --child-timeout), debug-mode leaks
and broken invariants, and the median RSS growth of a child between its first case and its end
(growth would show a leak that the counters do not see); and, sampled every --interval seconds
from /proc, each child's RSS and thread count, summarised per minute. A seed that failed is
listed with the command that replays it.
"""

import importlib
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from benchmarks import _util

MIX = os.path.join(_util.ROOT, "tests", "stress", "_stress_mix.py")
# mix -> the script a child runs (tests/stress/, whose random_case(rnd) draws its cases from
# the seed)
SCRIPTS = {"graph": "_stress_mix.py", "engine": "_stress_engine.py",
           "pipeline": "_stress_pipeline.py"}
MIXES = ("graph", "engine", "pipeline", "onnx")
RAY_CASES = 2           # Ray cases in a pipeline child that runs them (one cluster each)


def unavailable():
    """mix -> why it cannot run here (only the mixes that cannot)."""
    why = {}
    if importlib.util.find_spec("benchmarks.onnx_fuzz") is None:
        why["onnx"] = "onnx mix unavailable (benchmarks/onnx_fuzz.py missing)"
    elif importlib.util.find_spec("onnx") is None:
        why["onnx"] = "onnx mix unavailable (the onnx package is not installed)"
    return why


def ray_installed():
    return importlib.util.find_spec("ray") is not None


def child_command(mix, seed, cases, ray_cases=0, child_timeout=300):
    """The command line of one child of ``mix`` (also what replays it)."""
    if mix == "onnx":
        return [sys.executable, "-m", "benchmarks._soak_onnx", "--seed", str(seed), "--cases",
                str(cases), "--timeout", str(max(1.0, child_timeout - 10))]
    cmd = [sys.executable, os.path.join(_util.ROOT, "tests", "stress", SCRIPTS[mix]),
           "--seed", str(seed), "--cases", str(cases)]
    return cmd + (["--ray-cases", str(ray_cases)] if ray_cases else [])


def proc_status(pid):
    """(RSS in MiB, thread count) of a live process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return None
    try:
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])
    except (KeyError, ValueError):
        return None


def run_child(seed, cases, debug, interval, child_timeout, mix="graph", ray_cases=0):
    """Run one child of ``mix``; return its record (outcome, counts, samples)."""
    env = dict(os.environ, NNC_DEBUG="1" if debug else "0")
    cmd = child_command(mix, seed, cases, ray_cases, child_timeout)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        child = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=_util.ROOT)
        samples = []
        timed_out = False
        while child.poll() is None:
            status = proc_status(child.pid)
            if status is not None:
                samples.append((round(time.monotonic() - t0, 3), *status))
            if time.monotonic() - t0 > child_timeout:
                child.kill()
                child.wait()
                timed_out = True
                break
            time.sleep(interval)
        seconds = time.monotonic() - t0
        out.seek(0)
        err.seek(0)
        lines = out.read().splitlines()
        stderr = err.read()
    record = {"mix": mix, "seed": seed, "cases": cases, "ray_cases": ray_cases, "debug": debug,
              "rc": child.returncode, "seconds": round(seconds, 2),
              "samples": samples, "runs": 0, "errors": 0, "failed": 0, "leaks": {},
              "problems": [], "outcome": "ok", "failures": []}
    summary = None
    if lines:
        try:
            summary = json.loads(lines[-1])
        except ValueError:
            summary = None
    if isinstance(summary, dict) and "runs" in summary:
        for k in ("runs", "errors", "failed", "leaks", "problems"):
            record[k] = summary.get(k, record[k])
        rss = summary.get("rss_mib") or []
        if len(rss) == 2 and None not in rss:
            record["rss_growth_mib"] = rss[1] - rss[0]
    else:
        # No summary: count the cases that did report before the child died.
        for line in lines:
            try:
                case = json.loads(line)
            except ValueError:
                continue
            record["runs"] += case.get("outcome") in ("ok", "error")
            record["errors"] += case.get("outcome") == "error"
            record["failed"] += case.get("outcome") == "failed"
    record["failures"] = [json.loads(line)["why"][:500] for line in lines
                          if '"outcome": "failed"' in line][:3]
    record["failed_specs"] = [json.loads(line)["spec"] for line in lines
                              if '"outcome": "failed"' in line][:3]
    if timed_out or "Timeout (" in stderr:
        record["outcome"] = "hang"
    elif child.returncode < 0:
        record["outcome"] = f"crash (signal {-child.returncode})"
    elif record["failed"] or record["leaks"] or record["problems"]:
        record["outcome"] = "failed"
    elif child.returncode != 0:
        record["outcome"] = f"crash (exit {child.returncode})"
    if record["outcome"] != "ok":
        record["stderr_tail"] = stderr[-2000:]
    if record["outcome"] == "hang" or record["outcome"].startswith("crash"):
        # The case that was running: the one after the last that reported (cases are drawn
        # from the seed alone, so it can be drawn again here).
        done = sum(1 for line in lines if line.startswith('{"case"'))
        if mix in SCRIPTS and done < cases:
            record["failed_specs"].append(_case_of(mix, seed, done))
    return record


def _case_of(mix, seed, index):
    sys.path.insert(0, os.path.dirname(MIX))
    try:
        random_case = importlib.import_module(SCRIPTS[mix][:-3]).random_case
    finally:
        sys.path.pop(0)
    rnd = random.Random(seed)
    for _ in range(index):
        random_case(rnd)
    return random_case(rnd)


def _totals(children):
    totals = {"children": len(children), "runs": 0, "errors": 0, "failed": 0, "crashes": 0,
              "hangs": 0, "leaky_children": 0}
    growth = []
    for c in children:
        totals["runs"] += c["runs"]
        totals["errors"] += c["errors"]
        totals["failed"] += c["failed"]
        totals["crashes"] += c["outcome"].startswith("crash")
        totals["hangs"] += c["outcome"] == "hang"
        totals["leaky_children"] += bool(c["leaks"] or c["problems"])
        if "rss_growth_mib" in c:
            growth.append(c["rss_growth_mib"])
    totals["rss_growth_mib_median"] = round(_util.median(growth), 1) if growth else None
    return totals


def summarise(children, start):
    """Totals, totals per mix, and per-minute rows of the children that ended in that minute."""
    totals = _totals(children)
    mixes = {}
    for mix in MIXES:
        mine = [c for c in children if c.get("mix", "graph") == mix]
        if mine:
            mixes[mix] = _totals(mine)
            if mix == "pipeline":
                mixes[mix]["ray_children"] = sum(1 for c in mine if c.get("ray_cases"))
    minutes = {}
    for c in children:
        m = minutes.setdefault(int((c["end"] - start) // 60), {
            "children": 0, "runs": 0, "bad": 0, "rss_peak_mib": 0.0, "threads_peak": 0,
            "rss_growth_mib": []})
        m["children"] += 1
        m["runs"] += c["runs"]
        m["bad"] += c["outcome"] != "ok"
        if c["samples"]:
            m["rss_peak_mib"] = max(m["rss_peak_mib"], max(s[1] for s in c["samples"]))
            m["threads_peak"] = max(m["threads_peak"], max(s[2] for s in c["samples"]))
        if "rss_growth_mib" in c:
            m["rss_growth_mib"].append(c["rss_growth_mib"])
    timeline = []
    for minute in sorted(minutes):
        m = minutes[minute]
        growth = m.pop("rss_growth_mib")
        m["rss_growth_mib_median"] = round(_util.median(growth), 1) if growth else None
        m["rss_peak_mib"] = round(m["rss_peak_mib"], 1)
        timeline.append({"minute": minute, **m})
    return totals, mixes, timeline


def _replay(c):
    """The shell command that replays child ``c``."""
    cmd = child_command(c["mix"], c["seed"], c["cases"], c.get("ray_cases", 0))
    cmd[0] = "python"
    if c["mix"] != "onnx":
        cmd[1] = os.path.relpath(cmd[1], _util.ROOT)
    else:
        cmd = cmd[:-2]                  # --timeout: the soak's, not the case's
    return ("NNC_DEBUG=1 " if c["debug"] else "") + " ".join(cmd)


def render(r):
    t = r["totals"]
    lines = [
        f"soak: {r['minutes']} min, mixes {', '.join(r['mixes_run']) or 'none'}, first seed "
        f"{r['seed']}, {r['cases']} cases per child ({r['onnx_cases']} for onnx), every other "
        "child of a mix with NNC_DEBUG=1",
    ]
    lines += [f"  {why}" for why in r["unavailable"].values()]
    lines += [f"  {note}" for note in r["notes"]]
    lines += [
        "",
        _util.table(["mix", "children", "cases run", "errors raised (expected)", "failed cases",
                     "crashes", "hangs", "children with leaks or broken invariants",
                     "RSS growth (median MiB)"],
                    [[mix, m["children"], m["runs"], m["errors"], m["failed"], m["crashes"],
                      m["hangs"], m["leaky_children"], _util.fmt(m["rss_growth_mib_median"])]
                     for mix, m in [*r["mixes"].items(), ("total", t)]]),
        "",
        _util.table(["minute", "children", "cases", "bad children", "peak RSS MiB",
                     "RSS growth, first case to end (median MiB)", "peak threads"],
                    [[m["minute"], m["children"], m["runs"], m["bad"], _util.fmt(m["rss_peak_mib"]),
                      _util.fmt(m["rss_growth_mib_median"]), m["threads_peak"]]
                     for m in r["timeline"]]),
    ]
    if r["bad"]:
        lines += ["", "children that did not end cleanly (replay with the command shown):"]
        for c in r["bad"][:10]:
            lines.append(f"  {c['mix']} seed {c['seed']}: {c['outcome']}: {c['replay']}")
            for why in c["failures"]:
                lines.append(f"    {(why.splitlines() or [''])[0][:300]}")
    return "\n".join(lines)


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0], repeat=1)
    p.add_argument("--minutes", type=float, required=True, help="how long to soak")
    for mix in MIXES:
        p.add_argument(f"--{mix}", action="store_true",
                       help=f"run the {mix} mix (with no mix named: every available one)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first child (default 0)")
    p.add_argument("--cases", type=int, default=200,
                   help="cases per child of the graph, engine and pipeline mixes (default 200)")
    p.add_argument("--onnx-cases", type=int, default=500,
                   help="cases per child of the onnx mix (default 500)")
    p.add_argument("--ray-every", type=int, default=4,
                   help="with Ray installed, every K-th pipeline child also runs "
                        f"{RAY_CASES} Ray cases (default 4; 0: never)")
    p.add_argument("--interval", type=float, default=0.2,
                   help="seconds between RSS and thread samples (default 0.2)")
    p.add_argument("--child-timeout", type=float, default=300,
                   help="seconds before a child counts as hung (default 300)")
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.cases < 1 or args.onnx_cases < 1 or args.ray_every < 0:
        p.error("--minutes, --cases and --onnx-cases must be positive, --ray-every >= 0")
    named = [mix for mix in MIXES if getattr(args, mix)]
    missing = unavailable()
    mixes = [mix for mix in (named or MIXES) if mix not in missing]
    notes = []
    ray = "pipeline" in mixes and args.ray_every > 0 and ray_installed()
    if "pipeline" in mixes and not ray:
        notes.append("pipeline mix: local executor only (" + (
            "--ray-every 0" if args.ray_every == 0 else "Ray is not installed") + ")")
    start = time.monotonic()
    deadline = start + args.minutes * 60
    children = []
    seeds = dict.fromkeys(mixes, args.seed)
    ran = dict.fromkeys(mixes, 0)
    turn = 0
    # Every mix runs at least one child, however short the soak.
    while mixes and (turn < len(mixes) or time.monotonic() < deadline):
        mix = mixes[turn % len(mixes)]
        turn += 1
        ray_cases = RAY_CASES if mix == "pipeline" and ray and \
            ran[mix] % args.ray_every == 0 else 0
        record = run_child(seeds[mix], args.onnx_cases if mix == "onnx" else args.cases,
                           debug=ran[mix] % 2 == 1, interval=args.interval,
                           child_timeout=args.child_timeout, mix=mix, ray_cases=ray_cases)
        record["end"] = time.monotonic()
        children.append(record)
        seeds[mix] += 1
        ran[mix] += 1
    totals, per_mix, timeline = summarise(children, start)
    bad = [{**{k: c[k] for k in ("mix", "seed", "debug", "outcome", "rc", "failures",
                                 "failed_specs", "leaks", "problems", "stderr_tail") if k in c},
            "replay": _replay(c)}
           for c in children if c["outcome"] != "ok"]
    report = {"minutes": args.minutes, "seed": args.seed, "cases": args.cases,
              "onnx_cases": args.onnx_cases, "mixes_run": mixes,
              "unavailable": {m: why for m, why in missing.items() if m in (named or MIXES)},
              "notes": notes, "totals": totals, "mixes": per_mix, "timeline": timeline,
              "bad": bad}
    _util.publish(report, "soak", render, args.json)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
