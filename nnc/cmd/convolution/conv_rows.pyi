"""The A rows by pointer of CONVOLUTION's CPU_OPT (nnc/cmd/convolution/conv_rows.pyx): cdef
functions that cpu_opt.pyx cimports; it has no Python-level names."""
