"""Cost of nnc.trace on sequential runs: ``g.run()`` per node with tracing off and on.

    python -m benchmarks.tracing [--json] [--nodes N] [--repeat R]

A chain of N nodes (default 10,000) of NOOP nodes (skipped by the node loop, traced or not) and
of 1-element float32 SCALAR_MUL nodes (the C backend CPU_OPT). "off" is a plain ``g.run()``: the
node loop checks one C int per run, so it should cost what it did before tracing covered
sequential runs (compare with ``benchmarks.dispatch``'s "nnc" column). "on" is ``g.run()`` inside
``with nnc.trace(...)``: a run slice plus one host slice (a Python tuple) per node. Interleaved
rounds, median of the repeats, µs per node.
"""

import os
import tempfile

import numpy as np

import nnc
from benchmarks import _util


def chain(op, n):
    g = nnc.Graph()
    if op == "NOOP":
        nodes = [g.exec(nnc.Cmd("NOOP")) for _ in range(n)]
    else:
        ts = [nnc.Tensor(np.zeros(1, np.float32)) for _ in range(n + 1)]
        nodes = [g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [ts[i]], [ts[i + 1]]) for i in range(n)]
    for a, b in zip(nodes, nodes[1:]):
        g.concat(a, b)
    return g


def run(n, repeat):
    results = {}
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    for op in ("NOOP", "SCALAR_MUL"):
        g = chain(op, n)
        tr = nnc.trace(path)

        def traced(g=g, tr=tr):
            tr.__enter__()
            try:
                g.run()
            finally:
                tr.events = []          # skip writing the file: time the recording only
                from nnc.stream import worker

                worker.trace_stop()
                tr.host.clear()

        got = _util.measure_interleaved({"off": g.run, "on": traced}, repeat)
        results[op] = {k: _util.median(v) / n * 1e6 for k, v in got.items()}
    return results


def render(report):
    rows = [(op, _util.fmt(r["off"]), _util.fmt(r["on"])) for op, r in report["results"].items()]
    return ("g.run() on a chain, µs per node (median of the repeats)\n\n"
            + _util.table(["op", "tracing off", "tracing on"], rows))


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10_000, help="nodes per chain (default 10000)")
    args = p.parse_args(argv)
    if args.nodes < 2 or args.repeat < 1:
        p.error("--nodes must be at least 2 and --repeat at least 1")
    report = {"params": {"nodes": args.nodes, "repeat": args.repeat},
              "results": run(args.nodes, args.repeat)}
    _util.publish(report, "tracing", render, args.json)


if __name__ == "__main__":
    main()
