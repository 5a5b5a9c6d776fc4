# BLAS for C backends: single-precision and double-precision GEMM, called without the GIL from
# any thread. The library is the CBLAS of the scipy-openblas32 wheel (the OpenBLAS build NumPy
# and SciPy build against), loaded privately by nnc and kept at one thread: nnc's pool owns the
# parallelism (docs/commands.md, "BLAS"). Row-major only: every nnc tensor is.

cdef enum:
    BLAS_NO_TRANS = 111                 # CBLAS's CblasNoTrans
    BLAS_TRANS = 112                    # CblasTrans

# C[m, n] = alpha * op(A)[m, k] . op(B)[k, n] + beta * C, row-major with leading dimensions
# lda/ldb/ldc (in elements). Never NULL once nnc.base.openblas is imported (the import fails
# otherwise, and no backend using it is registered).
cdef void nnc_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha,
                    const float* a, int lda, const float* b, int ldb, float beta,
                    float* c, int ldc) noexcept nogil
cdef void nnc_dgemm(int trans_a, int trans_b, int m, int n, int k, double alpha,
                    const double* a, int lda, const double* b, int ldb, double beta,
                    double* c, int ldc) noexcept nogil
# y[m or n] = alpha * op(A)[.., ..] . x + beta * y, A row-major [m, n] with leading dimension
# lda; BLAS_TRANS multiplies by A^T (x has m elements, y n). incx/incy: element strides. A
# vector-matrix product: GEMM with one row would pack the whole matrix first.
cdef void nnc_sgemv(int trans, int m, int n, float alpha, const float* a, int lda,
                    const float* x, int incx, float beta, float* y, int incy) noexcept nogil
cdef void nnc_dgemv(int trans, int m, int n, double alpha, const double* a, int lda,
                    const double* x, int incx, double beta, double* y, int incy) noexcept nogil
