# CONVOLUTION CPU_OPT's float64 and depthwise paths (conv_unpacked.pyx), planned by cpu_opt.pyx.

from nnc.cmd.convolution.conv_geometry cimport conv_t, real

cdef int conv_unpacked(conv_t* cv, Py_ssize_t parts, Py_ssize_t itemsize,
                       void* ctx) noexcept nogil
cdef int split_channels(conv_t* cv, int width, Py_ssize_t itemsize, void* ctx) noexcept nogil
cdef void empty_sums(const conv_t* cv, real* y0) noexcept nogil
