"""The GPU peers of benchmarks/gpu.py: the network nnc runs, with the same weights (the ONNX
model ``nnc.onnx.save`` wrote from nnc's graph), in what a user would run instead on the same
GPU.

- ``torch_eager``: benchmarks/_torch_eager.py's op-by-op PyTorch eager loop on CUDA;
- ``torch_cuda_graphs``: that loop's step captured once into a ``torch.cuda.CUDAGraph`` and
  replayed, as torch's CUDA-graphs documentation does it: static inputs, three warm-up steps on
  a side stream (so cuDNN's algorithm search and the caching allocator settle outside the
  capture), then capture (in thread-local mode: nnc's threads are idle, but not torch's
  business) and ``replay()``;
- ``torch_compile_max_autotune`` and ``torch_compile_reduce_overhead``: that loop's step
  through ``torch.compile`` in mode "max-autotune" (Inductor's fused, autotuned kernels,
  replayed as CUDA graphs: what a user picks for batch-1 latency) and "reduce-overhead" (CUDA
  graphs of Inductor's default kernels); ``TorchCompiled`` says how (weights marked static,
  ``dynamic=False``, ``fullgraph=True``). Their compile and warm-up time is reported apart
  (``compile_s``), never in the timed rounds, and has a budget (``--compile-budget``): past
  it, or when torch.compile raises, the peer is unavailable with the reason;
- ``ort_cuda``: onnxruntime's CUDA execution provider through ``nnc.models.peers.OrtRun``
  with ``device="cuda:N"``: inputs and outputs bound to device memory (IOBinding), TF32 off
  (the session's provider options are read back into the report).

``precision`` "fp16": every peer runs the network in float16. The torch peers build their
step from float16 weights and a float16 input (``TorchEager(dtype="float16")``: what
``model.half()`` does to a module), in the same memory format and modes; torch's float32
settings stay as in "fp32" (TF32 off: they govern float32 math only, and none is left). The
onnxruntime peer runs ``float16_model(model)``: the same ONNX model with its float32
initializers, input and outputs stored as float16.

PyTorch settings, the same for every torch column and recorded in the report as torch
reports them after they are set (``torch_precision``): channels_last activations and
convolution weights, ``torch.inference_mode`` (``torch.no_grad`` for the compiled step),
``precision`` "fp32" (the default: TF32 off for convolutions and matrix products, as nnc's
kernels compute in float32; cuDNN uses TF32 by default on Ampere and later, which would make
the peers both faster and less exact than nnc) or "tf32" (on: PyTorch's default for
convolutions), and ``torch.backends.cudnn.benchmark`` **on**: cuDNN times its algorithms for
each convolution shape during the untimed warm-up runs, PyTorch's fastest setting for a
network whose shapes never change.

Every call of a peer returns when its outputs are ready on the device (a device
synchronisation), and ``fetch_outputs()`` copies them to the host for the output check.
A peer that cannot run here is reported as ``unavailable: <reason>``, never as a failure.
"""

import contextlib
import signal
import sys
import threading
import time
import traceback

PEERS = ("torch_eager", "torch_cuda_graphs", "torch_compile_max_autotune",
         "torch_compile_reduce_overhead", "ort_cuda")
COMPILE_MODES = {"torch_compile_max_autotune": "max-autotune",
                 "torch_compile_reduce_overhead": "reduce-overhead"}
PRECISIONS = ("fp32", "tf32", "fp16")
COMPILE_BUDGET = 300.0      # seconds for a torch.compile peer's compile and warm-up calls
WARMUP_CALLS = 20           # at most, before a compiled step counts as warm


def torch_cuda_reason(ordinal):
    """None when PyTorch can run on CUDA device ``ordinal``, else why not."""
    try:
        import torch
    except ImportError as e:
        return f"torch is not installed ({e})"
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} sees no CUDA device "
                f"(built for CUDA {torch.version.cuda})")
    if ordinal >= torch.cuda.device_count():
        return f"torch sees {torch.cuda.device_count()} CUDA device(s), not cuda:{ordinal}"
    return None


def _read(get):
    """``get()``, or what it raised (torch refuses to read some flags that were set through
    the other of its two precision APIs): a setting is reported as torch has it, or not."""
    try:
        v = get()
    except Exception as e:  # reported in the settings, never a failure
        return f"unreadable: {type(e).__name__}: {e}"
    return v if isinstance(v, (bool, int, float, str)) or v is None else str(v)


def torch_precision(torch):
    """The float32 settings torch has now, read back from torch: the precision API's
    (torch >= 2.9: "ieee" or "tf32") where it exists, else the allow_tf32 flags; and
    ``torch.get_float32_matmul_precision()``."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        out = {"api": "fp32_precision",
               "cudnn.conv.fp32_precision": _read(lambda: conv.fp32_precision),
               "cuda.matmul.fp32_precision": _read(
                   lambda: torch.backends.cuda.matmul.fp32_precision)}
        if hasattr(torch.backends, "fp32_precision"):
            out["backends.fp32_precision"] = _read(lambda: torch.backends.fp32_precision)
    else:
        out = {"api": "allow_tf32",
               "cudnn.allow_tf32": _read(lambda: torch.backends.cudnn.allow_tf32),
               "cuda.matmul.allow_tf32": _read(lambda: torch.backends.cuda.matmul.allow_tf32)}
    out["float32_matmul_precision"] = _read(torch.get_float32_matmul_precision)
    return out


def _tf32_in_use(read):
    """Whether convolutions and matrix products may use TF32, from torch_precision()'s
    read-back: {"conv": bool or None, "matmul": bool or None} (None: unreadable)."""
    def on(v, yes):
        return None if isinstance(v, str) and v.startswith("unreadable") else v == yes

    if read["api"] == "fp32_precision":
        return {"conv": on(read["cudnn.conv.fp32_precision"], "tf32"),
                "matmul": on(read["cuda.matmul.fp32_precision"], "tf32")}
    return {"conv": on(read["cudnn.allow_tf32"], True),
            "matmul": on(read["cuda.matmul.allow_tf32"], True)}


def configure_torch(cudnn_benchmark=True, precision="fp32"):
    """Set the PyTorch settings above (process-wide), ``precision`` "fp32" (TF32 off), "tf32"
    (on, for convolutions and matrix products) or "fp16" (TF32 off, as for "fp32": the float16
    network has no float32 math for it to govern); returns the settings as torch reports them
    afterwards, with torch's versions and the dtype the peers run in."""
    import torch

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    tf32 = precision == "tf32"
    torch.backends.cudnn.benchmark = bool(cudnn_benchmark)
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        # torch >= 2.9: the precision API (mixing it with the allow_tf32 flags is an error).
        conv.fp32_precision = "tf32" if tf32 else "ieee"
        torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
    read = torch_precision(torch)
    return {"torch": str(torch.__version__), "torch_cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "precision": precision, "precision_read_back": read, "tf32": _tf32_in_use(read),
            "dtype": dtype_of(precision), "memory_format": "channels_last",
            "mode": "inference_mode"}


def dtype_of(precision):
    """The dtype the network's tensors have under ``precision`` (TF32 is float32 storage)."""
    return "float16" if precision == "fp16" else "float32"


def float16_model(model):
    """A copy of ONNX ``model`` in float16: its float32 initializers, inputs, outputs and
    value_info entries stored as float16 (NumPy's rounding to nearest); every operator then
    runs on float16 tensors. NotImplementedError naming what it cannot convert: a node that
    makes or converts to a dtype of its own (an attribute holding a tensor, a graph or a
    dtype), or a sparse initializer."""
    import numpy as np
    import onnx
    from onnx import TensorProto, numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    if len(g.sparse_initializer):
        raise NotImplementedError("float16_model: the model has sparse initializers")
    typed = {onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS,
             onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS,
             onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS}
    for node in g.node:
        for a in node.attribute:
            if a.type in typed or a.name in ("to", "dtype"):
                raise NotImplementedError(f"float16_model: {node.op_type} node {node.name!r} "
                                          f"has attribute {a.name!r}, which sets a dtype or "
                                          "holds a tensor or graph of its own")
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in [*g.input, *g.output, *g.value_info]:
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    return m


class TorchGraphs:
    """A TorchEager's step captured into one CUDA graph; a call replays it and waits."""

    def __init__(self, eager, warmup=3):
        torch = self.torch = eager.torch
        self.device, self.dtype = eager.device, eager.dtype
        with torch.cuda.device(self.device):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(warmup):
                    eager.step()
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.device_outputs = eager.step()
        self.warmup = warmup

    def __call__(self):
        self.graph.replay()
        self.torch.cuda.synchronize(self.device)

    def fetch_outputs(self):
        return [t.contiguous().cpu().numpy() for t in self.device_outputs]

    def describe(self):
        half = ", float16" if self.dtype == "float16" else ""
        return (f"PyTorch {self.torch.__version__} torch.cuda.CUDAGraph replay of the eager step "
                f"on {self.device}{half} ({self.warmup} warm-up steps on a side stream, then "
                "capture)")


class CompileDeadline(Exception):
    """A torch.compile peer's compile and warm-up calls ran past their budget."""


@contextlib.contextmanager
def _deadline(seconds):
    """Raise CompileDeadline in this thread once ``seconds`` have passed, and again each
    second until the block ends (SIGALRM: torch's compiler is Python, so the exception lands
    between its steps, or when a library call it is in returns; repeated, since the
    autotuner catches what a candidate's benchmark raises). Only the main thread takes
    signals, and a timer armed already (pytest-timeout's, say) owns SIGALRM: then nothing is
    armed, and the caller checks the time afterwards. Yields whether it is armed."""
    if (threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "setitimer") or signal.getitimer(signal.ITIMER_REAL)[0]):
        yield False
        return
    done = [False]

    def fire(signum, frame):
        if not done[0]:
            raise CompileDeadline(f"compile and warm-up ran past {seconds:g} s "
                                  f"(--compile-budget)")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield True
    finally:
        done[0] = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class TorchCompiled:
    """A TorchEager's step through ``torch.compile(mode=mode, dynamic=False, fullgraph=True)``:
    "max-autotune" (Inductor's autotuned kernels, replayed as CUDA graphs) or "reduce-overhead"
    (CUDA graphs of Inductor's default kernels). A call marks a new CUDA-graph step, runs the
    compiled step under ``torch.no_grad`` and waits for the device.

    The weights are tensors the step reads from closures, not module parameters: torch's
    CUDA-graph modes would treat each as a graph input and copy it into a static buffer on
    every replay, so every tensor in ``eager.static`` (weights as prepared, the input) is
    marked with ``torch._dynamo.mark_static_address`` first. The first calls compile, autotune
    and record the graphs: they run, within ``budget`` seconds (CompileDeadline past it),
    until a call is about as fast as the one before (at most WARMUP_CALLS), and their time is
    ``compile_s``, reported apart from the timed rounds."""

    def __init__(self, eager, mode, budget=COMPILE_BUDGET):
        torch = self.torch = eager.torch
        self.device, self.mode, self.budget = eager.device, mode, budget
        self.dtype = eager.dtype
        mark = getattr(torch._dynamo, "mark_static_address", None)
        if mark is not None:
            for t in eager.static:
                mark(t)
        self.static = len(eager.static) if mark is not None else 0
        self.step_begin = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
        self.device_outputs = []
        # No torch._dynamo.reset() between the modes: it would drop the other peer's compiled
        # code, which would then compile again inside the timed rounds. Dynamo guards each
        # compiled entry with its backend, so each mode compiles and keeps its own.
        self.fn = torch.compile(eager.body, mode=mode, dynamic=False, fullgraph=True)
        times = []
        t0 = time.perf_counter()
        with _deadline(budget):
            while len(times) < WARMUP_CALLS:
                t = time.perf_counter()
                self()
                times.append(time.perf_counter() - t)
                if len(times) >= 4 and times[-1] <= 1.5 * times[-2]:
                    break
        self.compile_s = time.perf_counter() - t0
        if self.compile_s > budget:     # a deadline that was not armed (not the main thread)
            raise CompileDeadline(f"compile and warm-up took {self.compile_s:.1f} s, past "
                                  f"{budget:g} s (--compile-budget)")
        self.first_call_s = times[0]
        self.warmup_calls = len(times)
        self.warm = len(times) >= 4 and times[-1] <= 1.5 * times[-2]

    def __call__(self):
        if self.step_begin is not None:
            self.step_begin()
        with self.torch.no_grad():
            self.device_outputs = self.fn()
        self.torch.cuda.synchronize(self.device)

    def fetch_outputs(self):
        """One more call's outputs, copied to the host at once (a CUDA-graph output is
        overwritten by the next replay)."""
        self()
        return [t.contiguous().cpu().numpy() for t in self.device_outputs]

    def info(self):
        """Compile cost and setup, for the report (never part of the timed rounds)."""
        return {"mode": self.mode, "dtype": self.dtype or "float32", "compile_s": self.compile_s,
                "first_call_s": self.first_call_s,
                "warmup_calls": self.warmup_calls, "warm": self.warm,
                "static_tensors": self.static, "compile_budget_s": self.budget}

    def describe(self):
        settled = "" if self.warm else ", the last still not as fast as the one before"
        half = ", float16" if self.dtype == "float16" else ""
        return (f"PyTorch {self.torch.__version__} torch.compile(mode={self.mode!r}, "
                f"dynamic=False, fullgraph=True) of the eager step on {self.device}{half}, "
                f"{self.static} weight/input tensors marked static; compile and warm-up "
                f"{self.compile_s:.1f} s ({self.warmup_calls} calls{settled}), not timed")


def _deadline_of(e):
    """The CompileDeadline ``e`` is or was raised from (torch's compiler wraps what its
    backend raised, in BackendCompilerFailed for one), else None."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, CompileDeadline):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _failed(e, say):
    say("".join(traceback.format_exception(e)).rstrip())
    return f"{type(e).__name__}: {e}"


def ort_settings(run):
    """The CUDA provider options an OrtRun's session reports (read back: ``use_tf32`` "0" is
    TF32 off)."""
    try:
        opts = run.session.get_provider_options().get("CUDAExecutionProvider", {})
    except Exception as e:  # reported, never a failure
        return {"unreadable": f"{type(e).__name__}: {e}"}
    return {"version": run.version, "use_tf32": opts.get("use_tf32"),
            "cudnn_conv_algo_search": opts.get("cudnn_conv_algo_search"),
            "tf32": None if opts.get("use_tf32") is None else opts.get("use_tf32") != "0"}


def make_peers(model, feeds, ordinal, names=PEERS, cudnn_benchmark=True, say=None,
               precision="fp32", compile_budget=COMPILE_BUDGET):
    """The peers in ``names`` for ONNX ``model`` and input arrays ``feeds``, on GPU ``ordinal``.

    Returns ``(peers, unavailable, settings)``: name -> callable with ``fetch_outputs()`` and
    ``describe()`` (called once already: warmed up; a torch.compile peer also has ``info()``);
    name -> the reason it cannot run; {"torch": the PyTorch settings read back (None without
    torch), "ort_cuda": the CUDA provider's options read back (None without it)}. ``say``
    gets progress lines and tracebacks.
    """
    say = say or (lambda *a: print(*a, file=sys.stderr))
    peers, unavailable, settings = {}, {}, {"torch": None, "ort_cuda": None}
    wants_torch = [n for n in names if n.startswith("torch_")]
    if wants_torch:
        why = torch_cuda_reason(ordinal)
        eager = None
        if why is None:
            from benchmarks._torch_eager import TorchEager

            try:
                settings["torch"] = t = configure_torch(cudnn_benchmark, precision)
                say(f"peers: PyTorch {t['torch']} (CUDA {t['torch_cuda']}, cuDNN {t['cudnn']}), "
                    f"cudnn.benchmark {'on' if t['cudnn_benchmark'] else 'off'}, {precision}: "
                    f"torch reports {t['precision_read_back']}")
                eager = TorchEager(model, feeds, None, device=f"cuda:{ordinal}",
                                   dtype="float16" if precision == "fp16" else None)
                eager()
            except NotImplementedError as e:
                why = f"unsupported: {e}"
            except Exception as e:  # a peer's failure is reported, not the benchmark's
                why = _failed(e, say)
        if why is not None:
            unavailable.update(dict.fromkeys(wants_torch, why))
        else:
            if "torch_eager" in names:
                peers["torch_eager"] = eager
            if "torch_cuda_graphs" in names:
                try:
                    g = TorchGraphs(eager)
                    g()
                    peers["torch_cuda_graphs"] = g
                except Exception as e:
                    unavailable["torch_cuda_graphs"] = _failed(e, say)
            for name, mode in COMPILE_MODES.items():
                if name not in names:
                    continue
                say(f"{name}: compiling (budget {compile_budget:g} s)")
                try:
                    c = TorchCompiled(eager, mode, compile_budget)
                    peers[name] = c
                    say(f"{name}: {c.describe()}")
                except Exception as e:
                    late = _deadline_of(e)
                    unavailable[name] = (str(late) if late is not None
                                         else f"torch.compile failed: {_failed(e, say)}")
    if "ort_cuda" in names:
        from nnc.models.peers import OrtRun, PeerUnavailableError, ort_version

        if ort_version() is None:
            unavailable["ort_cuda"] = "onnxruntime is not installed"
        else:
            try:
                if precision == "fp16":
                    model, feeds = float16_model(model), {
                        k: v.astype("float16") if v.dtype.kind == "f" else v
                        for k, v in feeds.items()}
                r = OrtRun(model, feeds, intra_op=1, device=f"cuda:{ordinal}")
                r()
                peers["ort_cuda"] = r
                settings["ort_cuda"] = {**ort_settings(r), "dtype": dtype_of(precision)}
            except (PeerUnavailableError, NotImplementedError) as e:
                unavailable["ort_cuda"] = str(e)
            except Exception as e:
                unavailable["ort_cuda"] = _failed(e, say)
    return peers, unavailable, settings
