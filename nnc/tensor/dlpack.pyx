"""DLPack: tensors shared zero-copy with NumPy, PyTorch, CuPy, JAX (the Python array API).

Not an NNC port (NNC has no DLPack); the protocol is the array API standard's ``__dlpack__`` /
``__dlpack_device__`` / ``from_dlpack`` over DLPack 1.x (structures in nnc/tensor/dlpack.pxd).

Export (``Tensor.__dlpack__`` calls :func:`tensor_to_dlpack`): a PyCapsule named
``"dltensor_versioned"`` when the consumer passes ``max_version >= (1, 0)``, else the legacy
``"dltensor"``. It points at the tensor's own memory (no copy) and holds the tensor and the owner
of its memory until the consumer calls the deleter; a capsule nobody consumed is freed by its
own destructor. A read-only tensor sets DLPack 1.x's read-only flag; the legacy capsule cannot
say read-only, so, as NumPy does, exporting one raises unless ``copy=True``.

Import (:func:`from_dlpack`): the object's capsule is consumed (renamed ``"used_..."``), and an
nnc Tensor over the same memory keeps the producer's deleter pending until the last tensor,
view or ndarray using that memory dies.

GPU tensors (kDLCUDA): nnc does not record which stream last wrote a tensor, so the producer
side makes its work visible to any consumer stream by synchronising the tensor's device
(``cuCtxSynchronize``) unless the consumer passes ``stream=-1``; the consumer side passes its
synchronous stream and waits on it, so the imported tensor is ready for every nnc stream.
"""

from cpython.exc cimport PyErr_Fetch, PyErr_Restore
from cpython.pycapsule cimport (
    PyCapsule_CheckExact, PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_IsValid,
    PyCapsule_New, PyCapsule_SetName,
)
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport strcmp

import numpy as np

from nnc.base.core import DATATYPES as _DATATYPES
from nnc.base.core import MAX_DIM as _MAX_DIM
from nnc.base.core import TensorError
from nnc.base.device import ArrayInterface, gpu_memory, parse_device, require_device

from nnc.tensor.tensor cimport Tensor

cdef extern from "Python.h":
    int Py_IsInitialized() nogil


class DLPackError(TensorError, BufferError):
    """A DLPack export or import that cannot be done as asked. A TensorError (so an NNCError
    and a ValueError) and the BufferError the array API standard asks producers to raise."""


# nnc datatype code -> (DLDataTypeCode, bits), and back.
_DL_OF = {
    _DATATYPES["float16"]: (DL_FLOAT, 16), _DATATYPES["float32"]: (DL_FLOAT, 32),
    _DATATYPES["float64"]: (DL_FLOAT, 64), _DATATYPES["int32"]: (DL_INT, 32),
    _DATATYPES["int64"]: (DL_INT, 64), _DATATYPES["uint8"]: (DL_UINT, 8),
}
_NNC_OF = {dl: code for code, dl in _DL_OF.items()}
_NAMES_OF = {code: name for name, code in _DATATYPES.items()}
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex",
               6: "bool"}
_DEVICE_NAMES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 4: "kDLOpenCL", 7: "kDLVulkan",
                 8: "kDLMetal", 9: "kDLVPI", 10: "kDLROCM", 11: "kDLROCMHost", 12: "kDLExtDev",
                 13: "kDLCUDAManaged", 14: "kDLOneAPI", 15: "kDLWebGPU", 16: "kDLHexagon",
                 17: "kDLMAIA", 18: "kDLTrn"}


def _device_name(int device_type):
    return f"{_DEVICE_NAMES.get(device_type, 'unknown device type')} ({device_type})"


def _dtype_name(int code, int bits, int lanes):
    if code == 6 and bits == 8:
        name = "bool"
    elif 7 <= code <= 17:
        name = f"a float{bits} variant (DLPack type code {code})"
    else:
        name = f"{_CODE_NAMES.get(code, f'type code {code} of')}{bits}"
    return name if lanes == 1 else f"{name} x{lanes} lanes"


# -- export ---------------------------------------------------------------------------------

cdef void _release_context(void* ctx) noexcept nogil:
    # The consumer may call the deleter on any thread, with or without the GIL. Once the
    # interpreter is finalised, leaking the context is the only safe choice (NumPy's too).
    if ctx == NULL or not Py_IsInitialized():
        return
    with gil:
        Py_XDECREF(<PyObject*>ctx)


cdef void _delete_legacy(DLManagedTensor* m) noexcept nogil:
    _release_context(m.manager_ctx)
    free(m)


cdef void _delete_versioned(DLManagedTensorVersioned* m) noexcept nogil:
    _release_context(m.manager_ctx)
    free(m)


cdef void _destroy_legacy(object capsule) noexcept:
    """A capsule's destructor: free the tensor unless a consumer took it (renamed the capsule)."""
    cdef PyObject* exc_type
    cdef PyObject* exc_value
    cdef PyObject* exc_tb
    cdef DLManagedTensor* m
    if PyCapsule_IsValid(capsule, b"dltensor"):
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb)     # the deleter may run Python code
        m = <DLManagedTensor*>PyCapsule_GetPointer(capsule, b"dltensor")
        if m != NULL and m.deleter != NULL:
            m.deleter(m)
        PyErr_Restore(exc_type, exc_value, exc_tb)


cdef void _destroy_versioned(object capsule) noexcept:
    cdef PyObject* exc_type
    cdef PyObject* exc_value
    cdef PyObject* exc_tb
    cdef DLManagedTensorVersioned* m
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb)
        m = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        if m != NULL and m.deleter != NULL:
            m.deleter(m)
        PyErr_Restore(exc_type, exc_value, exc_tb)


cdef int _fill(DLTensor* dl, Tensor t, int64_t* shape, int64_t* strides) except -1:
    cdef int i
    code, bits = _DL_OF[t.t.datatype]
    # dlpack.h: "if the tensor is of size zero, then the data pointer should be set to NULL".
    dl.data = NULL if t.t.count == 0 else t.t.data
    dl.byte_offset = 0
    dl.device.device_type = DL_CPU if t.t.device < 0 else DL_CUDA
    dl.device.device_id = 0 if t.t.device < 0 else t.t.device
    dl.ndim = t.t.ndim
    dl.dtype.code = code
    dl.dtype.bits = bits
    dl.dtype.lanes = 1
    for i in range(t.t.ndim):
        shape[i] = t.t.dim[i]
        strides[i] = t.t.stride[i]       # always given: DLPack 1.x forbids NULL when ndim > 0
    dl.shape = shape
    dl.strides = strides
    return 0


cdef object _capsule(Tensor t, bint versioned, bint copied):
    """A new, unconsumed capsule for t's memory holding (t, t's owner) until its deleter runs."""
    cdef int n = t.t.ndim
    cdef size_t head = sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor)
    # One block: the managed tensor, then shape[n] and strides[n] (the head is 8-byte aligned).
    cdef char* block = <char*>malloc(head + 2 * sizeof(int64_t) * (n if n > 0 else 1))
    cdef int64_t* shape
    cdef DLManagedTensor* m = <DLManagedTensor*>block
    cdef DLManagedTensorVersioned* v = <DLManagedTensorVersioned*>block
    if block == NULL:
        raise MemoryError()
    shape = <int64_t*>(block + head)
    try:
        _fill(&v.dl_tensor if versioned else &m.dl_tensor, t, shape, shape + n)
    except BaseException:
        free(block)
        raise
    ctx = (t, t._owner)
    Py_INCREF(ctx)                       # released by the deleter, which also frees the block
    if versioned:
        v.version.major = 1
        v.version.minor = 0
        v.manager_ctx = <void*>ctx
        v.deleter = _delete_versioned
        v.flags = (DL_FLAG_READ_ONLY if t.readonly else 0) | (DL_FLAG_IS_COPIED if copied else 0)
        try:
            return PyCapsule_New(block, b"dltensor_versioned", _destroy_versioned)
        except BaseException:
            _delete_versioned(v)
            raise
    m.manager_ctx = <void*>ctx
    m.deleter = _delete_legacy
    try:
        return PyCapsule_New(block, b"dltensor", _destroy_legacy)
    except BaseException:
        _delete_legacy(m)
        raise


def _synchronize(int ordinal):
    """Wait for all of nnc's work on a GPU (it does not know which stream wrote a tensor)."""
    gpu_memory("synchronize")(ordinal)


def _copy_to(Tensor t, int target):
    """A new contiguous tensor on ``target`` (-1: CPU) with t's elements; a GPU t is ready
    (synchronised) first."""
    if t.t.device < 0:
        host = np.array(t.numpy(), order="C", copy=True)
        if target < 0:
            return Tensor(host)
        return gpu_memory("from_host")(host, target)
    host = gpu_memory("to_host")(t)     # GPU to GPU goes through the host: simple and rare
    return Tensor(host) if target < 0 else gpu_memory("from_host")(host, target)


cdef bint _is_int(object x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _target_device(Tensor t, dl_device):
    """The nnc ordinal (-1: CPU) the consumer asks for with dl_device (None: t's own)."""
    if dl_device is None:
        return t.t.device
    try:
        kind, ident = dl_device
        kind, ident = int(kind), int(ident)
    except (TypeError, ValueError):
        raise DLPackError(f"dl_device must be a (device_type, device_id) pair like "
                          f"{t.__dlpack_device__()}, not {dl_device!r}") from None
    if kind == DL_CPU and ident == 0:
        return -1
    if kind == DL_CUDA and ident >= 0:
        return ident
    raise DLPackError(f"nnc exports to kDLCPU (1, 0) or kDLCUDA (2, N), not "
                      f"{_device_name(kind)} device {ident}")


def tensor_to_dlpack(Tensor t not None, stream=None, max_version=None, dl_device=None,
                     copy=None):
    """``Tensor.__dlpack__``: a DLPack capsule of t (see the module docstring)."""
    if copy is not None and not isinstance(copy, bool):
        raise DLPackError(f"copy must be True, False or None, not {copy!r}")
    versioned = False
    if max_version is not None:
        try:
            major, _ = max_version
            versioned = int(major) >= 1
        except (TypeError, ValueError):
            raise DLPackError(f"max_version must be a (major, minor) pair, not "
                              f"{max_version!r}") from None
    target = _target_device(t, dl_device)
    where = "CPU" if target < 0 else f"kDLCUDA device {target}"
    if target < 0 and stream is not None:
        raise DLPackError(f"stream must be None when exporting to the CPU (devices without "
                          f"streams take only None), not {stream!r}")
    if target >= 0 and stream is not None and not (_is_int(stream) and stream >= -1
                                                   and stream != 0):
        raise DLPackError(f"stream must be None, -1, 1, 2 or a CUDA stream pointer > 2, not "
                          f"{stream!r} (0 is ambiguous and disallowed by the standard)")
    copied = False
    if target != t.t.device or copy:
        if copy is False:
            raise DLPackError(f"exporting this {t.device} tensor to {where} needs a copy, "
                              "and copy=False forbids one")
        if t.t.device >= 0:
            _synchronize(t.t.device)
        t = _copy_to(t, target)
        copied = True
    elif t.t.device >= 0 and stream != -1:
        _synchronize(t.t.device)
    if t.readonly and not versioned:
        raise DLPackError(
            "a read-only tensor cannot be exported as a legacy DLPack capsule, which cannot "
            "say read-only: the consumer should pass max_version=(1, 0) (DLPack 1.x has a "
            "read-only flag), or copy=True for a writable copy"
        )
    return _capsule(t, versioned, copied)


# -- import ---------------------------------------------------------------------------------

cdef class _Imported:
    """A consumed DLPack tensor: its producer's deleter runs when this object dies, that is
    when the last nnc tensor, view or ndarray over the memory is gone."""

    cdef void* managed
    cdef bint versioned

    def __dealloc__(self):
        cdef DLManagedTensor* m
        cdef DLManagedTensorVersioned* v
        if self.managed == NULL:
            return
        if self.versioned:
            v = <DLManagedTensorVersioned*>self.managed
            if v.deleter != NULL:
                v.deleter(v)
        else:
            m = <DLManagedTensor*>self.managed
            if m.deleter != NULL:
                m.deleter(m)
        self.managed = NULL

    def __reduce__(self):
        raise TypeError("the producer's memory behind a DLPack import cannot be pickled")

    def __repr__(self):
        return f"<nnc.tensor.dlpack._Imported {'versioned' if self.versioned else 'legacy'}>"


cdef Tensor _consume(object capsule, int device):
    """An nnc Tensor over the memory of a DLPack capsule that came from a ``device`` object
    (-1: CPU). Everything is checked before the capsule is consumed: on an error it stays
    unconsumed and its own destructor frees it."""
    cdef const char* name
    cdef DLManagedTensorVersioned* v = NULL
    cdef DLManagedTensor* m = NULL
    cdef DLTensor* dl
    cdef Tensor r
    cdef _Imported owner
    cdef int i
    cdef bint readonly = False
    if not PyCapsule_CheckExact(capsule):
        raise TensorError(f"__dlpack__ returned {type(capsule).__name__}, not a PyCapsule")
    name = PyCapsule_GetName(capsule)
    if name != NULL and strcmp(name, b"dltensor_versioned") == 0:
        v = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, name)
        if v.version.major != 1:
            raise TensorError(f"a DLPack {v.version.major}.{v.version.minor} capsule; nnc reads "
                              "DLPack 1.x and the legacy (0.x) capsule")
        dl = &v.dl_tensor
        readonly = (v.flags & DL_FLAG_READ_ONLY) != 0
    elif name != NULL and strcmp(name, b"dltensor") == 0:
        m = <DLManagedTensor*>PyCapsule_GetPointer(capsule, name)
        dl = &m.dl_tensor
    else:
        shown = "no name" if name == NULL else repr((<bytes>name).decode("utf-8", "replace"))
        raise TensorError(f"__dlpack__ returned a capsule with {shown}: not an unconsumed DLPack "
                          "tensor ('dltensor' or 'dltensor_versioned')")
    if dl.ndim < 0 or dl.ndim > _MAX_DIM:
        raise TensorError(f"a {dl.ndim}-dimensional DLPack tensor; nnc tensors have at most "
                          f"{_MAX_DIM} dimensions")
    key = (dl.dtype.code, dl.dtype.bits)
    code = _NNC_OF.get(key) if dl.dtype.lanes == 1 else None
    if code is None:
        shown = _dtype_name(dl.dtype.code, dl.dtype.bits, dl.dtype.lanes)
        raise TensorError(f"DLPack dtype {shown} is not supported; nnc supports "
                          f"{', '.join(_DATATYPES)}")
    kind = dl.device.device_type
    if not (device < 0 and kind in (DL_CPU, DL_CUDA_HOST)
            or device >= 0 and kind == DL_CUDA and dl.device.device_id == device):
        raise TensorError(f"the capsule's device {_device_name(kind)}:{dl.device.device_id} "
                          "is not the one __dlpack_device__ named")
    shape = tuple([dl.shape[i] for i in range(dl.ndim)])
    if any(d < 0 for d in shape):
        raise TensorError(f"DLPack tensor of negative shape {shape}")
    if dl.strides == NULL or dl.ndim == 0:
        steps, expected = [], 1
        for d in reversed(shape):
            steps.append(expected)
            expected *= d
        steps = tuple(reversed(steps))
    else:
        steps = tuple([dl.strides[i] for i in range(dl.ndim)])
    dtype = np.dtype(_NAMES_OF[code])
    itemsize = dtype.itemsize
    count = 1
    low = high = 0                      # the extent in elements, in Python ints: no overflow
    for d, s in zip(shape, steps):
        count *= d
        if d > 1:
            if s < 0:
                low += (d - 1) * s
            else:
                high += (d - 1) * s
    if count == 0:
        # Nothing to share (the data pointer may be NULL): a fresh empty tensor; the capsule
        # stays unconsumed and its destructor hands the producer's memory back.
        r = Tensor.empty(shape, dtype, "cpu" if device < 0 else f"gpu:{device}")
        r.readonly = readonly
        return r
    first = <uintptr_t>dl.data + dl.byte_offset
    if dl.data == NULL or first % itemsize:
        raise TensorError(f"DLPack data at {first:#x} is NULL or not aligned to its "
                          f"{itemsize}-byte elements; nnc needs aligned memory")
    owner = _Imported.__new__(_Imported)
    owner.versioned = v != NULL
    owner.managed = <void*>v if v != NULL else <void*>m
    if PyCapsule_SetName(capsule, b"used_dltensor_versioned" if v != NULL
                         else b"used_dltensor") != 0:
        owner.managed = NULL
        raise TensorError("could not mark the DLPack capsule consumed")
    lo = first + low * itemsize
    nbytes = (high - low + 1) * itemsize
    r = Tensor.__new__(Tensor)
    r.t.datatype = code
    r.t.device = device
    r.t.ndim = dl.ndim
    r.t.itemsize = itemsize
    r.t.count = count
    r.t.contiguous = 1
    expected = 1
    for i in range(dl.ndim - 1, -1, -1):
        r.t.dim[i] = shape[i]
        r.t.stride[i] = steps[i]
        if shape[i] > 1 and steps[i] != expected:
            r.t.contiguous = 0
        expected *= shape[i]
    r.t.data = <void*><uintptr_t>first
    r._lo = <char*><uintptr_t>lo
    r._hi = <char*><uintptr_t>lo + <Py_ssize_t>nbytes
    r._array = None
    r.readonly = readonly
    if device >= 0:
        r._owner = owner
    else:
        # CPU tensors' owner is an ndarray (nnc.cuda.capture.to_gpu copies it): one over the
        # extent, which keeps the producer's memory through ``owner``.
        r._owner = np.asarray(ArrayInterface(
            {"version": 3, "shape": (nbytes // itemsize,), "typestr": dtype.str,
             "data": (lo, bool(readonly)), "strides": None}, owner))
    return r


def _producer_device(x):
    try:
        kind, ident = x.__dlpack_device__()
        return int(kind), int(ident)
    except (TypeError, ValueError) as e:
        raise TensorError(f"{type(x).__name__}.__dlpack_device__() must return a "
                          f"(device_type, device_id) pair: {e}") from None


def _local_copy(Tensor t, int target):
    if t.t.device >= 0:
        _synchronize(t.t.device)
    return _copy_to(t, target)


def from_dlpack(x, *, device=None, copy=None):
    """An nnc Tensor sharing the memory of ``x``, any object with ``__dlpack__`` (a NumPy array,
    a PyTorch or CuPy tensor, an nnc Tensor): no copy, writes are seen both ways, and ``x``'s
    memory stays alive while the tensor (or a view or ndarray of it) does.

    ``device``: None (x's device), ``"cpu"`` or ``"gpu:N"``; another device than x's copies.
    ``copy``: None (share; copy only to change device), True (always a new tensor), False
    (never copy; a device change raises). dtypes: nnc's float16/32/64, int32/64, uint8; any
    other raises TensorError naming it. Strides of any sign become a strided view.
    """
    if copy is not None and not isinstance(copy, bool):
        raise TensorError(f"copy must be True, False or None, not {copy!r}")
    if not callable(getattr(x, "__dlpack__", None)) or not callable(
            getattr(x, "__dlpack_device__", None)):
        raise TensorError(f"from_dlpack takes an object with __dlpack__ and __dlpack_device__ "
                          f"(a NumPy array, a torch tensor, an nnc.Tensor), not "
                          f"{type(x).__name__}")
    target = None if device is None else parse_device(device)
    if target is not None:
        require_device(target, f"from_dlpack(device={device!r})")
    kind, ident = _producer_device(x)
    stream = None
    if kind in (DL_CPU, DL_CUDA_HOST):
        here = -1
    elif kind == DL_CUDA:
        require_device(ident, f"from_dlpack of a {_device_name(kind)} tensor")
        sync = gpu_memory("sync_stream")(ident)
        stream = int(sync.handle)
        here = ident
    else:
        raise TensorError(f"from_dlpack: {_device_name(kind)} memory is not supported; nnc "
                          "takes kDLCPU, kDLCUDAHost and kDLCUDA tensors")
    try:
        capsule = x.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:
        capsule = x.__dlpack__(stream=stream)       # a producer older than DLPack 1.0
    except BufferError as e:
        raise TensorError(f"{type(x).__name__}.__dlpack__ refused: {e}") from e
    if here >= 0:
        sync.wait()                     # the producer's work, made visible on our stream
    t = _consume(capsule, here)
    if target is not None and target != here:
        if copy is False:
            raise TensorError(f"from_dlpack(device={device!r}) of a {t.device} tensor needs a "
                              "copy, and copy=False forbids one")
        return _local_copy(t, target)
    if copy:
        return _local_copy(t, here)
    return t
