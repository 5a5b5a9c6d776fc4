# A float32 CONVOLUTION CPU_OPT call through nnc's own GEMM tiles (conv_packed.pyx), planned
# by cpu_opt.pyx.

from nnc.cmd.convolution.conv_geometry cimport conv_t

cdef int conv_packed(conv_t* cv, Py_ssize_t parts, bint by_channels, int width,
                     Py_ssize_t part_bytes, void* ctx) noexcept nogil
