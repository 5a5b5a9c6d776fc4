# The im2col patches of CONVOLUTION's CPU_OPT (conv_patches.pyx), float32 and float64: called
# once per part and group by cpu_opt.pyx and conv_unpacked.pyx.

from nnc.cmd.convolution.conv_geometry cimport conv_t, real

cdef void im2col(const conv_t* cv, real* patch, Py_ssize_t r0, Py_ssize_t r1,
                 Py_ssize_t g) noexcept nogil
