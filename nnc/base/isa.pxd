# The CPU's vector ISA as nnc's hand-written kernels see it: detected once at import, each
# kernel compiled for every level it supports (per-function target attributes, so the wheel
# stays baseline x86-64) and chosen at run time by cpu_isa(). Nothing outside nnc (no other
# library's environment variable) changes the choice; set_cpu_isa lowers it for tests and
# comparisons.

cdef enum:
    ISA_BASELINE = 0                    # no wide vectors assumed: SSE2 on x86-64, NEON on arm64
    ISA_AVX2 = 1                        # AVX2 + FMA (x86-64 only)
    ISA_AVX512 = 2                      # AVX-512 F/BW/DQ/VL + FMA, ZMM state saved by the OS

# The level kernels dispatch on: never above what the CPU and the OS support.
cdef int cpu_isa() noexcept nogil
