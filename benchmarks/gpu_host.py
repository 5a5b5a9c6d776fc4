"""nnc's own host cost of GPU dispatch, measured without a GPU: the driver does nothing.

    python -m benchmarks.gpu_host [--json] [--size S] [--repeat R]

The targets are host dispatch <= 5 us per node eagerly and <= 0.2 us per node replayed.
On a GPU, ``benchmarks.gpu`` measures the whole cost (nnc plus cuda.bindings plus the driver).
This benchmark isolates the first part, which a machine without a GPU can measure: the CUDA
driver is replaced by tests/fakes/cuda_driver.py's fake with every stream operation turned into a
no-op (kernels are not emulated, copies not made; host functions run on one thread), so a timed
``g.run(stream=s)`` is nnc's runner and the GPU stream's enqueue logic - everything but the driver's
own work. The per-node calls (``cuLaunchKernel``, ``cuEventRecord``, ``cuStreamWaitEvent``) go from
C to entry points that return at once (nnc/cuda/_ccall.pyx), as they go to libcuda's on a GPU; the
rest through cuda.bindings' argument conversion to the fake.

Measured: Inception-V3 batch 1 (``g.simplify()``, as the CPU benchmarks), copied to the (fake)
GPU with ``to_gpu`` and statically scheduled on GPU streams; eager = host seconds of
``g.run(stream=s)`` (enqueue only; the wait is outside the timed region) per node, replay = host
seconds of ``CudaGraph.replay`` per node; sequential = ``g.run(stream=s)`` with one stream; each
also per launched op (the nodes that enqueue work: all but the NOOPs ``simplify`` leaves).
Two backend sets: GPU_REF (pinned) and GPU_OPT (the default choice, with the test suite's fake
cuDNN and cuBLAS standing in for the libraries: a real cuBLAS or cuDNN must not run on the null
driver's pointers). A GPU_OPT node replays its own CUDA graph from C after its first run on a
stream (nnc/cuda/_ccall.pyx, NodeGraph), so what is timed is nnc's share of that path; the
libraries' own first-run and capture cost, and the driver's ``cuGraphLaunch``, come on top on a
GPU (``benchmarks.gpu`` measures them). Needs cuda-bindings (for the enums) and a checkout
(tests/ on disk).
"""

import os
import queue
import sys
import threading
import time
from collections import Counter

import nnc
from benchmarks import _util

TARGET_EAGER_US = 5.0
TARGET_REPLAY_US = 0.2
TARGET_OPT_EAGER_US = 10.0              # GPU_OPT, per launched op


def _null_driver_class():
    """A FakeDriver whose stream work does nothing (see the module docstring)."""
    sys.path.insert(0, os.path.join(_util.ROOT, "tests"))
    from fakes.cuda_driver import FakeDriver, real

    if real is None:
        raise SystemExit("benchmarks.gpu_host needs cuda-bindings (pip install -e '.[cuda]')")

    class NullDriver(FakeDriver):
        def __init__(self):
            super().__init__(count=1)
            self.host_calls = queue.SimpleQueue()
            threading.Thread(target=self._host_thread, daemon=True).start()

        def __getattr__(self, name):         # enums and handle types: the real module's
            return getattr(real, name)

        def c_entry_points(self):
            # The per-node calls nnc makes from C on a real driver, doing nothing here.
            from nnc.cuda._ccall import null_entry_points

            return null_entry_points()

        def _host_thread(self):
            while True:
                fn, data = self.host_calls.get()
                fn(data)

        def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            return self.ok()

        def _run(self, fn, stream):
            # Stream work (the fake libraries' computation, copies) does nothing, captured or
            # not; a replayed graph is therefore empty too.
            pass

        def cuLaunchHostFunc(self, s, fn, data):
            import ctypes

            self.host_calls.put((ctypes.CFUNCTYPE(None, ctypes.c_void_p)(int(fn)), data))
            return self.ok()

    return NullDriver


def install_null_driver(setattr=setattr):
    """Make nnc.cuda use a new null driver; returns it. ``setattr``: how to replace module
    attributes (a test passes monkeypatch.setattr, so they are restored)."""
    from nnc import cuda
    from nnc.cuda import driver as drv
    from nnc.cuda import memory

    d = _null_driver_class()()
    setattr(cuda, "_status", (1, None))
    setattr(drv, "_driver", d)
    setattr(drv, "_devices", {})
    setattr(drv, "_tls", threading.local())
    setattr(memory, "_staging", {})
    # The fakes of cuBLAS and cuDNN: a real library (on a GPU machine) must never see fake
    # pointers. Plans are untimed, and never cached on disk.
    import weakref

    from fakes.cublas import FakeCublas
    from fakes.cudnn_frontend import FakeCudnn

    from nnc.cmd.convolution.gpu import cudnn as cudnn_conv
    from nnc.cmd.gemm.gpu import cublas as cublas_gemm

    setattr(cudnn_conv, "_status", (FakeCudnn(d), None))
    setattr(cudnn_conv, "_devices", weakref.WeakKeyDictionary())
    setattr(cudnn_conv, "TUNE", False)
    setattr(cublas_gemm, "_probed", (FakeCublas(d), None))
    setattr(cublas_gemm, "_constants", {})
    return d


def _pinned(graph, backend):
    """Pin every node that can run ``backend`` to it (GPU_REF: the library nodes too)."""
    from nnc.cmd.command import cmd_backends_for

    for e in graph.execs:
        if e.cmd.name == "NOOP" or e.backend == backend:
            continue
        if backend in [b.name for b in cmd_backends_for(e.cmd, e.inputs, e.outputs)]:
            e.backend = backend
    return graph


def _launched(g):
    """The nodes of ``g`` that enqueue work: all but NOOPs (the ReLUs ``simplify`` fused)."""
    return sum(e.cmd.name != "NOOP" for e in g.execs)


def _node_graphs():
    """{"captured": n, "refused": m}: the library nodes' own CUDA graphs (nnc/cuda/_ccall.pyx,
    NodeGraph) in the process, per node, stream and precision: made, or refused (and why)."""
    import gc

    from nnc.cuda._ccall import NodeGraph
    from nnc.cuda.driver import CudaGraph

    states = [v for o in gc.get_objects() if type(o) is NodeGraph
              for v in o.captured().values()]
    return {"captured": sum(isinstance(v, CudaGraph) for v in states),
            "refused": sorted({v for v in states if isinstance(v, str)})}


def _once(fn, s):
    """Host seconds of one ``fn()`` (enqueue only: the stream is idle before, waited after)."""
    s.wait()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    s.wait()
    return dt


def run(size=299, repeat=31, log=print):
    from nnc.cuda.capture import capture, to_gpu
    from nnc.models.inception import build_inception_v3_model

    m = build_inception_v3_model(size=size)
    m.graph.simplify()
    report = {"size": size, "sets": {}}
    graphs = {}
    for backend in ("GPU_REF", "GPU_OPT"):
        many = _pinned(to_gpu(m.graph)[0], backend)
        nnc.static_schedule(many, stream_type="gpu")
        one = _pinned(to_gpu(m.graph)[0], backend)
        nnc.static_schedule(one, stream_type="gpu", max_streams=1)
        graphs[backend] = (many, one)
    s = nnc.Stream("gpu")
    captured = {b: capture(many, s) for b, (many, _) in graphs.items()}
    timed = {}
    for backend, (many, one) in graphs.items():
        cg = captured[backend]
        for name, fn in (("sequential", lambda one=one: one.run(stream=s)),
                         ("eager", lambda many=many: many.run(stream=s)),
                         ("replay", lambda cg=cg: cg.replay(s))):
            fn()                                # warm-up (prepared launches made once)
            timed[backend, name] = fn
    # Interleaved rounds: every configuration once per round, medians over the rounds.
    samples = {k: [] for k in timed}
    for _ in range(repeat):
        for k, fn in timed.items():
            samples[k].append(_once(fn, s))
    for backend, (many, _) in graphs.items():
        nodes, ops = len(many), _launched(many)
        # NOOP nodes (the RELUs simplify fused) are skipped by the runner: no backend runs.
        backends = dict(Counter(e.backend for e in many.execs if e.cmd.name != "NOOP"))
        per = {name: _util.median(samples[backend, name]) * 1e6
               for name in ("sequential", "eager", "replay")}
        report["sets"][backend] = {
            "nodes": nodes, "launched_ops": ops, "backends": backends,
            "stream_count": many.schedule.stream_count,
            "signal_count": many.schedule.signal_count,
            "us_per_node": {k: v / nodes for k, v in per.items()},
            "us_per_launched_op": {k: v / ops for k, v in per.items()},
            "samples_ms": {name: [t * 1e3 for t in samples[backend, name]]
                           for name in ("sequential", "eager", "replay")},
        }
        log(f"{backend}: {nodes} nodes, {ops} launched ops, backends {backends}")
    report["node_graphs"] = _node_graphs()
    ref = report["sets"]["GPU_REF"]
    opt = report["sets"]["GPU_OPT"]
    # The GPU_REF set's figures at the top level, as before the GPU_OPT set existed.
    report.update({k: ref[k] for k in ("nodes", "stream_count", "signal_count", "us_per_node")})
    report["backends"] = sorted(ref["backends"])
    report["targets"] = {
        f"eager host cost <= {TARGET_EAGER_US} us/node (nnc's part)":
            ref["us_per_node"]["eager"] <= TARGET_EAGER_US,
        f"replay host cost <= {TARGET_REPLAY_US} us/node (nnc's part)":
            ref["us_per_node"]["replay"] <= TARGET_REPLAY_US,
        f"GPU_OPT eager host cost <= {TARGET_OPT_EAGER_US} us/launched op (nnc's part)":
            opt["us_per_launched_op"]["eager"] <= TARGET_OPT_EAGER_US,
    }
    return report


def render(r):
    rows = []
    for backend, st in r["sets"].items():
        for name in ("sequential", "eager", "replay"):
            rows.append([backend, name, _util.fmt(st["us_per_node"][name]),
                         _util.fmt(st["us_per_launched_op"][name])])
    ref = r["sets"]["GPU_REF"]
    return "\n".join([
        f"null CUDA driver: Inception-V3 {r['size']}x{r['size']}, {ref['nodes']} nodes "
        f"({ref['launched_ops']} launched ops), {ref['stream_count']} streams, "
        f"{ref['signal_count']} signals; GPU_OPT backends {r['sets']['GPU_OPT']['backends']}; "
        f"library nodes' own CUDA graphs: {r['node_graphs']}",
        _util.table(["set", "run", "host us / node", "host us / launched op"], rows),
        f"targets (nnc's share only; the driver's cost comes on top): {r['targets']}",
    ])


def main(argv=None):
    p = _util.parser("nnc's host cost of GPU dispatch on a null CUDA driver", repeat=31)
    p.add_argument("--size", type=int, default=299)
    args = p.parse_args(argv)
    install_null_driver()
    report = run(args.size, args.repeat, log=(lambda *a: None) if args.json else print)
    _util.publish(report, "gpu_host", render, args.json, ("numpy", "cuda-bindings"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
