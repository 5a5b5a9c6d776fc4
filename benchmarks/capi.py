"""The C API from C: cost of a call, of a graph run, and two streams of GIL-free C backends.

    python -m benchmarks.capi [--json] [--repeat R]

Compiles benchmarks/capi_bench.c with the flags of nnc.embed, runs it (NNC_PYTHON = this
interpreter) and reports the median of R samples of:

- ``call``: ns per ``nnc_graph_exec_count`` from C (take the GIL, look the handle up, return);
- ``run C``: µs per ``nnc_graph_run(g, NULL)`` of a 1000-node chain of 1-element SCALAR_MUL
  nodes, against ``run py``: ``g.run()`` of the same graph built in Python in this process;
- ``1 stream`` / ``2 streams``: ms for 8 calls of a C backend that spins 20 ms, all enqueued on
  one stream, or alternating between two (the ratio shows the backends running GIL-free);
- ``push``: ns per ``nnc_engine_push`` of a C no-op from C, with no vars and mutating one var
  (a chain), against ``Engine.push`` of the same C function from Python in the same process
  and rounds (the C program's embedded interpreter); the pushing thread's time only, the ops'
  completion waited for untimed. Two pool threads (``NNC_NUM_THREADS=2``).
- ``gated push``: the same, each op also reading a var whose first op (a gate) sleeps until
  the pushes are timed: nothing runs meanwhile, so this is the host's own cost of a push,
  without the pool's threads sharing the cores and the ops' cache lines.

OpenBLAS is held to one thread in the C program: nothing here calls BLAS, and its idle threads
spinning on the two cores made the push rows noisy.
"""

import pathlib
import subprocess
import sys
import tempfile

import numpy as np

import nnc
from benchmarks import _util
from nnc import embed

HERE = pathlib.Path(__file__).resolve().parent


def python_run_us(repeat):
    x = [np.zeros(1, np.float32) for _ in range(1001)]
    g = nnc.Graph()
    prev = None
    for i in range(1000):
        e = g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x[i]], [x[i + 1]])
        if prev is not None:
            g.concat(prev, e)
        prev = e

    def ten():
        for _ in range(10):
            g.run()

    return [s / 10 * 1e6 for s in _util.measure(ten, repeat)]


def run(repeat):
    cc = embed.compiler()
    if cc is None:
        sys.exit("no C compiler found")
    with tempfile.TemporaryDirectory() as tmp:
        exe = pathlib.Path(tmp) / "capi_bench"
        subprocess.run([*cc, "-std=c11", "-O2", str(HERE / "capi_bench.c"), "-o", str(exe),
                        *embed.cflags(), *embed.ldflags()], check=True)
        out = subprocess.run([str(exe), str(repeat)], capture_output=True, text=True,
                             env={**embed.environment(), "NNC_NUM_THREADS": "2",
                                  "OPENBLAS_NUM_THREADS": "1"},
                             check=True).stdout
    samples = {}
    for line in out.splitlines():
        name, value = line.split()
        samples.setdefault(name, []).append(float(value))
    samples["py_run_us"] = python_run_us(repeat)
    return {"samples": samples, "median": {k: _util.median(v) for k, v in samples.items()}}


def render(r):
    m = r["median"]
    rows = [
        ["call (nnc_graph_exec_count), ns", _util.fmt(m["call_ns"])],
        ["run C: nnc_graph_run, 1000 nodes, µs", _util.fmt(m["run_us"])],
        ["run py: g.run(), same graph, µs", _util.fmt(m["py_run_us"])],
        ["8 × 20 ms C backend, 1 stream, ms", _util.fmt(m["one_ms"])],
        ["8 × 20 ms C backend, 2 streams, ms", _util.fmt(m["two_ms"])],
        ["1 stream / 2 streams", _util.fmt(m["one_ms"] / m["two_ms"])],
        ["engine push from C, no vars, ns", _util.fmt(m["push_none_ns"])],
        ["engine push from Python, no vars, ns", _util.fmt(m["py_push_none_ns"])],
        ["engine push from C, one var mutated, ns", _util.fmt(m["push_chain_ns"])],
        ["engine push from Python, one var mutated, ns", _util.fmt(m["py_push_chain_ns"])],
        ["gated engine push from C, no vars, ns", _util.fmt(m["push_gated_none_ns"])],
        ["gated engine push from Python, no vars, ns", _util.fmt(m["py_push_gated_none_ns"])],
        ["gated engine push from C, one var mutated, ns", _util.fmt(m["push_gated_chain_ns"])],
        ["gated engine push from Python, one var mutated, ns",
         _util.fmt(m["py_push_gated_chain_ns"])],
    ]
    return _util.table(["quantity (median)", "value"], rows)


def main(argv=None):
    p = _util.parser(__doc__.splitlines()[0], repeat=5)
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    report = run(args.repeat)
    _util.publish(report, "capi", render, args.json)


if __name__ == "__main__":
    main()
