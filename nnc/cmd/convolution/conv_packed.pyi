"""CONVOLUTION's CPU_OPT float32 path through nnc's own GEMM tiles
(nnc/cmd/convolution/conv_packed.pyx): a cdef function that nnc/cmd/convolution/cpu_opt.pyx
cimports; it has no Python-level names."""
