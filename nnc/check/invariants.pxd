from nnc.graph.graph cimport Graph
from nnc.stream.stream cimport Stream
from nnc.tensor.tensor cimport Tensor


# Each returns the broken invariants of one live object as sentences naming it (an empty list if
# all hold); the caller holds the GIL and no nnc mutex.
cdef list stream_problems(Stream st)
cdef list graph_problems(Graph g)
cdef list tensor_problems(Tensor x)
