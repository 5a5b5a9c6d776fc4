"""CONVOLUTION's CPU_OPT float64 and depthwise paths (nnc/cmd/convolution/conv_unpacked.pyx):
cdef functions that cpu_opt.pyx cimports; it has no Python-level names."""
