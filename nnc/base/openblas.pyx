"""BLAS for nnc's C backends, without the GIL: GEMM from the scipy-openblas32 wheel's CBLAS.

Why this library, and why loaded this way (docs/commands.md, "BLAS"):

- It is the OpenBLAS NumPy and SciPy themselves build against, shipped as a wheel with a stable
  CBLAS (``scipy_cblas_sgemm`` ...) for every platform NumPy supports, so nnc needs no BLAS at
  build time and no compiler flags: the functions are looked up once, here, at import.
- It is nnc's own copy: NumPy's OpenBLAS (``libscipy_openblas64_`` inside numpy.libs) is a
  different library, so keeping this one at one thread does not change NumPy's (or the user's)
  BLAS threading. nnc's pool provides the parallelism instead: a convolution is split into
  parts idle pool threads take (nnc.base.parallel), and streams run side by side, without a second
  thread pool spinning against them.
- ``scipy.linalg.cython_blas`` would do too, but brings all of SciPy (and its BLAS is shared
  with the user's SciPy code, so its thread count is not nnc's to set).

OpenBLAS starts its own threads when it loads unless OPENBLAS_NUM_THREADS says 1; nnc sets it
for the load only when the user has not set it, then calls ``openblas_set_num_threads(1)``.
"""

import ctypes
import os

from libc.stdint cimport uintptr_t

ctypedef void (*sgemm_f)(int order, int ta, int tb, int m, int n, int k, float alpha,
                         const float* a, int lda, const float* b, int ldb, float beta,
                         float* c, int ldc) noexcept nogil
ctypedef void (*dgemm_f)(int order, int ta, int tb, int m, int n, int k, double alpha,
                         const double* a, int lda, const double* b, int ldb, double beta,
                         double* c, int ldc) noexcept nogil

ctypedef void (*sgemv_f)(int order, int ta, int m, int n, float alpha, const float* a, int lda,
                         const float* x, int incx, float beta, float* y,
                         int incy) noexcept nogil
ctypedef void (*dgemv_f)(int order, int ta, int m, int n, double alpha, const double* a,
                         int lda, const double* x, int incx, double beta, double* y,
                         int incy) noexcept nogil

cdef enum:
    ROW_MAJOR = 101                     # CblasRowMajor

cdef sgemm_f _sgemm = NULL
cdef dgemm_f _dgemm = NULL
cdef sgemv_f _sgemv = NULL
cdef dgemv_f _dgemv = NULL


cdef void nnc_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha,
                    const float* a, int lda, const float* b, int ldb, float beta,
                    float* c, int ldc) noexcept nogil:
    _sgemm(ROW_MAJOR, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


cdef void nnc_dgemm(int trans_a, int trans_b, int m, int n, int k, double alpha,
                    const double* a, int lda, const double* b, int ldb, double beta,
                    double* c, int ldc) noexcept nogil:
    _dgemm(ROW_MAJOR, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


cdef void nnc_sgemv(int trans, int m, int n, float alpha, const float* a, int lda,
                    const float* x, int incx, float beta, float* y, int incy) noexcept nogil:
    _sgemv(ROW_MAJOR, trans, m, n, alpha, a, lda, x, incx, beta, y, incy)


cdef void nnc_dgemv(int trans, int m, int n, double alpha, const double* a, int lda,
                    const double* x, int incx, double beta, double* y, int incy) noexcept nogil:
    _dgemv(ROW_MAJOR, trans, m, n, alpha, a, lda, x, incx, beta, y, incy)


def _load():
    """The library and its symbol prefix ("scipy_" in the wheel's build)."""
    import scipy_openblas32

    folder = scipy_openblas32.get_lib_dir()
    path = os.path.join(folder, scipy_openblas32.get_library(fullname=True))
    unset = "OPENBLAS_NUM_THREADS" not in os.environ
    if unset:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    finally:
        if unset:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
    for prefix in ("scipy_", ""):
        if hasattr(lib, prefix + "cblas_sgemm"):
            return lib, prefix
    raise ImportError(f"{path} has no cblas_sgemm")


_lib, _prefix = _load()
getattr(_lib, _prefix + "openblas_set_num_threads")(1)
_sgemm = <sgemm_f><uintptr_t>ctypes.cast(getattr(_lib, _prefix + "cblas_sgemm"),
                                         ctypes.c_void_p).value
_dgemm = <dgemm_f><uintptr_t>ctypes.cast(getattr(_lib, _prefix + "cblas_dgemm"),
                                         ctypes.c_void_p).value
_sgemv = <sgemv_f><uintptr_t>ctypes.cast(getattr(_lib, _prefix + "cblas_sgemv"),
                                         ctypes.c_void_p).value
_dgemv = <dgemv_f><uintptr_t>ctypes.cast(getattr(_lib, _prefix + "cblas_dgemv"),
                                         ctypes.c_void_p).value
#: What nnc's C backends compute with, for reports (benchmarks, docs/benchmarks.md).
config = ctypes.cast(getattr(_lib, _prefix + "openblas_get_config"),
                     ctypes.CFUNCTYPE(ctypes.c_char_p))().decode()


def gemm(a, b, c, bint trans_b=False):
    """c = a . b (or a . b^T with ``trans_b``) on C-contiguous 2-D float32/float64 ndarrays of
    one dtype, without the GIL: the GEMM nnc's backends call, for benchmarks (the baseline of
    docs/benchmarks.md's convolution table) and tests."""
    import numpy as np

    arrays = (a, b, c)
    if not all(isinstance(t, np.ndarray) and t.ndim == 2 and t.flags.c_contiguous
               for t in arrays):
        raise TypeError("gemm needs three C-contiguous 2-D ndarrays")
    if a.dtype != b.dtype or a.dtype != c.dtype or a.dtype not in (np.float32, np.float64):
        raise TypeError("gemm needs float32 or float64 arrays of one dtype")
    if not c.flags.writeable:
        raise ValueError("gemm: c is read-only")
    cdef int m = a.shape[0], k = a.shape[1], n = c.shape[1]
    cdef int kb = b.shape[1] if trans_b else b.shape[0]
    cdef int nb = b.shape[0] if trans_b else b.shape[1]
    if kb != k or nb != n or c.shape[0] != m:
        raise ValueError(f"gemm: shapes {a.shape} . {b.shape}{'^T' if trans_b else ''} "
                         f"-> {c.shape} do not agree")
    cdef int tb = BLAS_TRANS if trans_b else BLAS_NO_TRANS
    cdef int ldb = b.shape[1]
    cdef uintptr_t pa = a.ctypes.data, pb = b.ctypes.data, pc = c.ctypes.data
    if m == 0 or n == 0:
        return
    if a.dtype == np.float32:
        with nogil:
            nnc_sgemm(BLAS_NO_TRANS, tb, m, n, k, 1.0, <const float*>pa, max(k, 1),
                      <const float*>pb, max(ldb, 1), 0.0, <float*>pc, n)
    else:
        with nogil:
            nnc_dgemm(BLAS_NO_TRANS, tb, m, n, k, 1.0, <const double*>pa, max(k, 1),
                      <const double*>pb, max(ldb, 1), 0.0, <double*>pc, n)
