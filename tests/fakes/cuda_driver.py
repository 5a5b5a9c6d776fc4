"""A fake CUDA driver for machines without a GPU, so nnc.cuda's host-side logic can be tested.

Device memory is host memory (so copies are memmoves), streams run everything at once, stream
capture records the calls and cuGraphLaunch replays them, and the kernels nnc launches are
emulated in NumPy from the raw ``void**`` parameter array (tests/fakes/cuda_kernels.py).
Conditional nodes (CUDA 12.4+) are too: a conditional handle holds a value, nnc's condition
kernel (``nnc_cond_set``) sets it, and on replay a WHILE node reruns its body graph while the
value is nonzero, an IF runs body 0 when it is nonzero (body 1, if any, when zero), a SWITCH
runs body ``value`` when there is one; body graphs are filled by cuStreamBeginCaptureToGraph -
which checks that nnc packs each kernel's arguments as its C signature in
nnc/cuda/kernels/*.cu expects. When the real
cuda.bindings is installed, every call is first made on the real module too, which (with no
driver) converts all arguments and then fails to load libcuda: a TypeError there means nnc
passes an argument the real bindings would reject. This proves argument forms and host logic
only; GPU results need a GPU.
"""

import bisect
import ctypes
import threading
import time

import numpy as np

from .cuda_kernels import EMULATE, SIGNATURES, _acc, _Fault, cond_set

try:
    from cuda.bindings import driver as real
except ImportError:
    real = None


def _driver_library_present():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


# Only where no driver can load: with one, the real calls would run with fake handles.
REAL_CHECK = real is not None and not _driver_library_present()

NOT_READY = 600


class _Handle(int):
    """A handle for when the real bindings are missing (int-valued, like theirs)."""


class FakeDriver:
    def __init__(self, count=1, arch=(9, 0), driver_version=13000):
        self.count, self.arch = count, arch
        self.driver_version = driver_version    # what cuDriverGetVersion says (CUDA 13.0)
        self.calls = []                 # names of driver calls made, in order
        self.c_calls = []               # ... of those, the ones made through C entry points
        self.c_errors = []              # (name, exception) raised inside a C entry point
        self.buffers = {}               # ptr -> backing ndarray (device and pinned memory)
        self.modules = {}               # id -> cubin bytes
        self.functions = {}             # id -> kernel name
        # Open captures, innermost last: (stream id, graph id). A stream capturing into a body
        # graph (cuStreamBeginCaptureToGraph) records there until its cuStreamEndCapture.
        self.capture_stack = []
        # CUDA's membership of a capture: the streams that began one, and the streams that
        # joined it by waiting on an event recorded on a member (cross-stream capture). Work
        # on any other stream runs at once, whichever thread launches it, while a capture is
        # open (another thread's stream is not captured).
        self.capture_joined = set()
        self.captured_events = set()    # events last recorded on a member stream
        self.capture_thread = None      # the thread that began the capture (thread-local mode)
        self.capture_invalidated = None  # the unsafe call that broke the capture, if any
        self.graphs = {}                # id -> list of deferred calls
        self.graph_parent = {}          # body graph id -> the graph holding its conditional node
        self.cond_values = {}           # conditional handle -> its value now
        self.cond_defaults = {}         # conditional handle -> (graph id, default, flags)
        self.conditional_nodes = []     # (type name, size) of every conditional node added
        self.max_iterations = 100000    # a WHILE node running longer is a hang: raise instead
        self._keep = []                 # ctypes arrays the driver "owns" (phGraph_out)
        self.launches = []              # kernel names launched (executed)
        # (kernel name, stream id, its context) per launch executed: which device ran what
        self.launched_on = []
        # Device memory's device, as the driver knows it (UVA: a pointer names its device):
        # start -> (end, context of the allocation); pinned host memory is not in it.
        self.mem_ctx = {}
        self._mem_starts = None         # sorted starts of mem_ctx, rebuilt after a change
        self.faults = []                # (kernel name, pointer, its context, stream's context)
        self.live_streams = set()
        self.live_events = set()
        self.live_execs = set()         # instantiated CUDA graphs not yet destroyed
        self.ctx_of = {}                # stream / event / module / function id -> context
        self._current = threading.local()   # .ctx: this thread's current context
        self.busy = False               # cuStreamQuery says NOT_READY while set
        self.host_delay = 0.02          # seconds before a host function runs
        self._next = 1

    # -- helpers
    def _id(self):
        self._next += 1
        return self._next

    def _h(self, kind, value):
        return getattr(real, kind)(value) if real is not None else _Handle(value)

    @staticmethod
    def ok(*values):
        err = real.CUresult.CUDA_SUCCESS if real is not None else _Handle(0)
        return (err, *values)

    def _alloc(self, n):
        buf = np.zeros(n + 64, np.uint8)
        ptr = buf.ctypes.data
        self.buffers[ptr] = buf
        return ptr

    def unsafe(self, name):
        """CUDA's rule for a capture in thread-local mode (the mode nnc uses): on the capturing
        thread, calls that may synchronise or allocate (cuMemAlloc, cuMemFree, module loading,
        synchronising or querying) are refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and
        invalidate the capture (cuStreamEndCapture then fails). Other threads are unaffected.
        Returns the error tuple to return, or None when the call is legal now. Fake libraries
        (tests/fakes/cublas.py, fakes/cudnn_frontend.py) ask it for their allocating calls too."""
        if self.capturing is None or threading.get_ident() != self.capture_thread:
            return None
        relaxed = real.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        if getattr(self._current, "mode", None) == relaxed:
            return None                 # cuThreadExchangeStreamCaptureMode relaxed this thread
        self.capture_invalidated = self.capture_invalidated or name
        return (real.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)

    @property
    def capturing(self):
        """The list of calls the innermost open capture records, or None."""
        return self.graphs[self.capture_stack[-1][1]] if self.capture_stack else None

    def _member(self, s):
        """Whether stream s belongs to an open capture (began one, or joined one)."""
        s = int(s)
        return any(st == s for st, _ in self.capture_stack) or s in self.capture_joined

    def _run(self, fn, stream):
        # Stream work runs at once, unless its stream belongs to an open capture: then it
        # becomes a node of the innermost capture's graph.
        if self.capturing is not None and self._member(stream):
            self.capturing.append(fn)
        else:
            fn()

    # -- device and context
    def cuDriverGetVersion(self):
        return self.ok(self.driver_version)

    def cuInit(self, flags):
        return self.ok()

    def cuDeviceGetCount(self):
        return self.ok(self.count)

    def cuDeviceGet(self, ordinal):
        if not 0 <= int(ordinal) < self.count:
            return (real.CUresult.CUDA_ERROR_INVALID_DEVICE, None)
        return self.ok(self._h("CUdevice", ordinal))

    def cuDeviceGetName(self, length, dev):
        # Like the real bindings: the whole buffer of ``length`` bytes, the name NUL-terminated.
        name = f"Fake GPU {int(dev)}".encode()[:length - 1] + b"\0"
        return self.ok(name + b" " * (length - len(name)))

    def cuDevicePrimaryCtxRetain(self, dev):
        return self.ok(self._h("CUcontext", 0x1000 + int(dev)))

    def cuCtxSetCurrent(self, ctx):
        self._current.ctx = int(ctx)
        return self.ok()

    def cuCtxSynchronize(self):
        bad = self.unsafe("cuCtxSynchronize")
        if bad:
            return bad
        # Every stream runs its work at once, so the device is always idle here.
        return self.ok()

    def _made(self, h):
        """Remember the context current when handle h was made (None: none was)."""
        self.ctx_of[h] = getattr(self._current, "ctx", None)
        return h

    def _same_ctx(self, a, b):
        # As the driver: a stream records only its own context's events and runs its own
        # context's kernels; nnc must never mix them.
        if self.ctx_of[int(a)] != self.ctx_of[int(b)]:
            return (real.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        return None

    def cuDeviceGetAttribute(self, attr, dev):
        name = getattr(attr, "name", "")
        value = {"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": self.arch[0],
                 "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": self.arch[1],
                 "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT": 4}[name]
        return self.ok(value)

    # -- memory
    def cuMemAlloc(self, n):
        bad = self.unsafe("cuMemAlloc")
        if bad:
            return (*bad, None)
        ptr = self._alloc(n)
        # Memory of the current context's device (nnc makes the tensor's device current).
        self.mem_ctx[ptr] = (ptr + max(n, 1), getattr(self._current, "ctx", None))
        self._mem_starts = None
        return self.ok(self._h("CUdeviceptr", ptr))

    def cuMemFree(self, ptr):
        bad = self.unsafe("cuMemFree")
        if bad:
            return bad
        del self.buffers[int(ptr)]
        self.mem_ctx.pop(int(ptr), None)
        self._mem_starts = None
        return self.ok()

    def mem_context(self, ptr):
        """The context of the device memory holding address ptr; None for other memory."""
        if self._mem_starts is None:
            self._mem_starts = sorted(self.mem_ctx)
        i = bisect.bisect_right(self._mem_starts, ptr) - 1
        if i < 0:
            return None
        end, ctx = self.mem_ctx[self._mem_starts[i]]
        return ctx if ptr < end else None

    def cuMemHostAlloc(self, n, flags):
        bad = self.unsafe("cuMemHostAlloc")
        if bad:
            return (*bad, None)
        return self.ok(self._alloc(n))

    def cuMemFreeHost(self, ptr):
        bad = self.unsafe("cuMemFreeHost")
        if bad:
            return bad
        del self.buffers[int(ptr)]
        return self.ok()

    def _copy(self, dst, src, n, stream):
        self._run(lambda: ctypes.memmove(int(dst), int(src), n), stream)
        return self.ok()

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        return self._copy(dst, src, n, stream)

    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        return self._copy(dst, src, n, stream)

    def cuMemcpyDtoDAsync(self, dst, src, n, stream):
        return self._copy(dst, src, n, stream)

    def cuMemcpyPeerAsync(self, dst, dctx, src, sctx, n, stream):
        # The driver reads each side's device from the context it is given: a context that
        # does not hold that memory is an invalid argument.
        if self.mem_context(int(dst)) != int(dctx) or self.mem_context(int(src)) != int(sctx):
            return (real.CUresult.CUDA_ERROR_INVALID_VALUE,)
        return self._copy(dst, src, n, stream)

    def cuMemsetD8Async(self, ptr, value, n, stream):
        self._run(lambda: ctypes.memset(int(ptr), value, n), stream)
        return self.ok()

    # -- streams, events, capture
    def cuStreamCreate(self, flags):
        h = self._made(self._id())
        self.live_streams.add(h)
        return self.ok(self._h("CUstream", h))

    def cuStreamDestroy(self, s):
        self.live_streams.discard(int(s))
        return self.ok()

    def _captured(self, s, name):
        """CUDA's rule: synchronising or querying a stream that is capturing is illegal, from
        any thread, and invalidates the capture."""
        if self._member(s):
            self.capture_invalidated = self.capture_invalidated or name
            return (real.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
        return None

    def cuStreamSynchronize(self, s):
        bad = self.unsafe("cuStreamSynchronize") or self._captured(s, "cuStreamSynchronize")
        if bad:
            return bad
        return self.ok()

    def cuStreamQuery(self, s):
        bad = self._captured(s, "cuStreamQuery")
        if bad:
            return bad
        if self.busy:
            return (real.CUresult.CUDA_ERROR_NOT_READY,)
        return self.ok()

    def cuLaunchHostFunc(self, s, fn, data):
        # The driver calls fn(data) on its own thread once the stream gets there: here, from
        # a plain thread a little later, through ctypes (which does not take the GIL for it).
        cfn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(int(fn))

        def later():
            time.sleep(self.host_delay)
            self.busy = False
            cfn(data)

        self._run(lambda: threading.Thread(target=later).start(), s)
        return self.ok()

    def cuEventCreate(self, flags):
        h = self._made(self._id())
        self.live_events.add(h)
        return self.ok(self._h("CUevent", h))

    def cuEventDestroy(self, e):
        self.live_events.discard(int(e))
        return self.ok()

    def cuEventRecord(self, e, s):
        bad = self._same_ctx(e, s)
        if bad:
            return bad
        if self.capture_stack and self._member(s):
            self.captured_events.add(int(e))
        else:
            self.captured_events.discard(int(e))
        return self.ok()

    def cuEventQuery(self, e):
        return self.ok()

    def cuEventSynchronize(self, e):
        bad = self.unsafe("cuEventSynchronize")
        if bad:
            return bad
        return self.ok()

    def cuStreamWaitEvent(self, s, e, flags):
        if self.capture_stack and int(e) in self.captured_events:
            self.capture_joined.add(int(s))     # waiting on a captured event joins the capture
        return self.ok()

    def _begin(self, s, g):
        if any(st == int(s) for st, _ in self.capture_stack):
            return (real.CUresult.CUDA_ERROR_ILLEGAL_STATE,)   # already capturing
        if not self.capture_stack:
            self.capture_thread = threading.get_ident()
            self.capture_invalidated = None
        self.capture_stack.append((int(s), g))
        return self.ok()

    def cuThreadExchangeStreamCaptureMode(self, mode):
        # The calling thread's interaction mode (GLOBAL until changed); returns the old one.
        old = getattr(self._current, "mode", real.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL)
        self._current.mode = real.CUstreamCaptureMode(int(mode))
        return self.ok(old)

    def cuStreamBeginCapture(self, s, mode):
        g = self._id()
        self.graphs[g] = []
        return self._begin(s, g)

    def cuStreamBeginCaptureToGraph(self, s, graph, deps, edge_data, count, mode):
        if int(graph) not in self.graphs:
            return (real.CUresult.CUDA_ERROR_INVALID_VALUE,)
        return self._begin(s, int(graph))

    def cuStreamEndCapture(self, s):
        # As CUDA: only the stream that began a capture ends it (and the innermost first).
        if not self.capture_stack or self.capture_stack[-1][0] != int(s):
            return (real.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, None)
        _, g = self.capture_stack.pop()
        if not self.capture_stack:
            self.capture_thread = None
            self.capture_joined.clear()
            self.captured_events.clear()
            if self.capture_invalidated:
                return (real.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, None)
        return self.ok(self._h("CUgraph", g))

    def cuStreamGetCaptureInfo(self, s):
        # CUDA 13's form: status, id, graph, dependencies, edge data, count. Dependencies are
        # not modelled (recorded calls run in order): one stand-in node.
        status = real.CUstreamCaptureStatus
        if not self.capture_stack or not self._member(s):
            return self.ok(status.CU_STREAM_CAPTURE_STATUS_NONE, 0, None, [], [], 0)
        g = self.capture_stack[-1][1]
        return self.ok(status.CU_STREAM_CAPTURE_STATUS_ACTIVE, g, self._h("CUgraph", g),
                       [self._h("CUgraphNode", self._id())], [], 1)

    def cuStreamUpdateCaptureDependencies(self, s, nodes, edge_data, count, flags):
        if not self.capture_stack or count != len(nodes):
            return (real.CUresult.CUDA_ERROR_ILLEGAL_STATE,)
        return self.ok()

    def cuGraphConditionalHandleCreate(self, graph, ctx, default, flags):
        if int(graph) not in self.graphs:
            return (real.CUresult.CUDA_ERROR_INVALID_VALUE, None)
        h = self._id()
        self.cond_defaults[h] = (int(graph), default, int(flags))
        self.cond_values[h] = default
        return self.ok(self._h("CUgraphConditionalHandle", h))

    def cuGraphAddNode(self, graph, deps, edge_data, count, params):
        g = int(graph)
        kinds = real.CUgraphConditionalNodeType
        conditional = real.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        if g not in self.graphs or params.type != conditional:
            return (real.CUresult.CUDA_ERROR_NOT_SUPPORTED, None)
        c = params.conditional
        h, kind, size = int(c.handle), c.type, int(c.size)
        sizes = {kinds.CU_GRAPH_COND_TYPE_WHILE: (1,), kinds.CU_GRAPH_COND_TYPE_IF: (1, 2),
                 kinds.CU_GRAPH_COND_TYPE_SWITCH: range(1, 1 << 16)}
        if h not in self.cond_defaults or size not in sizes[kind]:
            return (real.CUresult.CUDA_ERROR_INVALID_VALUE, None)
        bodies = [self._id() for _ in range(size)]
        for b in bodies:
            self.graphs[b] = []
            self.graph_parent[b] = g
        # The driver fills phGraph_out with an array it owns: its pointer, in the struct
        # cuda.bindings wraps (CUgraphNodeParams: type, 3 reserved ints, then the union, where
        # CUDA_CONDITIONAL_NODE_PARAMS has handle, type, size, then phGraph_out).
        arr = (ctypes.c_uint64 * size)(*bodies)
        self._keep.append(arr)
        ctypes.c_uint64.from_address(params.getPtr() + 32).value = ctypes.addressof(arr)
        self.conditional_nodes.append((kind.name, size))

        def run():
            def body(i):
                for fn in self.graphs[bodies[i]]:
                    fn()
            if kind == kinds.CU_GRAPH_COND_TYPE_WHILE:
                n = 0
                while self.cond_values[h]:
                    n += 1
                    if n > self.max_iterations:
                        raise RuntimeError(f"WHILE node of handle {h} never ends")
                    body(0)
            elif kind == kinds.CU_GRAPH_COND_TYPE_IF:
                if self.cond_values[h]:
                    body(0)
                elif size == 2:
                    body(1)
            elif self.cond_values[h] < size:
                body(self.cond_values[h])

        self.graphs[g].append(run)
        return self.ok(self._h("CUgraphNode", self._id()))

    def cuGraphInstantiate(self, g, flags):
        self.live_execs.add(int(g))
        return self.ok(self._h("CUgraphExec", int(g)))

    def _root(self, g):
        while g in self.graph_parent:
            g = self.graph_parent[g]
        return g

    def cuGraphLaunch(self, gexec, s):
        if int(gexec) not in self.live_execs:
            return (real.CUresult.CUDA_ERROR_INVALID_VALUE,)     # destroyed, or never made
        # CU_GRAPH_COND_ASSIGN_DEFAULT: the handle takes its default at every launch.
        for h, (g, default, flags) in self.cond_defaults.items():
            if flags and self._root(g) == int(gexec):
                self.cond_values[h] = default
        try:
            for fn in self.graphs[int(gexec)]:
                fn()
        except _Fault:
            return (real.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,)
        return self.ok()

    def cuGraphExecDestroy(self, gexec):
        self.live_execs.discard(int(gexec))
        return self.ok()

    def cuGraphDestroy(self, g):
        self.graphs.pop(int(g), None)
        return self.ok()

    # -- modules and kernels
    def cuModuleLoadData(self, image):
        bad = self.unsafe("cuModuleLoadData")
        if bad:
            return (*bad, None)
        m = self._made(self._id())
        self.modules[m] = bytes(image)
        return self.ok(self._h("CUmodule", m))

    def cuModuleGetFunction(self, module, name):
        image = self.modules[int(module)]
        if image != b"fake" and name + b"\0" not in image:
            err = real.CUresult.CUDA_ERROR_NOT_FOUND if real is not None else _Handle(500)
            return (err, None)
        f = self._id()
        self.ctx_of[f] = self.ctx_of[int(module)]
        self.functions[f] = name.decode()
        return self.ok(self._h("CUfunction", f))

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        bad = self._same_ctx(f, stream)
        if bad:
            return bad
        name = self.functions[int(f)]
        if name == "nnc_cond_set":
            kernel, dtype = "cond_set", None
        else:
            base, dtype = name.rsplit("_", 1)
            dtype = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[dtype]
            kernel = base[4:]
        # Like the driver, copy the argument values now: the caller may free them on return
        # (a captured launch runs later, at replay).
        sizes = [np.dtype(_acc(dtype)).itemsize if n == "A" else n for n in SIGNATURES[kernel]]
        keep = [ctypes.create_string_buffer(
            ctypes.string_at(ctypes.c_uint64.from_address(params + 8 * i).value, n), n)
            for i, n in enumerate(sizes)]
        addrs = [ctypes.addressof(b) for b in keep]
        grid = (gx, gy, gz)
        ctx = self.ctx_of[int(stream)]

        def run():
            self.launches.append(name)
            self.launched_on.append((name, int(stream), ctx))
            self._check_access(name, keep, ctx)
            if kernel == "cond_set":
                self._cond_set(addrs)
            else:
                EMULATE[kernel](addrs, dtype, grid)
            del keep[:0]    # keep the copies alive as long as this launch may run

        try:
            self._run(run, stream)
        except _Fault:
            return (real.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,)
        return self.ok()

    def _check_access(self, name, params, ctx):
        """A kernel touching device memory of another device than its stream's faults: nnc
        enables no peer access, so such an address is illegal on the stream's device. Every
        8-byte word of the parameters that points into device memory is checked (pointer
        arrays and structs included). The real driver reports the fault asynchronously (a
        sticky CUDA_ERROR_ILLEGAL_ADDRESS at the next synchronisation); the fake, which runs
        kernels at once, returns it from the launch (from cuGraphLaunch for a replay)."""
        for buf in params:
            raw = bytes(buf)
            for i in range(0, len(raw) - 7, 8):
                ptr = int.from_bytes(raw[i:i + 8], "little")
                owner = self.mem_context(ptr)
                if owner is not None and owner != ctx:
                    self.faults.append((name, ptr, owner, ctx))
                    raise _Fault(f"{name} on context {ctx} touched {ptr:#x} of context {owner}")


FakeDriver._cond_set = cond_set


class Checked:
    """Forwards to the fake, after making the same call on the real bindings (see top)."""

    def __init__(self, fake):
        self.fake = fake
        self._c = None

    def c_entry_points(self):
        """{name: address} of the calls nnc makes from C (nnc/cuda/_ccall.pyx): the fake's
        own, so the suite runs that path without a GPU."""
        if self._c is None:
            self._c = {"cuLaunchKernel": _c_entry(self, "cuLaunchKernel", _LAUNCH_T),
                       "cuEventRecord": _c_entry(self, "cuEventRecord", _RECORD_T),
                       "cuStreamWaitEvent": _c_entry(self, "cuStreamWaitEvent", _WAIT_T),
                       "cuGraphLaunch": _c_entry(self, "cuGraphLaunch", _GRAPH_LAUNCH_T)}
        return {n: ctypes.cast(f, ctypes.c_void_p).value for n, f in self._c.items()}

    def __getattr__(self, name):
        target = getattr(self.fake, name, None)
        if target is None or not callable(target) or not name.startswith("cu"):
            if real is None:
                raise AttributeError(name)
            return getattr(real, name)   # enums and handle types

        def call(*args):
            self.fake.calls.append(name)
            if REAL_CHECK:
                try:
                    getattr(real, name)(*args)
                except TypeError as e:
                    raise AssertionError(f"real cuda.bindings rejects {name}{args}: {e}") from e
                except RuntimeError:
                    pass                 # got as far as loading libcuda: arguments accepted
            return target(*args)

        return call


_LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_RECORD_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_WAIT_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)
_GRAPH_LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def _c_entry(checked, name, ctype):
    """A C function pointer that makes call ``name`` on the fake, recorded as the Python calls
    are (nnc/cuda/_ccall.pyx calls it without the GIL; ctypes takes it). A NULL pointer comes
    as None; an exception becomes CUDA_ERROR_UNKNOWN, so nnc raises instead of going on."""
    def entry(*args):
        try:
            checked.fake.calls.append(name)
            checked.fake.c_calls.append(name)
            result = getattr(checked.fake, name)(*[0 if a is None else a for a in args])
            return int(result[0])
        except BaseException as e:  # noqa: BLE001 - must not unwind through C
            checked.fake.c_errors.append((name, e))
            return 999
    return ctype(entry)


def install(monkeypatch, count=1):
    """Make nnc.cuda use a new FakeDriver with ``count`` GPUs until the test ends; returns it.

    The library backends (GPU_OPT) are marked unavailable (see unfake_libraries); the kernel
    cache is off, and where NVRTC is missing the fake loads any module. Call gc.collect()
    before the test returns so fake buffers are freed while it is installed."""
    from nnc import CUDAError, cuda
    from nnc.cuda import driver as drv
    from nnc.cuda import memory, nvrtc

    f = FakeDriver(count=count)
    monkeypatch.setattr(cuda, "_status", (count, None))
    monkeypatch.setattr(drv, "_driver", Checked(f))
    monkeypatch.setattr(drv, "_devices", {})
    monkeypatch.setattr(drv, "_tls", threading.local())
    monkeypatch.setattr(memory, "_staging", {})
    unfake_libraries(monkeypatch)
    monkeypatch.setenv("NNC_CUDA_CACHE", "")
    try:
        nvrtc.nvrtc_version()
    except CUDAError:
        # Without NVRTC the fake module loads anything; with it, kernel names are looked up
        # in the real cubin (cuModuleGetFunction fails for a name the sources do not define).
        monkeypatch.setattr(nvrtc, "compile_cubin", lambda *a, **k: b"fake")
    return f


def unfake_libraries(monkeypatch):
    """Mark cuBLAS and cuDNN unavailable while a fake driver is installed: a real library
    (where one is installed, on a GPU machine too) would run on fake pointers.
    tests/fakes/cublas.py's and fakes/cudnn_frontend.py's install() replace them with fakes."""
    from nnc.cmd.convolution.gpu import cudnn as cudnn_conv
    from nnc.cmd.gemm.gpu import cublas as cublas_gemm

    monkeypatch.setattr(cublas_gemm, "_probed",
                        (None, "cuBLAS is not faked (tests/fakes/cublas.py)"))
    monkeypatch.setattr(cudnn_conv, "_status",
                        (None, "cuDNN is not faked (tests/fakes/cudnn_frontend.py)"))
