"""The CUDA driver through cuda-bindings: devices and contexts, streams, events, kernel launches
and stream capture into CUDA graphs.

NNC: ccv_nnc_stream.c's GPU half and gpu/ccv_nnc_compat.cu (stream contexts, signals as CUDA
events, kernel launches). Calls go through ``cuda.bindings.driver`` at the Python level, whose
wrappers release the GIL around every driver call, so nnc's extension modules need no CUDA
headers to build. Call sequences follow cuda-python's driver bindings (checked against the real
bindings); the "driver" attribute of this module may be replaced in tests by a fake that records
the calls (tests/fakes/cuda_driver.py).

- :class:`Device`: one GPU: its primary context (made current per host thread, since the
  current context is thread-local), compute capability and loaded kernel modules.
- :class:`CudaStream`: a non-blocking CUDA stream (never synchronises with the legacy default
  stream): what ``nnc.Stream("gpu:N")`` holds (nnc/cuda/gpu_stream.pyx) and backends launch on.
- :class:`CudaEvent`: a CUDA event without timing: nnc's signal on a GPU. Like every nnc
  signal, waiting on one never recorded is a no-op (that is CUDA's own rule).
- :class:`CudaGraph`: work captured from a stream (cuStreamBeginCapture .. cuStreamEndCapture),
  instantiated once and replayed with one cuGraphLaunch.

Everything here is written against the documented call sequences but has only run against the
fake driver on machines without a GPU; docs/gpu.md lists what a GPU run must still confirm.
"""

import contextlib
import threading

import numpy as np

from nnc import cuda as _detect
from nnc.base.core import CUDAError, StreamError

__all__ = ["CudaEvent", "CudaGraph", "CudaStream", "Device", "Resource", "capture_relaxed", "check",
           "cuda_stream", "device", "driver", "driver_version"]

_driver = None                      # the cuda.bindings.driver module (or a test's fake)
_lock = threading.Lock()
_devices = {}                       # ordinal -> Device
_tls = threading.local()            # .context: the context this thread made current


def driver():
    """cuda.bindings.driver, imported on first use (CUDAError if cuda-bindings is missing)."""
    global _driver
    if _driver is None:
        try:
            from cuda.bindings import driver as cu
        except ImportError as e:
            raise CUDAError(f"CUDA needs cuda-bindings (pip install 'nnc-graph[cuda]'): "
                            f"{e}") from None
        _driver = cu
    return _driver


def driver_version():
    """The CUDA version the installed driver supports, ``(major, minor)`` (``cuDriverGetVersion``,
    which needs no ``cuInit``): what a report names beside the device."""
    v = int(check(driver().cuDriverGetVersion(), "cuDriverGetVersion"))
    return v // 1000, v % 1000 // 10


def _name(err):
    return getattr(err, "name", None) or f"CUresult {int(err)}"


def check(result, what):
    """Unpack a cuda.bindings result tuple ``(err, *values)``; CUDAError unless err is 0."""
    err = result[0]
    if int(err) != 0:
        raise CUDAError(f"{what} failed: {_name(err)}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else tuple(result[1:])


@contextlib.contextmanager
def capture_relaxed():
    """While this thread captures a CUDA graph, let it make the calls capture refuses (loading
    a module, allocating a stream's library handle or workspace). CUDA's thread-local mode
    refuses them with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, so a
    stream first used during a capture (a conditional body's own stream always is) could not
    make its cuBLAS handle (CUBLAS_STATUS_NOT_INITIALIZED on an H200). Inside this scope the
    thread's mode is relaxed (cuThreadExchangeStreamCaptureMode), as CUDA's own libraries do
    around their lazy allocations; nnc's streams are non-blocking, so no legacy-stream call a
    library makes can join the capture. Other threads are not restricted by a thread-local
    capture, and outside a capture this changes nothing."""
    if getattr(_tls, "deferred", None) is None:
        yield
        return
    cu = driver()
    old = check(cu.cuThreadExchangeStreamCaptureMode(
        cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED), "cuThreadExchangeStreamCaptureMode")
    try:
        yield
    finally:
        check(cu.cuThreadExchangeStreamCaptureMode(old), "cuThreadExchangeStreamCaptureMode")


class Resource:
    """Something the driver frees (a stream, an event, memory): ``close()`` frees it once;
    garbage collection closes it too. Subclasses set ``handle`` and define ``_destroy``."""

    handle = None
    # Freeing it may synchronise (cuMemFree): illegal on a thread that is capturing a CUDA
    # graph, where it would invalidate the capture. Such frees wait until the capture ends.
    unsafe_in_capture = False

    def _destroy(self, handle):
        raise NotImplementedError

    def foreign(self):
        """True when the driver that made this handle is no longer the one in use (a test put
        a fake driver in place, or took it away): the handle means nothing to the driver now
        in use, and handing it over would crash the real one, so it is dropped, not freed."""
        dev = getattr(self, "device", None)
        return dev is not None and dev.cu is not _driver

    def close(self):
        if self.foreign():
            self.handle = None
            return
        handle, self.handle = self.handle, None
        if handle is not None:
            deferred = getattr(_tls, "deferred", None)
            if self.unsafe_in_capture and deferred is not None:
                deferred.append((self, handle))     # garbage collected mid-capture
            else:
                self._destroy(handle)

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit the driver may be gone
            pass


def _ready(result, what):
    """A query's result: True done, False CUDA_ERROR_NOT_READY, CUDAError otherwise."""
    if int(result[0]) == int(driver().CUresult.CUDA_ERROR_NOT_READY):
        return False
    check(result, what)
    return True


class Device:
    """One GPU and its primary context (NNC: the device half of a stream context)."""

    def __init__(self, ordinal):
        _detect.require(ordinal, f"gpu:{ordinal}")
        cu = driver()
        self.cu = cu                # the driver whose handles these are (Resource.foreign)
        self.ordinal = ordinal
        self.handle = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        # The primary context is the one the runtime API and other libraries share.
        self.context = check(cu.cuDevicePrimaryCtxRetain(self.handle),
                             "cuDevicePrimaryCtxRetain")
        attr = cu.CUdevice_attribute
        major = check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle), "cuDeviceGetAttribute")
        minor = check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle), "cuDeviceGetAttribute")
        self.arch = int(major) * 10 + int(minor)
        self.sm_count = int(check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.handle), "cuDeviceGetAttribute"))
        self._lock = threading.Lock()
        self._modules = {}          # kernel file -> CUmodule
        self._functions = {}        # C kernel name -> CUfunction
        self._sync = {}             # thread id -> CudaStream for synchronous work
        self._name = None           # the device's name, asked for on first use
        # nnc.cuda._ccall.calls_of's answer for this device's driver: False until asked, then
        # its CCalls or None (set once; a race sets an equal one).
        self.ccalls = False

    @property
    def name(self):
        """The device's name as the driver reports it (``cuDeviceGetName``), e.g. "NVIDIA H100
        80GB HBM3"; asked once, on first use, since only reports need it."""
        if self._name is None:
            # The bindings return the whole buffer: the name, its NUL, then whatever was after.
            raw = check(driver().cuDeviceGetName(256, self.handle), "cuDeviceGetName")
            self._name = bytes(raw).split(b"\0", 1)[0].decode("ascii", "replace").strip()
        return self._name

    def make_current(self):
        """Make this device's context current on the calling thread (cheap when it is)."""
        if getattr(_tls, "context", None) is not self.context:
            check(driver().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
            _tls.context = self.context

    def function(self, file, kernel):
        """The CUfunction of C kernel ``kernel`` in kernel file ``file``, compiled for this
        device's sm_XY by NVRTC on first use and loaded once."""
        f = self._functions.get(kernel)
        if f is not None:
            return f
        from nnc.cuda import nvrtc

        with self._lock:
            module = self._modules.get(file)
            if module is None:
                cubin = nvrtc.compile_cubin(nvrtc.kernel_source(file), self.arch, file)
                self.make_current()
                with capture_relaxed():     # a kernel first launched mid-capture
                    module = check(driver().cuModuleLoadData(cubin), "cuModuleLoadData")
                self._modules[file] = module
            f = check(driver().cuModuleGetFunction(module, kernel.encode()),
                      f"cuModuleGetFunction({kernel})")
            self._functions[kernel] = f
        return f

    def sync_stream(self):
        """This thread's stream for synchronous work (cmd_exec without a stream, copies)."""
        key = threading.get_ident()
        s = self._sync.get(key)
        if s is None:
            s = self._sync[key] = CudaStream(self)
        return s

    def __repr__(self):
        return f"<nnc.cuda.Device gpu:{self.ordinal} sm_{self.arch}>"


def device(spec=0):
    """The :class:`Device` for an ordinal, "gpu" or "gpu:N" (made once, then shared)."""
    if isinstance(spec, Device):
        return spec
    ordinal = spec if isinstance(spec, int) and not isinstance(spec, bool) else \
        _detect.parse_gpu(spec)
    if ordinal is None or ordinal < 0:
        raise CUDAError(f"unknown GPU {spec!r}; expected an ordinal, 'gpu' or 'gpu:N'")
    d = _devices.get(ordinal)
    if d is None:
        with _lock:
            d = _devices.get(ordinal)
            if d is None:
                d = _devices[ordinal] = Device(ordinal)
    return d


class CudaEvent(Resource):
    """A CUDA event without timing: nnc's signal between GPU streams (NNC: signal, GPU)."""

    def __init__(self, dev=0):
        self.device = device(dev)
        self.device.make_current()
        cu = driver()
        self.handle = check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING),
                            "cuEventCreate")
        self.emitted = False

    def query(self):
        """True if the latest record has completed (or there was none). Never blocks."""
        self.device.make_current()
        return _ready(driver().cuEventQuery(self.handle), "cuEventQuery")

    def wait(self):
        """Block (without the GIL) until the latest record has completed."""
        self.device.make_current()
        check(driver().cuEventSynchronize(self.handle), "cuEventSynchronize")

    def _destroy(self, handle):
        check(driver().cuEventDestroy(handle), "cuEventDestroy")

    def __repr__(self):
        return f"<nnc.cuda.CudaEvent gpu:{self.device.ordinal}>"


class CudaStream(Resource):
    """A non-blocking CUDA stream (NNC: GPU stream context): what ``nnc.Stream("gpu:N")`` holds
    (nnc/cuda/gpu_stream.pyx), and what GPU backends launch on.

    ``emit(event)`` records, ``wait_signal(event)`` makes later work wait for the latest
    record, ``query()`` never blocks, ``wait()`` blocks until all enqueued work is done.
    """

    def __init__(self, dev=0):
        self.device = device(dev)
        self.device.make_current()
        cu = driver()
        self.handle = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING),
                            "cuStreamCreate")
        # Library state bound to this stream (cuBLAS / cuDNN handles, the scratch workspace of
        # nnc.cuda.memory.workspace): key -> object with close(). Owned by the stream, made by
        # whichever thread asks first, the dict guarded by _state_lock; closed after the
        # stream drains, in close(), before the stream is destroyed.
        self._state_lock = threading.Lock()
        self._libraries = {}

    @property
    def kind(self):
        return f"gpu:{self.device.ordinal}"

    def emit(self, event):
        if not isinstance(event, CudaEvent):
            raise CUDAError(f"a CUDA stream emits an nnc.cuda.CudaEvent, not {event!r}")
        self.device.make_current()      # the current context is per thread (no-op if set)
        check(driver().cuEventRecord(event.handle, self.handle), "cuEventRecord")
        event.emitted = True

    def wait_signal(self, event):
        if not isinstance(event, CudaEvent):
            raise CUDAError(f"a CUDA stream waits on an nnc.cuda.CudaEvent, not {event!r}")
        self.device.make_current()
        # Across devices too: a stream may wait on another device's event (CUDA allows it).
        check(driver().cuStreamWaitEvent(self.handle, event.handle, 0), "cuStreamWaitEvent")

    def query(self):
        self.device.make_current()
        return _ready(driver().cuStreamQuery(self.handle), "cuStreamQuery")

    def wait(self):
        """Block until everything enqueued has run; a failure raises StreamError (cause:
        the CUDAError), as nnc.Stream.wait does."""
        self.device.make_current()
        try:
            check(driver().cuStreamSynchronize(self.handle), "cuStreamSynchronize")
        except CUDAError as e:
            raise StreamError(f"{self!r} failed: {e}") from e

    def library(self, key, make):
        """This stream's state for ``key`` (``make()`` on first use, e.g. a cuBLAS handle set
        to this stream), an object with ``close()``: one per stream, so two streams never
        share a handle's stream binding or workspace. The object guards its own use."""
        with self._state_lock:
            state = self._libraries.get(key)
            if state is None:
                if self.handle is None:
                    raise CUDAError(f"{self!r} is closed")
                with capture_relaxed():
                    state = self._libraries[key] = make()
            return state

    def close(self):
        """Free the stream; library state made for it is closed first, once its work has
        drained (a handle or workspace must outlive the launches that use it)."""
        if self.handle is not None and self._libraries and not self.foreign():
            try:
                self.wait()
            finally:
                with self._state_lock:
                    states, self._libraries = list(self._libraries.values()), {}
                for state in states:
                    state.close()
        super().close()

    def _destroy(self, handle):
        check(driver().cuStreamDestroy(handle), "cuStreamDestroy")

    def __repr__(self):
        return f"<nnc.cuda.CudaStream gpu:{self.device.ordinal}>"


class CudaGraph:
    """Work captured from a stream into a CUDA graph, instantiated once, replayed cheaply.

    ``CudaGraph.capture(stream, fn)`` calls ``fn()`` while ``stream`` captures: every launch,
    copy and event wait that fn enqueues on ``stream`` or on streams forked from it (by waiting
    on an event recorded on it) becomes a graph node; every forked stream must be joined back
    into ``stream`` before fn returns (CUDA's rule). ``replay(stream)`` enqueues the whole
    graph with one cuGraphLaunch. The tensors captured are baked in: replay reads and writes
    the same device memory. NNC has no counterpart; Nimble (ATC '21) does this.
    """

    def __init__(self, graph, exec_handle, stream):
        self.graph, self.exec_handle, self.device = graph, exec_handle, stream.device

    @classmethod
    def capture(cls, stream, fn):
        stream = cuda_stream(stream)
        cu = driver()
        stream.device.make_current()
        if getattr(_tls, "deferred", None) is not None:
            raise CUDAError("this thread is already capturing a CUDA graph")
        from nnc.cuda import _ccall

        # THREAD_LOCAL: other threads' unrelated CUDA calls are not capture violations.
        check(cu.cuStreamBeginCapture(
            stream.handle, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture")
        _tls.deferred = []
        _ccall.capture_enter()          # prepared nodes look at this thread's capture state
        try:
            try:
                fn()
            except BaseException:
                # End the capture so the stream is usable again, and drop the partial graph.
                result = cu.cuStreamEndCapture(stream.handle)
                if int(result[0]) == 0 and len(result) > 1 and result[1] is not None:
                    cu.cuGraphDestroy(result[1])
                raise
            graph = check(cu.cuStreamEndCapture(stream.handle), "cuStreamEndCapture")
        finally:
            _ccall.capture_exit()
            deferred, _tls.deferred = _tls.deferred, None
            for resource, handle in deferred:
                resource._destroy(handle)
        try:
            exec_handle = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except CUDAError:
            cu.cuGraphDestroy(graph)
            raise
        return cls(graph, exec_handle, stream)

    def replay(self, stream):
        """Enqueue the captured work on ``stream`` (returns at once)."""
        if self.exec_handle is None:
            raise CUDAError("this CudaGraph was closed")
        stream = cuda_stream(stream)
        self.device.make_current()
        check(driver().cuGraphLaunch(self.exec_handle, stream.handle), "cuGraphLaunch")

    def close(self):
        cu = driver()
        if self.device.cu is not cu:    # made by a driver no longer in use (Resource.foreign)
            self.exec_handle = self.graph = None
        if self.exec_handle is not None:
            cu.cuGraphExecDestroy(self.exec_handle)
            cu.cuGraphDestroy(self.graph)
            self.exec_handle = self.graph = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit the driver may be gone
            pass


def cuda_stream(stream):
    """The CudaStream of a GPU ``nnc.Stream`` (or the CudaStream itself)."""
    if isinstance(stream, CudaStream):
        return stream
    from nnc.cuda.gpu_stream import device_half

    return device_half(stream).cuda


def pack_args(args):
    """The ``void**`` kernel-parameter array for cuLaunchKernel, and what keeps it valid.

    ``args`` are NumPy scalars or arrays of the kernel's exact C types (structs as structured
    arrays or uint8 buffers); a pointer is an np.uint64. Each becomes one contiguous array and
    the result holds their addresses (ecosystem.md §1, "form A"). Keep the returned tuple alive
    until cuLaunchKernel has returned (the driver copies the values during the call).
    """
    vals = [np.ascontiguousarray(np.asarray(a)) for a in args]
    for v in vals:
        if v.dtype.kind not in "iufV" and v.dtype != np.uint8:
            raise CUDAError(f"kernel argument of dtype {v.dtype} is not a C scalar or struct")
    params = np.array([v.ctypes.data for v in vals], np.uint64)
    return params, vals


def launch(function, grid, block, args, stream, shared=0):
    """Enqueue ``function<<<grid, block, shared, stream>>>(*args)``; returns at once."""
    params, keep = pack_args(args)
    gx, gy, gz = (tuple(grid) + (1, 1))[:3]
    bx, by, bz = (tuple(block) + (1, 1))[:3]
    check(driver().cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared, stream.handle,
                                  params.ctypes.data, 0), "cuLaunchKernel")
    del keep
