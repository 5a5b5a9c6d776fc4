"""GPU_OPT of GEMM: cuBLAS through nvmath-python's low-level bindings (``nvmath.bindings.cublas``).

NNC: cmd/blas/gpu/ccv_nnc_gemm_gpu_cublas.cu (the GEMM backend that calls cuBLAS). nvmath-python
is NVIDIA's own binding of the CUDA math libraries: its ``bindings.cublas`` module is a thin
Cython layer over the C API (plain integers for handles, pointers and enums), so nnc passes
device addresses and CUstream values exactly as a C caller would, and nothing needs compiling.
It is an optional extra (``pip install 'nnc-graph[gpu-opt]'``); without it, or without a
loadable cuBLAS library, GPU_OPT accepts nothing and GEMM on GPU tensors runs on GPU_REF.
``import nnc`` imports neither nvmath nor cuda-bindings: the library is probed on the first
GEMM on GPU tensors, once per process.

- **One handle per CUDA stream** (:class:`CublasHandle`, the stream's ``library("cublas")``
  state): made on the stream's first GEMM, set to that stream once, destroyed after the stream
  drains when it closes. A lock serialises the calls on one handle, so two threads enqueuing
  on one stream never interleave a GEMM's two calls or the first call's set-up.
- **Workspace**: the stream's own scratch memory (nnc.cuda.memory.workspace) is set with
  cublasSetWorkspace, 32 MiB on Hopper (sm_90) and newer, 4 MiB before: the sizes cuBLAS's
  documentation recommends. A user workspace is what makes capture into CUDA graphs safe
  (without one, cuBLAS may allocate stream-ordered memory while capturing) and keeps two
  streams from sharing cuBLAS's default pool. It is set after cublasSetStream, which resets
  the workspace to that pool.
- **Host pointer mode**: alpha and beta are host scalars, read by cuBLAS when the call is
  enqueued (and baked into a captured graph); they are module constants, so they outlive
  every call and every prepared op.
- **Row-major mapping**: nnc's tensors are row-major, cuBLAS is column-major. ``out = a @ w``
  row-major is ``outᵀ = wᵀ aᵀ`` column-major, so cuBLAS's A is w, its B is a, its C is out,
  with m = N, n = M. A row-major matrix is its column-major transpose over the same memory, so
  each operand goes as it lies: unit stride along the cuBLAS rows -> OP_N with the other stride
  as leading dimension, unit stride along the columns -> OP_T. Batches (3-D) are one strided
  batched call (a 2-D operand shared by every batch has batch stride 0); a shared w with
  evenly laid a and out is folded into one GEMM of B·M rows instead.
- **Bias**: plain cuBLAS GEMM has no bias. The bias row is first broadcast into out with a
  k = 1 GEMM (out = bias · onesᵀ, beta = 0) and the product then added with beta = 1. One
  term times 1.0 is exact (NaN and Inf included), it needs no kernel of nnc's own and is
  captured like any cuBLAS call; the ones vector is per device and never freed. Without a
  bias, beta = 0: cuBLAS then never reads out, so garbage (NaN) in a fresh output does not
  leak into the result, exactly as GPU_REF and CPU_REF overwrite it. K = 0 broadcasts the
  bias, or zeros, and multiplies nothing.
- **Types and precision**: float64 runs cublasDgemm; float32 cublasSgemm (IEEE float32) or,
  under nnc.cuda.precision() "tf32", cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_TF32 (tensor
  cores on inputs rounded to TF32, float32 accumulation); float16 cublasGemmEx with float16
  operands and CUBLAS_COMPUTE_32F (float32 accumulation and float32 alpha / beta). The bias
  broadcast never uses TF32 (a bias rounded to TF32 would lose bits for no speed). A prepared
  float32 node keeps the calls of each precision (nnc.cuda.runner.ByPrecision) and enqueues
  those of the precision current at each run.

Written against cuBLAS's documented semantics and checked with a fake cuBLAS on the fake
driver (tests/fakes/cublas.py); docs/gpu.md lists what a GPU run must confirm.
"""

import threading

import numpy as np

from nnc.base.core import CommandError, CUDAError
from nnc.cmd.gemm import one_batch
from nnc.cuda import memory
from nnc.cuda.runner import FLOAT_TYPES, operands, runner, same_gpu, tensors_of

__all__ = ["BACKEND", "PRIORITY", "CublasHandle", "available", "handle", "register",
           "unavailable_reason", "workspace_size"]

BACKEND = "GPU_OPT"
PRIORITY = 20                       # above GPU_REF's 15: the default choice where it accepts
INSTALL = "pip install 'nnc-graph[gpu-opt]'"
_INT_MAX = 2 ** 31 - 1              # cuBLAS's 32-bit API: sizes, leading dims, batch count
_MiB = 1 << 20
_OP_N, _OP_T = 0, 1                 # cublasOperation_t (CUBLAS_OP_N, CUBLAS_OP_T)
_PROPERTY_MAJOR = 0                 # libraryPropertyType MAJOR_VERSION
_R_16F, _R_32F = 2, 0               # cudaDataType_t (CUDA_R_16F, CUDA_R_32F)
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32 = 68, 77   # cublasComputeType_t
_GEMM_DEFAULT = -1                  # cublasGemmAlgo_t CUBLAS_GEMM_DEFAULT
DATATYPES = ("float16", *FLOAT_TYPES)

_probe_lock = threading.Lock()
_probed = None                      # (nvmath cublas module or None, reason or None), once
_constants_lock = threading.Lock()
# (ordinal, dtype) -> (GPU tensor of L ones then L zeros, retired smaller ones). Only grows;
# retired tensors are kept for the process, as prepared ops and captured graphs keep their
# addresses.
_constants = {}
# alpha / beta for host pointer mode, by the type cuBLAS computes in (float32 for float16
# operands): read-only, alive as long as the module.
_SCALARS = {}
for _dt in FLOAT_TYPES:
    for _v in (0.0, 1.0):
        _s = np.full(1, _v, _dt)
        _s.flags.writeable = False
        _SCALARS[np.dtype(_dt), _v] = _s


def _probe():
    try:
        from nvmath.bindings import cublas
    except ImportError as e:
        return None, f"nvmath-python is not installed ({INSTALL}): {e}"
    except Exception as e:  # a broken install must not break GEMM on GPU_REF
        return None, f"nvmath-python failed to import: {type(e).__name__}: {e}"
    try:
        # cublasGetProperty needs no handle or device: it only loads libcublas.
        cublas.get_property(_PROPERTY_MAJOR)
    except Exception as e:
        return None, (f"the cuBLAS library does not load ({type(e).__name__}: {e}); "
                      f"{INSTALL} installs it")
    return cublas, None


def _library():
    """(the nvmath cuBLAS module or None, reason or None), probed once per process."""
    global _probed
    probed = _probed
    if probed is None:
        with _probe_lock:
            if _probed is None:
                _probed = _probe()
            probed = _probed
    return probed


def available():
    """True if nvmath-python imports and the cuBLAS library loads. Never raises."""
    return _library()[0] is not None


def unavailable_reason():
    """Why GPU_OPT's GEMM cannot run (naming what to install), or None when it can."""
    return _library()[1]


def workspace_size(dev):
    """Bytes of cuBLAS workspace for a device: cuBLAS's recommended 32 MiB on Hopper (sm_90)
    and newer, 4 MiB on older GPUs."""
    return (32 if dev.arch >= 90 else 4) * _MiB


class CublasHandle:
    """A cuBLAS handle bound to one CudaStream (that stream's ``library("cublas")`` state).

    Invariants: ``handle`` is set to the stream from creation to :meth:`close` (then None);
    ``workspace`` is None until the first call, then the stream's workspace address, set on
    the handle; every use of the handle holds ``lock``. It keeps no reference to the stream
    (which owns it), only the stream's device and raw handle.
    """

    def __init__(self, lib, dev, cu_stream):
        self.lib, self.device = lib, dev
        self.lock = threading.Lock()
        self.workspace = None
        dev.make_current()              # a handle belongs to the device current when made
        self.handle = None
        try:
            h = lib.create()
        except (lib.cuBLASError, RuntimeError) as e:
            raise CUDAError(f"cublasCreate failed: {e}") from e
        try:
            lib.set_stream(h, cu_stream)
            lib.set_pointer_mode(h, lib.PointerMode.HOST)
            # cuBLAS's default: IEEE float32 (no TF32 tensor-op rounding), as the tolerances
            # of docs/commands.md assume; an environment cannot turn TF32 on behind nnc.
            lib.set_math_mode(h, lib.Math.DEFAULT_MATH)
        except (lib.cuBLASError, RuntimeError) as e:
            lib.destroy(h)
            raise CUDAError(f"setting up a cuBLAS handle failed: {e}") from e
        self.handle = h

    def run(self, stream, calls):
        """Enqueue ``calls`` ((cuBLAS function name, arguments after the handle), ...) on
        ``stream``, the CudaStream this handle is set to."""
        lib = self.lib
        with self.lock:
            if self.handle is None:
                raise CUDAError(f"the cuBLAS handle of {stream!r} was destroyed")
            self.device.make_current()      # cuBLAS calls run in the current context
            if self.workspace is None:
                size = workspace_size(self.device)
                ptr = memory.workspace(stream, size)
                try:
                    lib.set_workspace(self.handle, ptr, size)
                except (lib.cuBLASError, RuntimeError) as e:
                    raise CUDAError(f"cublasSetWorkspace failed on {stream!r}: {e}") from e
                self.workspace = ptr
            try:
                for name, args in calls:
                    getattr(lib, name)(self.handle, *args)
            except (lib.cuBLASError, RuntimeError) as e:
                raise CUDAError(f"cuBLAS failed on {stream!r}: {e}") from e

    def close(self):
        with self.lock:
            h, self.handle = self.handle, None
        if h is not None:
            self.device.make_current()
            self.lib.destroy(h)


def handle(stream):
    """The :class:`CublasHandle` of CudaStream ``stream`` (made on first use)."""
    lib, reason = _library()
    if lib is None:
        raise CUDAError(f"GEMM/{BACKEND} needs cuBLAS, which is unavailable: {reason}")
    return stream.library("cublas", lambda: CublasHandle(lib, stream.device, int(stream.handle)))


def _ones_zeros(dev, dtype, n):
    """(address of >= n ones, address of >= n zeros, the tensor holding them) on ``dev``."""
    key = (dev.ordinal, dtype)
    with _constants_lock:
        entry = _constants.get(key)
        if entry is None or entry[0].shape[0] // 2 < n:
            length = 1 << max(10, (n - 1).bit_length())     # powers of two: few regrowths
            host = np.concatenate([np.ones(length, dtype), np.zeros(length, dtype)])
            t = memory.from_numpy(host, dev.ordinal)
            entry = _constants[key] = (t, (entry[1] + [entry[0]]) if entry else [])
        t = entry[0]
    half = t.shape[0] // 2
    return t.data_ptr, t.data_ptr + half * t.dtype.itemsize, t


def _matrix(rows, cols, rs, cs):
    """cuBLAS's view of a rows x cols operand whose element (r, c) lies at r*rs + c*cs
    (elements): (op, ld) with OP_N when it is column-major (unit stride down the rows), OP_T
    when it is stored as its transpose (unit stride along the columns); None when neither
    fits: no unit stride, or a leading dimension below the other axis' extent (overlap) or
    beyond int32. A size-1 axis has no stride that matters."""
    if rows <= 1 or rs == 1:
        ld = cs if cols > 1 else max(1, rows)
        if max(1, rows) <= ld <= _INT_MAX:
            return _OP_N, ld
    if cols <= 1 or cs == 1:
        ld = rs if rows > 1 else max(1, cols)
        if max(1, cols) <= ld <= _INT_MAX:
            return _OP_T, ld
    return None


class _Plan:
    """One GEMM as cuBLAS calls: sizes and layouts (cuBLAS's m = N, n = M), no addresses."""

    __slots__ = ("batch", "m", "n", "k", "wop", "aop", "ldc", "w_bs", "a_bs", "o_bs", "bias")


def plan(cmd, a, w, bias, out):
    """The :class:`_Plan` of GEMM on these tensors, or None where cuBLAS cannot express it
    (then GPU_REF runs it)."""
    ta, tb = cmd.params["transpose_a"], cmd.params["transpose_b"]
    if a.ndim == 1:
        m, k, a_ms, a_ks = 1, a.shape[0], 0, a.strides[0]
    elif ta:
        (k, m), (a_ks, a_ms) = a.shape[-2:], a.strides[-2:]
    else:
        (m, k), (a_ms, a_ks) = a.shape[-2:], a.strides[-2:]
    if tb:
        n, (w_ns, w_ks) = w.shape[-2], w.strides[-2:]
    else:
        n, (w_ks, w_ns) = w.shape[-1], w.strides[-2:]
    batch = a.shape[0] if a.ndim == 3 else (w.shape[0] if w.ndim == 3 else 1)
    has_m = a.ndim >= 2
    o_ms = out.strides[-2] if has_m else 0
    # A batch of 1 has no batch stride that matters; a 2-D operand is shared (stride 0).
    a_bs = a.strides[0] if a.ndim == 3 and batch > 1 else 0
    w_bs = w.strides[0] if w.ndim == 3 and batch > 1 else 0
    o_bs = out.strides[0] if out.ndim == (3 if has_m else 2) and batch > 1 else 0
    if min(a_bs, w_bs, o_bs) < 0:
        return None
    if batch > 1 and w_bs == 0 and a.ndim == 3 and 0 < a_bs == m * a_ms and 0 < o_bs == m * o_ms:
        # Every batch of a and out continues the rows of the one before: one GEMM of B*M rows.
        m, batch, a_bs, o_bs = m * batch, 1, 0, 0
    p = _Plan()
    p.batch, p.m, p.n, p.k, p.w_bs, p.a_bs, p.o_bs = batch, n, m, k, w_bs, a_bs, o_bs
    if max(n, m, k, batch) > _INT_MAX:
        return None
    c = _matrix(n, m, out.strides[-1], o_ms)
    if c is None or c[0] != _OP_N:
        return None                 # C cannot be transposed: out needs unit stride along N
    p.ldc = c[1]
    if batch > 1 and o_bs < (m - 1) * p.ldc + n:
        return None                 # the batches of out would overlap
    p.bias = None
    if bias is not None:
        p.bias = _matrix(n, 1, bias.strides[0], 0)
        if p.bias is None:
            return None
    p.wop = p.aop = None
    if k > 0:
        # op(A) = wᵀ, N x K; op(B) = aᵀ, K x M.
        p.wop, p.aop = _matrix(n, k, w_ns, w_ks), _matrix(k, m, a_ks, a_ms)
        if p.wop is None or p.aop is None:
            return None
    return p


def _calls(p, a, w, bias, out, ones, zeros, precision="ieee"):
    """The cuBLAS calls of plan ``p`` (function name, arguments after the handle) under float32
    ``precision``."""
    dt = np.dtype(out.dtype)
    acc = np.dtype(np.float32) if dt == np.float16 else dt
    one, zero = (_SCALARS[acc, 1.0].ctypes.data, _SCALARS[acc, 0.0].ctypes.data)
    calls = []

    def gemm(op_a, lda, a_ptr, a_bs, op_b, ldb, b_ptr, b_bs, k, beta, fast=False):
        if dt == np.float16 or fast:
            # cublasGemmEx: the operands' type, then the compute type, then the algorithm.
            t = _R_16F if dt == np.float16 else _R_32F
            compute = _COMPUTE_32F_FAST_TF32 if fast else _COMPUTE_32F
            if p.batch > 1:
                calls.append(("gemm_strided_batched_ex",
                              (op_a, op_b, p.m, p.n, k, one, a_ptr, t, lda, a_bs, b_ptr, t, ldb,
                               b_bs, beta, out.data_ptr, t, p.ldc, p.o_bs, p.batch, compute,
                               _GEMM_DEFAULT)))
            else:
                calls.append(("gemm_ex", (op_a, op_b, p.m, p.n, k, one, a_ptr, t, lda, b_ptr, t,
                                          ldb, beta, out.data_ptr, t, p.ldc, compute,
                                          _GEMM_DEFAULT)))
            return
        prefix = "s" if dt == np.float32 else "d"
        if p.batch > 1:
            calls.append((f"{prefix}gemm_strided_batched",
                          (op_a, op_b, p.m, p.n, k, one, a_ptr, lda, a_bs, b_ptr, ldb, b_bs,
                           beta, out.data_ptr, p.ldc, p.o_bs, p.batch)))
        else:
            calls.append((f"{prefix}gemm", (op_a, op_b, p.m, p.n, k, one, a_ptr, lda, b_ptr,
                                            ldb, beta, out.data_ptr, p.ldc)))

    broadcast = bias is not None or p.k == 0
    if broadcast:
        # out = row · onesᵀ: A the bias (N x 1), or zeros when K = 0 without a bias; B a
        # 1 x M row of ones. Shared by every batch (batch stride 0); beta = 0 overwrites out.
        op_r, ld_r = p.bias if bias is not None else (_OP_N, max(1, p.m))
        row = bias.data_ptr if bias is not None else zeros
        gemm(op_r, ld_r, row, 0, _OP_N, 1, ones, 0, 1, zero)
    if p.k > 0:
        gemm(*p.wop, w.data_ptr, p.w_bs, *p.aop, a.data_ptr, p.a_bs, p.k,
             one if broadcast else zero, fast=dt == np.float32 and precision == "tf32")
    return calls


class _GemmOp:
    """``op(cuda_stream)``: one GEMM's cuBLAS calls, arguments packed once (a prepared op is
    replayed for every run of a graph node); ``keep`` holds the ones/zeros tensor."""

    __slots__ = ("calls", "keep")
    # A GPU stream may capture it into a CUDA graph of its node (nnc.cuda._ccall.NodeGraph):
    # the calls are packed once, and the handle's workspace is set once per stream.
    capturable = True

    def __init__(self, calls, keep):
        self.calls, self.keep = calls, keep

    def __call__(self, stream):
        handle(stream).run(stream, self.calls)


def _gemm(dev, sink, cmd, inputs, outputs):
    a, w, bias, out = operands(inputs, outputs)
    if out.size == 0:
        return
    p = plan(cmd, a, w, bias, out)
    if p is None:
        raise CommandError(f"GEMM/{BACKEND}: cuBLAS cannot express this layout")
    ones = zeros = keep = None
    if bias is not None or p.k == 0:
        ones, zeros, keep = _ones_zeros(dev, out.dtype, max(p.m, p.n))
    sink.call(_GemmOp(_calls(p, a, w, bias, out, ones, zeros, sink.precision), keep))


def _accept(cmd, inputs, outputs):
    """cuBLAS through nvmath-python installed; each matrix with a unit stride on one axis,
    sizes and leading dimensions within int32, out with unit stride along N.

    Pinned (``Cmd("GEMM", backend="GPU_OPT")``) while cuBLAS is unavailable: CUDAError naming
    what to install, rather than a silent fallback."""
    if not same_gpu(tensors_of(inputs, outputs)):
        return False
    lib, reason = _library()
    if lib is None:
        if cmd.pinned and cmd.backend == BACKEND:
            raise CUDAError(f"GEMM/{BACKEND} needs cuBLAS, which is unavailable: {reason}")
        return False
    a, w, bias, out = operands(inputs, outputs)
    if not one_batch(a.shape, w.shape, None if bias is None else bias.shape):
        return False                # broadcast batches: one strided-batched call cannot
    return plan(cmd, a, w, bias, out) is not None


def register():
    """Register GPU_OPT of GEMM (at import nnc: imports neither nvmath nor cuda-bindings)."""
    from nnc.cmd.command import register_backend

    register_backend("GEMM", BACKEND, runner(_gemm, name=BACKEND, precise=True),
                     datatypes=DATATYPES,
                     accept=_accept, priority=PRIORITY, device="gpu")
