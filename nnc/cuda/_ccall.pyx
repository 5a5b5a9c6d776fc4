"""The driver calls a GPU stream makes for every graph node, made from C without the GIL.

NNC: gpu/ccv_nnc_compat.cu calls the CUDA API from C. Through cuda-bindings' Python wrappers
each call costs microseconds of argument conversion with the GIL held (on an H100 host, 9.7 us
of dispatch per node of Inception-V3, of which 3.3 us was nnc's with a driver that does
nothing; 4.0-6.6 and 1.1 us with these calls from C: docs/benchmarks.md, "gpu"), so
the three calls every node makes - ``cuLaunchKernel`` for a prepared launch, ``cuEventRecord``
for an emit, ``cuStreamWaitEvent`` for a wait - go through C function pointers instead, taken
once per driver from ``libcuda.so.1`` (the library cuda-bindings itself loads; these exported
names are the ones CUDA's header maps to for explicit streams). Everything else stays on the
Python path, which also checks argument forms against the real bindings in the tests.

A driver may offer its own entry points through ``c_entry_points()`` (the test suite's fake
does, so CI runs this path); any other driver object gets none and its GPU streams use the
Python path. ``NNC_CUDA_C_CALLS=0`` turns the C path off (for comparison, or to debug).
No CUDA header is needed: the functions are declared here by their C ABI.

A prepared library node (GPU_OPT: cuDNN through cudnn-frontend's Python ``execute``, cuBLAS
through nvmath's bindings) is a Python call costing tens of microseconds per run. On a GPU
stream such a node becomes a :class:`NodeGraph`: its first run on that stream (per float32
precision, where that selects its work) runs the Python ops as before - which makes the
stream's library handle and workspace and loads what loads lazily - and then captures the
same ops, on the same stream, handle and workspace, into a CUDA graph (thread-local capture
mode; nothing runs while capturing); every later run is one ``cuGraphLaunch`` from C without
the GIL. Where a graph cannot be used the Python ops run as before: inside an enclosing
capture (they record into it), where the capture failed (remembered, never retried), and
without a ``cuGraphLaunch`` entry point (then no NodeGraph is made). A graph bakes in exactly
the pointers, plan and workspace the prepared ops enqueue, and a prepared node is never
re-pointed (a re-bound node is prepared anew, a node with movable tensors is never prepared),
so a replay enqueues what the Python ops would. The graphs are freed with the NodeGraph, or
when the stream closes (``CudaStream.library`` state).
"""

from libc.stdint cimport uintptr_t

import ctypes
import os
import weakref

import nnc.cuda as _cuda

__all__ = ["CCalls", "CLaunch", "GRAPH_NAMES", "NAMES", "NodeGraph", "calls_of", "capture_enter",
           "capture_exit", "enabled", "node_graph_fits", "null_entry_points"]

NAMES = ("cuLaunchKernel", "cuEventRecord", "cuStreamWaitEvent")
# Optional: without it, library nodes stay Python calls (NodeGraph is not used).
GRAPH_NAMES = ("cuGraphLaunch",)
_GRAPHS = "node graphs"                 # CudaStream.library key of a stream's NodeGraph graphs

# CudaGraph captures in progress in the process, any thread (capture_enter / capture_exit):
# while none is, a NodeGraph's replay needs no look at the thread's capture state.
cdef int captures_open = 0


def capture_enter():
    """A CudaGraph capture begins (nnc.cuda.driver.CudaGraph.capture)."""
    global captures_open
    captures_open += 1


def capture_exit():
    """... and ends, however it ends."""
    global captures_open
    captures_open -= 1


def enabled():
    """False when ``NNC_CUDA_C_CALLS=0``: every GPU stream made after that uses Python calls."""
    return os.environ.get("NNC_CUDA_C_CALLS", "1") != "0"


cdef int _fail(object cu, int err, str what) except -1:
    """Raise CUDAError for a failed call, named as nnc.cuda.driver.check names it."""
    from nnc.cuda.driver import check
    try:
        code = cu.CUresult(err)
    except (AttributeError, TypeError, ValueError):
        code = err
    check((code,), what)
    return -1


cdef class CCalls:
    """A driver's per-node entry points (see the module docstring)."""

    cdef int record(self, void* event, void* stream) except -1:
        cdef int err
        with nogil:
            err = self.event_record(event, stream)
        if err:
            _fail(self.cu, err, "cuEventRecord")
        return 0

    cdef int wait_event(self, void* stream, void* event) except -1:
        cdef int err
        with nogil:
            err = self.stream_wait_event(stream, event, 0)
        if err:
            _fail(self.cu, err, "cuStreamWaitEvent")
        return 0


cdef class CLaunch:
    """A prepared launch's fields read once, so that firing it touches no Python object."""

    def __init__(self, launch):
        cdef int i
        self.launch = launch
        self.f = <void*><uintptr_t>int(launch.f)
        for i in range(6):
            self.dims[i] = <unsigned>launch.dims[i]
        self.params = <void**><uintptr_t>launch.ptr

    cdef int fire(self, CCalls c, void* stream) except -1:
        cdef int err
        with nogil:
            err = c.launch_kernel(self.f, self.dims[0], self.dims[1], self.dims[2],
                                  self.dims[3], self.dims[4], self.dims[5], 0, stream,
                                  self.params, NULL)
        if err:
            _fail(c.cu, err, "cuLaunchKernel")
        return 0


cdef class NodeGraph:
    """A prepared library node's ops on one GPU stream, replayed as a CUDA graph from C (see
    the module docstring). ``ops``: what nnc.cuda.runner's prepare made (each op(cuda_stream)),
    Launch ops unconverted: they are captured through the Python path."""

    def __init__(self, list ops):
        self.ops = ops
        self.by_precision = ops[0] if len(ops) == 1 and hasattr(ops[0], "ops_of") else None
        self.execs = {}
        self.last_key = None
        self.last = NULL

    def captured(self):
        """{key: CudaGraph, or why that key runs the Python ops}: what later runs replay."""
        return dict(self.execs)

    cdef int fire(self, CCalls c, void* stream, object cuda, object gate) except -1:
        """Enqueue the node on CUstream ``stream`` (``cuda``'s, open and its context current).
        ``gate``: a lock held while capturing, so that the stream's waits never query a
        capturing stream."""
        cdef int err
        key = None if self.by_precision is None else _cuda._precision
        if captures_open == 0 and self.last != NULL and key is self.last_key:
            with nogil:
                err = c.graph_launch(self.last, stream)
            if err:
                _fail(c.cu, err, "cuGraphLaunch")
            return 0
        return self._slow(c, stream, cuda, gate, key)

    cdef int _slow(self, CCalls c, void* stream, object cuda, object gate, object key) except -1:
        cdef int err
        ops = self.ops if self.by_precision is None else self.by_precision.ops_of(key)
        if _thread_capturing():
            for op in ops:              # recorded into the enclosing capture, as before
                op(cuda)
            return 0
        found = self.execs.get(key)
        if found is None or type(found) is str:
            for op in ops:
                op(cuda)
            if found is None:
                # Enqueued above: now captured (nothing runs), made once, or refused once.
                with gate:
                    self.execs[key] = _capture(cuda, ops)
            return 0
        self.last_key = key
        self.last = <void*><uintptr_t>int(found.exec_handle)
        with nogil:
            err = c.graph_launch(self.last, stream)
        if err:
            _fail(c.cu, err, "cuGraphLaunch")
        return 0


def node_graph_fits(list ops):
    """Whether a prepared node's ops become a NodeGraph: some op is a library call (not a
    plain kernel launch, which CLaunch fires from C already) and every op says it may be
    captured (``capturable``: its work is the same at every call on a stream)."""
    from nnc.cuda.runner import Launch

    return (any(type(op) is not Launch for op in ops)
            and all(getattr(op, "capturable", False) for op in ops))


def _thread_capturing():
    """Whether this thread captures a CUDA graph (nnc.cuda.capture.capture, CudaGraph.capture)."""
    from nnc.cuda import driver as drv
    from nnc.cuda.gpu_stream import capturing

    return capturing() or getattr(drv._tls, "deferred", None) is not None


class _Graphs:
    """A CudaStream's NodeGraph graphs (its ``library(_GRAPHS)`` state): each closes with its
    NodeGraph, or here when the stream closes (after it drained), whichever is first."""

    def __init__(self):
        self.graphs = weakref.WeakSet()

    def add(self, graph):
        self.graphs.add(graph)

    def close(self):
        for graph in list(self.graphs):
            graph.close()


def _capture(cuda, ops):
    """``ops`` on CudaStream ``cuda`` captured into a CudaGraph, or why they cannot be (a
    library refusing capture, an op that is not capturable, a capture the driver refused)."""
    from nnc.cuda.driver import CudaGraph

    bad = [op for op in ops if not getattr(op, "capturable", False)]
    if bad:
        return f"{bad[0]!r} is not capturable"

    def run():
        for op in ops:
            op(cuda)

    try:
        graph = CudaGraph.capture(cuda, run)
    except Exception as e:  # whatever refused: the node keeps its Python ops
        return f"{type(e).__name__}: {e}"
    try:
        cuda.library(_GRAPHS, _Graphs).add(graph)
    except Exception as e:
        graph.close()
        return f"{type(e).__name__}: {e}"
    return graph


def _entry_points(cu):
    """{name: address} for cu, with what keeps them valid; (None, None) when it has none."""
    offer = getattr(cu, "c_entry_points", None)
    if offer is not None:
        points = offer()
        return points, points
    try:
        from cuda.bindings import driver as real
    except ImportError:
        return None, None
    if cu is not real:                  # a stand-in (a test's): its handles are not libcuda's
        return None, None
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        points = {n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in NAMES}
    except (OSError, AttributeError):
        return None, None
    for n in GRAPH_NAMES:
        found = getattr(lib, n, None)
        if found is not None:
            points[n] = ctypes.cast(found, ctypes.c_void_p).value
    return points, lib


cdef int _null_launch(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                      unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                      void** extra) noexcept nogil:
    return 0


cdef int _null_record(void* event, void* stream) noexcept nogil:
    return 0


cdef int _null_wait(void* stream, void* event, unsigned flags) noexcept nogil:
    return 0


cdef int _null_graph_launch(void* graph_exec, void* stream) noexcept nogil:
    return 0


def null_entry_points():
    """Entry points that do nothing and succeed: what a driver that does no work offers
    (benchmarks/gpu_host.py measures nnc's own host share with them)."""
    return {"cuLaunchKernel": <uintptr_t>_null_launch, "cuEventRecord": <uintptr_t>_null_record,
            "cuStreamWaitEvent": <uintptr_t>_null_wait,
            "cuGraphLaunch": <uintptr_t>_null_graph_launch}


cpdef object calls_of(object device):
    """The :class:`CCalls` of ``device``'s driver (an nnc.cuda.driver.Device), made on first use
    and kept on the device; None when the C path is off or the driver offers no entry points."""
    if not enabled():
        return None
    c = getattr(device, "ccalls", False)
    if c is not False:
        return c
    cdef CCalls made = None
    points, keep = _entry_points(device.cu)
    if points is not None and all([points.get(n) for n in NAMES]):
        made = CCalls.__new__(CCalls)
        made.launch_kernel = <launch_kernel_t><uintptr_t>points["cuLaunchKernel"]
        made.event_record = <event_record_t><uintptr_t>points["cuEventRecord"]
        made.stream_wait_event = <stream_wait_event_t><uintptr_t>points["cuStreamWaitEvent"]
        made.graph_launch = <graph_launch_t><uintptr_t>(points.get("cuGraphLaunch") or 0)
        made.cu, made.keep = device.cu, keep
    # Two threads may both make one on first use: either is right, and both stay valid.
    device.ccalls = made
    return made
