"""GPU: CUDA streams, static schedules and captured replay (docs/gpu.md).

    python -m benchmarks.gpu [--json] [--repeat R] [--size S] [--kernels N]

Everything runs through ``nnc.cuda``: graphs are CPU-built, copied to the GPU with
``nnc.cuda.graph.to_gpu`` and run with ``g.run(stream=nnc.Stream("gpu"))`` then
``stream.wait()``, so each measurement is the wall time of one run, host and device.

- (a) ``independent``: N independent SCALAR_MUL nodes on 4096-element float32 tensors, scheduled
  on one stream (``max_streams=1``) versus the default schedule (N streams);
- (b) ``inception``: Inception-V3 batch 1 on one stream, on its static schedule's streams, and
  replayed from a CUDA graph captured from that schedule;
- (c) ``dispatch``: host time per node to enqueue a run (eager: ``g.run(stream=s)``, measured
  without waiting) and to replay it (``CudaGraph.replay``), divided by the node count.

Targets (H100/H200, issue 5): Inception multi-stream >= 1.3x over one stream; dispatch
<= 5 us/node eager and <= 0.2 us/node replayed. Reported, never asserted. Without a GPU the
benchmark prints ``no GPU: <reason>`` (with ``--json``, ``{"gpu": null, "reason": ...}``) and
exits 0.
"""

import sys
import time

import numpy as np

import nnc
from benchmarks import _util

TARGET_MULTI_STREAM = 1.3
TARGET_EAGER_US = 5.0
TARGET_REPLAY_US = 0.2


def _independent_graph(n, size=4096):
    g = nnc.Graph()
    for _ in range(n):
        g.exec(nnc.Cmd("SCALAR_MUL", a=1.0001), [np.ones(size, np.float32)],
               [np.zeros(size, np.float32)])
    return g


def _runs(cpu_graph):
    """(GPU copy scheduled on 1 stream, GPU copy on the default schedule): two copies, since
    a graph has one default schedule."""
    from nnc.cuda.graph import to_gpu

    one, _ = to_gpu(cpu_graph)
    nnc.static_schedule(one, stream_type="gpu", max_streams=1)
    many, _ = to_gpu(cpu_graph)
    nnc.static_schedule(many, stream_type="gpu")
    return one, many


def _timed(g, s):
    def fn():
        g.run(stream=s)
        s.wait()

    return fn


def _dispatch_us(enqueue, s, nodes, repeat):
    """Median host microseconds per node for ``enqueue()`` (the device work is waited for
    outside the timed region)."""
    samples = []
    for _ in range(repeat):
        s.wait()
        t0 = time.perf_counter()
        enqueue()
        samples.append(time.perf_counter() - t0)
        s.wait()
    return _util.median(samples) / nodes * 1e6


def run(size=299, repeat=7, kernels=64, log=print):
    from nnc.cuda import driver
    from nnc.cuda.graph import capture
    from nnc.models.inception import build_inception_v3_model

    dev = driver.device(0)
    s = nnc.Stream("gpu:0")
    log(f"device: gpu:0 sm_{dev.arch}, {dev.sm_count} SMs")

    ind_one, ind_many = _runs(_independent_graph(kernels))
    m = build_inception_v3_model(size=size)
    m.graph.run()
    want = m.output.numpy().copy()
    one, inc = _runs(m.graph)
    many = inc
    cg = capture(inc, s)
    log(f"inception: {len(inc)} nodes, {many.schedule.stream_count} streams, "
        f"{many.schedule.signal_count} signals")

    samples = _util.measure_interleaved({
        "independent_1_stream": _timed(ind_one, s),
        "independent_n_streams": _timed(ind_many, s),
        "inception_1_stream": _timed(one, s),
        "inception_streams": _timed(many, s),
        "inception_replay": lambda: (cg.replay(s), s.wait()),
    }, repeat)
    # The output after all those runs (every run recomputes it from the same input).
    out = [t for e in inc.execs if e.name == "softmax" for t in e.outputs][0].numpy()
    max_err = float(np.max(np.abs(out - want)))

    def ratio(a, b):
        return _util.median([x / y for x, y in zip(samples[a], samples[b])])

    eager = _dispatch_us(lambda: many.run(stream=s), s, len(inc), repeat)
    replay = _dispatch_us(lambda: cg.replay(s), s, len(inc), repeat)
    multi = ratio("inception_1_stream", "inception_streams")
    return {
        "gpu": f"sm_{dev.arch}",
        "size": size,
        "kernels": kernels,
        "nodes": len(inc),
        "stream_count": many.schedule.stream_count,
        "signal_count": many.schedule.signal_count,
        "ms": {k: _util.median(v) * 1e3 for k, v in samples.items()},
        "samples_ms": {k: [t * 1e3 for t in v] for k, v in samples.items()},
        "ratios": {
            "independent_n_vs_1": ratio("independent_1_stream", "independent_n_streams"),
            "inception_streams_vs_1": multi,
            "inception_replay_vs_1": ratio("inception_1_stream", "inception_replay"),
            "inception_replay_vs_streams": ratio("inception_streams", "inception_replay"),
        },
        "dispatch_us_per_node": {"eager": eager, "replay": replay},
        "max_abs_error_vs_cpu": max_err,
        "targets": {
            f"inception multi-stream >= {TARGET_MULTI_STREAM}x": multi >= TARGET_MULTI_STREAM,
            f"eager dispatch <= {TARGET_EAGER_US} us/node": eager <= TARGET_EAGER_US,
            f"replay dispatch <= {TARGET_REPLAY_US} us/node": replay <= TARGET_REPLAY_US,
        },
    }


def render(r):
    return "\n".join([
        f"{r['gpu']}: Inception-V3 {r['size']}x{r['size']} batch 1, {r['nodes']} nodes, "
        f"{r['stream_count']} streams, {r['signal_count']} signals; {r['kernels']} "
        "independent kernels",
        _util.table(["config", "ms / run"], [[k, _util.fmt(v)] for k, v in r["ms"].items()]),
        _util.table(["ratio", "x"], [[k, _util.fmt(v)] for k, v in r["ratios"].items()]),
        f"host dispatch: {_util.fmt(r['dispatch_us_per_node']['eager'])} us/node eager, "
        f"{_util.fmt(r['dispatch_us_per_node']['replay'])} us/node replayed",
        f"max |GPU - CPU| of the softmax output: {r['max_abs_error_vs_cpu']:.3g}",
        f"targets: {r['targets']}",
    ])


def main(argv=None):
    p = _util.parser("GPU: one stream vs scheduled streams vs captured replay", repeat=7)
    p.add_argument("--size", type=int, default=299)
    p.add_argument("--kernels", type=int, default=64)
    args = p.parse_args(argv)
    if not nnc.cuda_available():
        reason = nnc.cuda_unavailable_reason()
        print(f"no GPU: {reason}")
        if args.json:
            _util.emit_json({"gpu": None, "reason": reason, "date": _util.now(),
                             "command": _util.command_line()})
        return 0
    report = run(args.size, args.repeat, args.kernels,
                 log=(lambda *a: None) if args.json else print)
    report.update(machine=_util.machine_info(("numpy", "cuda-bindings", "nvidia-cuda-nvrtc")),
                  date=_util.now(), command=_util.command_line())
    if args.json:
        _util.emit_json(report)
    else:
        print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
