# Host waits on signal records, for the modules above the stream layer (nnc.engine.engine waits on
# an op's record as Signal.wait waits on a signal's latest one).

from nnc.stream.record cimport signal_record_t


# Sleep (GIL released) until r is done: True, or False once ``limit`` seconds (< 0: no limit)
# passed first. The caller holds a reference to r and the GIL; Ctrl-C raises here.
cdef bint record_wait(signal_record_t* r, double limit) except -1
