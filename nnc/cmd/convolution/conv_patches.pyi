"""The im2col patches of CONVOLUTION's CPU_OPT (nnc/cmd/convolution/conv_patches.pyx): a cdef
function that cpu_opt.pyx and conv_unpacked.pyx cimport; it has no Python-level names."""
