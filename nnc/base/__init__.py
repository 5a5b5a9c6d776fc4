"""Layer 0 base. What every other layer stands on: error classes and datatype codes (core), the
device-string parser (device), debug counters and checks (debug), the trace switch and host
slices (trace_switch), pthread declarations (sync.pxd), a C backend's context: the scratch memory
backends reuse and a command's parts on idle pool threads (parallel), and the CPU level
hand-written kernels dispatch on (isa). It imports nothing of nnc but itself and nnc.coro.
"""
