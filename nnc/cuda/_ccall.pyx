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
"""

from libc.stdint cimport uintptr_t

import ctypes
import os

__all__ = ["CCalls", "CLaunch", "NAMES", "calls_of", "enabled", "null_entry_points"]

NAMES = ("cuLaunchKernel", "cuEventRecord", "cuStreamWaitEvent")


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
        return {n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in NAMES}, lib
    except (OSError, AttributeError):
        return None, None


cdef int _null_launch(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                      unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                      void** extra) noexcept nogil:
    return 0


cdef int _null_record(void* event, void* stream) noexcept nogil:
    return 0


cdef int _null_wait(void* stream, void* event, unsigned flags) noexcept nogil:
    return 0


def null_entry_points():
    """Entry points that do nothing and succeed: what a driver that does no work offers
    (benchmarks/gpu_host.py measures nnc's own host share with them)."""
    return {"cuLaunchKernel": <uintptr_t>_null_launch, "cuEventRecord": <uintptr_t>_null_record,
            "cuStreamWaitEvent": <uintptr_t>_null_wait}


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
        made.cu, made.keep = device.cu, keep
    # Two threads may both make one on first use: either is right, and both stay valid.
    device.ccalls = made
    return made
