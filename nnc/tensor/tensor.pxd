from nnc.base.core cimport NNC_MAX_DIM

# NNC's tensor format codes (CCV_TENSOR_FORMAT_*; nnc/tensor/io.py writes them).
cdef enum:
    TENSOR_FORMAT_NCHW = 0x01
    TENSOR_FORMAT_NHWC = 0x02
    TENSOR_FORMAT_CHWN = 0x04


# The C view of a tensor. Backends written in C see only this struct (never the Python object),
# so they can run without the GIL on any thread.
ctypedef struct nnc_tensor_t:
    void* data                          # first element; never NULL for a live tensor
    int datatype                        # exactly one NNC_* datatype bit (nnc/base/core.pxd)
    int device                          # -1: CPU memory; >= 0: GPU ordinal
    int ndim                            # 0 <= ndim <= NNC_MAX_DIM
    int itemsize                        # bytes per element
    int contiguous                      # 1 iff stride[] is the C-order stride of dim[]
    # TENSOR_FORMAT_NHWC, _NCHW or _CHWN: which axes of a 3-d or 4-d tensor image commands read
    # as channels (NNC's info.format). In the padding before count, so the struct keeps its
    # size and every other field its offset.
    int format
    Py_ssize_t count                    # product of dim[0:ndim] (1 for ndim == 0)
    Py_ssize_t dim[NNC_MAX_DIM]
    Py_ssize_t stride[NNC_MAX_DIM]      # in elements, not bytes


cdef class Tensor:
    cdef nnc_tensor_t t
    # Owner of the memory: the root ndarray (views share their parent's). Kept alive as long as
    # any tensor or array aliases it. Invariant: t.data lies in [_lo, _hi).
    cdef object _owner
    cdef char* _lo                      # first byte of the owner's memory
    cdef char* _hi                      # one past its last byte
    cdef object _array                  # cached ndarray aliasing t.data; None until asked
    # The memory t.data points at now is read-only (a read-only ndarray or memmap, or frozen
    # memory: nnc/tensor/constant.pyx): such a tensor may be an input, never an output. A
    # property of the memory, so it moves with it. Frozen memory implies readonly.
    cdef readonly bint readonly
    # Loops may re-point t.data (a MultiView, a view synchronised to one, a carry-over target);
    # then _owner/_lo/_hi/readonly move with it, and _array is valid only while
    # _array_data == t.data (and is dropped when readonly changes).
    cdef readonly bint movable
    cdef void* _array_data              # t.data when _array was made
    # Tensors whose memory a loop may point this one at: a MultiView's versions, the multiview
    # a tensor is synchronised to, a carry-over's source. None: none. Only grows; read and
    # written with the GIL held, like every Python field. tensor_may_be_readonly follows it.
    cdef list _aliases

    cdef object _make_array(self)
    cdef int _point_to(self, Tensor src) except -1
    cdef int _make_movable(self) except -1
    cdef int _may_alias(self, Tensor src) except -1


# Bumped whenever a tensor becomes movable or may alias more memory, so graphs built before know
# to re-check their nodes.
cdef long tensor_movable_epoch()

# True if t's memory, or any memory a loop may point t at, is read-only: t must not be an output.
cdef bint tensor_may_be_readonly(Tensor t) except -1


# Re-point CPU tensors (not movable, not frozen) at frozen copies of their elements; those over
# one owner share one block (nnc/tensor/constant.pyx). Bumps tensor_movable_epoch.
cdef int tensors_freeze(list tensors) except -1


cdef Tensor tensor_wrap(object array)
cdef bint tensor_overlap(const nnc_tensor_t* a, const nnc_tensor_t* b) noexcept nogil
cdef bint tensor_same(const nnc_tensor_t* a, const nnc_tensor_t* b) noexcept nogil
