"""GPU: CUDA streams, static schedules, captured replay, and the peers (docs/gpu.md).

    python -m benchmarks.gpu [--json] [--quick] [--repeat R] [--budget S] [--size S]
                             [--kernels N] [--max-streams M] [--peers a,b,c]
                             [--cudnn-benchmark {on,off}] [--precision {fp32,tf32,fp16}]
                             [--compile-budget S] [--save DIR]

nnc's side runs through ``nnc.cuda``: CPU-built graphs copied to the GPU with
``nnc.cuda.capture.to_gpu`` and run with ``g.run(stream=s); s.wait()`` on ``nnc.Stream("gpu")``,
so each measurement is the wall time of one run, host and device.

- (a) ``independent``: N independent SCALAR_MUL nodes on 4096-element float32 tensors on one
  stream (``max_streams=1``) vs the default schedule (N streams);
- (b) ``inception``: Inception-V3 batch 1 (``nnc.models.inception``, ``g.simplify()`` applied
  as the CPU benchmarks do) on one stream, on its static schedule's streams, and replayed from
  CUDA graphs captured from each (``1_stream_replay``, ``replay``), for two backend sets:
  ``GPU_REF`` (every node that has a GPU_REF backend pinned to it: nnc's reference kernels) and
  ``GPU_OPT`` (each node's default backend: GPU_OPT where a library backend is installed and
  takes the node). The GPU_OPT set is skipped, with the reason, when no node of the graph
  picks GPU_OPT;
  Each set records which implementation each node ran (``implementations``, counted: a
  GPU_OPT convolution as ``nnc.cuda.cudnn_conv.implementation`` names it, "cudnn fused",
  "cudnn + epilogue" or "GPU_REF"; a GPU_OPT GEMM "cublas"; a node on GPU_REF "GPU_REF"; a
  NOOP "NOOP"; any other node its backend);
- (c) ``dispatch``: host time to enqueue a run (``g.run(stream=s)``, timed without waiting)
  and to replay one (``CudaGraph.replay``), for each set, per node and per launched op (a node
  that enqueues work: every node but the NOOPs that ``g.simplify()`` leaves where it fused a
  ReLU);
- (d) peers on the same weights (``nnc.onnx.save`` of the graph, as benchmarks/streams.py
  does): PyTorch eager on CUDA, PyTorch replaying a CUDA graph of that eager step, that step
  through ``torch.compile`` in modes "max-autotune" and "reduce-overhead" (compile time
  reported apart, within ``--compile-budget`` seconds, default 300), and onnxruntime's CUDA
  execution provider; benchmarks/_gpu_peers.py says how each is set up (cudnn.benchmark on by
  default). A peer that cannot run is reported as ``unavailable: <reason>``.

Precision: ``--precision fp32`` (the default) turns TF32 off in torch, ``tf32`` turns it on for
convolutions and matrix products (PyTorch's own default for convolutions); the report holds
the settings as torch reads them back afterwards, and onnxruntime's provider options as its
session reports them (TF32 off). nnc follows the same setting (``nnc.cuda.set_precision``
"ieee" or "tf32": GPU_OPT's cuDNN and cuBLAS calls; GPU_REF's kernels stay float32), so the
comparison is like with like. A configuration with TF32 on (a torch peer, or nnc's GPU_OPT
set) is checked against ``TOLERANCE_TF32``. ``--precision fp16`` runs Inception in float16:
nnc's sets are built from ``to_gpu(..., dtype="float16")`` (nnc's precision stays "ieee",
which float16 nodes ignore), the torch peers run float16 weights and input (TF32 off, as for
fp32), onnxruntime the ONNX model converted to float16; (a) stays float32. nnc's float32
replay of the main set (``inception_<set>_fp32_replay``) is timed in the same rounds, so the
target "fp16 within tolerance and faster than fp32" is read in one process.

Raw results: ``--save DIR`` (or the environment variable NNC_GPU_BENCH_SAVE=DIR) writes the
whole report, samples included, to ``DIR/gpu-<UTC date and time>-<device name>.json``;
benchmarks/results/ holds the files docs/benchmarks.md quotes.

Timing: every configuration in the same interleaved rounds (``_util.measure_interleaved``),
medians and medians of per-round ratios. Each configuration is warmed up (compilation, cuDNN's
search, capture) before its cost is estimated; then the rounds are ``--repeat`` or fewer, as many
as fit in ``--budget`` seconds (at least 3). ``--quick`` is a smoke run: 75x75, 8 kernels, at
most 5 rounds, a 20 s budget.

Checks (a failed one prints FAIL and makes the exit status 1): the logits of every nnc
configuration (zeroed on the device before its checked run) and of every peer are within
``TOLERANCE`` x max|logits| of nnc's CPU run of the same graph (``TOLERANCE_TF32`` with TF32
on, ``TOLERANCE_FP16`` for the float16 configurations of ``--precision fp16``).

Targets (H100/H200; reported, never asserted): Inception-V3 with GPU_OPT, multi-stream
>= 1.3x over one stream (both replayed, so the streams are what differs; the eager ratio is
reported beside it); dispatch <= 5 us/node eager and <= 0.2 us/node replayed; replayed
latency <= 1.2x PyTorch's with CUDA graphs; per launched op: eager dispatch
<= 10 us per launched op with GPU_OPT and <= 5 with GPU_REF; replayed latency <= torch.compile
"max-autotune"'s (and "reduce-overhead"'s) at the same precision; under fp16, the float16
checks pass and the float16 replay beats the float32 one. Without a GPU the benchmark prints
``no GPU: <reason>`` (with ``--json``, ``{"gpu": null, "reason": ...}``), saves nothing and
exits 0.
"""

import json
import math
import os
import re
import sys
import time
from collections import Counter

import numpy as np

import nnc
from benchmarks import _util
from benchmarks._gpu_fp16 import Fp32Replay
from benchmarks._gpu_peers import COMPILE_BUDGET, COMPILE_MODES, PEERS, PRECISIONS, make_peers

TARGET_MULTI_STREAM = 1.3
TARGET_EAGER_US = 5.0
TARGET_REPLAY_US = 0.2
TARGET_VS_TORCH_GRAPHS = 1.2
TARGET_EAGER_LAUNCHED_US = {"GPU_OPT": 10.0, "GPU_REF": 5.0}
TARGET_VS_TORCH_COMPILE = 1.0
TOLERANCE = 1e-3        # |logits - CPU logits| / max|CPU logits|
# A torch peer with TF32 on: its convolutions round their inputs to 10 mantissa bits.
TOLERANCE_TF32 = 1e-2
# Inception-V3 in float16 (docs/gpu.md, "Precision: TF32 and float16"): weights, input and
# every layer's output rounded to 10 mantissa bits, the errors compounding through the network.
TOLERANCE_FP16 = 1e-2
SAVE_ENV = "NNC_GPU_BENCH_SAVE"
# --precision -> nnc.cuda.set_precision's value (GPU_OPT's convolutions and matrix products).
NNC_PRECISION = {"fp32": "ieee", "tf32": "tf32", "fp16": "ieee"}
# --precision -> the dtype of nnc's Inception copies (to_gpu's dtype; None keeps float32).
NNC_DTYPE = {"fp32": None, "tf32": None, "fp16": "float16"}
SETS = ("GPU_REF", "GPU_OPT")
QUICK = {"size": 75, "repeat": 5, "kernels": 8, "budget": 20.0}
PACKAGES = ("numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "torch", "cuda-bindings",
            "nvidia-cuda-nvrtc", "nvmath-python", "nvidia-cudnn-frontend")


def _nvidia_driver():
    """The NVIDIA driver's version ("580.159.04"), from the kernel module or NVML; else None."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            for word in f.readline().split():
                if word[:1].isdigit() and word.count(".") >= 1:
                    return word
    except OSError:
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # no NVML here: the report says None
        return None


def _cudnn_version():
    """The cuDNN library nnc's GPU_OPT convolutions load (through nvidia-cudnn-frontend), as
    cuDNN numbers it (91900: 9.19.0), or why there is none."""
    from nnc.cmd.convolution.gpu import cudnn as cudnn_conv

    if not cudnn_conv.available():
        return f"unavailable: {cudnn_conv.unavailable_reason()}"
    try:
        import cudnn

        return cudnn.backend_version()
    except Exception as e:  # reported, never a failure
        return f"unreadable: {type(e).__name__}: {e}"


def device_info(ordinal=0):
    """Name, compute capability, SMs, driver, CUDA and cuDNN versions of GPU ``ordinal``."""
    from nnc.cuda import driver, nvrtc

    dev = driver.device(ordinal)
    cuda_major, cuda_minor = driver.driver_version()
    try:
        major, minor = nvrtc.nvrtc_version()
        nvrtc_v = f"{major}.{minor}"
    except nnc.CUDAError as e:
        nvrtc_v = f"unavailable: {e}"
    try:
        from cuda.bindings import __version__ as bindings
    except ImportError:  # the fake driver's tests run without it too
        bindings = None
    return {"ordinal": ordinal, "name": dev.name, "compute_capability": f"{dev.arch // 10}."
            f"{dev.arch % 10}", "sm_count": dev.sm_count, "nvidia_driver": _nvidia_driver(),
            "cuda_driver": f"{cuda_major}.{cuda_minor}", "cuda_bindings": bindings,
            "nvrtc": nvrtc_v, "cudnn": _cudnn_version()}


def _independent_graph(n, size=4096):
    g = nnc.Graph()
    for _ in range(n):
        g.exec(nnc.Cmd("SCALAR_MUL", a=1.0001), [np.ones(size, np.float32)],
               [np.zeros(size, np.float32)])
    return g


def _gpu_copy(cpu_graph, max_streams, pin_ref, dtype=None):
    """A GPU copy of ``cpu_graph`` with its static schedule (``max_streams`` 0: no cap);
    ``pin_ref``: every node that has a GPU_REF backend is pinned to it; ``dtype`` "float16":
    every floating-point tensor, the input's values included, converted on the way."""
    from nnc.cuda.capture import to_gpu

    g, _ = to_gpu(cpu_graph, dtype=dtype)
    if pin_ref:
        for e in g.execs:
            if e.backend != "GPU_REF" and "GPU_REF" in nnc.backends(e.cmd.name, device="gpu"):
                e.backend = "GPU_REF"
    nnc.static_schedule(g, stream_type="gpu", max_streams=max_streams)
    return g


def _backends(g):
    return dict(Counter(f"{e.cmd.name}/{e.backend}" for e in g.execs).most_common())


def _launched(g):
    """The nodes of ``g`` that enqueue work: all but NOOPs (a NOOP is what ``g.simplify()``
    leaves where it fused a ReLU into its convolution; the runner skips it)."""
    return sum(e.cmd.name != "NOOP" for e in g.execs)


def _json_safe(d):
    return json.loads(json.dumps(d, default=str))


def _implementations(g):
    """(implementation -> node count, [the GPU_OPT convolutions' records]) for ``g``: a
    GPU_OPT CONVOLUTION as ``nnc.cuda.cudnn_conv.implementation`` reports it ("cudnn fused",
    "cudnn + epilogue" or "GPU_REF"), a GPU_OPT GEMM "cublas", a node on GPU_REF "GPU_REF", a
    NOOP "NOOP", any other node its backend. Read after the runs (the plans are built)."""
    from nnc.cmd.convolution.gpu import cudnn as cudnn_conv

    impl_of = getattr(cudnn_conv, "implementation", None)
    counts, records = Counter(), []
    for i, e in enumerate(g.execs):
        name, backend = e.cmd.name, e.backend
        if name == "NOOP":
            what = "NOOP"
        elif backend == "GPU_REF":
            what = "GPU_REF"
        elif name == "GEMM" and backend == "GPU_OPT":
            what = "cublas"
        elif name == "CONVOLUTION" and backend == "GPU_OPT":
            if impl_of is None:
                what = "GPU_OPT (this nnc.cuda.cudnn_conv cannot say which implementation)"
            else:
                try:
                    rec = _json_safe(impl_of(e.cmd, e.inputs, e.outputs))
                    what = str(rec["impl"])
                except Exception as ex:  # reported in the count, never a failure
                    rec, what = None, f"unknown ({type(ex).__name__}: {ex})"
                if rec is not None:
                    records.append({"node": i, **rec})
        else:
            what = backend
        counts[what] += 1
    return dict(counts.most_common()), records


def _run(g, s):
    def fn():
        g.run(stream=s)
        s.wait()
    return fn


def _rel_err(got, want):
    scale = max(float(np.abs(want).max()), 1e-30)
    diff = float(np.abs(got.astype(np.float64) - want).max())
    return diff, diff / scale


class _Set:
    """One backend set of Inception on the GPU: ``one`` (a copy on one stream), ``many`` (a
    copy on its schedule's streams), ``cg`` (a CUDA graph captured from ``many``) and ``cg_one``
    (one captured from ``one``). The two replays differ only in the streams the GPU sees: with
    the host's dispatch out of the way, they measure what the schedule's streams gain."""

    def __init__(self, name, one, many, s, out_index):
        from nnc.cuda.capture import capture

        self.name, self.one, self.many, self.s = name, one, many, s
        self.cg = capture(many, s)          # runs ``many`` once first (compiles the kernels)
        self.cg_one = capture(one, s)
        self.out = {"one": one.execs[out_index].outputs[0],
                    "many": many.execs[out_index].outputs[0]}

    def fns(self):
        s, cg = self.s, self.cg

        def replay():
            cg.replay(s)
            s.wait()

        def replay_one():
            self.cg_one.replay(s)
            s.wait()
        return {f"inception_{self.name}_1_stream": _run(self.one, s),
                f"inception_{self.name}_streams": _run(self.many, s),
                f"inception_{self.name}_replay": replay,
                f"inception_{self.name}_1_stream_replay": replay_one}

    def check(self, want, checks, tolerance=TOLERANCE):
        """Each configuration's logits, zeroed on the device first, against the CPU's."""
        from nnc.cuda import memory

        errs = {}
        for config, (fn, out) in {"1_stream": (_run(self.one, self.s), self.out["one"]),
                                  "streams": (_run(self.many, self.s), self.out["many"]),
                                  "replay": (self.fns()[f"inception_{self.name}_replay"],
                                             self.out["many"]),
                                  "1_stream_replay": (
                                      self.fns()[f"inception_{self.name}_1_stream_replay"],
                                      self.out["one"])}.items():
            memory.fill_zero(out)
            fn()
            diff, rel = _rel_err(out.numpy(), want)
            errs[config] = diff
            checks.append({"check": f"inception_{self.name}_{config} logits within "
                           f"{tolerance:g} of the CPU's", "ok": rel <= tolerance,
                           "max_abs_error": diff, "rel_error": rel})
        return errs

    def dispatch(self, rounds):
        """Host microseconds per node: (eager enqueue, replay enqueue), medians."""
        s, nodes = self.s, len(self.many)

        def per_node(enqueue):
            samples = []
            for _ in range(rounds):
                s.wait()
                t0 = time.perf_counter()
                enqueue()
                samples.append(time.perf_counter() - t0)
                s.wait()
            return _util.median(samples) / nodes * 1e6

        return (per_node(lambda: self.many.run(stream=s)),
                per_node(lambda: self.cg.replay(s)))


def _build_sets(cpu_graph, out_index, max_streams, s, checks, say, dtype=None):
    """{set name: _Set}, and {set name: why it was skipped or failed}; ``dtype``: _gpu_copy's."""
    sets, skipped = {}, {}
    for name in SETS:
        try:
            many = _gpu_copy(cpu_graph, max_streams, name == "GPU_REF", dtype)
            if name == "GPU_OPT" and not any(e.backend == "GPU_OPT" for e in many.execs):
                have = [c for c in nnc.commands() if "GPU_OPT" in nnc.backends(c, device="gpu")]
                skipped[name] = ("skipped: no node's default backend is GPU_OPT (GPU_OPT "
                                 + (f"is registered for {', '.join(have)} but takes none of "
                                    "this graph's nodes)" if have else
                                    "is not registered: its libraries are not importable)"))
                say(f"{name}: {skipped[name]}")
                continue
            one = _gpu_copy(cpu_graph, 1, name == "GPU_REF", dtype)
            sets[name] = _Set(name, one, many, s, out_index)
        except Exception as e:  # a set that cannot run is reported; the others still run
            import traceback

            say("".join(traceback.format_exception(e)).rstrip())
            skipped[name] = f"failed: {type(e).__name__}: {e}"
            checks.append({"check": f"inception_{name} runs", "ok": False,
                           "error": skipped[name]})
            continue
        sched = many.schedule
        say(f"{name}: {len(many)} nodes on {sched.stream_count} streams, "
            f"{sched.signal_count} signals; backends {_backends(many)}")
    return sets, skipped


def _estimate_rounds(fns, repeat, budget, sets):
    """How many rounds fit in ``budget`` seconds: one untimed call of each configuration,
    after a warm-up call, gives its cost; a call under 50 ms is made twice a round (see
    _util.measure_interleaved); each set's dispatch measurement adds one eager run and one
    replay per round. At least 3 rounds (or ``repeat``, if fewer), at most ``repeat``."""
    cost = {}
    for name, fn in fns.items():
        fn()
        t0 = time.perf_counter()
        fn()
        cost[name] = time.perf_counter() - t0
    per_round = sum(2 * c if c < 0.05 else c for c in cost.values())
    per_round += sum(cost[f"inception_{n}_streams"] + cost[f"inception_{n}_replay"]
                     for n in sets)
    fit = int(budget / max(per_round, 1e-9))
    return max(min(3, repeat), min(repeat, fit)), per_round


def _ratio(samples, a, b):
    """Median over rounds of time(a) / time(b): above 1, b is faster."""
    return _util.median([x / y for x, y in zip(samples[a], samples[b])])


def _target(value, ok, **more):
    return {"value": value, "ok": ok if value is not None else None, **more}


def _why_no_ratio(sets, main, peers_missing, peer):
    if main not in sets:
        return f"inception_{main} did not run"
    return peers_missing.get(peer, f"{peer} was not asked for (--peers)")


def _targets(sets, skipped, ratios, dispatch, launched, peers_missing, precision, fp16=None):
    main = "GPU_OPT" if "GPU_OPT" in sets else "GPU_REF"
    out = {}
    key = f"inception multi-stream >= {TARGET_MULTI_STREAM}x over one stream (GPU_OPT)"
    if "GPU_OPT" in sets:
        # Replayed, so that the streams are what differs: eagerly, GPU_OPT's library calls
        # cost the host more than the GPU work they enqueue, and no schedule can hide that.
        v = ratios["inception_GPU_OPT_1_stream_replay / replay"]
        out[key] = _target(v, v >= TARGET_MULTI_STREAM, set="GPU_OPT", measure="replayed",
                           eager=ratios["inception_GPU_OPT_1_stream / streams"])
    else:
        out[key] = _target(None, None, set="GPU_OPT", why=skipped.get("GPU_OPT", "not run"))
    d = dispatch.get(main)
    for what, limit in (("eager", TARGET_EAGER_US), ("replay", TARGET_REPLAY_US)):
        v = d[what] if d else None
        out[f"{what} dispatch <= {limit} us/node"] = _target(
            v, v is not None and v <= limit, set=main)
    key = f"replay latency <= {TARGET_VS_TORCH_GRAPHS}x PyTorch CUDA graphs"
    k = f"inception_{main}_replay / torch_cuda_graphs"
    if k in ratios:
        v = ratios[k]
        out[key] = _target(v, v <= TARGET_VS_TORCH_GRAPHS, set=main)
    else:
        why = _why_no_ratio(sets, main, peers_missing, "torch_cuda_graphs")
        out[key] = _target(None, None, set=main, why=why)
    for name, limit in TARGET_EAGER_LAUNCHED_US.items():
        key = f"eager dispatch <= {limit} us/launched op ({name})"
        v = launched[name]["eager"] if name in launched else None
        out[key] = _target(v, v is not None and v <= limit, set=name,
                           **({} if name in sets else {"why": skipped.get(name, "not run")}))
    if precision == "fp16":
        # fp16: {"within": every fp16 check of set main passed, "why": why the float32
        # replay did not run, or None}.
        key = f"fp16 within {TOLERANCE_FP16:g} and faster than fp32 (replayed)"
        k = f"inception_{main}_fp32_replay / replay"
        if k in ratios:
            v = ratios[k]
            out[key] = _target(v, fp16["within"] and v > 1.0, set=main, measure="replayed",
                               within_tolerance=fp16["within"])
        else:
            out[key] = _target(None, None, set=main, within_tolerance=fp16["within"],
                               why=fp16["why"] or f"inception_{main} did not run")
    like = {"nnc_precision": NNC_PRECISION[precision], "nnc_dtype": NNC_DTYPE[precision]
            or "float32", "torch_precision": precision}
    for peer, mode in COMPILE_MODES.items():
        key = (f"replay latency <= {TARGET_VS_TORCH_COMPILE}x torch.compile {mode} "
               f"({precision})")
        k = f"inception_{main}_replay / {peer}"
        if k in ratios:
            v = ratios[k]
            out[key] = _target(v, v <= TARGET_VS_TORCH_COMPILE, set=main, **like)
        else:
            why = _why_no_ratio(sets, main, peers_missing, peer)
            out[key] = _target(None, None, set=main, why=why, **like)
    return out


def run(size=299, repeat=50, kernels=64, budget=120.0, max_streams=0, peers=PEERS,
        cudnn_benchmark=True, seed=0, say=print, precision="fp32",
        compile_budget=COMPILE_BUDGET):
    """Measure everything above on gpu:0; returns the report (see docs/benchmarks.md)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    import nnc.onnx
    from nnc.models.inception import build_inception_v3_model

    t_start = time.perf_counter()
    dev = device_info(0)
    say(f"device: {dev['name']} (sm {dev['compute_capability']}, {dev['sm_count']} SMs), "
        f"NVIDIA driver {dev['nvidia_driver']}, CUDA {dev['cuda_driver']}, cuda-bindings "
        f"{dev['cuda_bindings']}, NVRTC {dev['nvrtc']}")
    s = nnc.Stream("gpu:0")
    checks = []
    from nnc import cuda as nnc_cuda

    nnc_cuda.set_precision(NNC_PRECISION[precision])    # read at each GPU_OPT enqueue

    # (a) independent kernels: GPU_REF's SCALAR_MUL, one stream vs the default schedule
    cpu_ind = _independent_graph(kernels)
    ind_one = _gpu_copy(cpu_ind, 1, True)
    ind_many = _gpu_copy(cpu_ind, 0, True)

    # (b) Inception: the CPU reference, the ONNX export for the peers, then the GPU copies
    m = build_inception_v3_model(size=size, seed=seed)
    cpu = m.graph
    x = m.input.numpy().copy()
    try:
        model = nnc.onnx.save(cpu, None, inputs=[m.input], outputs=[m.logits, m.output])
    except nnc.onnx.OnnxMissingError as e:
        model, no_onnx = None, f"onnx is not installed ({e})"
    fused = cpu.simplify()
    cpu.run()
    want = m.logits.numpy().astype(np.float64)
    out_index = next(i for i, e in enumerate(cpu.execs)
                     if any(t is not None and t.data_ptr == m.logits.data_ptr
                            for t in e.outputs))
    say(f"Inception-V3 {size}x{size} batch 1: {len(cpu)} nodes ({fused} conv+ReLU fused)")
    sets, skipped = _build_sets(cpu, out_index, max_streams, s, checks, say, NNC_DTYPE[precision])
    main, fp32 = "GPU_OPT" if "GPU_OPT" in sets else "GPU_REF", None
    if precision == "fp16" and main in sets:
        try:
            fp32 = Fp32Replay(_gpu_copy(cpu, max_streams, main == "GPU_REF"), out_index, s)
        except Exception as e:  # reported; the fp16 configurations still run
            import traceback

            say("".join(traceback.format_exception(e)).rstrip())
            fp32 = f"failed: {type(e).__name__}: {e}"
            checks.append({"check": f"inception_{main}_fp32_replay runs", "ok": False,
                           "error": fp32})

    # (d) peers
    if model is None:
        found, missing = {}, dict.fromkeys(peers, no_onnx)
        peer_settings = {"torch": None, "ort_cuda": None}
    else:
        found, missing, peer_settings = make_peers(
            model, {model.graph.input[0].name: x}, 0, peers, cudnn_benchmark, say,
            precision=precision, compile_budget=compile_budget)
    for name in peers:
        if name in missing:
            say(f"{name}: unavailable: {missing[name]}")

    fns = {"independent_1_stream": _run(ind_one, s), "independent_n_streams": _run(ind_many, s)}
    for st in sets.values():
        fns.update(st.fns())
    if isinstance(fp32, Fp32Replay):
        fns[f"inception_{main}_fp32_replay"] = fp32
    fns.update(found)
    rounds, per_round = _estimate_rounds(fns, repeat, budget, sets)
    say(f"timing {len(fns)} configurations: {rounds} round(s) of about {per_round:.3f} s")
    t_setup = time.perf_counter() - t_start
    samples = _util.measure_interleaved(fns, rounds)
    dispatch, launched = {}, {}
    for name, st in sets.items():
        eager, replay = st.dispatch(rounds)
        dispatch[name] = {"eager": eager, "replay": replay}
        ops, nodes = _launched(st.many), len(st.many)
        per_op = nodes / max(ops, 1)
        launched[name] = {"eager": eager * per_op, "replay": replay * per_op,
                          "launched_ops": ops, "nodes": nodes}
    implementations = {name: _implementations(st.many) for name, st in sets.items()}

    nnc_tf32 = precision == "tf32"      # GPU_OPT's library calls; GPU_REF stays float32
    fp16 = precision == "fp16"          # both sets, every tensor
    errors = {name: st.check(want, checks, TOLERANCE_FP16 if fp16 else TOLERANCE_TF32
                             if nnc_tf32 and name == "GPU_OPT" else TOLERANCE)
              for name, st in sets.items()}
    fp16_within = all(c["ok"] for c in checks if c["check"].startswith(f"inception_{main}_")
                      and "_fp32_replay" not in c["check"])
    if isinstance(fp32, Fp32Replay):
        diff, rel = fp32.check(want, _rel_err)
        checks.append({"check": f"inception_{main}_fp32_replay logits within {TOLERANCE:g} of "
                       "the CPU's", "ok": rel <= TOLERANCE, "max_abs_error": diff,
                       "rel_error": rel})
    peer_report = {}
    for name in peers:
        if name not in found:
            peer_report[name] = {"status": f"unavailable: {missing[name]}"}
            continue
        p = found[name]
        diff, rel = _rel_err(p.fetch_outputs()[0], want)
        tf32 = name.startswith("torch_") and any((peer_settings["torch"] or {})
                                                  .get("tf32", {}).values())
        tol = TOLERANCE_FP16 if fp16 else TOLERANCE_TF32 if tf32 else TOLERANCE
        checks.append({"check": f"{name} logits within {tol:g} of nnc's CPU run"
                       + (" (float16)" if fp16 else " (TF32 on)" if tf32 else ""),
                       "ok": rel <= tol, "max_abs_error": diff, "rel_error": rel})
        peer_report[name] = {"status": "ok", "describe": p.describe(), "max_abs_error": diff,
                             "rel_error": rel, "tolerance": tol,
                             **(p.info() if hasattr(p, "info") else {})}

    ratios = {"independent_1_stream / n_streams":
              _ratio(samples, "independent_1_stream", "independent_n_streams")}
    for name in sets:
        k = f"inception_{name}"
        ratios[f"{k}_1_stream / streams"] = _ratio(samples, f"{k}_1_stream", f"{k}_streams")
        ratios[f"{k}_1_stream / replay"] = _ratio(samples, f"{k}_1_stream", f"{k}_replay")
        ratios[f"{k}_streams / replay"] = _ratio(samples, f"{k}_streams", f"{k}_replay")
        ratios[f"{k}_1_stream_replay / replay"] = _ratio(samples, f"{k}_1_stream_replay",
                                                         f"{k}_replay")
        for p in found:
            ratios[f"{k}_replay / {p}"] = _ratio(samples, f"{k}_replay", p)
    if isinstance(fp32, Fp32Replay):
        k = f"inception_{main}"
        ratios[f"{k}_fp32_replay / replay"] = _ratio(samples, f"{k}_fp32_replay", f"{k}_replay")
    return {
        "benchmark": "gpu",
        "gpu": dev["name"],
        "device": dev,
        "nnc": nnc.__version__,
        "settings": {"size": size, "kernels": kernels, "repeat": repeat, "rounds": rounds,
                     "budget_s": budget, "max_streams": max_streams, "peers": list(peers),
                     "tolerance": TOLERANCE, "tolerance_tf32": TOLERANCE_TF32,
                     "tolerance_fp16": TOLERANCE_FP16,
                     "compile_budget_s": compile_budget,
                     "precision": {"requested": precision, "nnc": nnc_cuda.precision(),
                                   "nnc_dtype": {n: str(st.out["many"].dtype)
                                                 for n, st in sets.items()},
                                   "torch_dtype": (peer_settings["torch"] or {}).get("dtype"),
                                   "torch_tf32": (peer_settings["torch"] or {}).get("tf32"),
                                   "ort_cuda_tf32": (peer_settings["ort_cuda"] or {}).get("tf32")},
                     "torch": peer_settings["torch"], "ort_cuda": peer_settings["ort_cuda"]},
        "independent": {"kernels": kernels, "streams": ind_many.schedule.stream_count},
        "inception": {
            "nodes": len(cpu), "fused": fused,
            "sets": {name: {"status": "ok", "backends": _backends(st.many),
                            "streams": st.many.schedule.stream_count,
                            "signals": st.many.schedule.signal_count,
                            "launched_ops": launched[name]["launched_ops"],
                            "dtype": str(st.out["many"].dtype),
                            "implementations": implementations[name][0],
                            "implementation_nodes": implementations[name][1],
                            "max_abs_error": errors[name]} for name, st in sets.items()}
            | {name: {"status": why} for name, why in skipped.items()},
        },
        "peers": peer_report,
        "ms": {k: _util.median(v) * 1e3 for k, v in samples.items()},
        "samples_ms": {k: [t * 1e3 for t in v] for k, v in samples.items()},
        "ratios": ratios,
        "dispatch_us_per_node": dispatch,
        "dispatch_us_per_launched_op": launched,
        "checks": checks,
        "targets": _targets(sets, skipped, ratios, dispatch, launched, missing, precision,
                            {"within": fp16_within, "why": fp32 if isinstance(fp32, str)
                             else None}),
        "seconds": {"setup": t_setup, "total": time.perf_counter() - t_start},
        "ok": all(c["ok"] for c in checks),
    }


def save(report, folder):
    """Write ``report`` to ``folder/gpu-<UTC date and time>-<device name>.json`` (the folder
    made if missing, a file never overwritten); returns the path."""
    when = report["date"].replace("+00:00", "Z").replace("-", "").replace(":", "")
    slug = re.sub(r"[^a-z0-9]+", "-", str(report["gpu"]).lower()).strip("-") or "gpu"
    os.makedirs(folder, exist_ok=True)
    base = os.path.join(folder, f"gpu-{when}-{slug}")
    path, n = base + ".json", 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}.json"
    with open(path, "x") as f:
        json.dump(report, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return path


def _verdict(t):
    if t["ok"] is None:
        return f"not measured ({t.get('why', '')})"
    return f"{_util.fmt(t['value'])}: {'met' if t['ok'] else 'MISSED'} ({t['set']})"


def render(r):
    d = r["device"]
    out = [f"{d['name']}: compute capability {d['compute_capability']}, {d['sm_count']} SMs; "
           f"NVIDIA driver {d['nvidia_driver']}, CUDA {d['cuda_driver']} (driver), cuda-bindings "
           f"{d['cuda_bindings']}, NVRTC {d['nvrtc']}, cuDNN {d.get('cudnn')}; nnc {r['nnc']}; "
           f"{r.get('date', '')}",
           f"Inception-V3 {r['settings']['size']}x{r['settings']['size']} batch 1, "
           f"{r['inception']['nodes']} nodes; {r['settings']['kernels']} independent kernels "
           f"on {r['independent']['streams']} streams; {r['settings']['rounds']} round(s)"]
    prec = r["settings"]["precision"]
    out.append(f"precision {prec['requested']}: nnc {prec['nnc']} on tensors "
               f"{prec.get('nnc_dtype')}, torch {prec.get('torch_dtype')} with TF32 (read back) "
               f"{prec['torch_tf32']}, onnxruntime CUDA TF32 (read back) "
               f"{prec['ort_cuda_tf32']}")
    for name, st in r["inception"]["sets"].items():
        if st["status"] == "ok":
            out.append(f"{name}: {st['streams']} streams, {st['signals']} signals; "
                       f"backends {st['backends']}; implementations {st['implementations']}")
        else:
            out.append(f"{name}: {st['status']}")
    for name, p in r["peers"].items():
        out.append(f"{name}: {p.get('describe') or p['status']}")
    out.append(_util.table(["config", "ms / run (median)"],
                           [[k, _util.fmt(v)] for k, v in r["ms"].items()]))
    out.append(_util.table(["ratio (median of per-round)", "x"],
                           [[k, _util.fmt(v)] for k, v in r["ratios"].items()]))
    for name, d in r["dispatch_us_per_node"].items():
        op = r["dispatch_us_per_launched_op"][name]
        out.append(f"host dispatch ({name}): {_util.fmt(d['eager'])} us/node eager, "
                   f"{_util.fmt(d['replay'])} us/node replayed; per launched op "
                   f"({op['launched_ops']} of {op['nodes']} nodes): {_util.fmt(op['eager'])} "
                   f"us eager, {_util.fmt(op['replay'])} us replayed")
    for c in r["checks"]:
        err = f" (max abs error {c['max_abs_error']:.3g})" if "max_abs_error" in c else ""
        out.append(f"{'ok' if c['ok'] else 'FAIL'}: {c['check']}{err}"
                   + (f": {c['error']}" if "error" in c else ""))
    for name, t in r["targets"].items():
        out.append(f"target {name}: {_verdict(t)}")
    out.append(f"setup {r['seconds']['setup']:.1f} s, total {r['seconds']['total']:.1f} s")
    return "\n".join(out)


def main(argv=None):
    p = _util.parser("GPU: one stream vs scheduled streams vs captured replay, and the peers",
                     repeat=50)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 75x75, 8 kernels, at most 5 rounds, 20 s budget")
    p.add_argument("--size", type=int, default=None, help="Inception-V3 input (default 299)")
    p.add_argument("--kernels", type=int, default=None, help="independent kernels (default 64)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for the timed rounds (default 120)")
    p.add_argument("--max-streams", type=int, default=0,
                   help="the schedule's stream cap (default 0: none)")
    p.add_argument("--peers", default=",".join(PEERS),
                   help=f"comma-separated subset of {','.join(PEERS)} ('' for none)")
    p.add_argument("--cudnn-benchmark", choices=("on", "off"), default="on",
                   help="torch.backends.cudnn.benchmark for the PyTorch peers (default on)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32 (TF32 off, the default), tf32 (TF32 on for convolutions and "
                   "matrix products: the PyTorch peers, nnc's GPU_OPT) or fp16 (Inception in "
                   "float16 for nnc and every peer)")
    p.add_argument("--compile-budget", type=float, default=COMPILE_BUDGET,
                   help="seconds for each torch.compile peer's compile and warm-up calls "
                   f"(default {COMPILE_BUDGET:g}); past it the peer is unavailable")
    p.add_argument("--save", metavar="DIR", default=os.environ.get(SAVE_ENV) or None,
                   help="write the whole report to DIR/gpu-<UTC date>-<device>.json "
                   f"(default: ${SAVE_ENV}, if set)")
    a = p.parse_args(argv)
    peers = tuple(x for x in a.peers.split(",") if x)
    if set(peers) - set(PEERS):
        p.error(f"unknown peers {sorted(set(peers) - set(PEERS))}; choose from {PEERS}")
    base = QUICK if a.quick else {"size": 299, "repeat": a.repeat, "kernels": 64,
                                  "budget": 120.0}
    size = a.size or base["size"]
    repeat = min(a.repeat, base["repeat"])
    kernels = a.kernels or base["kernels"]
    budget = base["budget"] if a.budget is None else a.budget
    if (repeat < 1 or kernels < 1 or budget <= 0 or a.max_streams < 0
            or not 0 < a.compile_budget < math.inf):
        p.error("--repeat and --kernels must be at least 1, --budget above 0, "
                "--compile-budget a finite number above 0, --max-streams at least 0")
    if not nnc.cuda_available():
        reason = nnc.cuda_unavailable_reason()
        print(f"no GPU: {reason}")
        if a.json:
            _util.emit_json({"benchmark": "gpu", "gpu": None, "reason": reason,
                             "nnc": nnc.__version__, "date": _util.now(),
                             "command": _util.command_line()})
        return 0
    say = (lambda *x: print(*x, file=sys.stderr, flush=True)) if a.json else \
        (lambda *x: print(*x, flush=True))
    report = run(size, repeat, kernels, budget, a.max_streams, peers, a.cudnn_benchmark == "on",
                 say=say, precision=a.precision, compile_budget=a.compile_budget)
    report.update(date=_util.now(), command=_util.command_line(),
                  machine=_util.machine_info(PACKAGES))
    if a.save:
        try:
            report["saved"] = save(report, a.save)
            say(f"saved {report['saved']}")
        except OSError as e:         # the measurements still go to stdout below
            report["saved"] = f"failed: {type(e).__name__}: {e}"
            report["checks"].append({"check": f"the report is saved in {a.save}", "ok": False,
                                     "error": report["saved"]})
            report["ok"] = False
    print(render(report), flush=True)
    if a.json:
        _util.emit_json(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
