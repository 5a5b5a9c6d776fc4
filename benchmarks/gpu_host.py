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
seconds of ``CudaGraph.replay`` per node; sequential = ``g.run(stream=s)`` with one stream.
Backends: GPU_REF (the library backends are marked unavailable: a real cuBLAS or cuDNN must not
run on the null driver's pointers). Needs cuda-bindings (for the enums) and a checkout (tests/
on disk).
"""

import os
import queue
import sys
import threading
import time
import types

import nnc
from benchmarks import _util

TARGET_EAGER_US = 5.0
TARGET_REPLAY_US = 0.2


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
    # GPU_REF only: a real cuBLAS / cuDNN (on a GPU machine) must never see fake pointers.
    from fakes.cuda_driver import unfake_libraries

    unfake_libraries(types.SimpleNamespace(setattr=setattr))
    return d


def _host_us(fn, s, nodes, repeat):
    """Median host microseconds per node of ``fn()`` (enqueue only), over ``repeat`` calls."""
    samples = []
    for _ in range(repeat):
        s.wait()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    s.wait()
    return _util.median(samples) / nodes * 1e6, samples


def run(size=299, repeat=31, log=print):
    from nnc.cuda.capture import capture, to_gpu
    from nnc.models.inception import build_inception_v3_model

    m = build_inception_v3_model(size=size)
    m.graph.simplify()
    many, _ = to_gpu(m.graph)
    nnc.static_schedule(many, stream_type="gpu")
    one, _ = to_gpu(m.graph)
    nnc.static_schedule(one, stream_type="gpu", max_streams=1)
    s = nnc.Stream("gpu")
    nodes = len(many)
    # NOOP nodes (the RELUs simplify fused) are skipped by the runner: not a backend that runs.
    backends = sorted({e.cmd.backend for e in many.execs if e.cmd.name != "NOOP"})
    cg = capture(many, s)
    log(f"Inception-V3 {size}x{size}: {nodes} nodes, {many.schedule.stream_count} streams, "
        f"backends {backends}")
    out = {}
    for name, fn in (("sequential", lambda: one.run(stream=s)),
                     ("eager", lambda: many.run(stream=s)),
                     ("replay", lambda: cg.replay(s))):
        fn()                                    # warm-up (prepared launches made once)
        out[name] = _host_us(fn, s, nodes, repeat)
    return {
        "size": size,
        "nodes": nodes,
        "stream_count": many.schedule.stream_count,
        "signal_count": many.schedule.signal_count,
        "backends": backends,
        "us_per_node": {k: v[0] for k, v in out.items()},
        "samples_ms": {k: [t * 1e3 for t in v[1]] for k, v in out.items()},
        "targets": {
            f"eager host cost <= {TARGET_EAGER_US} us/node (nnc's part)":
                out["eager"][0] <= TARGET_EAGER_US,
            f"replay host cost <= {TARGET_REPLAY_US} us/node (nnc's part)":
                out["replay"][0] <= TARGET_REPLAY_US,
        },
    }


def render(r):
    us = r["us_per_node"]
    return "\n".join([
        f"null CUDA driver: Inception-V3 {r['size']}x{r['size']}, {r['nodes']} nodes, "
        f"{r['stream_count']} streams, {r['signal_count']} signals, backends {r['backends']}",
        _util.table(["run", "host us / node"], [[k, _util.fmt(v)] for k, v in us.items()]),
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
