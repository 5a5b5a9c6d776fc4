"""A fake of the nvmath-python cuBLAS surface nnc uses (nnc/cmd/gemm/gpu/cublas.py), on the fake
driver of tests/fakes/cuda_driver.py.

Handles remember their device context, stream, workspace and modes; every GEMM checks its
arguments as cuBLAS's documentation says cuBLAS does (CUBLAS_STATUS_INVALID_VALUE otherwise),
that the handle's context is current on the calling thread, that every element it touches lies
in fake device memory, reads alpha and beta from their host pointers when called (pointer mode
host), records which stream it targeted, and then runs as a column-major GEMM in NumPy through
FakeDriver._run: at once, or as a node of the graph a capturing stream records (so replay
reruns it with the values read at capture). Where nvmath-python is installed and no driver
library is, every call is first made on the real module too, which converts every argument and
then fails to find the driver: a TypeError or OverflowError there means the real bindings would
reject what nnc passes.
"""

import ctypes
import enum

import numpy as np

from .cuda_driver import _driver_library_present
from .cuda_kernels import _arr

try:
    from nvmath.bindings import cublas as real
except ImportError:
    real = None

# Only where no driver library can load: with one, the real module could reach a real cuBLAS
# with these fake handles.
REAL_CHECK = real is not None and not _driver_library_present()


class Operation(enum.IntEnum):       # cublasOperation_t
    N = 0
    T = 1
    C = 2


class PointerMode(enum.IntEnum):     # cublasPointerMode_t
    HOST = 0
    DEVICE = 1


class Math(enum.IntEnum):            # cublasMath_t (the values nnc may set)
    DEFAULT_MATH = 0
    TENSOR_OP_MATH = 1
    PEDANTIC_MATH = 2
    TF32_TENSOR_OP_MATH = 3


class cuBLASError(Exception):  # noqa: N801  (nvmath's name)
    """A cuBLAS status other than success (nvmath's cuBLASError needs the library to name it)."""

    def __init__(self, status):
        super().__init__(f"cuBLAS status {status}")
        self.status = status


NOT_INITIALIZED, ALLOC_FAILED, INVALID_VALUE, EXECUTION_FAILED = 1, 3, 7, 13  # cublasStatus_t
NOT_SUPPORTED = 15
R_16F, R_32F, R_64F = 2, 0, 1                           # cudaDataType_t
COMPUTE_32F, COMPUTE_32F_FAST_TF32 = 68, 77             # cublasComputeType_t
_EX_TYPES = {R_16F: np.float16, R_32F: np.float32}
_EX_COMPUTE = {(R_16F, COMPUTE_32F), (R_32F, COMPUTE_32F), (R_32F, COMPUTE_32F_FAST_TF32)}


def tf32(v):
    """float32 values rounded to TF32 (10 mantissa bits, nearest), as tensor cores read them."""
    bits = np.asarray(v, np.float32).view(np.uint32)
    finite = np.isfinite(np.asarray(v, np.float32))
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(finite, rounded, v).astype(np.float32)


class _State:
    """What cuBLAS keeps per handle."""

    def __init__(self, ctx):
        self.ctx = ctx                  # the context current at cublasCreate
        self.stream = 0                 # the legacy default stream until cublasSetStream
        self.workspace = None           # (ptr, bytes) set by the user, None: the default pool
        self.pointer_mode = PointerMode.HOST
        self.math = Math.DEFAULT_MATH


class FakeCublas:
    Operation, PointerMode, Math, cuBLASError = Operation, PointerMode, Math, cuBLASError

    def __init__(self, driver, version=13):
        self.driver = driver            # the FakeDriver whose memory and streams are used
        self.version = version
        self.handles = {}               # live handle -> _State
        self.destroyed = []             # handles destroyed, in order
        self.calls = []                 # (function name, handle, stream) of every GEMM
        self.ex = []                    # (function name, data type, compute type) of *_ex GEMMs
        self.names = []                 # every call's name, in order
        self._next = 0x7000

    # -- helpers
    def _real(self, name, *args):
        self.names.append(name)
        if REAL_CHECK:
            try:
                getattr(real, name)(*args)
            except (TypeError, OverflowError) as e:
                raise AssertionError(f"nvmath's cuBLAS rejects {name}{args}: {e}") from e
            except RuntimeError:
                pass                    # got as far as loading the driver: arguments accepted

    def _ctx(self):
        return getattr(self.driver._current, "ctx", None)

    def _state(self, h):
        st = self.handles.get(h)
        if st is None:
            raise cuBLASError(NOT_INITIALIZED)
        if self._ctx() != st.ctx:
            # A handle is used with its own device's context current (cuBLAS's rule).
            raise AssertionError(f"cuBLAS handle {h:#x} used with context {self._ctx()} "
                                 f"current, made under {st.ctx}")
        return st

    def _unsafe_in_capture(self, name, status):
        # cublasCreate allocates and cublasDestroy synchronises: CUDA refuses both on a thread
        # capturing a graph, and the capture is invalidated (the fake driver's rule, where it
        # has one: FakeDriver.unsafe).
        unsafe = getattr(self.driver, "unsafe", None)
        if unsafe is not None and unsafe(name):
            raise cuBLASError(status)

    def _inside(self, ptr, nbytes, what):
        for base, buf in self.driver.buffers.items():
            if base <= ptr and ptr + nbytes <= base + buf.nbytes:
                return
        raise AssertionError(f"{what}: {nbytes} bytes at {ptr:#x} are not fake device memory")

    # -- handles
    def get_property(self, kind):
        self._real("get_property", kind)
        return (self.version, 0, 0)[kind]

    def create(self):
        self._real("create")
        # What cuBLAS 13 answered on an H200 when a capture refused its allocation.
        self._unsafe_in_capture("cublasCreate", NOT_INITIALIZED)
        if self._ctx() is None:
            raise cuBLASError(NOT_INITIALIZED)
        self._next += 16
        self.handles[self._next] = _State(self._ctx())
        return self._next

    def destroy(self, h):
        self._real("destroy", h)
        self._state(h)
        self._unsafe_in_capture("cublasDestroy", EXECUTION_FAILED)
        del self.handles[h]
        self.destroyed.append(h)

    def set_stream(self, h, stream):
        self._real("set_stream", h, stream)
        st = self._state(h)
        if stream not in self.driver.live_streams or self.driver.ctx_of[stream] != st.ctx:
            raise AssertionError(f"cublasSetStream: {stream} is no live stream of the handle's "
                                 "context")
        st.stream = stream
        st.workspace = None             # cublasSetStream resets the workspace to the default pool

    def set_workspace(self, h, ptr, nbytes):
        self._real("set_workspace", h, ptr, nbytes)
        st = self._state(h)
        self._inside(ptr, nbytes, "cublasSetWorkspace")
        st.workspace = (ptr, nbytes)

    def set_pointer_mode(self, h, mode):
        self._real("set_pointer_mode", h, mode)
        self._state(h).pointer_mode = PointerMode(mode)

    def set_math_mode(self, h, mode):
        self._real("set_math_mode", h, mode)
        self._state(h).math = Math(mode)

    # -- GEMM
    def sgemm(self, h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self._real("sgemm", h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        self._gemm("sgemm", np.float32, h, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta,
                   c, ldc, 0, 1)

    def dgemm(self, h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self._real("dgemm", h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        self._gemm("dgemm", np.float64, h, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta,
                   c, ldc, 0, 1)

    def sgemm_strided_batched(self, h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c,
                              ldc, sc, count):
        args = (h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count)
        self._real("sgemm_strided_batched", *args)
        self._gemm("sgemm_strided_batched", np.float32, *args)

    def dgemm_strided_batched(self, h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c,
                              ldc, sc, count):
        args = (h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count)
        self._real("dgemm_strided_batched", *args)
        self._gemm("dgemm_strided_batched", np.float64, *args)

    def gemm_ex(self, h, ta, tb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc,
                compute, algo):
        self._real("gemm_ex", h, ta, tb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c,
                   ctype, ldc, compute, algo)
        self._ex("gemm_ex", atype, btype, ctype, compute, algo)
        self._gemm("gemm_ex", _EX_TYPES[atype], h, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0,
                   beta, c, ldc, 0, 1, fast=compute == COMPUTE_32F_FAST_TF32)

    def gemm_strided_batched_ex(self, h, ta, tb, m, n, k, alpha, a, atype, lda, sa, b, btype,
                                ldb, sb, beta, c, ctype, ldc, sc, count, compute, algo):
        self._real("gemm_strided_batched_ex", h, ta, tb, m, n, k, alpha, a, atype, lda, sa, b,
                   btype, ldb, sb, beta, c, ctype, ldc, sc, count, compute, algo)
        self._ex("gemm_strided_batched_ex", atype, btype, ctype, compute, algo)
        self._gemm("gemm_strided_batched_ex", _EX_TYPES[atype], h, ta, tb, m, n, k, alpha, a,
                   lda, sa, b, ldb, sb, beta, c, ldc, sc, count,
                   fast=compute == COMPUTE_32F_FAST_TF32)

    def _ex(self, name, atype, btype, ctype, compute, algo):
        # The combinations of cublasGemmEx's table that nnc uses; others: NOT_SUPPORTED.
        if not (atype == btype == ctype and (atype, compute) in _EX_COMPUTE and algo == -1):
            raise cuBLASError(NOT_SUPPORTED)
        self.ex.append((name, atype, compute))

    def _gemm(self, name, dt, h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc,
              sc, count, fast=False):
        st = self._state(h)
        if st.workspace is None:
            raise AssertionError(f"{name} on a handle without a user workspace (not safe to "
                                 "capture into a CUDA graph)")
        if st.pointer_mode != PointerMode.HOST or st.math != Math.DEFAULT_MATH:
            raise AssertionError(f"{name}: nnc sets host pointer mode and the default math")
        # cublas<t>gemm's documented CUBLAS_STATUS_INVALID_VALUE conditions.
        if (min(m, n, k, count) < 0 or ta not in (0, 1, 2) or tb not in (0, 1, 2)
                or lda < max(1, m if ta == Operation.N else k)
                or ldb < max(1, k if tb == Operation.N else n)
                or ldc < max(1, m) or not alpha or not beta):
            raise cuBLASError(INVALID_VALUE)
        # alpha and beta are of the compute type: float for float16 and float32 operands.
        ctype = ctypes.c_double if dt == np.float64 else ctypes.c_float
        # Pointer mode host: the scalars are read now, at enqueue (a capture bakes them in).
        al, be = ctype.from_address(alpha).value, ctype.from_address(beta).value
        a_shape = (m, k) if ta == Operation.N else (k, m)
        b_shape = (k, n) if tb == Operation.N else (n, k)
        size = np.dtype(dt).itemsize
        if m == 0 or n == 0 or count == 0:
            self.calls.append((name, h, st.stream))
            return

        def extent(shape, ld):
            return ((shape[1] - 1) * ld + shape[0]) * size if min(shape) > 0 else 0

        reads_ab = k > 0 and al != 0
        for i in range(count):
            if reads_ab:
                self._inside(a + i * sa * size, extent(a_shape, lda), f"{name} A[{i}]")
                self._inside(b + i * sb * size, extent(b_shape, ldb), f"{name} B[{i}]")
            self._inside(c + i * sc * size, extent((m, n), ldc), f"{name} C[{i}]")
        self.calls.append((name, h, st.stream))

        def run():
            for i in range(count):
                cv = _arr(c + i * sc * size, dt, (m, n), (1, ldc))
                acc = np.zeros((m, n))
                if reads_ab:
                    av = _arr(a + i * sa * size, dt, a_shape, (1, lda))
                    bv = _arr(b + i * sb * size, dt, b_shape, (1, ldb))
                    if fast:            # tensor cores read TF32, then accumulate in float
                        av, bv = tf32(av), tf32(bv)
                    av, bv = av.astype(np.float64), bv.astype(np.float64)
                    av = av if ta == Operation.N else av.T
                    bv = bv if tb == Operation.N else bv.T
                    acc = al * (av @ bv)
                if be != 0:             # beta == 0: C is not read (cuBLAS's documented rule)
                    acc = acc + be * cv
                cv[...] = acc

        self.driver._run(run, st.stream)


def install(monkeypatch, fake_driver):
    """Make GPU_OPT use a new FakeCublas on ``fake_driver`` until the test ends; returns it."""
    from nnc.cmd.gemm.gpu import cublas as cublas_gemm

    fake = FakeCublas(fake_driver)
    monkeypatch.setattr(cublas_gemm, "_probed", (fake, None))
    monkeypatch.setattr(cublas_gemm, "_constants", {})
    return fake
