"""Layer 0 base. What every other layer stands on: error classes and datatype codes (core), the
device-string parser (device), debug counters and checks (debug), the trace switch and host
slices (trace_switch), pthread declarations (sync.pxd), scratch memory C backends reuse (workspace)
and a command's parts on idle pool threads (parallel). It imports nothing of nnc but itself and
nnc.coro.
"""
