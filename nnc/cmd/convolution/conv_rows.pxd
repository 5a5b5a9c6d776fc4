# The A-row builders of CONVOLUTION's CPU_OPT (conv_rows.pyx): called once per part (or once
# per call) by cpu_opt.pyx and conv_packed.pyx.

from nnc.cmd.convolution.conv_geometry cimport conv_t, real

cdef void im2col(const conv_t* cv, real* patch, Py_ssize_t r0, Py_ssize_t r1,
                 Py_ssize_t g) noexcept nogil
cdef void pixel_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t g,
                     const float** rows) noexcept nogil
cdef void tap_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t g,
                   const float** rows, Py_ssize_t ts) noexcept nogil
cdef void run_rows(const conv_t* cv, Py_ssize_t r0, Py_ssize_t r1, const float** rows,
                   Py_ssize_t ts, float* edges) noexcept nogil
