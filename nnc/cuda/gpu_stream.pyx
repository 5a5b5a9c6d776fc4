"""The device half of ``nnc.Stream("gpu:N")`` and ``nnc.Signal("gpu:N")``: how a CUDA stream runs
each task kind the runners push (nnc/stream/stream.pxd), so that graph runs, loops, branches and
``cmd_exec`` reach a GPU through the same code as a CPU stream (docs/gpu.md, "How a GPU stream
runs each task").

NNC: ccv_nnc_stream.c's GPU stream context. A CPU stream queues a task and a worker runs it
later; a GPU stream decides at enqueue time, on the enqueueing thread:

- a device launch (TASK_PY with TASK_LAUNCH: a GPU backend) is launched now with the CUDA
  stream, as prepared launches (parameters packed once) for graph nodes whose backend offers
  ``prepare`` (registered in nnc.cuda.runner.PREPARE) and whose tensors cannot move;
- host bookkeeping (TASK_NOW: a loop's count, multiview selection, carry-overs) runs now: it
  only has to precede the launches that read the pointers it sets;
- a C call (TASK_CALL, e.g. a coroutine's inbox post) becomes ``cuLaunchHostFunc`` with that C
  function: it runs on the driver's thread without the GIL;
- any other Python call (a run's finish, ``add_callback``) becomes a host function that hands
  it to nnc's one watcher thread (nnc/cuda/_hostfn.pyx), which runs it with the GIL;
- emit is ``cuEventRecord``, wait_signal ``cuStreamWaitEvent``.

Prepared launches, emits and waits - what every node costs - call the driver from C without
the GIL where the driver offers entry points (nnc/cuda/_ccall.pyx); so does a prepared library
node (cuDNN, cuBLAS) after its first run on the stream, replayed as a CUDA graph of its own
(``NodeGraph``); the rest goes through cuda-bindings.

A CUDA event cannot be waited on before it is recorded, but the coroutine runner reserves the
end signal of a run with control flow and makes the caller's stream wait on it before the
scheduler thread emits it (nnc/run/flow.pyx). A GPU stream waiting on a *reserved* signal
therefore holds its later work on the host, in order, until that signal's emit is enqueued
(then it waits on the event and launches what it held) or the signal is set.

Host functions finish after the device work before them, but the watcher runs their Python
later: each is a :class:`_HostTask` token, and ``wait()``/``query()`` also wait for the tokens
of the stream and those it inherited through signals (an emit passes the emitter's unfinished
tokens to the signal, a wait passes them on), so a run's finish on its stream 0 is waited for by
the caller's stream.
"""

from libc.stdint cimport uintptr_t

import threading
import time

from nnc.base.core import CUDAError, StreamError

from nnc.stream.stream cimport DeviceStream, Signal, Stream
from nnc.stream.worker cimport (
    TASK_C, TASK_CALL, TASK_LAUNCH, TASK_NOW, TASK_PY, TASK_STORE, stream_keep_error,
    stream_task_t, task_release_owned,
)

from nnc.cuda._ccall cimport CCalls, CLaunch, NodeGraph, calls_of

from nnc.cuda import _hostfn
from nnc.cuda._ccall import node_graph_fits
from nnc.cuda.driver import CudaEvent, CudaStream, check, driver
from nnc.cuda.runner import PREPARE     # backend function -> prepare: never found by name
from nnc.cuda.runner import Launch

__all__ = ["GpuSignal", "GpuStream", "capturing", "device_half", "set_capturing", "signal_half"]

_PREPARED_MAX = 4096                    # prepared nodes kept per stream before starting over

cdef enum:
    OP_LAUNCH = 1
    OP_NOW = 2
    OP_HOST = 3
    OP_CALL = 4
    OP_STORE = 5
    OP_EMIT = 6
    OP_WAIT = 7

# Guards every GPU stream's gate and held list and every GpuSignal's reservation (one lock: a
# release touches the emitter and the gated streams together). Re-entrant: a launch may push.
_lock = threading.RLock()
# Notified when a host task finishes, held work is launched, or a reservation ends.
_cond = threading.Condition(_lock)
_tls = threading.local()                # .capturing: this thread is capturing a CUDA graph


def capturing():
    """True while the calling thread captures a CUDA graph (nnc.cuda.capture.capture)."""
    return getattr(_tls, "capturing", False)


def set_capturing(bint on):
    _tls.capturing = on


cdef class _HostTask:
    """One host function's Python work: done once the watcher has run it."""
    cdef public bint done


cdef list _undone(list tokens):
    return [t for t in tokens if not (<_HostTask>t).done]


cdef class _HostCall:
    """What the watcher runs for a host function: fn(*args), a failure recorded on owner."""
    cdef Stream owner
    cdef object fn
    cdef tuple args
    cdef str where
    cdef _HostTask token

    def __call__(self):
        try:
            self.fn(*self.args)
        except BaseException as e:
            stream_keep_error(self.owner.s, (self.where, e))
        finally:
            with _cond:
                self.token.done = True
                _cond.notify_all()


cdef str _where(object ctx, int node):
    """How a failing task is named in errors, as nnc.stream.worker names it."""
    if ctx is not None and node >= 0 and hasattr(ctx, "_label"):
        return f"node {ctx._label(node)}"
    return "a task" if ctx is None else repr(ctx)


class GpuSignal:
    """A Signal's CUDA event, and what the CUDA event cannot say itself: a reservation (the
    coroutine runner's future emit) and the host tasks its last emit came after."""

    def __init__(self, kind):
        self.event = CudaEvent(kind)
        self.ptr = int(self.event.handle)  # the CUevent's address, for the C calls
        self.kind = kind
        self.host = []                  # _HostTask tokens the latest emit came after
        self.reserved = False           # an emit is promised; waiting streams hold their work
        self.gated = []                 # GpuStreams holding work until then

    @property
    def emitted(self):
        return self.event.emitted

    def query(self):
        return not self.reserved and not _undone(self.host) and self.event.query()

    def wait(self, double timeout):
        """Host wait (Signal.wait): the reservation, the event, then its host tasks."""
        end = time.monotonic() + timeout
        with _cond:
            while self.reserved:
                if not _cond.wait(_slice(end, timeout)) and _late(end, timeout):
                    return False
        while not self.event.query():
            if _late(end, timeout):
                return False
            time.sleep(0.0005)
        return _wait_tokens(self.host, end, timeout)

    def reserve(self):
        with _lock:
            self.reserved = True

    def set(self):
        """The reserved emit will never come: release the held work without an event wait."""
        self._release(False)

    def _release(self, bint recorded):
        cdef GpuStream st
        with _lock:
            self.reserved = False
            gated, self.gated = self.gated, []
            for st in gated:
                if st.gate is self:
                    st.gate = None
                    if recorded:
                        st._wait_event(self)
                    st._flush()
            _cond.notify_all()

    def __repr__(self):
        return f"<nnc.cuda GpuSignal {self.kind}>"


cdef double _slice(double end, double timeout):
    return 0.1 if timeout < 0 else max(0.0, min(0.1, end - time.monotonic()))


cdef bint _late(double end, double timeout):
    return timeout >= 0 and time.monotonic() >= end


cdef bint _wait_tokens(list tokens, double end, double timeout) except -1:
    with _cond:
        while _undone(tokens):
            if _hostfn.on_watcher():
                raise StreamError("wait() on nnc's host-function watcher thread (in a GPU "
                                  "stream's callback): it would wait for itself")
            if not _cond.wait(_slice(end, timeout)) and _late(end, timeout):
                return False
    return True


cdef class GpuStream(DeviceStream):
    """The CUDA stream of one nnc.Stream("gpu:N") (see the module docstring)."""
    cdef readonly object cuda           # nnc.cuda.driver.CudaStream
    cdef object gate                    # the reserved GpuSignal holding our work, or None
    cdef list held                      # [(owner, op)] held behind gate, in push order
    cdef list host                      # _HostTask tokens later work and wait() depend on
    cdef dict prepared                  # id(node args) -> (args, ops): prepared launches
    cdef CCalls c                       # the driver's C entry points; None: Python calls
    cdef void* handle                   # the CUstream, for c (valid while cuda is open)
    # Held while a NodeGraph captures on cuda, and around every query or synchronize of it
    # here: querying a capturing stream is illegal and would invalidate the capture.
    cdef object capture_lock

    def __init__(self, kind):
        self.cuda = CudaStream(kind)
        self.held = []
        self.host = []
        self.prepared = {}
        self.capture_lock = threading.Lock()
        self.c = calls_of(self.cuda.device)
        self.handle = <void*><uintptr_t>int(self.cuda.handle)

    cdef int push(self, Stream owner, stream_task_t* t) except -1:
        cdef int kind = t.bound.kind
        ctx = <object>t.ctx if t.ctx != NULL else None
        if kind == TASK_PY:
            fn, args = <object>t.bound.fn, <object>t.bound.args
            if t.bound.flags & TASK_LAUNCH:
                op = (OP_LAUNCH, fn, args, t.node >= 0)
            elif t.bound.flags & TASK_NOW:
                op = (OP_NOW, fn, args)
            else:
                op = (OP_HOST, fn, args, _where(ctx, t.node))
        elif kind == TASK_CALL:
            op = (OP_CALL, <uintptr_t>t.call, <uintptr_t>t.arg)
        elif kind == TASK_STORE and t.bound.flags & TASK_NOW:
            op = (OP_STORE, <uintptr_t>t.arg, t.value)
        elif kind == TASK_C:
            raise StreamError(f"{_where(ctx, t.node)} has a CPU (C) backend; {owner!r} runs GPU "
                              "backends only (put every tensor of the node on the GPU, or copy "
                              "with DATA_TRANSFER)")
        else:
            raise StreamError(f"a task of kind {kind} cannot run on {owner!r}")
        self._submit(owner, op)
        # Enqueued: the op holds what it needs, so the task's own references go now.
        task_release_owned(t)
        return 0

    cdef int emit(self, Stream owner, Signal sig) except -1:
        self._submit(owner, (OP_EMIT, sig._device))
        return 0

    cdef int wait_signal(self, Stream owner, Signal sig) except -1:
        self._submit(owner, (OP_WAIT, sig._device))
        return 0

    cdef int _submit(self, Stream owner, tuple op) except -1:
        with _lock:
            if self.gate is not None:
                self.held.append((owner, op))
                return 0
            self._do(owner, op)
        return 0

    cdef int _do(self, Stream owner, tuple op) except -1:
        cdef int code = op[0]
        if code == OP_LAUNCH:
            self._launch(op[1], op[2], op[3])
        elif code == OP_NOW:
            op[1](*op[2])
        elif code == OP_HOST:
            self._host(owner, op[1], op[2], op[3])
        elif code == OP_CALL:
            self._host_fn(op[1], op[2])
        elif code == OP_STORE:
            (<long long*><uintptr_t>op[1])[0] = op[2]
        elif code == OP_EMIT:
            self._record(op[1])
        else:
            self._wait_or_gate(op[1])
        return 0

    cdef int _launch(self, fn, tuple args, bint node) except -1:
        """A GPU backend on this stream; a graph node's prepared launches where possible."""
        prepare = PREPARE.get(fn) if node else None
        if prepare is not None:
            hit = self.prepared.get(id(args))
            if hit is None or hit[0] is not args:
                cmd, ins, outs = args
                if any(x is not None and x.movable for x in list(ins) + list(outs)):
                    hit = None                  # a loop re-points them: launch anew each time
                else:
                    if len(self.prepared) >= _PREPARED_MAX:
                        self.prepared.clear()
                    ops = prepare(cmd, ins, outs, self.cuda)
                    if self.c is not None:
                        if self.c.graph_launch != NULL and node_graph_fits(ops):
                            ops = [NodeGraph(ops)]
                        else:
                            ops = [CLaunch(op) if type(op) is Launch else op for op in ops]
                    # The entry holds args, so id(args) is not reused while it is cached.
                    hit = self.prepared[id(args)] = (args, ops)
            if hit is not None:
                if self.c is None:
                    for op in hit[1]:
                        op(self.cuda)
                    return 0
                self._c_ready()
                for op in hit[1]:
                    if type(op) is CLaunch:
                        (<CLaunch>op).fire(self.c, self.handle)
                    elif type(op) is NodeGraph:
                        (<NodeGraph>op).fire(self.c, self.handle, self.cuda, self.capture_lock)
                    else:
                        op(self.cuda)
                return 0
        fn(*args, stream=self.cuda)
        return 0

    cdef int _host_fn(self, uintptr_t fn, uintptr_t data) except -1:
        cu = driver()
        self.cuda.device.make_current()
        check(cu.cuLaunchHostFunc(self.cuda.handle, cu.CUhostFn(fn), data), "cuLaunchHostFunc")
        return 0

    cdef int _host(self, Stream owner, fn, tuple args, str where) except -1:
        cdef _HostCall call = _HostCall.__new__(_HostCall)
        call.owner, call.fn, call.args, call.where = owner, fn, args, where
        call.token = _HostTask.__new__(_HostTask)
        data = _hostfn.arm(call)
        if capturing():
            # Not stream work: it runs once now (after nothing: capture runs no device work),
            # not on every replay, so a captured run's bookkeeping is done exactly once.
            self.host = _undone(self.host) + [call.token]
            _hostfn.post(data)
            return 0
        try:
            self._host_fn(_hostfn.fn_address(), data)
        except BaseException:
            _hostfn.disarm(data)
            raise
        self.host = _undone(self.host) + [call.token]
        return 0

    cdef int _c_ready(self, signal=None) except -1:
        """Before a C call: the stream (and the signal's event) open, the context current on
        this thread. A closed handle's address may be reused: passing it would not fail."""
        if self.cuda.handle is None:
            raise CUDAError(f"{self.cuda!r} is closed")
        if signal is not None and signal.event.handle is None:
            raise CUDAError(f"the CUDA event of {signal!r} is closed")
        self.cuda.device.make_current()
        return 0

    cdef int _record(self, signal) except -1:
        if self.c is None:
            self.cuda.emit(signal.event)
        else:
            self._c_ready(signal)
            self.c.record(<void*><uintptr_t>signal.ptr, self.handle)
            signal.event.emitted = True
        signal.host = _undone(self.host)
        if signal.reserved:
            signal._release(True)
        return 0

    cdef int _wait_event(self, signal) except -1:
        if self.c is None:
            self.cuda.wait_signal(signal.event)
        else:
            self._c_ready(signal)
            self.c.wait_event(self.handle, <void*><uintptr_t>signal.ptr)
        self.host = _undone(self.host) + _undone(signal.host)
        return 0

    cdef int _wait_or_gate(self, signal) except -1:
        if signal.reserved:
            self.gate = signal
            signal.gated.append(self)
            return 0
        return self._wait_event(signal)

    def _node_graphs(self):
        """The NodeGraphs of the nodes prepared on this stream (for tests)."""
        return [op for _, ops in self.prepared.values() for op in ops if type(op) is NodeGraph]

    def _flush(self):
        """Launch the work held behind a released gate, in order (with _lock held), until a
        held wait gates the stream again. A failure is recorded on the stream it was pushed to:
        the pusher has returned long ago."""
        cdef Stream owner
        held, self.held = self.held, []
        for i, (owner, op) in enumerate(held):
            if self.gate is not None:
                self.held = held[i:] + self.held
                return
            try:
                self._do(owner, op)
            except Exception as e:
                stream_keep_error(owner.s, (f"work held on {owner!r}", e))

    cdef int drain(self, Stream owner, double timeout) except -1:
        """wait(): held work launched, the CUDA stream idle, its host tasks run; 0 on timeout.
        A CUDA failure is recorded on owner, so wait() raises it as StreamError."""
        cdef double end = time.monotonic() + timeout
        if _hostfn.on_watcher():
            raise StreamError(f"{owner!r}.wait() on nnc's host-function watcher thread (in a "
                              "GPU stream's callback): it would wait for itself")
        with _cond:
            while self.held:
                if not _cond.wait(_slice(end, timeout)) and _late(end, timeout):
                    return 0
        try:
            if timeout < 0:
                self.cuda.device.make_current()
                with self.capture_lock:
                    check(driver().cuStreamSynchronize(self.cuda.handle), "cuStreamSynchronize")
            else:
                while not self._cuda_query():
                    if _late(end, timeout):
                        return 0
                    time.sleep(0.0005)
        except CUDAError as e:
            stream_keep_error(owner.s, (repr(owner), e))
        return 1 if _wait_tokens(self.host, end, timeout) else 0

    cdef bint _cuda_query(self) except -1:
        with self.capture_lock:
            return self.cuda.query()

    cdef int query(self) except -1:
        if self.held or _undone(self.host):
            return 0
        return 1 if self._cuda_query() else 0


def signal_half(Signal sig not None):
    """The GpuSignal of a GPU nnc.Signal (StreamError for a CPU signal)."""
    if not isinstance(sig._device, GpuSignal):
        raise StreamError(f"{sig!r} is not a GPU signal; use nnc.Signal('gpu')")
    return sig._device


def device_half(Stream s not None):
    """The GpuStream of a GPU nnc.Stream (StreamError for a CPU stream)."""
    if not isinstance(s._device, GpuStream):
        raise StreamError(f"{s!r} is not a GPU stream; use nnc.Stream('gpu')")
    return s._device
