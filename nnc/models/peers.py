"""The same network in onnxruntime and OpenVINO, for side-by-side timings with nnc.

``python -m nnc demo --streams`` and ``benchmarks/streams.py`` compare nnc with what a user
would run instead. To make the comparison about the runtimes and nothing else:

- the network is the same file and the same weights (``nnc.onnx.save`` of nnc's own graph, or
  the ONNX model nnc loaded);
- the session gets its thread counts explicitly (intra-op and inter-op), never its defaults,
  which depend on the machine;
- inputs and outputs are bound once to preallocated NumPy arrays (IOBinding), so a timed call
  is the inference alone: no feed dictionary, no output allocation, no copy.

On a GPU (``device="cuda"``, for benchmarks/gpu.py) the session uses onnxruntime's CUDA
execution provider (the onnxruntime-gpu package has it) with TF32 off, so its float32 math is
nnc's, and the inputs and outputs are bound to device memory (OrtValues made once), so a timed
call copies nothing between host and device.

OpenVINO (``OvRun``, CPU only) gets the same treatment: the same ONNX model, its thread count
explicit (``INFERENCE_NUM_THREADS``) with one stream and the latency hint, float32 inference
precision (never bf16, which it would pick on a CPU with AVX-512-BF16 or AMX: that would not be
the same math), and one infer request whose input and output tensors are bound once over
preallocated NumPy arrays.

onnxruntime and OpenVINO are optional (the ``bench`` extra: ``pip install 'nnc-graph[bench]'``);
``ort_version()`` and ``ov_version()`` say whether each is importable.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys

import numpy as np

from nnc.base.core import NNCError


class PeerUnavailableError(NNCError, RuntimeError):
    """A peer configuration cannot run here (onnxruntime without its CUDA provider); the
    message says why, for the benchmark's report."""


def _cuda_ordinal(device):
    """None for "cpu", N for "cuda" (0) or "cuda:N"; ValueError for anything else."""
    if device == "cpu":
        return None
    kind, sep, n = str(device).partition(":")
    if kind != "cuda" or (sep and not n.isdigit()):
        raise ValueError(f"OrtRun: device must be 'cpu', 'cuda' or 'cuda:N', not {device!r}")
    return int(n) if sep else 0


def ort_version():
    """onnxruntime's version string, or None when it cannot be imported."""
    try:
        import onnxruntime
    except ImportError:
        return None
    return str(onnxruntime.__version__)


class OrtRun:
    """One onnxruntime CPU session bound to preallocated inputs and outputs.

    ``model`` is an ONNX ``ModelProto`` or its serialized bytes; ``feeds`` maps each input
    name to the array to bind (kept by reference: write new data into it between calls).
    ``intra_op`` and ``inter_op`` are the session's thread counts; ``parallel`` selects
    ``ORT_PARALLEL`` execution mode (branches on the inter-op pool) instead of sequential;
    ``optimize`` False turns graph optimisations off (``ORT_DISABLE_ALL``; default
    ``ORT_ENABLE_ALL``). Calling the object runs one inference into ``outputs``.

    ``device`` "cuda" or "cuda:N" runs on that GPU through the CUDA execution provider (TF32
    off): a call runs on device memory bound once and returns when the outputs are ready;
    ``fetch_outputs()`` copies them into ``outputs``. PeerUnavailableError when this
    onnxruntime has no CUDA provider or the session could not use it.
    """

    def __init__(self, model, feeds, *, intra_op, inter_op=1, parallel=False, optimize=True,
                 device="cpu"):
        import onnxruntime as ort

        for name, n in (("intra_op", intra_op), ("inter_op", inter_op)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"OrtRun: {name} must be an int >= 1, not {n!r}")
        gpu = _cuda_ordinal(device)
        providers = ["CPUExecutionProvider"]
        if gpu is not None:
            have = ort.get_available_providers()
            if "CUDAExecutionProvider" not in have:
                raise PeerUnavailableError(
                    f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (it has "
                    f"{', '.join(have)}); the onnxruntime-gpu package has it")
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": gpu, "use_tf32": 0}))
        data = model if isinstance(model, bytes) else model.SerializeToString()
        so = ort.SessionOptions()
        so.intra_op_num_threads = intra_op
        so.inter_op_num_threads = inter_op
        so.execution_mode = (ort.ExecutionMode.ORT_PARALLEL if parallel
                             else ort.ExecutionMode.ORT_SEQUENTIAL)
        so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                       else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        self.session = ort.InferenceSession(data, so, providers=providers)
        if gpu is not None and "CUDAExecutionProvider" not in self.session.get_providers():
            # onnxruntime falls back to the CPU, with a log line, when the provider's CUDA
            # libraries do not load: timing that as "CUDA" would be wrong.
            raise PeerUnavailableError(
                f"onnxruntime {ort.__version__} could not use its CUDAExecutionProvider "
                f"(the session has {', '.join(self.session.get_providers())})")
        names = [i.name for i in self.session.get_inputs()]
        if sorted(names) != sorted(feeds):
            raise ValueError(f"OrtRun: the model's inputs are {names}, feeds give {list(feeds)}")
        self.feeds = {k: np.ascontiguousarray(v) for k, v in feeds.items()}
        # One plain run learns the output shapes and dtypes; then every output gets its own
        # array (or device buffer), bound once, which each later call overwrites.
        first = self.session.run(None, self.feeds)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.outputs = [np.empty_like(a) for a in first]
        self.binding = self.session.io_binding()
        self.device = device
        self.device_inputs, self.device_outputs = {}, []     # OrtValues on the GPU
        if gpu is None:
            for name, a in self.feeds.items():
                self.binding.bind_cpu_input(name, a)
            for name, a in zip(self.output_names, self.outputs):
                self.binding.bind_output(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        else:
            self.device_inputs = {k: ort.OrtValue.ortvalue_from_numpy(a, "cuda", gpu)
                                  for k, a in self.feeds.items()}
            self.device_outputs = [ort.OrtValue.ortvalue_from_shape_and_type(
                list(a.shape), a.dtype.type, "cuda", gpu) for a in first]
            for name, v in self.device_inputs.items():
                self.binding.bind_ortvalue_input(name, v)
            for name, v in zip(self.output_names, self.device_outputs):
                self.binding.bind_ortvalue_output(name, v)
        self.version = str(ort.__version__)
        self.intra_op = intra_op
        self.inter_op = inter_op
        self.parallel = parallel
        self.optimize = optimize

    def __call__(self):
        self.session.run_with_iobinding(self.binding)
        if self.device_outputs:
            self.binding.synchronize_outputs()      # the outputs are ready when a call returns

    def fetch_outputs(self):
        """The last call's outputs as NumPy arrays (``outputs``; copied from the device on a
        GPU)."""
        if self.device_outputs:
            self.outputs = [v.numpy() for v in self.device_outputs]
        return self.outputs

    def describe(self):
        """A short description of the configuration, for reports."""
        mode = (f"parallel mode, inter-op {self.inter_op}" if self.parallel
                else f"sequential, intra-op {self.intra_op}")
        level = "ENABLE_ALL" if self.optimize else "DISABLE_ALL"
        where = ("" if self.device == "cpu"
                 else f", CUDAExecutionProvider on {self.device}, TF32 off")
        return f"onnxruntime {level}, {mode}{where}"


def ov_version():
    """OpenVINO's version string, or None when it cannot be imported."""
    try:
        import openvino
    except ImportError:
        return None
    return str(openvino.__version__)


class _StackT(ctypes.Structure):
    # struct sigaltstack on Linux (glibc): void* ss_sp; int ss_flags; size_t ss_size.
    _fields_ = [("sp", ctypes.c_void_p), ("flags", ctypes.c_int), ("size", ctypes.c_size_t)]


@contextlib.contextmanager
def _thread_signal_stack_kept():
    """Restore the calling thread's alternate signal stack after the block (Linux; elsewhere
    a no-op): a library may not leave one of its own behind, whose memory it frees later."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        sigaltstack = libc.sigaltstack
    except (OSError, AttributeError):
        yield
        return
    old = _StackT()
    saved = sys.platform.startswith("linux") and sigaltstack(None, ctypes.byref(old)) == 0
    try:
        yield
    finally:
        if saved:
            sigaltstack(ctypes.byref(old), None)


class OvRun:
    """One OpenVINO CPU compiled model and its infer request, bound to preallocated inputs and
    outputs.

    ``model`` is an ONNX ``ModelProto`` or its serialized bytes (read by OpenVINO's ONNX
    frontend: the same file and weights onnxruntime gets); ``feeds`` maps each input name to
    the array to bind (kept by reference: write new data into it between calls). ``threads`` is
    ``INFERENCE_NUM_THREADS``; the model is compiled with ``NUM_STREAMS`` 1, ``PERFORMANCE_HINT``
    LATENCY and ``INFERENCE_PRECISION_HINT`` f32, and PeerUnavailableError is raised if the
    compiled model reports another precision. Calling the object runs one inference into
    ``outputs``.

    What a call copies: nothing on the Python side. Each input and output is an ``ov.Tensor``
    sharing its NumPy array's memory (``shared_memory=True``), set on the request once; a call is
    ``infer(share_outputs=True)``, whose result views those tensors rather than copying them.
    The CPU plugin reads the inputs from and writes the outputs into those arrays; the reorders
    between the plain layout and its blocked one are part of its compiled graph (as ORT's
    NCHWc reorders are part of its graph).
    """

    def __init__(self, model, feeds, *, threads):
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"OvRun: threads must be an int >= 1, not {threads!r}")
        # Compiling installs a signal stack of OpenVINO's on the calling thread (sigaltstack),
        # which it frees with the compiled model; when that happens on another thread (a
        # garbage collection there) the calling thread is left pointing at freed memory, and
        # the next signal delivered to it (Ctrl-C) crashes the process. The thread keeps its
        # own stack instead.
        with _thread_signal_stack_kept():
            self._build(model, feeds, threads)

    def _build(self, model, feeds, threads):
        import openvino as ov
        import openvino.properties as props
        import openvino.properties.hint as hints

        data = model if isinstance(model, bytes) else model.SerializeToString()
        core = ov.Core()
        # An empty weights blob: an ONNX model carries its initializers (OpenVINO's frontend
        # is chosen from the bytes).
        ov_model = core.read_model(data, b"")
        self.compiled = core.compile_model(ov_model, "CPU", {
            props.inference_num_threads: threads,
            props.streams.num: 1,
            hints.performance_mode: hints.PerformanceMode.LATENCY,
            hints.inference_precision: ov.Type.f32,
        })
        precision = self.compiled.get_property(hints.inference_precision)
        if precision != ov.Type.f32:
            raise PeerUnavailableError(
                f"OpenVINO {ov.__version__} compiled the model at {precision}, not f32")
        names = [i.get_any_name() for i in self.compiled.inputs]
        if sorted(names) != sorted(feeds):
            raise ValueError(f"OvRun: the model's inputs are {names}, feeds give {list(feeds)}")
        self.feeds = {k: np.ascontiguousarray(v) for k, v in feeds.items()}
        self.request = self.compiled.create_infer_request()
        for port in self.compiled.inputs:
            self.request.set_tensor(port, ov.Tensor(self.feeds[port.get_any_name()],
                                                    shared_memory=True))
        # One run into the plugin's own output tensors learns their shapes and types; then each
        # output gets its own array, bound once, which each later call overwrites.
        first = self.request.infer(share_outputs=True)
        self.output_names = [o.get_any_name() for o in self.compiled.outputs]
        self.outputs = [np.empty_like(first[o]) for o in self.compiled.outputs]
        for port, a in zip(self.compiled.outputs, self.outputs):
            self.request.set_tensor(port, ov.Tensor(a, shared_memory=True))
        self.version = str(ov.__version__)
        self.threads = threads
        self.precision = precision.get_type_name()      # "f32"

    def __call__(self):
        self.request.infer(share_outputs=True)

    def fetch_outputs(self):
        """The last call's outputs as NumPy arrays (``outputs``)."""
        return self.outputs

    def describe(self):
        """A short description of the configuration, for reports."""
        c = self.compiled
        # The compiled model's own settings, read back: what it runs with, not what was asked.
        return (f"OpenVINO {self.version.split('-')[0]} CPU, "
                f"{c.get_property('INFERENCE_NUM_THREADS')} thread(s), "
                f"{c.get_property('NUM_STREAMS')} stream(s), "
                f"{c.get_property('PERFORMANCE_HINT')} hint, {self.precision} precision")
