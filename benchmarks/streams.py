"""Inception-V3 batch 1: sequential vs statically scheduled on CPU streams.

    python -m benchmarks.streams [--json] [--repeat R] [--size S]

Configurations, timed in interleaved rounds in one process on one graph:

- ``seq1``: ``g.run()`` on the calling thread, BLAS at 1 thread;
- ``seq2``: the same at 2 BLAS threads (the best sequential run on 2 cores);
- ``streams``: ``g.run(stream=s); s.wait()`` under the default schedule of
  ``nnc.static_schedule(g)``, BLAS at 1 thread (so each stream's BLAS call uses one core);
- ``streams_capped``: the same on a second copy of the graph scheduled with
  ``max_streams=os.cpu_count()`` (no more worker threads than cores).

BLAS threads are switched with threadpoolctl. Reported: median wall time per inference, the
median of the per-round ratios, the schedule's stream and signal counts, and the bound on
branch concurrency, sum(op time) / critical path, from per-node times measured at 1 BLAS thread
(``g.profile``) — with how close the measured speedup comes to it.
"""

import os
import sys

import numpy as np

import nnc
from benchmarks import _util
from nnc.demo import critical_path
from nnc.models.inception import build_inception_v3

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - pip install -e '.[bench]'
    threadpool_limits = None

TARGET_SPEEDUP = 1.35
TARGET_VS_SEQ2 = 0.85


def run(size, repeat, log=print):
    if threadpool_limits is None:
        raise SystemExit("benchmarks.streams needs threadpoolctl (pip install -e '.[bench]')")
    g, x, out = build_inception_v3(size=size)
    sched = nnc.static_schedule(g)
    g_cap, _, out_cap = build_inception_v3(size=size)
    cores = os.cpu_count() or 2
    sched_cap = nnc.static_schedule(g_cap, max_streams=cores)
    s = nnc.Stream("cpu")
    with threadpool_limits(1, "blas"):
        g.run()
        expected = out.numpy().copy()
        g.run(stream=s)
        s.wait()
        # Same graph, same tensors: the scheduled run must give the same bits.
        same = bool(np.array_equal(out.numpy(), expected))
        g_cap.run(stream=s)
        s.wait()
        same = same and bool(np.array_equal(out_cap.numpy(), expected))
        profile = g.profile(repeat=3)
    seconds = {e: t for e, t in profile}
    total = sum(seconds.values())
    path, nodes = critical_path(g, seconds)
    log(f"graph: {len(g)} nodes; schedule: {sched.stream_count} streams, "
        f"{sched.signal_count} signals; scheduled output identical: {same}")

    def seq1():
        with threadpool_limits(1, "blas"):
            g.run()

    def seq2():
        with threadpool_limits(2, "blas"):
            g.run()

    def streams():
        with threadpool_limits(1, "blas"):
            g.run(stream=s)
            s.wait()

    def streams_capped():
        with threadpool_limits(1, "blas"):
            g_cap.run(stream=s)
            s.wait()

    samples = _util.measure_interleaved(
        {"seq1": seq1, "seq2": seq2, "streams": streams, "streams_capped": streams_capped},
        repeat, warmup=1,
    )

    def per_round(a, b):
        return [x / y for x, y in zip(samples[a], samples[b])]

    ratios = {
        "streams_vs_seq1": per_round("seq1", "streams"),
        "streams_vs_seq2": per_round("seq2", "streams"),
        "capped_vs_seq1": per_round("seq1", "streams_capped"),
        "capped_vs_seq2": per_round("seq2", "streams_capped"),
        "seq2_vs_seq1": per_round("seq1", "seq2"),
    }
    bound = total / path if path else float("nan")
    best = max(("streams", "capped"), key=lambda k: _util.median(ratios[f"{k}_vs_seq1"]))
    speedup = _util.median(ratios[f"{best}_vs_seq1"])
    return {
        "size": size,
        "nodes": len(g),
        "stream_count": sched.stream_count,
        "signal_count": sched.signal_count,
        "capped_stream_count": sched_cap.stream_count,
        "capped_signal_count": sched_cap.signal_count,
        "best": best,
        "identical_output": same,
        "ms": {k: _util.median(v) * 1e3 for k, v in samples.items()},
        "samples_ms": {k: [t * 1e3 for t in v] for k, v in samples.items()},
        "ratios": {k: _util.median(v) for k, v in ratios.items()},
        "sum_op_ms": total * 1e3,
        "critical_path_ms": path * 1e3,
        "critical_path_nodes": len(nodes),
        "bound": bound,
        "fraction_of_bound": speedup / bound,
        "targets": {
            "speedup >= 1.35x over seq1": speedup >= TARGET_SPEEDUP,
            "within 15% of seq2": _util.median(ratios[f"{best}_vs_seq2"]) >= TARGET_VS_SEQ2,
        },
    }


def render(r):
    lines = [
        f"Inception-V3 {r['size']}x{r['size']}, batch 1: {r['nodes']} nodes, "
        f"{r['stream_count']} streams, {r['signal_count']} signals (capped: "
        f"{r['capped_stream_count']} streams, {r['capped_signal_count']} signals)",
        _util.table(
            ["config", "ms / inference"],
            [[k, _util.fmt(v)] for k, v in r["ms"].items()],
        ),
        f"streams / seq1 speedup: {r['ratios']['streams_vs_seq1']:.3f}x "
        f"(target >= {TARGET_SPEEDUP}x)",
        f"streams vs seq2:        {r['ratios']['streams_vs_seq2']:.3f} "
        f"(target >= {TARGET_VS_SEQ2}: within 15 %)",
        f"capped / seq1 speedup:  {r['ratios']['capped_vs_seq1']:.3f}x; capped vs seq2: "
        f"{r['ratios']['capped_vs_seq2']:.3f}",
        f"seq2 / seq1:            {r['ratios']['seq2_vs_seq1']:.3f}x",
        f"bound sum/critical path: {r['sum_op_ms']:.1f} / {r['critical_path_ms']:.1f} ms = "
        f"{r['bound']:.3f}x; the best stream run ({r['best']}) reaches "
        f"{100 * r['fraction_of_bound']:.0f} % of it",
        f"targets: {r['targets']}",
    ]
    return "\n".join(lines)


def main(argv=None):
    p = _util.parser("Inception-V3: sequential vs CPU streams", repeat=9)
    p.add_argument("--size", type=int, default=299)
    args = p.parse_args(argv)
    report = run(args.size, args.repeat, log=(lambda *a: None) if args.json else print)
    report.update(machine=_util.machine_info(("numpy", "threadpoolctl")), date=_util.now(),
                  command=_util.command_line())
    if args.json:
        _util.emit_json(report)
    else:
        print(render(report))


if __name__ == "__main__":
    sys.exit(main())
