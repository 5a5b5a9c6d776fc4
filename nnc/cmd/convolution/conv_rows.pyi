"""The A rows of CONVOLUTION's CPU_OPT float32 tiles (nnc/cmd/convolution/conv_rows.pyx): cdef
functions that nnc/cmd/convolution/cpu_opt.pyx and conv_packed.pyx cimport; it has no
Python-level names."""
