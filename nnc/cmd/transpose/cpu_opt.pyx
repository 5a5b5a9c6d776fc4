"""CPU_OPT loop for TRANSPOSE: a batch of 2-D transposes, in cache-sized tiles.

Every permutation that moves one block of adjacent axes past another (NCHW -> NHWC is
[N, C, H*W] -> [N, H*W, C], NHWC -> NCHW the reverse, a matrix transpose [R, S] -> [S, R]) is
this loop; the family module (__init__.py) finds that form and falls back to NumPy otherwise. Both
arrays are C-contiguous and distinct (TRANSPOSE is never in place).
"""

ctypedef fused real:
    float
    double

# Tiles are 32 x 32 (the literal 32 in the loops: Cython needs a constant step to make a C
# loop): 8 KiB of doubles per side, so both tiles stay in L1 while one is read by rows and the
# other written by columns.


cdef void _transpose(real* y, const real* x, Py_ssize_t batch, Py_ssize_t rows,
                     Py_ssize_t cols) noexcept nogil:
    cdef Py_ssize_t b, r0, c0, r, c, r1, c1
    cdef const real* xb
    cdef real* yb
    for b in range(batch):
        xb = x + b * rows * cols
        yb = y + b * rows * cols
        for r0 in range(0, rows, 32):
            r1 = min(r0 + 32, rows)
            for c0 in range(0, cols, 32):
                c1 = min(c0 + 32, cols)
                for r in range(r0, r1):
                    for c in range(c0, c1):
                        yb[c * rows + r] = xb[r * cols + c]


def transpose_batched(real[::1] y, const real[::1] x, Py_ssize_t batch, Py_ssize_t rows,
                      Py_ssize_t cols):
    """y[b, c, r] = x[b, r, c] for flat arrays of batch * rows * cols elements."""
    if batch < 0 or rows < 0 or cols < 0:
        raise ValueError("transpose_batched: negative size")
    if x.shape[0] != batch * rows * cols or y.shape[0] != x.shape[0]:
        raise ValueError("transpose_batched: sizes do not match batch * rows * cols")
    if x.shape[0] == 0:
        return
    with nogil:
        _transpose(&y[0], &x[0], batch, rows, cols)
