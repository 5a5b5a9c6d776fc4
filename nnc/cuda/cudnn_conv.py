"""GPU_OPT of CONVOLUTION: cuDNN through NVIDIA's cudnn-frontend Python API (``import cudnn``).

NNC: cmd/convolution/gpu/ccv_nnc_conv_gpu_cudnn.cu. GPU_REF's direct convolution is a
reference kernel; this backend hands the same NHWC convolution, with its fused bias + ReLU
epilogue, to cuDNN's graph API. Registered at ``import nnc`` with priority 20 (GPU_REF: 15),
so it is the default choice wherever it accepts; ``autotune`` may still pick either.
Registering imports neither cuda-bindings nor cudnn: the frontend is imported the first time a
GPU convolution asks (:func:`available`), and where it is missing GPU_REF runs everything.

Layout mapping (cuDNN describes every tensor as NCHW dims with arbitrary strides):

- x [N, H, W, C] (N = 1 for [H, W, C]) with pixel stride p: dims [N, C, H, W], strides
  [H*W*p, 1, W*p, p]; p > C is a channel slice of a wider buffer (a concat's input).
- w [O, kh, kw, C/g] contiguous: dims [O, C/g, kh, kw], strides [kh*kw*C/g, 1, kw*C/g, C/g]
  (cuDNN's KRSC layout); cuDNN infers the group count from C / (C/g).
- bias [O]: dims [1, O, 1, 1]; out [N, Ho, Wo, O] with pixel stride q: like x.
- padding (top, left, bottom, right) becomes pre_padding [top, left] and post_padding
  [bottom, right]; stride as given, dilation 1 (nnc's convolution has none).

One cuDNN graph per geometry (shapes, pixel strides, padding, stride, groups, dtype, float32
precision, bias, ReLU) and device, built once (validate, build_operation_graph,
create_execution_plans with heuristics A then FALLBACK, check_support, build_plans) and shared
by every stream of the device. Plans exclude engines whose numerical notes lose accuracy
(down-converted inputs, reduced-precision reductions, FFT, large Winograd tiles), and float32
plans under nnc.cuda.precision() "ieee" also TF32 tensor cores, so the results keep
docs/commands.md's float32 bound like GPU_REF's; under "tf32" tensor-core engines may run them
(docs/gpu.md: the TF32 bound). The precision is part of the key, and a prepared float32 node
looks its plan up again when it changes (nnc.cuda.backends.ByPrecision). float16 runs with
io_data_type HALF and compute FLOAT (tensor cores, float32 accumulation, the fused bias + ReLU
in float32). float64 is not registered:
cuDNN serves double convolutions only through its pre-compiled single-operation engines, not
the runtime-fusion engines a bias + ReLU epilogue needs, so GPU_REF runs float64.

Each CudaStream gets its own cuDNN handle bound to it (``stream.library``, destroyed when the
stream closes) with a lock, so two threads enqueuing onto one stream never interleave on it;
the plan's workspace is the stream's (``memory.workspace``). ``accept`` builds the plan: a
configuration cuDNN declines, or an operand not 16-byte aligned (the frontend declares every
tensor 16-byte aligned), is not accepted and GPU_REF runs it. Zero-size outputs do nothing;
zero input channels (which cuDNN cannot describe) run GPU_REF's kernel: bias (+ ReLU).
Written against cudnn-frontend 1.x and tested against tests/_fake_cudnn.py; docs/gpu.md
lists what a GPU must still confirm.
"""

import inspect
import threading
import weakref

import numpy as np

import nnc.cuda as _cuda
from nnc._core import CUDAError
from nnc.cuda import memory
from nnc.cuda.backends import bias_act, operands, pixel_stride, runner, same_gpu, tensors_of
from nnc.cuda.backends import conv_body as _reference_conv
from nnc.cuda.driver import device

__all__ = ["ALIGN", "BACKEND", "HINT", "LIBRARY", "PRIORITY", "available", "describe", "geometry",
           "plan", "register", "unavailable_reason"]

BACKEND = "GPU_OPT"
PRIORITY = 20
HINT = "pip install 'nnc-graph[gpu-opt]'"
ALIGN = 16                          # bytes: the alignment the frontend declares for tensors
LIBRARY = "cudnn"                   # CudaStream.library key of the per-stream handle
# Numerical notes no plan may carry: engines that convert inputs to a narrower type, reduce in
# less than float32, or lose accuracy to FFT / large Winograd tiles.
_LOSSY_NOTES = ("DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "WINOGRAD_TILE_6x6",
                "WINOGRAD_TILE_13x13")
# And a float32 plan under precision "ieee": TF32 tensor cores (10-bit mantissa inputs).
_TF32_NOTES = ("TENSOR_CORE",)
# cuDNN's io types by dtype (NumPy's dtype.str) and the type each computes in.
_IO = {"<f2": "HALF", "<f4": "FLOAT", "<f8": "DOUBLE"}
_COMPUTE = {"<f2": "FLOAT", "<f4": "FLOAT", "<f8": "DOUBLE"}

_status = None                      # (cudnn module or None, reason or None), probed once
_status_lock = threading.Lock()
_devices = weakref.WeakKeyDictionary()      # Device -> _DeviceState
_devices_lock = threading.Lock()


def _probe():
    try:
        import cudnn
    except Exception as e:  # ImportError, or a broken install failing inside its import
        return None, f"nvidia-cudnn-frontend is not installed ({HINT}): {e}"
    try:
        cudnn.backend_version()         # loads libcudnn
    except Exception as e:
        return None, f"the cuDNN library cannot be loaded ({HINT}): {e}"
    return cudnn, None


def _load():
    global _status
    if _status is None:
        with _status_lock:
            if _status is None:
                _status = _probe()
    return _status


def available():
    """Whether cuDNN can be used (the frontend imports and libcudnn loads); cached."""
    return _load()[0] is not None


def unavailable_reason():
    """Why cuDNN cannot be used (naming the extra to install), or None when it can."""
    return _load()[1]


def _module():
    cu, reason = _load()
    if cu is None:
        raise CUDAError(f"CONVOLUTION/{BACKEND} needs cuDNN: {reason}")
    return cu


class _Plan:
    """One built cuDNN graph and its operand tensors; ``lock`` serialises execute calls,
    since the frontend keeps per-graph state in Python that it does not guard. ``epilogue``:
    cuDNN declined the fused bias / ReLU, so this plan is the bare convolution and nnc's
    bias_act kernel finishes the node."""

    __slots__ = ("graph", "x", "w", "bias", "y", "workspace", "lock", "epilogue")

    def __init__(self, graph, x, w, bias, y, workspace, epilogue=False):
        self.graph, self.x, self.w, self.bias, self.y = graph, x, w, bias, y
        self.workspace = int(workspace)
        self.lock = threading.Lock()
        self.epilogue = epilogue


class _DeviceState:
    """A device's plans (geometry key -> _Plan, or the reason cuDNN declined it) and the
    handle plans are built with (never executed on: each stream executes on its own)."""

    def __init__(self, cu, dev):
        dev.make_current()              # a cuDNN handle belongs to the current device
        self.build_handle = cu.create_handle()
        self.lock = threading.Lock()    # serialises builds; plans is read without it
        self.plans = {}


def _state(cu, dev):
    st = _devices.get(dev)
    if st is None:
        with _devices_lock:
            st = _devices.get(dev)
            if st is None:
                st = _devices[dev] = _DeviceState(cu, dev)
    return st


def geometry(cmd, inputs, outputs, precision=None):
    """The key of a convolution's cuDNN graph: (dtype, float32 precision, N, H, W, C, x pixel
    stride, O, kh, kw, C/groups, Ho, Wo, out pixel stride, (sh, sw), (top, left, bottom,
    right), bias?, relu?). The precision is ``precision`` (default: nnc.cuda.precision()) for
    float32 and None for the dtypes it does not affect."""
    x, w, bias, out = operands(inputs, outputs)
    n = x.shape[0] if x.ndim == 4 else 1
    dt = np.dtype(x.dtype).str
    if dt != "<f4":
        precision = None
    elif precision is None:
        precision = _cuda.precision()
    return (dt, precision, n, *x.shape[-3:], pixel_stride(x), *w.shape,
            out.shape[-3], out.shape[-2], pixel_stride(out), tuple(cmd.params["stride"]),
            tuple(cmd.params["padding"]), bias is not None,
            cmd.params.get("activation") == "relu")


def describe(cu, key, handle=None):
    """The cuDNN graph of geometry ``key`` and its operands: (graph, x, w, bias or None, y).

    Only records the graph (the frontend needs no driver for that); :func:`_build` builds it.
    """
    (dt, _, n, h, wd, c, xps, o, kh, kw, cg, ho, wo, ops, (sh, sw), (pt, pl, pb, pr), has_bias,
     relu) = key
    f = getattr(cu.data_type, _IO[dt])
    acc = getattr(cu.data_type, _COMPUTE[dt])
    g = cu.pygraph(io_data_type=f, intermediate_data_type=acc, compute_data_type=acc,
                   handle=handle)
    x = g.tensor(name="x", dim=[n, c, h, wd], stride=[h * wd * xps, 1, wd * xps, xps],
                 data_type=f)
    w = g.tensor(name="w", dim=[o, cg, kh, kw], stride=[kh * kw * cg, 1, kw * cg, cg],
                 data_type=f)
    # Cross-correlation, the frontend's default mode (as nnc's CONVOLUTION: no kernel flip).
    y = g.conv_fprop(image=x, weight=w, pre_padding=[pt, pl], post_padding=[pb, pr],
                     stride=[sh, sw], dilation=[1, 1], compute_data_type=acc, name="conv")
    bias = None
    if has_bias:
        bias = g.tensor(name="b", dim=[1, o, 1, 1], stride=[o, 1, o, o], data_type=f)
        y = g.bias(input=y, bias=bias, compute_data_type=acc, name="bias")
    if relu:
        y = g.relu(input=y, compute_data_type=acc, name="relu")
    y.set_output(True).set_dim([n, o, ho, wo]).set_stride([ho * wo * ops, 1, wo * ops, ops])
    y.set_data_type(f)
    return g, x, w, bias, y


def _build(cu, g, key):
    """Build graph g into an execution plan; its workspace size in bytes."""
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cu.heur_mode.A, cu.heur_mode.FALLBACK])
    g.deselect_numeric_notes([getattr(cu.numerical_note, k) for k in _notes_excluded(key)])
    g.check_support()
    g.build_plans()
    return g.get_workspace_size()


def _notes_excluded(key):
    """The numerical notes plan ``key`` may not carry (key[1]: its float32 precision)."""
    return _LOSSY_NOTES + (_TF32_NOTES if key[0] == "<f4" and key[1] != "tf32" else ())


def _declined(cu):
    # What the frontend raises when no engine serves a graph (cuDNN status errors surface
    # as RuntimeError from its bindings).
    return (cu.cudnnGraphNotSupportedError, NotImplementedError, RuntimeError)


def _plan_of(cu, st, dev, key):
    """The plan of geometry ``key`` (built once, under st.lock), or the reason cuDNN
    declined it. Fused bias / ReLU that cuDNN declines falls back to the bare convolution
    (whose plan is shared by every epilogue of that geometry) plus nnc's epilogue kernel:
    cuDNN's fused float32 engines may all be ones whose numerics _build excludes."""
    found = st.plans.get(key)
    if found is None:
        dev.make_current()
        g, x, w, bias, y = describe(cu, key, st.build_handle)
        try:
            found = _Plan(g, x, w, bias, y, _build(cu, g, key))
        except _declined(cu) as e:
            found = f"{type(e).__name__}: {e}"
            bare = key[:-2] + (False, False)
            if bare != key:
                base = _plan_of(cu, st, dev, bare)
                if isinstance(base, _Plan):
                    found = _Plan(base.graph, base.x, base.w, None, base.y, base.workspace,
                                  epilogue=True)
                    found.lock = base.lock      # one graph: one lock
        st.plans[key] = found
    return found


def plan(dev, cmd, inputs, outputs, precision=None):
    """The device's plan for this convolution under float32 ``precision`` (default:
    nnc.cuda.precision()), built on first use, or None when cuDNN declines the configuration,
    fused or bare."""
    cu = _module()
    st = _state(cu, dev)
    key = geometry(cmd, inputs, outputs, precision)
    found = st.plans.get(key)
    if found is None:
        with st.lock:
            found = _plan_of(cu, st, dev, key)
    return found if isinstance(found, _Plan) else None


def _aligned(ts):
    return all(t.data_ptr % ALIGN == 0 for t in ts)


class _StreamHandle:
    """A cuDNN handle bound to one CudaStream: that stream's ``library(LIBRARY)`` state."""

    def __init__(self, cu, stream):
        stream.device.make_current()
        self.cu = cu
        self.lock = threading.Lock()    # one enqueuing thread at a time on the handle
        self.handle = cu.create_handle()
        cu.set_stream(self.handle, int(stream.handle))

    def close(self):
        with self.lock:
            handle, self.handle = self.handle, None
        if handle is not None:
            self.cu.destroy_handle(handle)


def _ordered(graph):
    """Whether ``graph.execute`` takes the buffers as a list in ``tensor_uids``' order (the
    frontend's "ordered" form, 1.32 and later): its variant pack is then read in C++ in one
    crossing, where the mapping form is inspected operand by operand in Python (an H100
    measured about 100 us a call that way, more than the convolutions of Inception-V3 take)."""
    try:
        return "tensor_uids" in inspect.signature(graph.execute).parameters
    except (TypeError, ValueError):
        return False


class _Execute:
    """One convolution's cuDNN call with its variant pack built once: ``op(cuda_stream)``.
    ``uids``: the operands' uids for the ordered form (``ptrs`` in that order), or None
    where the frontend lacks it and ``pack`` (tensor -> address) is passed instead."""

    __slots__ = ("plan", "pack", "uids", "ptrs")

    def __init__(self, plan, pack):
        self.plan, self.pack = plan, pack
        self.uids = self.ptrs = None
        if _ordered(plan.graph):
            uids = [getattr(t, "uid", None) for t in pack]
            # A uid is the frontend's (assigned at build); a missing or repeated one leaves
            # the mapping form, which needs none.
            if all(isinstance(u, int) for u in uids) and len(set(uids)) == len(uids):
                self.uids, self.ptrs = uids, list(pack.values())

    def __call__(self, stream):
        cu = _module()
        state = stream.library(LIBRARY, lambda: _StreamHandle(cu, stream))
        ws = memory.workspace(stream, self.plan.workspace) if self.plan.workspace else None
        stream.device.make_current()    # cuDNN launches in the calling thread's context
        with state.lock, self.plan.lock:
            if state.handle is None:
                raise CUDAError(f"{stream!r} is closed")
            if self.uids is not None:
                self.plan.graph.execute(self.ptrs, ws, handle=state.handle,
                                        tensor_uids=self.uids)
            else:
                self.plan.graph.execute(self.pack, ws, handle=state.handle)


def _body(dev, sink, cmd, inputs, outputs):
    x, w, bias, out = operands(inputs, outputs)
    if out.size == 0:
        return
    ts = tensors_of(inputs, outputs)
    p = plan(dev, cmd, inputs, outputs, sink.precision) if x.shape[-1] and _aligned(ts) else None
    if p is None:
        # Zero input channels (bias and ReLU only), or tensors accept did not see (autotune's
        # scratch copies, tensors a loop re-pointed) that cuDNN cannot take: the reference.
        _reference_conv(dev, sink, cmd, inputs, outputs)
        return
    pack = {p.x: x.data_ptr, p.w: w.data_ptr, p.y: out.data_ptr}
    if bias is not None and not p.epilogue:
        pack[p.bias] = bias.data_ptr
    sink.call(_Execute(p, pack))
    if p.epilogue:
        # Same stream, after the convolution: stream order is all the ordering needed.
        bias_act(dev, sink, bias, cmd.params.get("activation") == "relu", out)


def _accept(cmd, inputs, outputs):
    """cuDNN (nvidia-cudnn-frontend) installed; NHWC tensors on one GPU, pixels evenly
    spaced with unit channel stride, w and bias contiguous, every operand 16-byte aligned, in a
    configuration cuDNN builds a plan for.

    Pinned while cuDNN is unavailable: CUDAError naming the extra to install.
    """
    cu, reason = _load()
    if cu is None:
        if cmd.pinned and cmd.backend == BACKEND:
            raise CUDAError(f"CONVOLUTION/{BACKEND} needs cuDNN: {reason}")
        return False
    if cmd.params.get("activation") not in (None, "relu"):
        return False
    ts = tensors_of(inputs, outputs)
    x, out = inputs[0], outputs[0]
    if not same_gpu(ts) or pixel_stride(x) is None or pixel_stride(out) is None:
        return False
    if not all(t.is_contiguous for t in inputs[1:] if t is not None):
        return False
    if out.size == 0 or x.shape[-1] == 0:
        return True                     # nothing to do, or bias (+ ReLU) by the reference
    if not _aligned(ts):
        return False
    return plan(device(out.device), cmd, inputs, outputs) is not None


def register():
    """Register GPU_OPT for CONVOLUTION (once, at import nnc; imports no CUDA library)."""
    from nnc.cmd import register_backend

    register_backend("CONVOLUTION", BACKEND, runner(_body, name=BACKEND, precise=True),
                     datatypes=("float16", "float32"), accept=_accept, priority=PRIORITY,
                     device="gpu")
