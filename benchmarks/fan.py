"""Fan-out on CPU streams: nnc's pool against a thread pool and dask on the same work.

    python -m benchmarks.fan [--json] [--repeat R] [--wide N] [--tiny N]

Three graphs, each run by four executors in interleaved rounds in one process:

- ``a``: one tiny source node, then 4 unequal GEMM "experts" (x_k of 256*k rows @ W 320x320,
  k = 1..4, about 1, 2, 3 and 4 ms at one BLAS thread): uneven work that a static stream
  assignment cannot balance, but a pool of threads can.
- ``b``: N (default 1,000) independent 1 ms GEMMs (256x320 @ 320x320, each into its own output),
  after one tiny source.
- ``c``: M (default 10,000) independent tiny C tasks (SCALAR_MUL on one float32 each).

GEMM's CPU backend is NumPy's matmul, which holds the GIL only around the BLAS call, so the
experts run in parallel on any executor that gives them threads. Executors:

- ``uncapped``: ``g.run(stream=s); s.wait()`` under ``nnc.static_schedule(g)`` (no stream cap:
  a stream per branch, 1,000 for ``b``, all on nnc's worker pool);
- ``capped``: the same under ``static_schedule(g, max_streams=cores)``;
- ``tpe``: ``concurrent.futures.ThreadPoolExecutor(cores)``: the source, then one ``submit`` of
  ``nnc.cmd_exec`` per task on the same tensors, then wait for all;
- ``dask``: ``dask.threaded.get(num_workers=cores)`` on the same tasks as a dask graph.

The pool is sized to the cores (``nnc.set_num_threads(cores)``) and BLAS to one thread. Each
executor's result is checked once against a sequential run. Reported: median wall time per run,
each executor's time as a ratio to ``tpe`` (median of per-round ratios) and the peak number of
OS threads of the process during one more, untimed run of each (``/proc/self/status``, sampled
every millisecond by a thread of the benchmark, which is not counted). nnc's peaks are taken
first, before the thread pool or dask have started a thread; the others' include nnc's pool
threads, idle by then, and each other's (a ThreadPoolExecutor and dask keep their threads).
"""

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

import nnc
from benchmarks import _util

try:
    import dask
    import dask.threaded
except ImportError:  # dask is an optional benchmark dependency (pip install -e '.[bench]')
    dask = None

CORES = os.cpu_count() or 2
DIM = 320
ROWS = 256
TARGET_VS_TPE = 1.10                    # uncapped within 10 % of ThreadPoolExecutor(cores)


def os_threads():
    """The number of OS threads of this process now (Linux), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_threads(fn):
    """Run fn() once while a sampler thread reads the OS thread count; the peak, less the
    sampler itself."""
    peak = [os_threads() or 0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            n = os_threads()
            if n is not None and n > peak[0]:
                peak[0] = n
            time.sleep(0.001)

    t = threading.Thread(target=sample)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    return peak[0] - 1


class Work:
    """One fan-out: a source task, then independent tasks (cmd, inputs, outputs)."""

    def __init__(self, name, tasks):
        self.name = name
        rng = np.random.default_rng(0)
        self.seed = nnc.Tensor(np.ones(1, np.float32))
        self.seed_out = nnc.Tensor(np.zeros(1, np.float32))
        self.source = (nnc.Cmd("SCALAR_MUL", a=2.0), [self.seed], [self.seed_out])
        self.tasks = tasks(rng)

    def graph(self):
        g = nnc.Graph()
        cmd, ins, outs = self.source
        src = g.exec(cmd, ins, outs, name="source")
        for cmd, ins, outs in self.tasks:
            g.concat(src, g.exec(cmd, ins, outs))
        return g

    def outputs(self):
        return [o.numpy().copy() for _, _, outs in self.tasks for o in outs]


def _expert_tasks(rng):
    w = nnc.Tensor(rng.standard_normal((DIM, DIM), dtype=np.float32))
    out = []
    for k in range(1, 5):
        x = nnc.Tensor(rng.standard_normal((ROWS * k, DIM), dtype=np.float32))
        y = nnc.Tensor(np.zeros((ROWS * k, DIM), np.float32))
        out.append((nnc.Cmd("GEMM"), [x, w], [y]))
    return out


def _wide_tasks(n):
    def make(rng):
        w = nnc.Tensor(rng.standard_normal((DIM, DIM), dtype=np.float32))
        x = nnc.Tensor(rng.standard_normal((ROWS, DIM), dtype=np.float32))
        return [(nnc.Cmd("GEMM"), [x, w], [nnc.Tensor(np.zeros((ROWS, DIM), np.float32))])
                for _ in range(n)]
    return make


def _tiny_tasks(n):
    def make(rng):
        cmd = nnc.Cmd("SCALAR_MUL", a=3.0)
        return [(cmd, [nnc.Tensor(np.ones(1, np.float32))], [nnc.Tensor(np.zeros(1, np.float32))])
                for _ in range(n)]
    return make


def executors(work, pool):
    """{name: callable running one whole fan-out} for ``work``."""
    g_free = work.graph()
    nnc.static_schedule(g_free)
    g_cap = work.graph()
    nnc.static_schedule(g_cap, max_streams=CORES)
    s = nnc.Stream()
    exec_ = nnc.cmd_exec
    src_cmd, src_in, src_out = work.source
    tasks = work.tasks

    def uncapped():
        g_free.run(stream=s)
        s.wait()

    def capped():
        g_cap.run(stream=s)
        s.wait()

    def tpe():
        exec_(src_cmd, src_in, src_out)
        wait([pool.submit(exec_, cmd, ins, outs) for cmd, ins, outs in tasks])

    fns = {"uncapped": uncapped, "capped": capped, "tpe": tpe}
    if dask is not None:
        dsk = {"source": (exec_, src_cmd, src_in, src_out)}
        for i, (cmd, ins, outs) in enumerate(tasks):
            dsk[i] = (lambda _src, c=cmd, a=ins, b=outs: exec_(c, a, b), "source")
        keys = list(range(len(tasks)))

        def dask_thr():
            dask.threaded.get(dsk, keys, num_workers=CORES)

        fns["dask"] = dask_thr
    info = {"streams_uncapped": g_free.schedule.stream_count,
            "streams_capped": g_cap.schedule.stream_count}
    return fns, info


def run(wide, tiny, repeat, log=print):
    nnc.set_num_threads(CORES)
    works = [Work("a", _expert_tasks), Work("b", _wide_tasks(wide)), Work("c", _tiny_tasks(tiny))]
    report = {"cores": CORES, "pool_threads": nnc.get_num_threads(), "graphs": {}}
    with ThreadPoolExecutor(CORES) as pool:
        built = [(work, *executors(work, pool)) for work in works]
        # nnc's thread peaks first, before the thread pool and dask have started any thread.
        threads = {work.name: {k: peak_threads(fns[k]) for k in ("uncapped", "capped")}
                   for work, fns, _ in built}
        for work, fns, info in built:
            # The right answer: every executor must reproduce a sequential run's outputs.
            work.graph().run()
            expected = work.outputs()
            for name, fn in fns.items():
                for _, _, outs in work.tasks:
                    outs[0].numpy()[...] = 0
                fn()
                got = work.outputs()
                if not all(np.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(got, expected)):
                    raise SystemExit(f"fan {work.name}: {name} gave a wrong result")
            for name in fns:
                if name not in threads[work.name]:
                    threads[work.name][name] = peak_threads(fns[name])
            samples = _util.measure_interleaved(fns, repeat, warmup=1)
            ratios = {name: _util.median([x / y for x, y in zip(samples[name], samples["tpe"])])
                      for name in fns}
            report["graphs"][work.name] = dict(
                tasks=len(work.tasks), ms={k: _util.median(v) * 1e3 for k, v in samples.items()},
                vs_tpe=ratios, peak_threads=threads[work.name], **info)
            log(f"fan {work.name}: done")
    a, b = report["graphs"]["a"], report["graphs"]["b"]
    report["targets"] = {
        "a: uncapped within 10% of tpe": a["vs_tpe"]["uncapped"] <= TARGET_VS_TPE,
        "b: uncapped within 10% of tpe": b["vs_tpe"]["uncapped"] <= TARGET_VS_TPE,
        "peak threads <= pool + 2 (nnc runs)": all(
            g["peak_threads"][k] <= report["pool_threads"] + 2
            for g in report["graphs"].values() for k in ("uncapped", "capped")),
    }
    return report


def render(r):
    lines = [f"fan-out on {r['cores']} cores, nnc pool of {r['pool_threads']} threads"]
    names = {"a": "4 unequal GEMM experts", "b": f"{r['graphs']['b']['tasks']} x 1 ms GEMM",
             "c": f"{r['graphs']['c']['tasks']} tiny C tasks"}
    for key, g in r["graphs"].items():
        rows = [[k, _util.fmt(g["ms"][k]), _util.fmt(g["vs_tpe"][k]), str(g["peak_threads"][k])]
                for k in g["ms"]]
        lines.append(f"\n({key}) {names[key]}: uncapped schedule {g['streams_uncapped']} streams, "
                     f"capped {g['streams_capped']}")
        lines.append(_util.table(["executor", "ms / run", "/ tpe", "peak OS threads"], rows))
    lines.append(f"\ntargets: {r['targets']}")
    return "\n".join(lines)


def main(argv=None):
    p = _util.parser("fan-out: nnc's pool vs ThreadPoolExecutor and dask", repeat=9)
    p.add_argument("--wide", type=int, default=1000)
    p.add_argument("--tiny", type=int, default=10000)
    args = p.parse_args(argv)
    report = run(args.wide, args.tiny, args.repeat, log=(lambda *a: None) if args.json else print)
    report.update(machine=_util.machine_info(("numpy", "dask")), date=_util.now(),
                  command=_util.command_line())
    if args.json:
        _util.emit_json(report)
    else:
        print(render(report))


if __name__ == "__main__":
    sys.exit(main())
