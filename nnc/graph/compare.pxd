# A declarative loop or branch expression (nnc/graph/compare.pyx): while_node and case_of evaluate
# it on the host through a typed reference; nnc.cuda.capture compiles it into a condition kernel.

cimport cython


@cython.final
cdef class Compare:
    cdef readonly object lhs            # "count" or an input index >= 0
    cdef readonly str op                # one of COMPARE_OPS
    cdef readonly object value          # an int or a float
