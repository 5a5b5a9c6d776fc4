"""How a GPU backend's body reaches a CUDA stream: the runner every GPU backend is made by, and
the helpers the built-in families' kernels share.

NNC: the launch half of cmd/*/gpu/ccv_nnc_*_gpu_ref.cu. The backends themselves live with their
command family (nnc/cmd/<family>/gpu/: ``ref.py`` for GPU_REF, ``cudnn.py`` / ``cublas.py`` for
GPU_OPT), registered in order by nnc/cuda/builtins.py; their CUDA C kernels are
nnc/cuda/kernels/*.cu, compiled by nnc.cuda.nvrtc. Here: :func:`runner` (a body becomes a backend
that runs now or is prepared once for a GPU stream, :data:`PREPARE`), the two sinks a body sends
its work to, :class:`Launch` (a kernel launch packed once), :class:`ByPrecision` (a prepared
float32 GPU_OPT node keyed by nnc.cuda.precision()), the compiled kernel of a dtype
(:func:`kernel_function`), launch geometry (:func:`grid_1d`, :func:`window_geometry`,
:func:`convt_geometry`), the
operand layouts the kernels take (:func:`pixel_stride`, :func:`row_stride`, :func:`row_layout`)
and the ``accept`` predicates several families share.

GPU_REF is registered for float16, float32 and float64 with ``device="gpu"`` (DATA_TRANSFER:
``"any"``, one side may be host memory), so the default choice follows the tensors' device: host
tensors get CPU_OPT/CPU_REF, GPU tensors get GPU_REF. Registering needs no CUDA (nothing here
imports cuda-bindings until a kernel is launched); on a machine without a GPU no tensor can select
them.

A backend is ``fn(cmd, inputs, outputs, stream=None)`` on Tensors: with a
:class:`~nnc.cuda.driver.CudaStream` it enqueues and returns; without one it runs on the
device's per-thread synchronous stream and waits (``nnc.cmd_exec`` without a stream, and
``Graph.run()``). Results match CPU_REF within docs/commands.md's tolerances for float32/float64
(GEMM and CONVOLUTION accumulate in the tensor dtype, like BLAS; float16 is stored as float16 and
computed in float32, docs/gpu.md states its bound) - meant to be checked on a GPU by the
"gpu" variants of tests/cuda/test_cuda_runtime.py, skipped where there is none; without a GPU the
same tests check the argument packing and geometry against NumPy emulations of the kernels.
"""

import numpy as np

import nnc.cuda as _cuda
from nnc.base.core import CommandError
from nnc.cuda import memory, nvrtc
from nnc.cuda.driver import check, device, driver, launch, pack_args

__all__ = ["ACC_DTYPE", "BACKEND", "CONVT_T", "FLOAT_TYPES", "GPU_TYPES", "PREPARE", "THREADS",
           "WINDOW_T", "ByPrecision", "Launch", "contiguous_same_gpu", "convt_accept",
           "convt_geometry", "grid_1d", "kernel_function", "operands", "pixel_stride", "ptr",
           "row_layout", "row_stride", "rows_same_gpu", "register_ref", "runner", "same_gpu",
           "scalar_param", "tensors_of", "window_accept", "window_geometry"]

BACKEND = "GPU_REF"
FLOAT_TYPES = ("float32", "float64")
# What GPU_REF's kernels take: float16 is loaded into float32, computed there and rounded once
# when stored (nnc_acc_t in kernels/common.cuh).
GPU_TYPES = ("float16", *FLOAT_TYPES)
_SUFFIX = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
# The dtype a kernel computes in, and takes its scalar parameters in (SCALAR_MUL, SET).
ACC_DTYPE = {np.dtype(np.float16): np.dtype(np.float32),
             np.dtype(np.float32): np.dtype(np.float32),
             np.dtype(np.float64): np.dtype(np.float64)}
_FILE_OF = {k: f for f, names in nvrtc.KERNELS.items() for k in names}
THREADS = 256

# nnc_window_t in conv.cu, field by field (align=True gives the C layout: 88 bytes).
WINDOW_T = np.dtype([("n", "<i8"), ("h", "<i4"), ("w", "<i4"), ("c", "<i4"), ("ho", "<i4"),
                     ("wo", "<i4"), ("o", "<i4"), ("kh", "<i4"), ("kw", "<i4"), ("sh", "<i4"),
                     ("sw", "<i4"), ("pt", "<i4"), ("pl", "<i4"), ("groups", "<i4"),
                     ("count_include_pad", "<i4"), ("relu", "<i4"), ("x_ps", "<i8"),
                     ("o_ps", "<i8")], align=True)
# nnc_convt_t in conv.cu (CONVOLUTION_TRANSPOSE), field by field: 88 bytes as well.
CONVT_T = np.dtype([("n", "<i8"), ("h", "<i4"), ("w", "<i4"), ("c", "<i4"), ("ho", "<i4"),
                    ("wo", "<i4"), ("o", "<i4"), ("kh", "<i4"), ("kw", "<i4"), ("sh", "<i4"),
                    ("sw", "<i4"), ("dh", "<i4"), ("dw", "<i4"), ("pt", "<i4"), ("pl", "<i4"),
                    ("groups", "<i4"), ("x_ps", "<i8"), ("o_ps", "<i8")], align=True)
# The int fields of nnc_convt_t hold sizes, strides, dilations and paddings below this.
_INT_LIMIT = 2 ** 31


def ptr(t):
    """A tensor's device address as a kernel argument (0 for None: an absent bias)."""
    return np.uint64(0 if t is None else t.data_ptr)


def grid_1d(dev, n, threads=THREADS):
    # Grid-stride kernels: enough blocks to fill every SM a few times, no more.
    return (max(1, min((n + threads - 1) // threads, dev.sm_count * 32)),)


def tensors_of(inputs, outputs):
    return [t for t in list(inputs) + list(outputs) if t is not None]


def same_gpu(ts):
    devices = {t.device for t in ts}
    return len(devices) == 1 and next(iter(devices)) != "cpu"


def pixel_stride(t):
    """For an NHWC tensor whose channels have unit stride and whose pixels are evenly spaced
    (a contiguous tensor, or a channel slice such as buf[..., c0:c1]): that pixel stride in
    elements. None for any other layout."""
    return row_stride(t) if t.ndim in (3, 4) else None


def _spans(dims):
    """Pixels spanned by one step of each of W, H, N in an evenly spaced layout."""
    span, out = 1, []
    for d, _ in dims:
        out.append(span)
        span *= d
    return out


class _Now:
    """Where a backend body sends its work when it runs now: straight onto a stream.
    ``precision``: the float32 precision (nnc.cuda.precision()) its work uses."""

    __slots__ = ("stream", "precision")

    def __init__(self, stream, precision):
        self.stream, self.precision = stream, precision

    def kernel(self, f, grid, block, args):
        launch(f, grid, block, args, self.stream)

    def copy(self, dst, src):
        memory.copy(dst, src, self.stream)

    def call(self, op):
        op(self.stream)


class Launch:
    """A kernel launch with its parameters packed once; ``op(stream)`` enqueues it."""

    __slots__ = ("f", "dims", "params", "keep", "ptr")
    # Enqueues the same work at every call on a stream: a CUDA graph of a node may capture it
    # (nnc.cuda._ccall.NodeGraph). A library op says so only where that holds for it too.
    capturable = True

    def __init__(self, f, grid, block, args):
        self.f = f
        self.dims = (tuple(grid) + (1, 1))[:3] + (tuple(block) + (1, 1))[:3]
        self.params, self.keep = pack_args(args)
        self.ptr = self.params.ctypes.data

    def __call__(self, stream):
        check(driver().cuLaunchKernel(self.f, *self.dims, 0, stream.handle, self.ptr, 0),
              "cuLaunchKernel")


class _Record:
    """Where a body sends its work when prepared: a list of ops, each ``op(stream)``, for
    float32 precision ``precision``."""

    __slots__ = ("ops", "precision")

    def __init__(self, precision):
        self.ops, self.precision = [], precision

    def kernel(self, f, grid, block, args):
        self.ops.append(Launch(f, grid, block, args))

    def copy(self, dst, src):
        self.ops.append(lambda stream: memory.copy(dst, src, stream))

    def call(self, op):
        self.ops.append(op)


class ByPrecision:
    """A prepared node whose work depends on nnc.cuda.precision() (GPU_OPT's float32
    convolutions and GEMMs): ``op(stream)`` reads the precision at every enqueue and replays the
    ops recorded for it, recording them on the first enqueue under that precision. So a
    set_precision takes effect from the next run of an already prepared (bound) graph, and two
    precisions never share ops or the library plans they hold.

    Invariant: ``ops[p]`` was recorded by ``record(p)``, with every plan looked up under p.
    A GPU stream's NodeGraph captures ``ops_of(p)`` per precision (each checked capturable)."""

    __slots__ = ("record", "ops")
    capturable = True

    def __init__(self, record):
        self.record = record
        self.ops = {}                   # precision -> [op(stream)]

    def ops_of(self, p):
        """The ops of precision ``p``, recorded on first use."""
        ops = self.ops.get(p)
        if ops is None:
            # Two streams never share a prepared node; a race here would only record twice.
            ops = self.ops[p] = self.record(p)
        return ops

    def __call__(self, stream):
        for op in self.ops_of(_cuda.precision()):
            op(stream)


def _float32(ts):
    return any(t.dtype == np.float32 for t in ts)


# GPU backend function -> its prepare(cmd, inputs, outputs, cuda_stream): what a GPU stream
# (nnc/cuda/gpu_stream.pyx) uses to launch a graph node with parameters packed once.
PREPARE = {}


def runner(body, name=BACKEND, peers=False, precise=False):
    """Wrap ``body(dev, sink, cmd, inputs, outputs)`` as GPU backend ``name``.

    The body sends its work to ``sink``: ``sink.kernel(f, grid, block, args)``,
    ``sink.copy(dst, src)`` or ``sink.call(op)``, where ``op(cuda_stream)`` enqueues work
    through a library (cuBLAS, cuDNN: nnc/cmd/gemm/gpu/cublas.py,
    nnc/cmd/convolution/gpu/cudnn.py). The backend runs the body at once (onto a stream); its
    ``prepare(cmd, inputs, outputs)`` runs it into a list of ops with every kernel's parameters
    packed, which a graph runner replays for each run at the cost of one driver call per launch
    (a GPU nnc.Stream, :data:`PREPARE`).
    ``peers``: the tensors may be on several devices (copies); otherwise they must be on the
    stream's. ``precise``: the body reads ``sink.precision`` (nnc.cuda.precision(), read when it
    runs) for float32 tensors, so a prepared float32 node is one :class:`ByPrecision` op.
    """

    def setup(cmd, inputs, outputs, stream):
        ts = tensors_of(inputs, outputs)
        if not all(hasattr(t, "data_ptr") and hasattr(t, "device") for t in ts):
            raise CommandError(f"{cmd.name}/{name} runs on GPU tensors through nnc.cmd_exec, "
                               "a CUDA stream or Graph.run(), not on ndarrays of a CPU stream")
        gpus = [t.device for t in ts if t.device != "cpu"]
        if not gpus:
            raise CommandError(f"{cmd.name}/{name} needs at least one GPU tensor")
        # A kernel runs on a stream of its tensors' GPU (modules and streams belong to one
        # context); copies may use any stream (peer copies name both contexts).
        dev = stream.device if stream is not None else device(gpus[0])
        if not peers and gpus[0] != f"gpu:{dev.ordinal}":
            raise CommandError(f"{cmd.name}/{name}: the tensors are on {gpus[0]} but the "
                               f"stream is on gpu:{dev.ordinal}")
        dev.make_current()
        return dev

    def backend(cmd, inputs, outputs, stream=None):
        dev = setup(cmd, inputs, outputs, stream)
        s = stream if stream is not None else dev.sync_stream()
        body(dev, _Now(s, _cuda.precision()), cmd, inputs, outputs)
        if stream is None:
            s.wait()

    def prepare(cmd, inputs, outputs, stream):
        """The ops of one run on ``stream``'s GPU (the tensors must not move afterwards)."""
        dev = setup(cmd, inputs, outputs, stream)

        def record(precision):
            dev.make_current()
            sink = _Record(precision)
            body(dev, sink, cmd, inputs, outputs)
            return sink.ops

        if precise and _float32(tensors_of(inputs, outputs)):
            op = ByPrecision(record)
            op.ops[_cuda.precision()] = record(_cuda.precision())     # errors surface here
            return [op]
        return record(_cuda.precision())

    PREPARE[backend] = prepare
    return backend


def kernel_function(dev, kernel, t):
    """The compiled ``nnc_<kernel>_f16|f32|f64`` of t's dtype on ``dev`` (nnc/cuda/kernels)."""
    return dev.function(_FILE_OF[kernel], f"nnc_{kernel}_{_SUFFIX[t.dtype]}")


def scalar_param(t, value):
    """A scalar parameter as the kernels of t's dtype take it (:data:`ACC_DTYPE`)."""
    return np.asarray(value, ACC_DTYPE[np.dtype(t.dtype)])


def row_layout(*ts):
    """(n, cols, [row stride of each t]) for same-shape tensors seen as rows x cols (ew.cu):
    one row when all are contiguous, else rows of the last axis, evenly spaced."""
    n = ts[0].size
    if all(t.is_contiguous for t in ts):
        return n, max(n, 1), [max(n, 1)] * len(ts)
    cols = ts[0].shape[-1]
    return n, cols, [cols if t.is_contiguous else row_stride(t) for t in ts]


def row_stride(t):
    """The spacing of t's rows (its last axis has unit stride), or None if uneven."""
    if t.ndim < 2 or (t.strides[-1] != 1 and t.shape[-1] > 1):
        return None
    dims = list(zip(t.shape[-2::-1], t.strides[-2::-1]))
    p = next((s // span for span, (d, s) in zip(_spans(dims), dims) if d > 1), t.shape[-1])
    if p < t.shape[-1]:
        return None
    want = p
    for d, s in dims:
        if d > 1 and s != want:
            return None
        want *= d
    return p


def operands(inputs, outputs):
    """(x or a, w, bias or None, out) of GEMM and CONVOLUTION."""
    return inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, outputs[0]


def window_geometry(cmd, x, out, groups=1):
    """nnc_window_t (a WINDOW_T record) for CONVOLUTION / pooling on x -> out."""
    sh, sw = cmd.params["stride"]
    pt, pl = cmd.params["padding"][:2]
    kh, kw = cmd.params["size"] if "size" in cmd.params else (None, None)
    g = np.zeros((), WINDOW_T)
    n = x.shape[0] if x.ndim == 4 else 1
    g["n"], (g["h"], g["w"], g["c"]) = n, x.shape[-3:]
    g["ho"], g["wo"], g["o"] = out.shape[-3:]
    if kh is not None:
        g["kh"], g["kw"] = kh, kw
    g["sh"], g["sw"], g["pt"], g["pl"] = sh, sw, pt, pl
    g["groups"] = groups
    g["count_include_pad"] = int(bool(cmd.params.get("count_include_pad", False)))
    g["relu"] = int(cmd.params.get("activation") == "relu")
    g["x_ps"], g["o_ps"] = pixel_stride(x), pixel_stride(out)
    return g


def window_accept(cmd, inputs, outputs):
    """``accept`` of the window kernels (conv.cu: CONVOLUTION, MAX_POOL, AVG_POOL): one GPU,
    NHWC pixels evenly spaced with unit channel stride, weights and bias contiguous."""
    if cmd.params.get("activation") not in (None, "relu"):
        return False                    # the kernels fuse ReLU only
    if cmd.name == "CONVOLUTION" and len(inputs) > 3:
        return False                    # ... and no residual
    if cmd.params.get("ceil_mode") and cmd.params.get("count_include_pad"):
        return False                    # avg_pool divides by kh * kw, not a ceil window's part
    ts = tensors_of(inputs, outputs)
    if not same_gpu(ts):
        return False
    x, out = inputs[0], outputs[0]
    if pixel_stride(x) is None or pixel_stride(out) is None:
        return False
    return all(t.is_contiguous for t in inputs[1:] if t is not None)


def convt_geometry(cmd, x, w, out):
    """nnc_convt_t (a CONVT_T record) for CONVOLUTION_TRANSPOSE of x by w -> out."""
    g = np.zeros((), CONVT_T)
    g["n"] = x.shape[0] if x.ndim == 4 else 1
    g["h"], g["w"], g["c"] = x.shape[-3:]
    g["ho"], g["wo"], g["o"] = out.shape[-3:]
    g["kh"], g["kw"] = w.shape[1], w.shape[2]
    (g["sh"], g["sw"]), (g["dh"], g["dw"]) = cmd.params["stride"], cmd.params["dilation"]
    g["pt"], g["pl"] = cmd.params["padding"][:2]
    g["groups"] = cmd.params["groups"]
    g["x_ps"], g["o_ps"] = pixel_stride(x), pixel_stride(out)
    return g


def convt_accept(cmd, inputs, outputs):
    """``accept`` of CONVOLUTION_TRANSPOSE's kernel (conv.cu): one GPU, NHWC x and out with
    evenly spaced pixels and unit channel stride, w and bias contiguous, every size, stride,
    dilation and padding below 2^31 (the kernel's int fields).

    Formats other than NHWC never get here (nnc/cmd/command.pyx refuses them first)."""
    if not window_accept(cmd, inputs, outputs):
        return False
    x, w, out = inputs[0], inputs[1], outputs[0]
    (sh, sw), (dh, dw) = cmd.params["stride"], cmd.params["dilation"]
    pt, pl, pb, pr = cmd.params["padding"]
    # The kernel's row arithmetic, i + top - a * dh with i < Ho and a < kh, stays in int when
    # Ho + top and (kh - 1) * dh do; likewise columns.
    sizes = (*x.shape[-3:], *out.shape[-3:], *w.shape[1:3], sh, sw, dh, dw, pt, pl, pb, pr,
             out.shape[-3] + pt, out.shape[-2] + pl, (w.shape[1] - 1) * dh,
             (w.shape[2] - 1) * dw)
    return all(v < _INT_LIMIT for v in sizes)


def contiguous_same_gpu(cmd, inputs, outputs):
    """``accept`` of kernels that take flat buffers: one GPU, every tensor contiguous."""
    ts = tensors_of(inputs, outputs)
    return same_gpu(ts) and all(t.is_contiguous for t in ts)


def rows_same_gpu(cmd, inputs, outputs):
    """``accept`` of the row kernels of ew.cu: one GPU, every tensor contiguous or evenly spaced
    rows of a unit-stride last axis (:func:`row_layout`)."""
    ts = tensors_of(inputs, outputs)
    return same_gpu(ts) and all(t.is_contiguous or row_stride(t) is not None for t in ts)


def register_ref(command, body, accept=contiguous_same_gpu, device="gpu", datatypes=GPU_TYPES,
                 peers=False):
    """Register ``body`` as ``command``'s GPU_REF (each family's gpu/ref.py, once, at import
    nnc through nnc/cuda/builtins.py)."""
    from nnc.cmd.command import register_backend

    register_backend(command, BACKEND, runner(body, peers=peers), datatypes=datatypes,
                     accept=accept, device=device)
