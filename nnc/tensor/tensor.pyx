"""Tensors: NumPy memory seen zero-copy from C ("toll-free bridging"), and views into it.

NNC: ccv_nnc_tensor_new / ccv_nnc_tensor_view_new (ccv_nnc_tensor.c). A :class:`Tensor` wraps a
C-contiguous ndarray without copying: writes through either side are seen by the other, and
``t.numpy()`` returns that very array. ``Tensor.empty`` and ``Tensor.zeros`` allocate 64-byte
aligned memory, as NNC does. ``t.view(shape, offset, strides)`` aliases part of a tensor with
element offsets and strides, like NNC's tensor views; the view's extent is checked against the
owner's memory, so a view can never reach outside it.

Every tensor has a format (NNC's ``info.format``): ``"NHWC"`` (the default, what nnc's image
commands always took), ``"NCHW"`` or ``"CHWN"``. It says which axes of a 3-d or 4-d tensor the
image commands (CONVOLUTION, CONVOLUTION_TRANSPOSE, the pools, FORMAT_TRANSFORM) read as
channels; the shape is the tensor's own either way (an NCHW [2, 3, 4, 5] tensor has 3 channels).
Views, copies, pickles and persistence keep it (docs/commands.md, "Tensor formats").

GPU tensors (``device="gpu:N"``) hold device memory that nnc.cuda.memory allocates; this layer
only keeps their pointer and owner, and ``numpy()`` returns a host copy (docs/gpu.md). nnc.cuda
sits above this layer: it is reached only through the GPU table of nnc.base.device, which it fills
when imported. A bad device string raises nnc.base.device.DeviceError; a GPU one raises
:class:`nnc.CUDAError` naming why when CUDA is unavailable.
"""

from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.stdint cimport uintptr_t

import numpy as np

from nnc.base.core import DATATYPE_NAMES, DATATYPES, TensorError
from nnc.base.device import ArrayInterface, gpu_memory, parse_device, require_device

from nnc.base.debug cimport DEBUG_TENSORS, debug_count
from nnc.tensor.constant cimport FrozenMemory, constant_contains, frozen_array

_ALIGN = 64
_NP_DTYPE = {code: np.dtype(name) for name, code in DATATYPES.items()}
_CODE_OF = {np.dtype(name): code for name, code in DATATYPES.items()}
_SUPPORTED = ", ".join(DATATYPES)
# NNC's CCV_TENSOR_FORMAT_* codes by name, and back.
TENSOR_FORMATS = {"NCHW": TENSOR_FORMAT_NCHW, "NHWC": TENSOR_FORMAT_NHWC,
                  "CHWN": TENSOR_FORMAT_CHWN}
FORMAT_NAMES = {code: name for name, code in TENSOR_FORMATS.items()}


cdef int format_of(object format) except 0:
    """NNC's code of a format name ("NHWC", "NCHW" or "CHWN", any case)."""
    code = TENSOR_FORMATS.get(format.upper() if isinstance(format, str) else format)
    if code is None:
        raise TensorError(f"unknown tensor format {format!r}; nnc's are "
                          f"{', '.join(TENSOR_FORMATS)} (NNC's CCV_TENSOR_FORMAT_*)")
    return code


cdef int datatype_of(object dtype) except 0:
    try:
        key = np.dtype(dtype)
    except TypeError:
        raise TensorError(f"unsupported dtype {dtype!r}; nnc supports {_SUPPORTED}") from None
    code = _CODE_OF.get(key)
    if code is None:
        raise TensorError(f"unsupported dtype {key} ({key.str}); nnc supports {_SUPPORTED}")
    return code


cdef int _check_shape(tuple shape) except -1:
    if len(shape) > NNC_MAX_DIM:
        raise TensorError(
            f"{len(shape)} dimensions is more than nnc's limit of {NNC_MAX_DIM} (shape {shape})"
        )
    for d in shape:
        if d < 0:
            raise TensorError(f"negative dimension in shape {shape}")
        if d > PY_SSIZE_T_MAX:
            raise TensorError(f"dimension {d} in shape {shape} does not fit in 64 bits")
    return 0


cdef tuple _as_shape(object shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    try:
        return tuple(int(d) for d in shape)
    except TypeError:
        raise TensorError(f"shape must be an int or a sequence of ints, not {shape!r}") from None


cdef void _fill_contiguous(nnc_tensor_t* t) noexcept:
    cdef Py_ssize_t s = 1
    cdef int i
    for i in range(t.ndim - 1, -1, -1):
        t.stride[i] = s
        s *= t.dim[i]
    t.count = s
    t.contiguous = 1


cdef Tensor tensor_wrap(object array):
    """Wrap an ndarray zero-copy; raise TensorError when that is impossible."""
    cdef Tensor self = Tensor.__new__(Tensor)
    cdef int i
    if not isinstance(array, np.ndarray):
        raise TensorError(
            f"Tensor wraps a NumPy ndarray, not {type(array).__name__}; "
            "use np.asarray(x) first (that may copy)"
        )
    code = datatype_of(array.dtype)
    shape = array.shape
    _check_shape(shape)
    if not array.flags.c_contiguous:
        raise TensorError(
            f"array of shape {shape} with strides {array.strides} is not C-contiguous; "
            "nnc wraps memory without copying, so pass np.ascontiguousarray(x) (a copy)"
        )
    if not array.flags.aligned:
        raise TensorError("array is not aligned to its itemsize; pass a copy (np.array(x))")
    self.t.datatype = code
    self.t.device = -1
    self.t.format = TENSOR_FORMAT_NHWC
    self.t.ndim = len(shape)
    self.t.itemsize = array.itemsize
    for i in range(self.t.ndim):
        self.t.dim[i] = shape[i]
    _fill_contiguous(&self.t)
    cdef uintptr_t p = array.__array_interface__["data"][0]
    cdef Py_ssize_t nbytes = array.nbytes
    self.t.data = <void*>p
    self._owner = array
    self._lo = <char*>p
    self._hi = <char*>p + nbytes
    self._array = array
    self._array_data = self.t.data
    self.readonly = not array.flags.writeable
    return self


cdef inline void _extent(const nnc_tensor_t* t, char** lo, char** hi) noexcept nogil:
    """The byte range [lo, hi) that t's elements occupy (strides may be negative)."""
    cdef int i
    lo[0] = <char*>t.data
    hi[0] = <char*>t.data
    for i in range(t.ndim):
        if t.stride[i] < 0:
            lo[0] += (t.dim[i] - 1) * t.stride[i] * t.itemsize
        else:
            hi[0] += (t.dim[i] - 1) * t.stride[i] * t.itemsize
    hi[0] += t.itemsize


cdef bint tensor_overlap(const nnc_tensor_t* a, const nnc_tensor_t* b) noexcept nogil:
    """True if the byte extents of a and b intersect (a conservative aliasing test)."""
    cdef char* alo
    cdef char* ahi
    cdef char* blo
    cdef char* bhi
    if a.count == 0 or b.count == 0:
        return False
    _extent(a, &alo, &ahi)
    _extent(b, &blo, &bhi)
    return alo < bhi and blo < ahi


cdef bint tensor_same(const nnc_tensor_t* a, const nnc_tensor_t* b) noexcept nogil:
    """True if a and b are the same elements in the same layout (exact in-place aliasing)."""
    cdef int i
    if a.data != b.data or a.ndim != b.ndim or a.datatype != b.datatype:
        return False
    for i in range(a.ndim):
        if a.dim[i] != b.dim[i] or (a.dim[i] > 1 and a.stride[i] != b.stride[i]):
            return False
    return True


cdef tuple _c_strides(tuple shape):
    """C-order strides (in elements) of shape, as Python ints (they cannot overflow)."""
    out = [1] * len(shape)
    s = 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = s
        s *= shape[i]
    return tuple(out)


cdef object _view_start(Tensor base, tuple shape, tuple steps, object offset):
    """Byte offset from base's owner memory to a view's first element, after checking that
    every element lies inside that memory. Python ints throughout: C arithmetic on huge
    strides or offsets wraps around and would let a view pass the check and escape."""
    cdef Py_ssize_t itemsize = base.t.itemsize
    try:
        off = int(offset)
    except (TypeError, ValueError):
        raise TensorError(f"view offset must be an int, not {offset!r}") from None
    where = f"view of shape {shape} with strides {steps} at offset {offset}"
    count, low, high = 1, 0, 0
    for d, s in zip(shape, steps):
        count *= d
        if not -PY_SSIZE_T_MAX <= s <= PY_SSIZE_T_MAX:
            raise TensorError(f"{where}: stride {s} does not fit in 64 bits")
        if d > 1:
            if s < 0:
                low += (d - 1) * s
            else:
                high += (d - 1) * s
    if count * itemsize > PY_SSIZE_T_MAX:
        raise TensorError(f"{where}: {count} elements is more than memory can hold")
    size = base._hi - base._lo
    start = (<char*>base.t.data - base._lo) + off * itemsize
    if count == 0:
        inside = 0 <= start <= size         # nothing is read; the pointer still stays inside
    else:
        inside = start + low * itemsize >= 0 and start + (high + 1) * itemsize <= size
    if not inside:
        raise TensorError(f"{where} reaches outside the {size // itemsize}-element memory "
                          "it aliases")
    return start


cdef long _movable_epoch = 0


cdef long tensor_movable_epoch():
    return _movable_epoch


cdef bint tensor_may_be_readonly(Tensor t) except -1:
    """t.readonly, or that of any tensor t may be re-pointed at, transitively (the alias graph
    may have cycles: two carry-overs between the same tensors)."""
    cdef Tensor x
    if t._aliases is None:
        return t.readonly
    seen = set()
    todo = [t]
    while todo:
        x = todo.pop()
        if x.readonly:
            return True
        if x._aliases is not None and id(x) not in seen:
            seen.add(id(x))
            todo.extend(x._aliases)
    return False


def _tensor_from_array(array, frozen=False, format="NHWC"):
    """A new 64-byte aligned tensor of ``format`` holding a copy of ``array`` (unpickling and
    copy.copy); in frozen memory when ``frozen`` (a frozen tensor's pickle)."""
    cdef Tensor t
    cdef int code = format_of(format)
    if frozen:
        t = tensor_wrap(frozen_array(array))
    else:
        t = Tensor.empty(np.shape(array), np.asarray(array).dtype)
        t.numpy()[...] = array
    t.t.format = code
    return t


cdef int tensors_freeze(list tensors) except -1:
    """Re-point CPU tensors (none movable, none frozen: the callers check) at frozen copies of
    their elements. Tensors over one owner share one copy of the bytes they span together, at
    the same offsets, so views of one weight stay views of one block. The memory they left is
    not touched: arrays and tensors still over it are detached from them."""
    global _movable_epoch
    cdef Tensor t
    cdef char* lo
    cdef char* hi
    cdef char* tlo
    cdef char* thi
    cdef char* base
    groups = {}
    for t in tensors:
        groups.setdefault(id(t._owner), []).append(t)
    for members in groups.values():
        lo = hi = NULL
        for t in members:
            if t.t.count == 0:
                continue
            _extent(&t.t, &tlo, &thi)
            if lo == NULL or tlo < lo:
                lo = tlo
            if hi == NULL or thi > hi:
                hi = thi
        if lo == NULL:
            lo = hi = <char*>(<Tensor>members[0]).t.data     # only empty tensors: no bytes
        span = np.asarray(ArrayInterface({
            "version": 3, "shape": (<Py_ssize_t>(hi - lo),), "typestr": "|u1",
            "data": (<uintptr_t>lo, True), "strides": None,
        }, (<Tensor>members[0])._owner))
        block = frozen_array(span)
        # A run in flight may still read the memory these tensors leave: it lives as long as
        # the block does (a frozen weight's old copy costs its bytes once, never more).
        keeper = block
        while not isinstance(keeper, FrozenMemory):
            # ndarray views, then the memoryview np.frombuffer made over the block
            keeper = keeper.obj if isinstance(keeper, memoryview) else keeper.base
        keeper._left = (<Tensor>members[0])._owner
        base = <char*><uintptr_t>block.__array_interface__["data"][0]
        for t in members:
            # Empty tensors read nothing; any address inside the block keeps _lo <= data.
            t.t.data = base + ((<char*>t.t.data - lo) if t.t.count else 0)
            t._owner = block
            t._lo = base
            t._hi = base + (hi - lo)
            t.readonly = True
            t._array = None
    # Graphs bound to the old memory (Python backends hold its ndarrays) or writing these
    # tensors re-check their nodes before their next run (Graph._prepare).
    _movable_epoch += 1
    return 0


cdef class Tensor:
    """An N-d array (up to 12 dimensions) whose memory C backends can use directly.

    ``Tensor(array)`` wraps a C-contiguous ndarray zero-copy; ``np.asarray(t)`` and ``t.numpy()``
    alias it. ``format=`` ("NHWC", the default, "NCHW" or "CHWN") is NNC's tensor format: which
    axes image commands read as channels. NNC: ccv_nnc_tensor_new(ptr, params, 0).
    """

    def __cinit__(self):
        debug_count(DEBUG_TENSORS, 1)
        self.t.format = TENSOR_FORMAT_NHWC     # every maker fills the rest

    def __dealloc__(self):
        debug_count(DEBUG_TENSORS, -1)

    def __init__(self, array, format="NHWC"):
        cdef int code = format_of(format)
        cdef Tensor w = tensor_wrap(array)
        w.t.format = code
        self.t = w.t
        self._owner = w._owner
        self._lo = w._lo
        self._hi = w._hi
        self._array = w._array
        self._array_data = w._array_data
        self.readonly = w.readonly

    @staticmethod
    def empty(shape, dtype="float32", device="cpu", format="NHWC"):
        """A new tensor of uninitialised, 64-byte aligned memory."""
        cdef Tensor t
        cdef int code = format_of(format)
        shape = _as_shape(shape)
        _check_shape(shape)
        ordinal = parse_device(device)
        dt = _NP_DTYPE[datatype_of(dtype)]
        if ordinal >= 0:
            require_device(ordinal, f"device {device!r}")
            t = gpu_memory("empty")(shape, dt, ordinal)
            t.t.format = code
            return t
        count = 1
        for d in shape:
            count *= d
        nbytes = count * dt.itemsize
        if nbytes > PY_SSIZE_T_MAX:
            raise TensorError(f"shape {shape} of {dt} needs {nbytes} bytes, more than memory "
                              "can hold")
        raw = np.empty(nbytes + _ALIGN, np.uint8)
        start = (-raw.__array_interface__["data"][0]) % _ALIGN
        array = raw[start:start + nbytes].view(dt).reshape(shape)
        t = tensor_wrap(array)
        t.t.format = code
        return t

    @staticmethod
    def zeros(shape, dtype="float32", device="cpu", format="NHWC"):
        """A new tensor filled with zeros."""
        cdef Tensor t = Tensor.empty(shape, dtype, device, format)
        if t.t.device >= 0:
            gpu_memory("fill_zero")(t)
        else:
            t.numpy().fill(0)
        return t

    @staticmethod
    def _from_device(owner, uintptr_t ptr, Py_ssize_t nbytes, shape, dtype, int device):
        """A contiguous tensor over GPU memory [ptr, ptr + nbytes) that ``owner`` keeps alive.

        For nnc.cuda.memory only: nothing here can check that the pointer is device memory.
        """
        cdef Tensor self = Tensor.__new__(Tensor)
        cdef int i
        shape = _as_shape(shape)
        _check_shape(shape)
        if device < 0:
            raise TensorError("_from_device needs a GPU ordinal >= 0")
        dt = _NP_DTYPE[datatype_of(dtype)]
        count = 1
        for d in shape:
            count *= d
        if count * dt.itemsize > nbytes:
            raise TensorError(f"shape {shape} of {dt} needs more than the {nbytes} bytes given")
        self.t.datatype = datatype_of(dtype)
        self.t.device = device
        self.t.ndim = len(shape)
        self.t.itemsize = dt.itemsize
        for i in range(self.t.ndim):
            self.t.dim[i] = shape[i]
        _fill_contiguous(&self.t)
        self.t.data = <void*>ptr
        self._owner = owner
        self._lo = <char*>ptr
        self._hi = <char*>ptr + nbytes
        self._array = None
        self.readonly = False
        return self

    @property
    def frozen(self):
        """Its memory is frozen (:meth:`freeze`, nnc.tensor.constant): its contents can never
        change, so kernels may keep packed copies of it."""
        return self.t.device < 0 and constant_contains(self.t.data)

    def freeze(self):
        """Make this tensor constant: copy its elements into frozen memory and point it there.
        Returns self; freezing a frozen tensor does nothing.

        From then on its memory is read-only: ``t.numpy()`` cannot be written (NumPy raises
        ValueError) and no command or graph node may write it (CommandError). Arrays taken
        from it before (``t.numpy()``, the array it wrapped) are detached, as in
        ``torch.jit.freeze``: writing them no longer reaches the tensor. Only a root tensor
        (one over the whole memory it was made with, not a :meth:`view`) is frozen here;
        :meth:`nnc.Graph.freeze` freezes a graph's weights, views included. Refused (a
        TensorError) for GPU tensors and tensors a loop may re-point (movable)."""
        if self.t.device >= 0:
            raise TensorError(f"cannot freeze a {self.device} tensor: frozen memory is host "
                              "memory (freeze the weights before copying them to the GPU)")
        if self.movable or self._aliases is not None:
            raise TensorError("cannot freeze a tensor a loop may re-point (a MultiView, a "
                              "tensor synchronised to one or a carry-over's destination): "
                              "its contents change from iteration to iteration")
        if constant_contains(self.t.data):
            return self
        if not (self.t.contiguous and <char*>self.t.data == self._lo and
                self._lo + self.t.count * self.t.itemsize == self._hi):
            raise TensorError(
                "cannot freeze a view on its own: it shares memory with the tensor it views, "
                "which would keep the old memory; freeze that tensor (the base) first, or "
                "freeze the graph's weights with Graph.freeze()")
        tensors_freeze([self])
        return self

    @property
    def _owner_object(self):
        """What keeps this tensor's memory alive (an ndarray, or nnc.cuda's device buffer)."""
        return self._owner

    @property
    def shape(self):
        return tuple([self.t.dim[i] for i in range(self.t.ndim)])

    @property
    def strides(self):
        """Strides in elements (NumPy's ``strides`` are in bytes)."""
        return tuple([self.t.stride[i] for i in range(self.t.ndim)])

    @property
    def dtype(self):
        return _NP_DTYPE[self.t.datatype]

    @property
    def device(self):
        return "cpu" if self.t.device < 0 else f"gpu:{self.t.device}"

    @property
    def format(self):
        """NNC's tensor format: "NHWC" (the default), "NCHW" or "CHWN"."""
        return FORMAT_NAMES[self.t.format]

    @property
    def ndim(self):
        return self.t.ndim

    @property
    def size(self):
        return self.t.count

    @property
    def nbytes(self):
        return self.t.count * self.t.itemsize

    @property
    def is_contiguous(self):
        return bool(self.t.contiguous)

    @property
    def data_ptr(self):
        """Address of the first element, for checking aliasing and for C callers."""
        return <uintptr_t>self.t.data

    cdef object _make_array(self):
        cdef int i
        interface = {
            "version": 3,
            "shape": self.shape,
            "typestr": _NP_DTYPE[self.t.datatype].str,
            "data": (<uintptr_t>self.t.data, bool(self.readonly)),
            "strides": None if self.t.contiguous else tuple(
                [self.t.stride[i] * self.t.itemsize for i in range(self.t.ndim)]
            ),
        }
        return np.asarray(ArrayInterface(interface, self._owner))

    def numpy(self):
        """The ndarray aliasing this tensor's memory (no copy; the same object every call).

        For a GPU tensor it is a new host copy, made after the device's earlier copies but
        not after work on other streams: wait for the stream that wrote the tensor first.

        For a movable tensor (see :class:`nnc.MultiView`) it aliases the memory the tensor
        points at *now*; an array taken before a loop re-pointed the tensor keeps the old memory.
        """
        if self.t.device >= 0:
            return gpu_memory("to_host")(self)
        if self._array is None or self._array_data != self.t.data:
            self._array = self._make_array()
            self._array_data = self.t.data
        return self._array

    cdef int _point_to(self, Tensor src) except -1:
        """Alias src's current memory (same shape and dtype, checked by the callers).

        The read-only flag comes along: it belongs to the memory, and a writable tensor left
        pointing at a read-only array (or a PROT_READ memmap) would be written through."""
        if self.readonly != src.readonly:
            self._array = None          # an ndarray with the old writeable flag
        self.t.data = src.t.data
        self._owner = src._owner
        self._lo = src._lo
        self._hi = src._hi
        self.readonly = src.readonly
        return 0

    cdef int _may_alias(self, Tensor src) except -1:
        """Record that a loop may point this tensor at src's memory (see tensor_may_be_readonly);
        graphs re-check their nodes' outputs before their next run."""
        global _movable_epoch
        if self._aliases is None:
            self._aliases = []
        self._aliases.append(src)
        _movable_epoch += 1
        return 0

    cdef int _make_movable(self) except -1:
        global _movable_epoch
        if not self.movable:
            self.movable = True
            _movable_epoch += 1
        return 0

    def __array__(self, dtype=None, copy=None):
        if self.t.device >= 0 and copy is False:
            raise ValueError("a GPU tensor has no host memory to alias; copy=False is impossible")
        a = self.numpy()
        if copy:
            a = a.copy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            if copy is False:
                raise ValueError("converting the dtype of a Tensor needs a copy")
            a = a.astype(dtype)
        return a

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of this tensor's memory, for ``np.from_dlpack``, ``torch.from_dlpack``
        and every array API consumer (no copy unless ``copy=True`` or ``dl_device`` asks for
        another device). A versioned (DLPack 1.x) capsule when ``max_version >= (1, 0)``, else
        the legacy one; a read-only tensor sets the read-only flag, and the legacy capsule,
        which cannot say read-only, is refused unless ``copy=True``. For a GPU tensor the
        device is synchronised unless ``stream=-1`` (nnc does not track which stream wrote
        it). Errors raise :class:`nnc.tensor.dlpack.DLPackError` (a TensorError and a BufferError).
        See nnc/tensor/dlpack.pyx and docs/design.md, "DLPack"."""
        # The DLPack layer sits above this one (it builds Tensors): reached only when asked.
        from nnc.tensor import dlpack

        return dlpack.tensor_to_dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        """``(1, 0)`` (kDLCPU) for a CPU tensor, ``(2, N)`` (kDLCUDA, ordinal) for gpu:N."""
        if self.t.device < 0:
            return (1, 0)
        return (2, int(self.t.device))

    def __copy__(self):
        """A new tensor with a copy of the elements, as ``copy.copy`` of an ndarray is: its own
        contiguous, writable memory on the same device (views and aliasing are not kept)."""
        cdef Tensor t
        if self.t.device >= 0:
            t = gpu_memory("from_host")(gpu_memory("to_host")(self), self.t.device)
            t.t.format = self.t.format
            return t
        return _tensor_from_array(self.numpy(), False, self.format)

    def __deepcopy__(self, memo):
        return self.__copy__()          # the elements are numbers: deep and shallow agree

    def __reduce__(self):
        """Pickles as (a copy of) its elements, dtype, shape and format; unpickling makes a new,
        writable, contiguous tensor, or a frozen one for a frozen tensor. Views, aliasing and
        the read-only flag are not kept; a movable tensor pickles the elements it points at
        now."""
        if self.t.device >= 0:
            raise TypeError(
                f"a {self.device} tensor cannot be pickled: its memory is on the GPU; pickle "
                "t.numpy() (a host copy) and rebuild it with nnc.cuda.memory.from_numpy"
            )
        if self.frozen:
            return (_tensor_from_array, (self.numpy(), True, self.format))
        if self.t.format != TENSOR_FORMAT_NHWC:
            return (_tensor_from_array, (self.numpy(), False, self.format))
        return (_tensor_from_array, (self.numpy(),))

    def view(self, shape, offset=0, strides=None):
        """A tensor aliasing part of this one.

        ``offset`` and ``strides`` count elements from this tensor's first element; without
        ``strides`` the view is C-contiguous. The view has this tensor's format. NNC:
        ccv_nnc_tensor_view_new.
        """
        cdef Tensor v = Tensor.__new__(Tensor)
        cdef int i
        shape = _as_shape(shape)
        _check_shape(shape)
        steps = _c_strides(shape) if strides is None else _as_shape(strides)
        if len(steps) != len(shape):
            raise TensorError(f"view strides {steps} do not match shape {shape}")
        start = _view_start(self, shape, steps, offset)
        v.t = self.t
        v.t.ndim = len(shape)
        v.t.contiguous = 1
        expected = 1
        for i in range(v.t.ndim - 1, -1, -1):
            v.t.dim[i] = shape[i]
            v.t.stride[i] = steps[i]
            if shape[i] > 1 and steps[i] != expected:
                v.t.contiguous = 0
            expected *= shape[i]
        v.t.count = expected
        v.t.data = <char*>self._lo + <Py_ssize_t>start
        v._owner = self._owner
        v._lo = self._lo
        v._hi = self._hi
        v._array = None
        v.readonly = self.readonly
        return v

    def __repr__(self):
        return (
            f"Tensor(shape={self.shape}, dtype={DATATYPE_NAMES[self.t.datatype]}, "
            f"device={self.device!r}, format={self.format!r}"
            f"{'' if self.t.contiguous else ', strided'})"
        )


def tensor_resize(Tensor t not None, shape):
    """A tensor of ``shape`` with ``t``'s dtype, format and memory where it fits.

    NNC: ccv_nnc_tensor_resize, which keeps the tensor's memory when the new shape needs no
    more bytes and reallocates it otherwise (keeping the leading bytes, as realloc does). NNC
    returns the tensor to use from then on and the old pointer is dead; here ``t`` itself is
    never changed, because graph nodes, views and arrays may hold it with its old shape (a
    node's bound C view would otherwise read the new shape): the result is a new Tensor over
    ``t``'s memory when ``shape`` needs no more elements than ``t`` has, so writes through
    either are seen by both, else over new memory holding a copy of ``t``'s first elements
    (the rest uninitialised). Either way ``t``, its views and the nodes that hold it keep
    their shape and their memory, which lives as long as any of them does.

    Refused (TensorError), as NNC asserts: a view (only a tensor over the whole memory it was
    made with is resized), a GPU tensor, a tensor a loop may re-point (a MultiView, a tensor
    synchronised to one, a carry-over's destination) and a frozen one (kernels key packed
    copies on its memory)."""
    cdef Tensor out
    shape = _as_shape(shape)
    _check_shape(shape)
    if t.t.device >= 0:
        raise TensorError(f"tensor_resize: {t.device} tensors are not resized (CPU tensors only)")
    if t.movable or t._aliases is not None:
        raise TensorError("tensor_resize: a loop may re-point this tensor (a MultiView, a "
                          "tensor synchronised to one or a carry-over's destination)")
    if t.t.device < 0 and constant_contains(t.t.data):
        raise TensorError("tensor_resize: the tensor is frozen; resize the array it was made "
                          "from before freezing it")
    if not (t.t.contiguous and <char*>t.t.data == t._lo and
            t._lo + t.t.count * t.t.itemsize == t._hi):
        raise TensorError("tensor_resize: a view is not resized (NNC asserts the same); resize "
                          "the tensor it views")
    count = 1
    for d in shape:
        count *= d
    if count <= t.t.count:
        out = t.view(shape)
    else:
        out = Tensor.empty(shape, t.dtype)
        out.numpy().reshape(-1)[:t.t.count] = t.numpy().reshape(-1)
    out.t.format = t.t.format
    return out
