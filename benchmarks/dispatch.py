"""Per-node dispatch cost of ``Graph.run()``, against a plain Python loop and ``dask.get``.

    python -m benchmarks.dispatch [--json] [--nodes N] [--repeat R] [--dask-repeat D]

Two graph shapes of N nodes (default 10,000): a *chain* (node i -> node i+1) and a *wide* graph
(one source fanning out to N-2 nodes that all fan into one sink). Each is built twice: with NOOP
nodes, and with 1-element float32 SCALAR_MUL nodes (a=1; chain: x_i -> x_{i+1}; wide: the source
writes a shared tensor s, every middle node reads s and writes its own y_i, the sink reads s).

Executors, all in this process, on the same tensors:

- ``nnc``: ``g.run()`` with default backends (SCALAR_MUL gets the C backend CPU_OPT; NOOP nodes
  are skipped by the node loop, as NNC does).
- ``nnc ref``: ``g.run()`` with every SCALAR_MUL pinned to the Python backend CPU_REF.
- ``loop C``: a Python ``for`` loop over the nodes in a precomputed topological order calling
  ``Backend.exec(cmd, [x], [y])`` of the node's C backend on its Tensors.
- ``loop py``: the same loop calling the raw Python backend ``py_exec(cmd, [xa], [ya])`` on
  precomputed ndarrays (for NOOP: NOOP's CPU_REF function).
- ``dask``: ``dask.get`` (the synchronous scheduler ``dask.local.get_sync``) on the equivalent task
  graph, ``{key: (fn, *dependency_keys)}``, where ``fn`` calls the same Python backend function.
- ``nnc stream``: ``g.run(stream=s); s.wait()`` without a schedule (every node on ``s``'s worker).
- ``nnc sched``: ``g.run(stream=s); s.wait()`` on a copy of the graph statically scheduled with
  ``max_streams=os.cpu_count()`` (one worker thread per core).
- ``dask thr``: ``dask.threaded.get`` with ``num_workers=os.cpu_count()`` on the same task graph
  as ``dask``.

Each executor is checked once for the right result (SCALAR_MUL: every tensor must hold 1 after a
run from zeroed outputs, so a node that ran early or not at all is caught), warmed up once, then
timed as a whole run, divided by N. Executors are timed in interleaved rounds (each fast one
re-run untimed just before its timed run, so it starts with its own data in cache) and reported
as the median over rounds; dask.get takes ~0.5 s a run, so it gets fewer rounds
(``--dask-repeat``, default 5). The default run takes about half a minute.
"""

import functools
import os
import sys

# `python -m benchmarks.dispatch` imports the package `benchmarks` before this module, and its
# __init__ pins OPENBLAS_NUM_THREADS=1, so NumPy below already starts single-threaded.
import numpy as np

import nnc
from benchmarks import _util

try:
    import dask
    import dask.threaded
except ImportError:  # dask is an optional benchmark dependency (pip install -e '.[bench]')
    dask = None

CORES = os.cpu_count() or 2

SHAPES = ("chain", "wide")
OPS = ("NOOP", "SCALAR_MUL")
EXECUTORS = {
    "nnc": "g.run(), default backends",
    "loop_c": "Python loop, Backend.exec of the C backend (CPU_OPT)",
    "nnc_ref": "g.run(), SCALAR_MUL pinned to CPU_REF (Python)",
    "loop_py": "Python loop, raw py_exec of CPU_REF on ndarrays",
    "dask": "dask.get (get_sync), tasks calling py_exec of CPU_REF",
    "nnc_stream": "g.run(stream=s); s.wait(), no schedule: every node on s",
    "nnc_sched": f"g.run(stream=s); s.wait(), static_schedule(max_streams={CORES})",
    "dask_thr": f"dask.threaded.get, num_workers={CORES}, same tasks as dask.get",
}
LABELS = {"nnc": "nnc", "loop_c": "loop C", "nnc_ref": "nnc ref", "loop_py": "loop py",
          "dask": "dask.get", "nnc_stream": "nnc stream", "nnc_sched": "nnc sched",
          "dask_thr": "dask thr"}
SLOW = ("dask", "dask_thr")  # ~0.5 s a run or more: fewer rounds (--dask-repeat)
# Reference: NNC's own C runner, topsorted sequential run of a 1000-node chain of 1-element
# SCALAR_MUL on a 2-vCPU VM (liuliu/ccv's C build, timed by hand: upstream publishes no figure).
NNC_C_US_PER_NODE = 0.037
NOOP_TARGET_US = 0.1
DASK_TARGET_RATIO = 30.0
DASK_THREADED_TARGET_RATIO = 20.0


class Workload:
    """One graph shape and command, built as nnc graphs and as loop and dask equivalents."""

    def __init__(self, shape, op, n):
        self.shape, self.op, self.n = shape, op, n
        if op == "NOOP":
            self.tensors = []
            self.io = [([], [])] * n
        elif shape == "chain":
            self.tensors = [_scalar() for _ in range(n + 1)]
            self.io = [([self.tensors[i]], [self.tensors[i + 1]]) for i in range(n)]
        else:
            x, s, z = _scalar(), _scalar(), _scalar()
            ys = [_scalar() for _ in range(n - 2)]
            self.tensors = [x, s, *ys, z]
            self.io = [([x], [s])] + [([s], [y]) for y in ys] + [([s], [z])]
        if shape == "chain":
            self.edges = [(i, i + 1) for i in range(n - 1)]
        else:
            self.edges = [(0, i) for i in range(1, n - 1)] + [(i, n - 1) for i in range(1, n - 1)]
        self.graph = self._build(None)
        self.graph_ref = self._build("CPU_REF") if op != "NOOP" else None
        # A schedule belongs to its graph, so the scheduled runs get a graph of their own.
        self.graph_sched = self._build(None)
        nnc.static_schedule(self.graph_sched, max_streams=CORES)
        self.stream = nnc.Stream("cpu")

    def _build(self, backend):
        g = nnc.Graph()
        if self.op == "NOOP":
            cmd = nnc.Cmd("NOOP")
        else:
            cmd = nnc.Cmd("SCALAR_MUL", a=1.0, backend=backend)
        nodes = [g.exec(cmd, ins, outs) for ins, outs in self.io]
        for i, j in self.edges:
            g.concat(nodes[i], nodes[j])
        return g

    def executors(self):
        """name -> zero-argument callable that runs the whole graph once."""
        run = {"nnc": self.graph.run}
        order = self.graph.topsort()
        if self.op == "NOOP":
            run["loop_py"] = _looper(_py_calls(order))
            py_order = order
        else:
            run["loop_c"] = _looper([(e.cmd.backend_object.exec, e.cmd, e.inputs, e.outputs)
                                     for e in order])
            run["nnc_ref"] = self.graph_ref.run
            py_order = self.graph_ref.topsort()
            run["loop_py"] = _looper(_py_calls(py_order))
        run["nnc_stream"] = functools.partial(_on_stream, self.graph, self.stream)
        run["nnc_sched"] = functools.partial(_on_stream, self.graph_sched, self.stream)
        if dask is not None:
            run["dask"] = self._dask(py_order, dask.get)
            run["dask_thr"] = self._dask(py_order, functools.partial(dask.threaded.get,
                                                                     num_workers=CORES))
        return run

    def _dask(self, order, get):
        preds = [[] for _ in range(self.n)]
        succs = [0] * self.n
        for i, j in self.edges:
            preds[j].append(i)
            succs[i] += 1
        dsk = {}
        for e, (fn, cmd, ins, outs) in zip(order, _py_calls(order)):
            i = e.index
            dsk[f"n{i}"] = (functools.partial(_task, fn, cmd, ins, outs),
                            *(f"n{p}" for p in preds[i]))
        sinks = [f"n{i}" for i in range(self.n) if not succs[i]]
        return functools.partial(get, dsk, sinks)

    def verify(self, name, fn):
        """Run ``fn`` once from zeroed outputs; every tensor must then hold 1 (inputs hold 1)."""
        if self.op == "NOOP":
            fn()
            return
        for t in self.tensors[1:]:
            t.numpy()[...] = 0
        self.tensors[0].numpy()[...] = 1
        fn()
        bad = [k for k, t in enumerate(self.tensors) if t.numpy()[0] != 1]
        if bad:
            raise AssertionError(f"{name} on {self.shape}/{self.op}: tensors {bad[:5]} not 1")


def _scalar():
    return nnc.Tensor(np.ones(1, np.float32))


def _py_calls(order):
    """(py_exec, cmd, input arrays, output arrays) per node, for the loop and the dask tasks."""
    calls = []
    for e in order:
        cmd = e.cmd
        b = cmd.backend_object
        ins = [t.numpy() for t in e.inputs]
        outs = [t.numpy() for t in e.outputs]
        calls.append((b.py_exec, cmd, ins, outs))
    return calls


def _on_stream(g, s):
    g.run(stream=s)
    s.wait()


def _looper(calls):
    def loop():
        for fn, cmd, ins, outs in calls:
            fn(cmd, ins, outs)

    return loop


def _task(fn, cmd, ins, outs, *deps):
    """A dask task body: run one node's Python backend (the dependencies only order it)."""
    fn(cmd, ins, outs)


def run(n, repeat, dask_repeat, log=print):
    """Measure every workload; return the report (a JSON-able dict)."""
    results = []
    for shape in SHAPES:
        for op in OPS:
            log(f"  {shape} / {op}: building {n} nodes ...", file=sys.stderr)
            w = Workload(shape, op, n)
            fns = w.executors()
            for name, fn in fns.items():
                w.verify(name, fn)
            reps = {name: dask_repeat if name in SLOW else repeat for name in fns}
            samples = _util.measure_interleaved(fns, reps)
            for name, secs in samples.items():
                us = [s / n * 1e6 for s in secs]
                results.append({
                    "graph": shape, "op": op, "executor": name,
                    "us_per_node": _util.median(us), "min_us_per_node": min(us),
                    "repeats": len(us), "samples_us_per_node": us,
                })
            del w, fns
    return results


def _lookup(results):
    return {(r["graph"], r["op"], r["executor"]): r["us_per_node"] for r in results}


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def ratios(results):
    """nnc against the loop calling the same backend, and dask.get against nnc."""
    us = _lookup(results)
    out = []
    for shape in SHAPES:
        for op in OPS:
            def get(name, shape=shape, op=op):
                return us.get((shape, op, name))

            loop = get("loop_py") if op == "NOOP" else get("loop_c")
            out.append({
                "graph": shape, "op": op,
                "nnc_over_loop": _ratio(get("nnc"), loop),
                "nnc_ref_over_loop_py": _ratio(get("nnc_ref"), get("loop_py")),
                "dask_over_nnc": _ratio(get("dask"), get("nnc")),
                "dask_over_nnc_ref": _ratio(get("dask"), get("nnc_ref")),
                "dask_thr_over_nnc_stream": _ratio(get("dask_thr"), get("nnc_stream")),
                "dask_thr_over_nnc_sched": _ratio(get("dask_thr"), get("nnc_sched")),
            })
    return out


def targets(results):
    """The targets, plus one informative check (``kind``: "target" or "info").

    Targets: NOOP <= 0.1 us/node; 1-element SCALAR_MUL with default backends no slower than the
    plain Python loop calling the same (C) backend, and at least 30x faster than dask.get;
    ``run(stream=...)`` (unscheduled and scheduled) at least 20x faster than dask's threaded
    scheduler per node.
    Info: ``g.run()`` with the Python backend against the loop calling that same function; both
    spend ~1.5-3 us per node inside NumPy, so the ratio is 1 within this machine's noise.
    """
    us = _lookup(results)

    def row(kind, name, shape, value, met):
        return {"kind": kind, "target": name, "graph": shape, "value": value,
                "met": value is not None and met}

    out = []
    for shape in SHAPES:
        v = us.get((shape, "NOOP", "nnc"))
        out.append(row("target", f"NOOP nnc <= {NOOP_TARGET_US} us/node", shape, v,
                       v is not None and v <= NOOP_TARGET_US))
    for shape in SHAPES:
        v = _ratio(us.get((shape, "SCALAR_MUL", "nnc")), us.get((shape, "SCALAR_MUL", "loop_c")))
        out.append(row("target", "SCALAR_MUL nnc / loop C <= 1", shape, v,
                       v is not None and v <= 1.0))
    for shape in SHAPES:
        v = _ratio(us.get((shape, "SCALAR_MUL", "dask")), us.get((shape, "SCALAR_MUL", "nnc")))
        out.append(row("target", f"SCALAR_MUL dask.get / nnc >= {DASK_TARGET_RATIO:g}", shape, v,
                       v is not None and v >= DASK_TARGET_RATIO))
    for shape in SHAPES:
        for name in ("nnc_stream", "nnc_sched"):
            v = _ratio(us.get((shape, "SCALAR_MUL", "dask_thr")),
                       us.get((shape, "SCALAR_MUL", name)))
            out.append(row("target", f"SCALAR_MUL dask thr / {LABELS[name]} >= "
                           f"{DASK_THREADED_TARGET_RATIO:g}", shape, v,
                           v is not None and v >= DASK_THREADED_TARGET_RATIO))
    for shape in SHAPES:
        v = _ratio(us.get((shape, "SCALAR_MUL", "nnc_ref")),
                   us.get((shape, "SCALAR_MUL", "loop_py")))
        out.append(row("info", "SCALAR_MUL nnc ref / loop py <= 1", shape, v,
                       v is not None and v <= 1.0))
    return out


def render(report):
    """The human-readable report."""
    p = report["params"]
    us = _lookup(report["results"])
    names = list(EXECUTORS)
    lines = [
        f"Dispatch cost, µs per node: median of {p['repeat']} timed runs after a warm-up "
        f"(dask: median of {p['dask_repeat']}, it is slow); {p['nodes']} nodes per graph; "
        "1-element float32 tensors",
        "",
        _util.table(["graph", "op"] + [LABELS[k] for k in names],
                    [[s, o] + [_util.fmt(us.get((s, o, k))) for k in names]
                     for s in SHAPES for o in OPS]),
        "",
    ]
    lines += [f"  {LABELS[k]:10} {v}" for k, v in EXECUTORS.items()]
    lines += ["  (NOOP: nnc skips NOOP nodes, so there is no 'nnc ref' or 'loop C' column; "
              "'loop py' calls NOOP's CPU_REF function)", ""]
    lines.append(_util.table(
        ["graph", "op", "nnc/loop", "nnc ref/loop py", "dask/nnc", "dask/nnc ref",
         "dask thr/nnc stream", "dask thr/nnc sched"],
        [[r["graph"], r["op"]] + [_util.fmt(r[k]) for k in
                                  ("nnc_over_loop", "nnc_ref_over_loop_py", "dask_over_nnc",
                                   "dask_over_nnc_ref", "dask_thr_over_nnc_stream",
                                   "dask_thr_over_nnc_sched")]
         for r in report["ratios"]]))
    lines += ["  nnc/loop: nnc against the Python loop calling the same backend "
              "(C for SCALAR_MUL, NOOP's CPU_REF for NOOP)", "", "Targets:"]
    for t in report["targets"]:
        mark = ("met" if t["met"] else "MISSED") if t["kind"] == "target" else "info"
        lines.append(f"  [{mark}] {t['target']} ({t['graph']}: {_util.fmt(t['value'])})")
    lines.append("  (info: the same Python function on both sides, ~1.5-3 µs of NumPy per node; "
                 "equal within noise)")
    m = report["machine"]
    lines += [
        "",
        f"Reference: NNC's C runner, 1000-node SCALAR_MUL chain: {NNC_C_US_PER_NODE} µs/node "
        "(liuliu/ccv's C build timed on a different 2-vCPU VM).",
        f"{report['date']}  {m['cpu']} ({m['usable_cpus']} usable CPUs), {m['platform']}, "
        f"Python {m['python']}, numpy {m['numpy']}, dask {m['dask']}, nnc {m['nnc']} "
        f"({m['git']}), OPENBLAS_NUM_THREADS={m['OPENBLAS_NUM_THREADS']}",
    ]
    return "\n".join(lines)


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10_000, help="nodes per graph (default 10000)")
    p.add_argument("--dask-repeat", type=int, default=None,
                   help="timed dask runs (default min(5, --repeat); each takes ~0.5 s or more)")
    args = p.parse_args(argv)
    if args.nodes < 3:
        p.error("--nodes must be at least 3 (the wide graph has a source, a sink and a middle)")
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    dask_repeat = min(5, args.repeat) if args.dask_repeat is None else args.dask_repeat
    print(f"benchmarks.dispatch: {args.nodes} nodes, {args.repeat} repeats "
          f"(dask.get {dask_repeat if dask else 'not installed'})", file=sys.stderr)
    results = run(args.nodes, args.repeat, dask_repeat)
    report = {
        "benchmark": "dispatch",
        "date": _util.now(),
        "command": _util.command_line(),
        "machine": _util.machine_info(("numpy", "dask")),
        "params": {"nodes": args.nodes, "repeat": args.repeat, "dask_repeat": dask_repeat,
                   "warmup": 1, "dtype": "float32", "elements": 1,
                   "timing": "whole run / nodes; median over interleaved rounds; gc off; "
                             "runs under 50 ms re-run untimed before each timed run"},
        "executors": EXECUTORS,
        "reference": {"nnc_c_runner_us_per_node": NNC_C_US_PER_NODE,
                      "source": "liuliu/ccv C build, 1000-node 1-element SCALAR_MUL chain, "
                                "topsorted"},
        "results": results,
        "ratios": ratios(results),
        "targets": targets(results),
    }
    print(render(report))
    if args.json:
        _util.emit_json(report)


if __name__ == "__main__":
    main()
