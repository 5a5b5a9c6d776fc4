"""GPU memory: device buffers behind GPU tensors, pinned host memory, and copies.

NNC: ccv_nnc_tensor_new with a GPU memory type (cumalloc / cufree in gpu/ccv_nnc_compat.cu) and
the GPU DATA_TRANSFER backend. A GPU :class:`nnc.Tensor` owns a :class:`DeviceBuffer`
(cuMemAlloc); its ``numpy()`` copies to the host through a pinned staging buffer (pageable
host memory makes the DMA engine bounce through a driver buffer anyway, and pinned memory lets
the device-to-host copy run at full bandwidth). :func:`pinned` makes CPU tensors in pinned
memory: copies between them and GPU tensors are truly asynchronous on a stream.

Written against ecosystem.md §1's call sequences; the argument forms are checked against the
real cuda.bindings in tests/cuda/test_cuda_runtime.py, but no copy here has run on a GPU yet.
"""

import threading

import numpy as np

from nnc.base.core import CUDAError, TensorError
from nnc.cuda.driver import Resource, capture_relaxed, check, device, driver

__all__ = ["DeviceBuffer", "PinnedBuffer", "copy", "empty", "fill_zero", "from_numpy",
           "pinned", "to_host", "workspace"]

_staging_lock = threading.Lock()
_staging = {}                       # ordinal -> PinnedBuffer, grown as needed, reused


class DeviceBuffer(Resource):
    """``nbytes`` of device memory on one GPU, freed when the last tensor using it dies."""

    unsafe_in_capture = True

    def __init__(self, dev, nbytes):
        self.device = device(dev)
        self.device.make_current()
        self.nbytes = int(nbytes)
        # cuMemAlloc(0) is an error; a 0-element tensor still gets a valid, unique pointer.
        self.handle = int(check(driver().cuMemAlloc(max(self.nbytes, 1)), "cuMemAlloc"))

    @property
    def ptr(self):
        return self.handle or 0

    def _destroy(self, ptr):
        self.device.make_current()
        # cuMemFree waits for work still using the memory (it synchronises the device).
        check(driver().cuMemFree(ptr), "cuMemFree")

    def __repr__(self):
        return f"<nnc.cuda.DeviceBuffer {self.nbytes} bytes on gpu:{self.device.ordinal}>"


class _Workspace:
    """A stream's scratch buffer for library calls (its ``library("workspace")`` state).

    Only grows: a smaller buffer is retired, not freed, because launches captured into a CUDA
    graph keep its address (a captured graph keeps its streams alive); all are freed when the
    stream closes. Work on one stream runs in order, so every call on it shares the buffer.
    """

    def __init__(self, dev):
        self.device = dev
        self._lock = threading.Lock()   # guards buf and retired (threads enqueue concurrently)
        self.buf = None                 # the current DeviceBuffer; None until one is needed
        self.retired = []

    def get(self, nbytes):
        with self._lock:
            if self.buf is None or self.buf.nbytes < nbytes:
                # Whole MiBs, so a few growing requests settle quickly.
                with capture_relaxed():         # a plan needing more, first met mid-capture
                    grown = DeviceBuffer(self.device, -(-nbytes // (1 << 20)) << 20)
                if self.buf is not None:
                    self.retired.append(self.buf)
                self.buf = grown
            return self.buf.ptr

    def close(self):
        with self._lock:
            bufs, self.retired, self.buf = self.retired + [self.buf], [], None
        for b in bufs:
            if b is not None:
                b.close()


def workspace(stream, nbytes):
    """Device address of at least ``nbytes`` of scratch memory owned by CudaStream ``stream``
    (0 for 0 bytes), for library calls enqueued on it (cuBLAS, cuDNN). Valid until the stream
    closes."""
    if nbytes <= 0:
        return 0
    return stream.library("workspace", lambda: _Workspace(stream.device)).get(int(nbytes))


class PinnedBuffer(Resource):
    """Page-locked host memory (cuMemHostAlloc): the source or target of async copies."""

    unsafe_in_capture = True

    def __init__(self, nbytes, dev=0):
        self.device = device(dev)
        self.device.make_current()
        self.nbytes = int(nbytes)
        self.handle = int(check(driver().cuMemHostAlloc(max(self.nbytes, 1), 0),
                                "cuMemHostAlloc"))

    @property
    def ptr(self):
        return self.handle or 0

    def array(self, shape=None, dtype=np.uint8):
        """An ndarray over this memory that keeps the buffer alive."""
        dt = np.dtype(dtype)
        shape = (self.nbytes // dt.itemsize,) if shape is None else tuple(shape)
        interface = {"version": 3, "shape": shape, "typestr": dt.str,
                     "data": (self.ptr, False), "strides": None}
        return np.asarray(_Interface(interface, self))

    def _destroy(self, ptr):
        check(driver().cuMemFreeHost(ptr), "cuMemFreeHost")


class _Interface:
    __slots__ = ("__array_interface__", "owner")

    def __init__(self, interface, owner):
        self.__array_interface__ = interface
        self.owner = owner


def empty(shape, dtype, ordinal):
    """A new contiguous GPU tensor (Tensor.empty(..., device="gpu:N") calls this)."""
    from nnc.tensor.tensor import Tensor

    dt = np.dtype(dtype)
    count = 1
    for d in shape:
        count *= int(d)
    buf = DeviceBuffer(ordinal, count * dt.itemsize)
    return Tensor._from_device(buf, buf.ptr, buf.nbytes, tuple(shape), dt, ordinal)


def pinned(shape, dtype="float32", dev=0):
    """A new CPU tensor in pinned host memory (the fast side of host <-> GPU copies)."""
    from nnc.tensor.tensor import Tensor

    dt = np.dtype(dtype)
    count = 1
    for d in shape:
        count *= int(d)
    return Tensor(PinnedBuffer(count * dt.itemsize, dev).array(tuple(shape), dt))


def _extent(t):
    """(first byte offset from data_ptr, byte length) covering every element of t."""
    lo = hi = 0
    for d, s in zip(t.shape, t.strides):
        if d > 1:
            if s < 0:
                lo += (d - 1) * s
            else:
                hi += (d - 1) * s
    return lo * t.dtype.itemsize, (hi - lo + 1) * t.dtype.itemsize if t.size else 0


def _staging_buffer(dev, nbytes):
    """The device's pinned staging buffer, at least nbytes; call with _staging_lock held."""
    buf = _staging.get(dev.ordinal)
    if buf is None or buf.nbytes < nbytes:
        if buf is not None:
            buf.close()
        buf = _staging[dev.ordinal] = PinnedBuffer(max(nbytes, 1 << 20), dev)
    return buf


def to_host(t):
    """A new ndarray with a GPU tensor's elements (what ``t.numpy()`` returns)."""
    dev = device(int(t.device[4:]))
    start, length = _extent(t)
    out = np.empty(t.shape, t.dtype)
    if length == 0:
        return out
    stream = dev.sync_stream()
    with _staging_lock:
        stage = _staging_buffer(dev, length)
        check(driver().cuMemcpyDtoHAsync(stage.ptr, t.data_ptr + start, length, stream.handle),
              "cuMemcpyDtoHAsync")
        stream.wait()
        raw = stage.array()[:length]
        if t.is_contiguous:
            out.reshape(-1).view(np.uint8)[:] = raw
        else:
            base = raw.view(t.dtype)
            strides = tuple(s * t.dtype.itemsize for s in t.strides)
            offset = -start // t.dtype.itemsize
            out[...] = np.lib.stride_tricks.as_strided(base[offset:], t.shape, strides)
    return out


def from_numpy(array, dev="gpu"):
    """A new GPU tensor holding a copy of ``array`` (synchronous)."""
    from nnc.cuda import parse_gpu

    ordinal = parse_gpu(dev) if isinstance(dev, str) else dev
    if ordinal is None:
        raise TensorError(f"unknown device {dev!r}; expected 'gpu' or 'gpu:N'")
    host = np.ascontiguousarray(array)
    t = empty(host.shape, host.dtype, ordinal)
    d = device(ordinal)
    stream = d.sync_stream()
    if host.nbytes:
        with _staging_lock:
            stage = _staging_buffer(d, host.nbytes)
            stage.array()[:host.nbytes] = host.reshape(-1).view(np.uint8)
            check(driver().cuMemcpyHtoDAsync(t.data_ptr, stage.ptr, host.nbytes, stream.handle),
                  "cuMemcpyHtoDAsync")
            stream.wait()           # the staging buffer is reused by the next copy
    return t


def fill_zero(t, stream=None):
    """Zero a contiguous GPU tensor; synchronous unless a stream is given."""
    if not t.is_contiguous:
        raise TensorError("fill_zero needs a contiguous GPU tensor")
    dev = device(int(t.device[4:]))
    s = stream or dev.sync_stream()
    if t.nbytes:
        check(driver().cuMemsetD8Async(t.data_ptr, 0, t.nbytes, s.handle), "cuMemsetD8Async")
    if stream is None:
        s.wait()


def copy(dst, src, stream):
    """Enqueue dst <- src on ``stream`` for contiguous tensors of equal nbytes, any devices.

    Host <-> device copies are asynchronous when the host tensor is pinned (see
    :func:`pinned`); from pageable memory the driver stages them itself (the host-to-device
    call returns once the source may be reused; device-to-host returns when done). Device to
    device on one GPU is cuMemcpyDtoDAsync; across GPUs cuMemcpyPeerAsync.
    """
    if not (dst.is_contiguous and src.is_contiguous):
        raise TensorError("the GPU DATA_TRANSFER copies contiguous tensors only")
    n = src.nbytes
    if dst.nbytes != n:
        raise TensorError(f"copy of {n} bytes into {dst.nbytes}")
    if n == 0:
        return
    cu = driver()
    sd, dd = src.device, dst.device
    if sd == "cpu" and dd == "cpu":
        raise CUDAError("copy between two CPU tensors is not a GPU copy")
    if sd == "cpu":
        check(cu.cuMemcpyHtoDAsync(dst.data_ptr, src.data_ptr, n, stream.handle),
              "cuMemcpyHtoDAsync")
    elif dd == "cpu":
        check(cu.cuMemcpyDtoHAsync(dst.data_ptr, src.data_ptr, n, stream.handle),
              "cuMemcpyDtoHAsync")
    elif sd == dd:
        check(cu.cuMemcpyDtoDAsync(dst.data_ptr, src.data_ptr, n, stream.handle),
              "cuMemcpyDtoDAsync")
    else:
        a, b = device(int(dd[4:])), device(int(sd[4:]))
        check(cu.cuMemcpyPeerAsync(dst.data_ptr, a.context, src.data_ptr, b.context, n,
                                   stream.handle), "cuMemcpyPeerAsync")


def device_table():
    """GPU memory for the tensor layer (nnc.base.device.gpu_memory; registered by nnc.cuda)."""

    def synchronize(ordinal):
        d = device(ordinal)
        d.make_current()
        check(driver().cuCtxSynchronize(), "cuCtxSynchronize")

    return {"empty": empty, "fill_zero": fill_zero, "to_host": to_host,
            "from_host": from_numpy, "synchronize": synchronize,
            "sync_stream": lambda ordinal: device(ordinal).sync_stream()}
