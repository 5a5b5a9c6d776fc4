from nnc.tensor.tensor cimport Tensor

cdef enum:
    MV_K0N = 0                          # version i % repeat
    MV_K1N = 1                          # version 0 at count 0, then 1 + (i - 1) % repeat
    MV_PHI = 2                          # chosen by a case..of node: 0 skipped, 1 branch ran


cdef class MultiView(Tensor):
    cdef readonly tuple versions        # the Tensors it selects among; same shape and dtype
    cdef readonly int kind              # MV_*
    cdef readonly int repeat            # versions cycled after the first (K1N) or in all (K0N)
    cdef readonly object anchor         # the loop body (Graph) whose count selects; None: PHI
    cdef readonly int current           # index of the version this tensor aliases now
    cdef list _synced                   # Tensors that follow the current version

    cdef int version_at(self, long long count) noexcept
    cdef int select_count(self, long long count) except -1
    cdef int select(self, int i) except -1
    cdef int refresh(self) except -1
