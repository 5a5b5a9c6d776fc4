"""Soak: the stress mix of tests/_stress_mix.py, in a loop of child processes, for N minutes.

    python -m benchmarks.soak --minutes N [--seed S] [--cases C] [--json]

Each child runs C cases drawn from its own seed (S, S+1, ...): random DAGs x schedules x injected
errors x graphs and streams dropped mid-run x concurrent waiters x while / case..of
(docs/dev.md, "Stress and soak"). Every other child runs with NNC_DEBUG=1, so it also checks the
C state's invariants with work queued and that its live-object counters balance at its end.
Children run one at a time, so a crash is counted, not fatal, and the numbers are the mix's own.

Reported: children, cases run, errors raised (expected ones: an injected failure reported as a
clear nnc.NNCError), failed cases (a wrong result, an unclear or missing error), crashes (a child
killed by a signal or exiting non-zero without a failed case), hangs (a child's own faulthandler
timer fired, or the child outlived --child-timeout), debug-mode leaks and broken invariants;
and, sampled every --interval seconds from /proc, each child's RSS and thread count, summarised
per minute, and each child's own RSS after its first case and at its end: growth between the two
would show a leak that the counters do not see. A seed that failed is listed with the command
that replays it.
"""

import json
import os
import random
import subprocess
import sys
import tempfile
import time

from benchmarks import _util

MIX = os.path.join(_util.ROOT, "tests", "_stress_mix.py")


def _proc_status(pid):
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


def run_child(seed, cases, debug, interval, child_timeout):
    """Run one child; return its record (outcome, counts, samples)."""
    env = dict(os.environ, NNC_DEBUG="1" if debug else "0")
    cmd = [sys.executable, MIX, "--seed", str(seed), "--cases", str(cases)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        child = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=_util.ROOT)
        samples = []
        timed_out = False
        while child.poll() is None:
            status = _proc_status(child.pid)
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
    record = {"seed": seed, "debug": debug, "rc": child.returncode, "seconds": round(seconds, 2),
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
        if done < cases:
            record["failed_specs"].append(_case_of(seed, done))
    return record


def _case_of(seed, index):
    sys.path.insert(0, os.path.dirname(MIX))
    try:
        from _stress_mix import random_case
    finally:
        sys.path.pop(0)
    rnd = random.Random(seed)
    for _ in range(index):
        random_case(rnd)
    return random_case(rnd)


def summarise(children, start):
    """Totals, and per-minute rows of the children that ended in that minute."""
    totals = {"children": len(children), "runs": 0, "errors": 0, "failed": 0, "crashes": 0,
              "hangs": 0, "leaky_children": 0}
    minutes = {}
    for c in children:
        totals["runs"] += c["runs"]
        totals["errors"] += c["errors"]
        totals["failed"] += c["failed"]
        totals["crashes"] += c["outcome"].startswith("crash")
        totals["hangs"] += c["outcome"] == "hang"
        totals["leaky_children"] += bool(c["leaks"] or c["problems"])
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
    return totals, timeline


def render(r):
    t = r["totals"]
    lines = [
        f"soak: {r['minutes']} min, seeds {r['seed']}..{r['seed'] + t['children'] - 1}, "
        f"{r['cases']} cases per child, every other child with NNC_DEBUG=1",
        f"children {t['children']}  cases run {t['runs']}  errors raised (expected) {t['errors']}"
        f"  failed cases {t['failed']}  crashes {t['crashes']}  hangs {t['hangs']}"
        f"  children with leaks or broken invariants {t['leaky_children']}",
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
            env = "NNC_DEBUG=1 " if c["debug"] else ""
            lines.append(f"  seed {c['seed']}: {c['outcome']}: {env}python tests/_stress_mix.py "
                         f"--seed {c['seed']} --cases {r['cases']}")
            for why in c["failures"]:
                lines.append(f"    {why.splitlines()[0]}")
    return "\n".join(lines)


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0], repeat=1)
    p.add_argument("--minutes", type=float, required=True, help="how long to soak")
    p.add_argument("--seed", type=int, default=0, help="seed of the first child (default 0)")
    p.add_argument("--cases", type=int, default=200, help="cases per child (default 200)")
    p.add_argument("--interval", type=float, default=0.2,
                   help="seconds between RSS and thread samples (default 0.2)")
    p.add_argument("--child-timeout", type=float, default=300,
                   help="seconds before a child counts as hung (default 300)")
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.cases < 1:
        p.error("--minutes and --cases must be positive")
    start = time.monotonic()
    deadline = start + args.minutes * 60
    children = []
    seed = args.seed
    while time.monotonic() < deadline or not children:
        record = run_child(seed, args.cases, debug=len(children) % 2 == 1,
                           interval=args.interval, child_timeout=args.child_timeout)
        record["end"] = time.monotonic()
        children.append(record)
        seed += 1
    totals, timeline = summarise(children, start)
    bad = [{k: c[k] for k in ("seed", "debug", "outcome", "rc", "failures", "failed_specs",
                                "leaks", "problems", "stderr_tail") if k in c}
           for c in children if c["outcome"] != "ok"]
    report = {"minutes": args.minutes, "seed": args.seed, "cases": args.cases,
              "totals": totals, "timeline": timeline, "bad": bad}
    _util.publish(report, "soak", render, args.json)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
