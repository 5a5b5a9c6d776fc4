"""Helpers shared by the benchmarks: timing, machine description, tables and JSON output.

Conventions (see docs/benchmarks.md):

- ``measure`` runs a callable once untimed (warm-up), then ``repeat`` times, each timed as a whole
  with ``time.perf_counter``; the garbage collector is off while timing (as ``timeit`` does), so a
  collection triggered by one executor's garbage is not charged to another.
  ``measure_interleaved`` does the same for several callables in rounds (see its docstring).
- A result is the median of the repeats; the minimum and every sample are kept in the JSON.
- ``machine_info`` describes where the numbers came from; it goes in every JSON report.
- With ``--json`` a benchmark prints exactly one JSON object, on the last line of stdout.
"""

import argparse
import datetime
import gc
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

# Imported when a benchmark starts, not when it reports: an nnc that cannot be imported (a source
# checkout never built, and no nnc installed) must stop the run before its work, not after.
import nnc
from nnc.models.limits import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(fn, repeat, warmup=1):
    """Call ``fn()`` ``warmup`` times untimed, then ``repeat`` times; return the seconds of each."""
    for _ in range(warmup):
        fn()
    samples = []
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    finally:
        if enabled:
            gc.enable()
    return samples


def measure_interleaved(fns, repeats, warmup=1, rewarm_below=0.05):
    """Time several callables in rounds, so that drift on a shared machine hits them alike.

    ``fns`` maps a name to a callable, ``repeats`` maps a name to its number of timed runs (an
    int applies to all). Each callable is first called ``warmup`` times untimed; then round k
    times one call of every callable that still wants more than k runs. Within a round, a
    callable whose warm-up took less than ``rewarm_below`` seconds is called once more, untimed,
    right before its timed call: otherwise it would run with caches full of the previous
    callable's data (10,000 nodes of Python objects do not fit in L2), which is not how a
    repeated ``run()`` behaves. The garbage collector is off while timing and runs, untimed,
    at the start of each round. Returns name -> [seconds].
    """
    if isinstance(repeats, int):
        repeats = dict.fromkeys(fns, repeats)
    rewarm = {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        for _ in range(warmup):
            fn()
        rewarm[name] = (time.perf_counter() - t0) / max(warmup, 1) < rewarm_below
    samples = {name: [] for name in fns}
    enabled = gc.isenabled()
    try:
        for k in range(max(repeats.values(), default=0)):
            gc.enable()
            gc.collect()
            gc.disable()
            for name, fn in fns.items():
                if k < repeats[name]:
                    if rewarm[name]:
                        fn()
                    t0 = time.perf_counter()
                    fn()
                    samples[name].append(time.perf_counter() - t0)
    finally:
        if enabled:
            gc.enable()
        else:
            gc.disable()
    return samples


def machine_busy_seconds():
    """CPU seconds the whole machine has spent busy (steal included), from /proc/stat; None
    where that file does not exist. With ``os.times()`` it tells how much of a time span other
    processes (or the hypervisor) took: see ``measure_rounds``."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal ...: everything but idle and iowait
    ticks = [int(v) for v in fields[1:9]]
    busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]
    return busy / os.sysconf("SC_CLK_TCK")


def _own_seconds():
    t = os.times()
    return t.user + t.system


def measure_rounds(fns, repeat, pause=0.1, warmup=1, prepare=None, round_start=None):
    """Time several callables in interleaved rounds, so that noise hits each alike.

    Each callable is called ``warmup`` times untimed; then each of ``repeat`` rounds calls
    every callable once, in an order rotated by one place per round, and before each timed
    call sleeps ``pause`` seconds (so a thread pool that spins after work, OpenBLAS's or
    onnxruntime's, has gone idle and does not slow the next callable) and makes one untimed
    call (so the timed one starts with its own data in cache). The garbage collector is off
    while timing and runs, untimed, at the start of each round.

    ``prepare`` (name -> callable, optional) runs, untimed, before a callable's warm-up and
    before each of its rounds (to switch a shared graph's schedule, say); ``round_start()``
    (optional) runs at the start of each round, inside its load window (to measure per-round
    costs beside the runs).

    Returns ``(samples, others)``: name -> [seconds per round], and for each round the CPU
    that other processes took while it ran, in cores (machine busy time minus this
    process's, per wall second; None where /proc/stat is missing). ``quiet_rounds`` picks
    the rounds to trust from it.
    """
    names = list(fns)
    prepare = prepare or {}
    for name in names:
        if name in prepare:
            prepare[name]()
        for _ in range(warmup):
            fns[name]()
    samples = {name: [] for name in names}
    others = []
    enabled = gc.isenabled()
    try:
        for k in range(repeat):
            gc.enable()
            gc.collect()
            gc.disable()
            busy0, own0, wall0 = machine_busy_seconds(), _own_seconds(), time.perf_counter()
            if round_start is not None:
                round_start()
            for i in range(len(names)):
                name = names[(i + k) % len(names)]
                if name in prepare:
                    prepare[name]()
                time.sleep(pause)
                fns[name]()
                t0 = time.perf_counter()
                fns[name]()
                samples[name].append(time.perf_counter() - t0)
            busy1, own1, wall1 = machine_busy_seconds(), _own_seconds(), time.perf_counter()
            if busy0 is None or busy1 is None:
                others.append(None)
            else:
                taken = (busy1 - busy0) - (own1 - own0)
                others.append(max(0.0, taken) / max(wall1 - wall0, 1e-9))
    finally:
        if enabled:
            gc.enable()
        else:
            gc.disable()
    return samples, others


def quiet_rounds(others, threshold=0.1, least=3):
    """Indices of the rounds to report: those during which other processes used at most
    ``threshold`` cores, if there are at least ``least`` of them (or every round when fewer
    were run); otherwise the quieter half (at least ``least``). Rounds with no load figure
    count as quiet."""
    n = len(others)
    load = [0.0 if o is None else o for o in others]
    quiet = [k for k in range(n) if load[k] <= threshold]
    if len(quiet) >= min(least, n):
        return quiet
    keep = max(min(least, n), (n + 1) // 2)
    return sorted(sorted(range(n), key=lambda k: load[k])[:keep])


def median(values):
    return statistics.median(values)


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git_commit():
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine_info(packages=("numpy",)):
    """Platform, CPU, core counts, interpreter and package versions, BLAS threads and nnc's
    BLAS build, nnc's pool and intra-op threads, git commit."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    info = {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "nnc": nnc.__version__,
        "git": _git_commit(),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
    }
    try:
        from nnc.base import openblas as cpu_blas
    except ImportError:  # pragma: no cover - an nnc without its C BLAS binding
        cpu_blas = None
    info["nnc_blas"] = getattr(cpu_blas, "config", None)
    info["nnc_pool_threads"] = nnc.get_num_threads()
    info["nnc_intra_op_threads"] = nnc.get_intra_op_threads()
    for name in packages:
        info[name] = _version(name)
    return info


def now():
    """The current UTC time, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def command_line():
    """How this benchmark was started, as a shell command."""
    mod = sys.modules["__main__"].__spec__
    head = ["python", "-m", mod.name] if mod is not None else ["python", sys.argv[0]]
    return shlex.join(head + sys.argv[1:])


def parser(description, repeat=7):
    """An argument parser with the options every benchmark takes: --json and --repeat."""
    spec = sys.modules["__main__"].__spec__
    prog = f"python -m {spec.name}" if spec is not None else None
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object on the last line of stdout")
    p.add_argument("--repeat", type=int, default=repeat,
                   help=f"timed runs per measurement after one warm-up (default {repeat})")
    return p


def fmt(value, digits=3):
    """A number with ``digits`` significant digits, or an em dash for None."""
    if value is None:
        return "—"
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:.0f}"
    return f"{value:.{digits - 1}e}"


def table(headers, rows):
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths)))

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def emit_json(obj):
    """Print ``obj`` as one line of JSON (the last line a benchmark writes with --json)."""
    sys.stdout.flush()
    print(json.dumps(obj, sort_keys=False, ensure_ascii=False))


def publish(report, name, render, as_json, packages=("numpy",)):
    """Stamp ``report`` (benchmark name, date, command, machine), print ``render(report)`` and,
    with ``as_json``, the report as the last line of stdout."""
    report.update(benchmark=name, date=now(), command=command_line(),
                  machine=machine_info(packages))
    print(render(report))
    if as_json:
        emit_json(report)
