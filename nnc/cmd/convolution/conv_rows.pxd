# The A rows by pointer of CONVOLUTION's CPU_OPT float32 path (conv_rows.pyx): called once per
# part (or once for a channel cut) by cpu_opt.pyx. rows[t * ts + i] is tap (or kernel row) t of
# output pixel i of rows r0..r1.

from nnc.cmd.convolution.conv_geometry cimport conv_t

cdef enum:
    # pixel_copies lays its copies k + PIXEL_PAD floats apart.
    PIXEL_PAD = 16

cdef void pixel_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t g,
                     const float** rows) noexcept nogil
cdef void pixel_copies(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, const float** rows,
                       float* buf) noexcept nogil
cdef void tap_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t g,
                   const float** rows, Py_ssize_t ts) noexcept nogil
cdef void run_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, const float** rows,
                   Py_ssize_t ts, float* edges) noexcept nogil
