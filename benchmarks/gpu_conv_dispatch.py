"""GPU: the host cost of one cuDNN convolution, by the ways nnc could enqueue it.

    python -m benchmarks.gpu_conv_dispatch [--json] [--calls N] [--repeat R]

Eager GPU_OPT dispatch is host-bound where cuDNN's frontend is called from Python for every
launched op. This measures, for one Inception-V3 convolution (35x35x192 -> 64, 1x1, bias +
ReLU, float32 NHWC), the host microseconds per enqueue of:

- ``nnc_eager``: ``g.run(stream=s)`` of a one-node GPU graph (the whole nnc path: runner,
  GPU stream, the frontend call);
- ``frontend_ordered``: the frontend's ``execute`` in its ordered form (buffers as a list in
  ``tensor_uids``' order, what nnc's GPU_OPT calls);
- ``graph_launch``: the same execute captured once into a CUDA graph and launched with
  ``cuGraphLaunch`` (one driver call; what a per-node captured plan would cost from C, plus
  the bindings' Python overhead);
- ``nnc_replay``: a capture of the one-node graph replayed (``CudaGraph.replay``).

Each is N enqueues timed back to back, then one synchronisation (not timed); medians of
``--repeat`` batches. The GPU work of one call (a few microseconds) is reported beside them, from
a batch timed to the end of its synchronisation, so the numbers say which side bounds the op.
Without a GPU or cuDNN it prints why and exits 0.
"""

import sys
import time

import numpy as np

import nnc
from benchmarks import _util


def _conv_graph(h=35, c=192, o=64):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, h, h, c)).astype(np.float32)
    w = (rng.standard_normal((o, 1, 1, c)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    y = np.zeros((1, h, h, o), np.float32)
    g = nnc.Graph()
    g.exec(nnc.Cmd("CONVOLUTION", stride=(1, 1), padding=(0, 0, 0, 0), activation="relu"),
           [x, w, b], [y])
    return g


def _per_call(fn, wait, calls, repeat):
    """(host µs per enqueue, µs per call to the end of the sync), medians over batches."""
    host, total = [], []
    for _ in range(repeat):
        wait()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        wait()
        t2 = time.perf_counter()
        host.append((t1 - t0) / calls * 1e6)
        total.append((t2 - t0) / calls * 1e6)
    return _util.median(host), _util.median(total)


def run(calls=200, repeat=15, say=print):
    from benchmarks.gpu import device_info
    from nnc.cmd.convolution.gpu import cudnn as cudnn_conv
    from nnc.cuda import memory
    from nnc.cuda.capture import capture, to_gpu
    from nnc.cuda.driver import CudaGraph, check, cuda_stream, driver

    if not cudnn_conv.available():
        return {"benchmark": "gpu_conv_dispatch", "skipped": cudnn_conv.unavailable_reason()}
    dev = device_info(0)
    g, _ = to_gpu(_conv_graph())
    e = g.execs[0]
    s = nnc.Stream("gpu:0")
    cs = cuda_stream(s)
    g.run(stream=s)
    s.wait()
    say(f"device {dev['name']}; the node runs {e.backend}")
    out = {}
    out["nnc_eager"] = _per_call(lambda: g.run(stream=s), s.wait, calls, repeat)
    cg = capture(g, s)
    out["nnc_replay"] = _per_call(lambda: cg.replay(s), s.wait, calls, repeat)
    p = cudnn_conv.plan(cs.device, e.cmd, e.inputs, e.outputs)
    if p is not None:
        x, w, b = e.inputs
        y = e.outputs[0]
        pack = {p.x: x.data_ptr, p.w: w.data_ptr, p.y: y.data_ptr}
        if not p.epilogue:
            pack[p.bias] = b.data_ptr
        op = cudnn_conv._Execute(p, pack)
        out["frontend_ordered"] = _per_call(lambda: op(cs), cs.wait, calls, repeat)
        one = CudaGraph.capture(cs, lambda: op(cs))
        exe, cu = one.exec_handle, driver()
        out["graph_launch"] = _per_call(
            lambda: check(cu.cuGraphLaunch(exe, cs.handle), "cuGraphLaunch"), cs.wait, calls,
            repeat)
        out["frontend_form"] = "ordered" if op.uids is not None else "mapping"
        memory.fill_zero(y)
    us = {k: {"host_us": v[0], "with_sync_us": v[1]} for k, v in out.items()
          if isinstance(v, tuple)}
    return {"benchmark": "gpu_conv_dispatch", "device": dev, "backend": e.backend,
            "calls": calls, "repeat": repeat, "us": us,
            "frontend_form": out.get("frontend_form")}


def main(argv=None):
    p = _util.parser("GPU: host cost of one cuDNN convolution per way of enqueueing it",
                     repeat=15)
    p.add_argument("--calls", type=int, default=200, help="enqueues per batch (default 200)")
    a = p.parse_args(argv)
    if a.calls < 1 or a.repeat < 1:
        p.error("--calls and --repeat must be at least 1")
    if not nnc.cuda_available():
        print(f"no GPU: {nnc.cuda_unavailable_reason()}")
        return 0
    say = (lambda *x: print(*x, file=sys.stderr, flush=True)) if a.json else print
    r = run(a.calls, a.repeat, say)
    r.update(date=_util.now(), command=_util.command_line())
    if "us" in r:
        say(_util.table(["way", "host us / enqueue", "us / call with sync"],
                        [[k, _util.fmt(v["host_us"]), _util.fmt(v["with_sync_us"])]
                         for k, v in r["us"].items()]))
    else:
        say(f"skipped: {r['skipped']}")
    if a.json:
        _util.emit_json(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
