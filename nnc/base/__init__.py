"""Layer 0 base. What every other layer stands on: error classes and datatype codes (core), the
device-string parser (device), debug counters and checks (debug), the trace switch and host
slices (trace_switch), pthread declarations (sync.pxd), scratch memory C backends reuse (workspace),
a command's parts on idle pool threads (parallel) and the CPU level hand-written kernels dispatch on
(isa). It imports nothing of nnc but itself and
nnc.coro.
"""
