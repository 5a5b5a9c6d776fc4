"""GPU: a data-dependent while loop with no host in it (CUDA conditional WHILE nodes) against
the host-driven loops it replaces.

    python -m benchmarks.gpu_loop [--json] [--n N] [--iters K] [--repeat R]

The loop is power iteration on an N-vector (default 1024) for K iterations (default 100):
``y = A x; x = y / |y|``, two kernels a step, with the trip count decided on the device by a
third kernel (``step``) that counts iterations and writes the loop's condition. Variants, each
timed from the first enqueue to the end of a synchronisation, medians of ``--repeat`` runs:

- ``host_sync``: what a while loop whose condition lives on the device costs when the host
  drives it (nnc's path for a while node on a GPU stream): each iteration enqueues the body and
  the condition kernel, then copies the condition to the host and waits for it;
- ``host_unrolled``: the K iterations enqueued with no synchronisation (only possible when the
  host knows K in advance: a lower bound on any host-driven loop);
- ``graph_unrolled``: the K iterations captured once into a CUDA graph and replayed (again
  needs K on the host; one graph of 3K nodes);
- ``graph_while``: one CUDA graph holding a WHILE conditional node (CUDA 12.4+): its body
  (the two kernels and ``step``, which sets the node's condition handle with
  ``cudaGraphSetConditional``) is captured into the node's body graph with
  ``cuStreamBeginCaptureToGraph``; one cuGraphLaunch runs all K iterations;
- ``capture_while``: the same WHILE node inserted *during an ongoing stream capture*
  (``cuStreamGetCaptureInfo``, ``cuGraphAddNode``, ``cuStreamUpdateCaptureDependencies``), the
  way a captured nnc schedule would embed a while node.

- ``nnc_host`` / ``nnc_captured``: the same loop as an nnc graph (a while node whose body is a
  GEMM ``y = A x`` and a SCALAR_MUL ``x = y / rho``, with ``nnc.Compare("count", "<", K)`` as
  its expression), run host-driven by ``g.run(stream=s)`` and replayed from
  ``nnc.cuda.capture.capture``, which records the while node as a conditional WHILE node. nnc has
  no norm command, so this loop scales by the spectral radius instead of normalising.

Every variant's x is checked against NumPy's float64 power iteration of the same K steps.
The kernels are compiled by NVRTC (nnc.cuda.nvrtc); the condition handle's device function
is declared as a CUDA runtime builtin, which NVRTC resolves without the runtime's headers.
Without a GPU it prints ``no GPU: <reason>`` and exits 0.
"""

import sys
import time
import traceback

import numpy as np

import nnc
from benchmarks import _util

TARGET_SPEEDUP = 5.0        # nnc's captured while loop vs its host-driven run
TOLERANCE = 1e-4            # max |x - x_numpy| (x has unit norm)

SOURCE = r"""
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

// y = A x, one warp per row (A row-major n x n).
extern "C" __global__ void pi_matvec(const float* a, const float* x, float* y, int n) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= n) return;
    float s = 0.f;
    for (int j = lane; j < n; j += 32) s += a[(size_t)row * n + j] * x[j];
    for (int o = 16; o; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) y[row] = s;
}

// x = y / |y|, one block of 1024 threads.
extern "C" __global__ void pi_normalize(const float* y, float* x, int n) {
    __shared__ float part[32];
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += y[i] * y[i];
    for (int o = 16; o; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.f;
        for (int o = 16; o; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) part[0] = s;
    }
    __syncthreads();
    float inv = rsqrtf(part[0]);
    for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] = y[i] * inv;
}

// The loop's condition, counted on the device: keep going while ++count < bound. The count
// resets itself at the end, so every launch of the loop starts from zero.
extern "C" __global__ void pi_step(int* count, int bound, int* go) {
    int c = *count + 1;
    int more = c < bound;
    *count = more ? c : 0;
    *go = more;
}

extern "C" __global__ void pi_step_handle(int* count, int bound,
                                          cudaGraphConditionalHandle handle) {
    int c = *count + 1;
    int more = c < bound;
    *count = more ? c : 0;
    cudaGraphSetConditional(handle, more);
}
"""


def _power_numpy(a, x, iters):
    a, x = a.astype(np.float64), x.astype(np.float64)
    for _ in range(iters):
        y = a @ x
        x = y / np.linalg.norm(y)
    return x


class _Loop:
    """The device buffers, kernels and variants of one power iteration problem."""

    def __init__(self, n, iters, seed=0):
        from nnc.cuda import driver, memory, nvrtc

        self.driver, self.memory = driver, memory
        self.cu = driver.driver()
        self.dev = driver.device(0)
        self.dev.make_current()
        self.n, self.iters = n, iters
        rng = np.random.default_rng(seed)
        m = rng.standard_normal((n, n)).astype(np.float32)
        self.a_host = (m + m.T) / np.float32(2 * np.sqrt(n))
        self.x0 = rng.standard_normal(n).astype(np.float32)
        self.x0 /= np.linalg.norm(self.x0)
        self.want = _power_numpy(self.a_host, self.x0, iters)
        self.a = memory.from_numpy(self.a_host)
        self.x = memory.from_numpy(self.x0)
        self.y = memory.from_numpy(np.zeros(n, np.float32))
        self.count = memory.from_numpy(np.zeros(1, np.int32))
        self.go = memory.from_numpy(np.zeros(1, np.int32))
        self.go_host = memory.pinned((1,), "int32")
        cubin = nvrtc.compile_cubin(SOURCE, self.dev.arch, "gpu_loop.cu")
        module = driver.check(self.cu.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.fn = {k: driver.check(self.cu.cuModuleGetFunction(module, k.encode()),
                                   f"cuModuleGetFunction({k})")
                   for k in ("pi_matvec", "pi_normalize", "pi_step", "pi_step_handle")}
        self.stream = driver.CudaStream(self.dev)
        self.side = driver.CudaStream(self.dev)

    def ptr(self, t):
        return np.uint64(t.data_ptr)

    def reset(self):
        self.memory.copy(self.x, nnc.Tensor(self.x0), self.stream)
        self.stream.wait()

    def body(self, stream, handle=None):
        """One iteration enqueued on ``stream``: matvec, normalize, then the condition."""
        launch, n = self.driver.launch, np.int32(self.n)
        launch(self.fn["pi_matvec"], ((self.n + 7) // 8,), (256,),
               [self.ptr(self.a), self.ptr(self.x), self.ptr(self.y), n], stream)
        launch(self.fn["pi_normalize"], (1,), (1024,),
               [self.ptr(self.y), self.ptr(self.x), n], stream)
        if handle is None:
            launch(self.fn["pi_step"], (1,), (1,),
                   [self.ptr(self.count), np.int32(self.iters), self.ptr(self.go)], stream)
        else:
            launch(self.fn["pi_step_handle"], (1,), (1,),
                   [self.ptr(self.count), np.int32(self.iters), np.uint64(handle)], stream)

    # -- the variants: each runs the whole loop once and returns when x is final ------------

    def host_sync(self):
        cu, s = self.cu, self.stream
        go = self.go_host.numpy()       # a view of the pinned memory the copy lands in
        while True:
            self.body(s)
            self.driver.check(cu.cuMemcpyDtoHAsync(self.go_host.data_ptr, self.go.data_ptr, 4,
                                                   s.handle), "cuMemcpyDtoHAsync")
            s.wait()
            if not go[0]:
                return

    def host_unrolled(self):
        for _ in range(self.iters):
            self.body(self.stream)
        self.stream.wait()

    def make_graph_unrolled(self):
        cg = self.driver.CudaGraph.capture(
            self.stream, lambda: [self.body(self.stream) for _ in range(self.iters)])

        def run():
            cg.replay(self.stream)
            self.stream.wait()
        run.graph = cg
        return run

    def _add_node(self, graph, deps, params):
        """cuGraphAddNode across binding generations: CUDA 13 takes edge data (the 12.x
        signature without it was renamed); try the newer form first."""
        cu = self.cu
        try:
            return self.driver.check(cu.cuGraphAddNode(graph, deps, None, len(deps), params),
                                     "cuGraphAddNode")
        except TypeError:
            return self.driver.check(cu.cuGraphAddNode(graph, deps, len(deps), params),
                                     "cuGraphAddNode")

    def _while_params(self, graph):
        cu = self.cu
        handle = self.driver.check(cu.cuGraphConditionalHandleCreate(
            graph, self.dev.context, 1,
            cu.CU_GRAPH_COND_ASSIGN_DEFAULT), "cuGraphConditionalHandleCreate")
        params = cu.CUgraphNodeParams()
        params.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = handle
        params.conditional.type = cu.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE
        params.conditional.size = 1
        params.conditional.ctx = self.dev.context
        return handle, params

    def _capture_body(self, body_graph, handle):
        cu, side = self.cu, self.side
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        try:
            r = cu.cuStreamBeginCaptureToGraph(side.handle, body_graph, None, None, 0, mode)
        except TypeError:
            r = cu.cuStreamBeginCaptureToGraph(side.handle, body_graph, None, 0, mode)
        self.driver.check(r, "cuStreamBeginCaptureToGraph")
        self.body(side, int(handle))
        self.driver.check(cu.cuStreamEndCapture(side.handle), "cuStreamEndCapture")

    def make_graph_while(self):
        cu, check = self.cu, self.driver.check
        graph = check(cu.cuGraphCreate(0), "cuGraphCreate")
        handle, params = self._while_params(graph)
        self._add_node(graph, [], params)
        self._capture_body(params.conditional.phGraph_out[0], handle)
        exe = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

        def run():
            check(cu.cuGraphLaunch(exe, self.stream.handle), "cuGraphLaunch")
            self.stream.wait()
        run.keep = (graph, exe, params)
        return run

    def make_capture_while(self):
        """The WHILE node added to a graph being captured from ``stream``, between a kernel
        captured before it and one after (x *= 1 by normalize), as nnc's capture would."""
        cu, check, s = self.cu, self.driver.check, self.stream
        holder = {}

        def fn():
            # Something before the loop, so the node has a dependency to take over.
            self.driver.launch(self.fn["pi_normalize"], (1,), (1024,),
                               [self.ptr(self.x), self.ptr(self.x), np.int32(self.n)], s)
            info = cu.cuStreamGetCaptureInfo(s.handle)
            check(info, "cuStreamGetCaptureInfo")
            # CUDA 13: (err, status, id, graph, deps, edge data, count); 12.x _v2 had no
            # edge data. The graph is the first CUgraph; the dependencies the first list.
            graph = next(v for v in info[1:] if type(v).__name__ == "CUgraph")
            deps = next(v for v in info[1:] if isinstance(v, (list, tuple)))
            deps = list(deps)[:int(info[-1])] if isinstance(info[-1], int) else list(deps)
            handle, params = self._while_params(graph)
            node = self._add_node(graph, deps, params)
            try:
                r = cu.cuStreamUpdateCaptureDependencies(
                    s.handle, [node], None, 1,
                    cu.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES)
            except TypeError:
                r = cu.cuStreamUpdateCaptureDependencies(
                    s.handle, [node], 1,
                    cu.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES)
            check(r, "cuStreamUpdateCaptureDependencies")
            self._capture_body(params.conditional.phGraph_out[0], handle)
            holder["params"] = params
            self.driver.launch(self.fn["pi_normalize"], (1,), (1024,),
                               [self.ptr(self.x), self.ptr(self.x), np.int32(self.n)], s)

        cg = self.driver.CudaGraph.capture(s, fn)

        def run():
            cg.replay(s)
            s.wait()
        run.keep = (cg, holder)
        return run

    def error(self):
        got = self.memory.to_host(self.x).astype(np.float64)
        return float(np.abs(got - self.want).max())


class _NncLoop:
    """The power iteration as an nnc graph with a while node (see the module docstring)."""

    def __init__(self, loop):
        from nnc.cuda import capture as cgraph
        from nnc.cuda import memory

        self.loop, self.memory = loop, memory
        a0, iters = loop.a_host, loop.iters
        self.x0 = loop.x0.reshape(-1, 1).copy()
        self.a = memory.from_numpy(a0)
        self.x = memory.from_numpy(self.x0)
        y = nnc.Tensor.empty(self.x0.shape, device="gpu")
        rho = float(np.abs(np.linalg.eigvalsh(a0.astype(np.float64))).max())
        g, body = nnc.Graph(), nnc.Graph()
        head = body.exec(nnc.Cmd("NOOP"))
        mv = body.exec(nnc.Cmd("GEMM"), [self.a, self.x], [y])
        sc = body.exec(nnc.Cmd("SCALAR_MUL", a=1.0 / rho), [y], [self.x])
        body.concat(head, mv)
        body.concat(mv, sc)
        g.while_(body)
        body.set_while_expr(nnc.Compare("count", "<", iters), [], [head])
        nnc.static_schedule(g, stream_type="gpu")
        want = self.x0.astype(np.float64)
        for _ in range(iters):
            want = (a0.astype(np.float64) @ want) / rho
        self.want, self.g, self.body = want, g, body
        self.s = nnc.Stream("gpu")
        self.cg = cgraph.capture(g, self.s)

    def reset(self):
        nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [self.x0.copy()], [self.x])

    def host(self):
        self.g.run(stream=self.s)
        self.s.wait()

    def captured(self):
        self.cg.replay(self.s)
        self.s.wait()

    def error(self):
        return float(np.abs(self.memory.to_host(self.x).astype(np.float64) - self.want).max())


def run(n=1024, iters=100, repeat=20, say=print):
    from benchmarks.gpu import device_info

    loop = _Loop(n, iters)
    dev = device_info(0)
    say(f"device: {dev['name']}, CUDA {dev['cuda_driver']}, NVRTC {dev['nvrtc']}; power "
        f"iteration n={n}, {iters} iterations")
    fns, failed = {"host_sync": loop.host_sync, "host_unrolled": loop.host_unrolled}, {}
    for name, make in (("graph_unrolled", loop.make_graph_unrolled),
                       ("graph_while", loop.make_graph_while),
                       ("capture_while", loop.make_capture_while)):
        try:
            fns[name] = make()
        except Exception as e:  # a variant the driver refuses is reported, not fatal
            say("".join(traceback.format_exception(e)).rstrip())
            failed[name] = f"{type(e).__name__}: {e}"
    resets, errs = {}, {}
    try:
        nl = _NncLoop(loop)
        for name, fn in (("nnc_host", nl.host), ("nnc_captured", nl.captured)):
            fns[name], resets[name], errs[name] = fn, nl.reset, nl.error
    except Exception as e:
        say("".join(traceback.format_exception(e)).rstrip())
        failed["nnc"] = f"{type(e).__name__}: {e}"
    checks, errors = [], {}
    for name, fn in list(fns.items()):
        resets.get(name, loop.reset)()
        try:
            fn()
        except Exception as e:
            say("".join(traceback.format_exception(e)).rstrip())
            failed[name] = f"{type(e).__name__}: {e}"
            del fns[name]
            continue
        errors[name] = errs.get(name, loop.error)()
        checks.append({"check": f"{name}: x within {TOLERANCE:g} of NumPy's",
                       "ok": errors[name] <= TOLERANCE, "max_abs_error": errors[name]})
        say(f"{name}: max |x - numpy| = {errors[name]:.3g}")
    for fn in fns.values():     # warm
        fn()
    samples = {k: [] for k in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            resets.get(name, loop.reset)()
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    ms = {k: _util.median(v) * 1e3 for k, v in samples.items()}
    ratios = {f"host_sync / {k}": ms["host_sync"] / ms[k] for k in ms
              if "host_sync" in ms and k not in ("host_sync", "nnc_host", "nnc_captured")}
    target = None
    if "nnc_host" in ms and "nnc_captured" in ms:
        ratios["nnc_host / nnc_captured"] = ms["nnc_host"] / ms["nnc_captured"]
        v = ratios["nnc_host / nnc_captured"]
        target = {"value": v, "ok": v >= TARGET_SPEEDUP, "what": "nnc_host / nnc_captured"}
    return {"benchmark": "gpu_loop", "device": dev, "n": n, "iters": iters, "repeat": repeat,
            "ms": ms, "us_per_iteration": {k: v * 1e3 / iters for k, v in ms.items()},
            "ratios": ratios, "failed": failed, "checks": checks,
            "target": {f"nnc_captured >= {TARGET_SPEEDUP}x nnc_host": target},
            "ok": all(c["ok"] for c in checks)}


def main(argv=None):
    p = _util.parser("GPU: a while loop as a CUDA conditional node vs host-driven loops",
                     repeat=20)
    p.add_argument("--n", type=int, default=1024, help="vector length (default 1024)")
    p.add_argument("--iters", type=int, default=100, help="iterations (default 100)")
    a = p.parse_args(argv)
    if a.n < 1 or a.iters < 1 or a.repeat < 1:
        p.error("--n, --iters and --repeat must be at least 1")
    if not nnc.cuda_available():
        print(f"no GPU: {nnc.cuda_unavailable_reason()}")
        return 0
    say = (lambda *x: print(*x, file=sys.stderr, flush=True)) if a.json else print
    r = run(a.n, a.iters, a.repeat, say)
    r.update(date=_util.now(), command=_util.command_line())
    say(_util.table(["variant", "ms (median)", "us / iteration"],
                    [[k, _util.fmt(v), _util.fmt(r["us_per_iteration"][k])]
                     for k, v in r["ms"].items()]))
    for k, v in r["ratios"].items():
        say(f"{k}: {v:.2f}x")
    for k, why in r["failed"].items():
        say(f"{k}: FAILED {why}")
    if a.json:
        _util.emit_json(r)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
