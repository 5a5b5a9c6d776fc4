"""CPU streams and signals: asynchronous serial queues with CUDA-event-like synchronisation.

One file of ~730 lines because it is two cdef classes that touch each other's C state (Stream
and Signal): Cython keeps a class's methods in its module.

NNC: ccv_nnc_stream.c, _ccv_nnc_stream.h. A :class:`Stream` is a queue of tasks in C (``stream_t``,
worker.pxd) that nnc.stream.worker's pool of threads runs in order, libdispatch-style: a stream
costs no thread of its own, and one waiting on a signal occupies none. Enqueueing returns at once.
Pool threads run C backends without the GIL, so two streams running C or BLAS work use two cores;
they take the GIL only for Python-implemented commands and callbacks.

A :class:`Signal` follows CUDA events: ``s.emit(sig)`` records "s has reached this point";
``t.wait_signal(sig)`` makes t wait for the *latest record enqueued so far*; a signal never
emitted makes the wait a no-op, and emitting again re-arms it. Records are refcounted C
structs guarded by one module-wide lock; completing one wakes only the workers waiting on it.

Errors: a failing task (a C backend's status, a Python exception) is recorded and the stream
keeps working: later tasks still run, so signals are still emitted and no other stream hangs.
``wait()`` raises the first recorded error as :class:`StreamError` with the original as
``__cause__`` and forgets them all, leaving the stream ready for more work.

Threading model (docs/threading.md): the host thread enqueues; a pool thread runs one stream's
tasks in order at a time; nobody takes the GIL while holding a stream lock, the signal lock or
the pool's lock, so lock order can never invert.

Interpreter exit: work enqueued before exit runs before exit (nnc.stream.drain, the exit rule).
"""

from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_XDECREF
from libc.stdlib cimport free, malloc
from libc.string cimport memset

import weakref

from nnc.base.core import CommandError, NNCError, StreamError, error_repr
from nnc.cmd.command import cmd_register_stream
from nnc.coro import Scheduler, current_scheduler
from nnc.base.trace_switch import tracing_begin, tracing_end

from nnc.cmd.command cimport BOUND_DEVICE, BOUND_NONE, Backend, Cmd, cmd_bind, nnc_bound_t
from nnc.stream.inbox cimport Inbox, inbox_deliver, inbox_discard, inbox_message, inbox_msg_t
from nnc.base.sync cimport pthread_mutex_lock, pthread_mutex_unlock
from nnc.tensor.tensor cimport nnc_tensor_t
from nnc.base.trace_switch cimport trace_label, trace_on
from nnc.stream.worker cimport (
    TASK_CALL, TASK_EMIT, TASK_LAUNCH, TASK_NOW, TASK_OWNS_IO, TASK_OWNS_PY,
    TASK_STORE, TASK_WAIT, mono_now, pool_refusing, record_done, record_new, record_release,
    signal_lock, stream_check_not_worker, stream_drain, stream_enqueue, stream_keep_error,
    stream_new, stream_release, stream_task_call, task_release_owned, trace_event_t,
)


cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1


cdef int _stream_seq = 0

_live = weakref.WeakSet()               # every Stream object, for tracing and scheduler joins


cdef inline void _task_init(stream_task_t* t, int kind) noexcept nogil:
    """A zeroed task of ``kind`` that belongs to no graph node and has no trace label yet."""
    memset(t, 0, sizeof(stream_task_t))
    t.bound.kind = kind
    t.node = -1
    t.label = -1


def _qualname(fn):
    q = getattr(fn, "__qualname__", None)
    return q if isinstance(q, str) else type(fn).__qualname__


def _add_note(exc, str note):
    """BaseException.add_note (Python 3.11+); on 3.10 the note is stored the same way."""
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(note)
    else:
        notes = getattr(exc, "__notes__", None)
        exc.__notes__ = (notes if isinstance(notes, list) else []) + [note]


# -- device kinds ----------------------------------------------------------------------------
# "gpu"/"gpu:N" streams and signals are made by nnc.cuda, which registers itself here when it is
# imported (nnc/__init__.py imports it; that import is cheap: no cuda-bindings). The registered
# object has parse(kind) -> "gpu:N" (NNCError for a malformed kind, CUDAError when CUDA is
# unusable), stream(kind) -> a DeviceStream, and signal(kind) -> the CUDA event of a Signal.
cdef object _devices = None


def stream_register_device(backend):
    """nnc.cuda's registration of the GPU kinds (see above); the latest call wins."""
    global _devices
    _devices = backend


def _parse_kind(kind):
    if kind == "cpu":
        return "cpu"
    if _devices is None:
        raise NNCError(f"unknown stream kind {kind!r}: no GPU support is registered (nnc.cuda "
                       "was not imported)")
    return _devices.parse(kind)


cdef class DeviceStream:
    """The device half of a GPU stream (stream.pxd). nnc.cuda subclasses it."""

    cdef int push(self, Stream owner, stream_task_t* task) except -1:
        raise NotImplementedError

    cdef int emit(self, Stream owner, Signal sig) except -1:
        raise NotImplementedError

    cdef int wait_signal(self, Stream owner, Signal sig) except -1:
        raise NotImplementedError

    cdef int drain(self, Stream owner, double timeout) except -1:
        raise NotImplementedError

    cdef int query(self) except -1:
        raise NotImplementedError


cdef int _check_mix(Stream s, Signal sig, bint emit) except -1:
    """A stream emits signals of its own kind only, and waits on signals of its own kind or,
    on a GPU, of another GPU: a CUDA event cannot be set by a CPU worker, a CPU record cannot
    be waited on by a CUDA stream, and an event is recorded only by a stream of its device,
    while cuStreamWaitEvent accepts another device's event (how a multi-GPU schedule orders
    its devices)."""
    if (s._device is None) != (sig._device is None) or (emit and s._device is not None
                                                        and s.kind != sig.kind):
        raise StreamError(f"{s!r} cannot {'emit' if emit else 'wait on'} {sig!r}: a stream "
                          f"emits signals of its own kind (nnc.Signal({s.kind!r})) and waits on "
                          "signals of its own kind or, on a GPU, of any GPU; to order a CPU "
                          "stream after GPU work, wait() on the GPU stream or add_callback a "
                          "CPU emit (docs/gpu.md)")
    return 0


cdef class Stream:
    """An asynchronous in-order queue (NNC: ccv_nnc_stream_context_t): ``"cpu"`` runs on nnc's
    worker pool, ``"gpu"``/``"gpu:N"`` on a CUDA stream.

    Work enqueued returns at once and runs in order (on a pool thread, for CPU). ``wait()``
    blocks until everything enqueued so far is done and raises the first failure, if any.
    """

    def __cinit__(self, kind="cpu"):
        global _stream_seq
        self.kind = _parse_kind(kind)
        if self.kind != "cpu":
            # GPU: the CUDA stream runs the tasks; the stream_t below only keeps failures (it
            # never queues a task, so the pool never sees it).
            self._device = _devices.stream(self.kind)
        # Starts the pool on first use: a thread that cannot start fails here, before any work
        # is enqueued (a lazy start used to leave a run half enqueued and wait() hung).
        self.s = stream_new(_stream_seq + 1)
        _stream_seq += 1
        self.index = _stream_seq
        _live.add(self)
        # After joining _live (whose add may let another thread run): a trace_stop that does not
        # see this stream in _live has already cleared trace_on, so it never records unseen.
        self.s.trace = trace_on

    def __dealloc__(self):
        # The pool holds its own reference while work is queued: that work still runs, and the
        # exit hook still waits for it (it counts busy streams, not objects).
        if self.s != NULL:
            stream_release(self.s)

    cdef int push(self, stream_task_t* task, bint wake=True) except -1:
        """Append a task (copied).

        Tasks are staged on the host side and handed to the pool STAGE_SIZE at a time, under
        one lock. ``wake=True`` hands over at once; ``wake=False`` is for callers that enqueue
        many tasks in a row (graph runs) and call :meth:`kick` when done. Handing over each
        task alone made a pool thread run it, sleep, and pay a futex wake-up (about a
        microsecond) per task, with the host and the thread fighting over the lock in between.
        """
        if self._device is not None:
            return self._device.push(self, task)
        if pool_refusing():
            raise StreamError(f"cannot enqueue on {self!r}: the interpreter is exiting and "
                              "nnc's exit hook has already stopped the worker pool")
        self.stage[self.stage_size] = task[0]
        self.stage_size += 1
        if wake or self.stage_size == STAGE_SIZE:
            self.kick()
        return 0

    cdef int kick(self) except -1:
        """Hand the staged tasks to the pool (an idle stream becomes ready)."""
        if self._device is not None:
            return 0                    # a GPU stream launches at push: nothing is staged
        if self.stage_size == 0:
            return 0
        # MemoryError or StreamError (exiting): the tasks stay staged.
        stream_enqueue(self.s, self.stage, self.stage_size)
        self.stage_size = 0
        return 0

    def emit(self, Signal sig not None):
        """Record ``sig`` here: waiters on it wait until this stream reaches this point."""
        stream_emit(self, sig)

    def wait_signal(self, Signal sig not None):
        """Make this stream wait for the latest emit of ``sig`` (a no-op if never emitted)."""
        stream_wait_signal(self, sig)

    def record_event(self, Signal sig=None):
        """torch/CuPy's name: emit ``sig`` (a new Signal of this kind if None) and return it."""
        if sig is None:
            sig = Signal(self.kind)
        stream_emit(self, sig)
        return sig

    def wait_event(self, Signal sig not None):
        """torch/CuPy's name for :meth:`wait_signal`."""
        stream_wait_signal(self, sig)

    def synchronize(self):
        """torch/CuPy's name for ``wait()`` without a timeout."""
        self.wait()

    def add_callback(self, fn):
        """Call ``fn()`` once the work enqueued before it is done: on a pool thread
        (CPU), or on nnc's host-function watcher thread (GPU, docs/gpu.md)."""
        if not callable(fn):
            raise NNCError(f"add_callback needs a callable, not {type(fn).__name__}")
        self._push_call(fn, (), fn)

    def _push_call(self, fn, tuple args, ctx, keep=None, bint wake=True, str name=None,
                   int flags=0):
        """Enqueue ``fn(*args)``; ``ctx`` names it in errors, ``name`` (default: fn's
        qualified name) in a trace; ``flags``: TASK_NOW or TASK_LAUNCH (stream.pxd), which
        only GPU streams read."""
        cdef stream_task_t t
        cdef int label = -1
        if trace_on:
            label = trace_label(name if name is not None else _qualname(fn))
        stream_task_call(&t, fn, args, ctx, keep, flags)
        t.label = label
        try:
            self.push(&t, wake)
        except BaseException:
            task_release_owned(&t)
            raise

    def coro_arm(self, wake):
        """The nnc.coro glue: False if everything enqueued so far is done, else True after
        arranging for ``wake()`` to be called (on a pool thread) once it is.

        ``yield nnc.coro.WaitFor(stream)`` in a task uses it; an idle stream costs no hand-off.
        """
        cdef stream_task_t t
        cdef inbox_msg_t* msg
        if self.stage_size == 0 and self.query():
            return False
        box = getattr(wake, "inbox", None)
        if type(box) is not Inbox:
            self._push_call(wake, (), None)  # hands the staged tasks over with it, one wake-up
            return True
        # Our own schedulers' inbox: the worker posts the wake-up itself, without the GIL.
        item, wake.item = wake.item, None
        msg = inbox_message(<Inbox>box, item)
        _task_init(&t, TASK_CALL)
        t.call = inbox_deliver
        t.arg = msg
        try:
            self.push(&t, True)
        except BaseException:
            inbox_discard(msg)
            raise
        return True

    @property
    def scheduler(self):
        """This stream's coroutine scheduler (nnc.coro.Scheduler), made on first use.

        ``wait()`` first joins it, so control flow still pending on it is waited for too.
        """
        if self._scheduler is None:
            self._scheduler = Scheduler(f"nnc-coro-{self.index}", Inbox())
        return self._scheduler

    def query(self):
        """True if everything enqueued so far has finished (never blocks, never raises).

        The GIL stays held, as in kick(): dropping it would let a worker take it for a Python
        task, and a coroutine checking a stream in WaitFor would pay one more GIL hand-off.
        """
        cdef bint done
        if self._device is not None:
            return self._device.query() == 1
        pthread_mutex_lock(&self.s.lock)
        done = self.s.completed == self.s.submitted
        pthread_mutex_unlock(&self.s.lock)
        return done

    def wait(self, timeout=None):
        """Block until all work enqueued so far is done; raise StreamError for any failure.

        Tasks of this stream's coroutine scheduler are joined first. NNC:
        ccv_nnc_stream_context_wait. Ctrl-C interrupts the wait (not the work) with
        KeyboardInterrupt. Each failure is raised by every wait() that began before the failure
        was first raised (so concurrent waiters all see it), by none that begins after.
        Refused (StreamError) on a stream worker thread and inside a task of this stream's own
        scheduler (a while or case..of expression): both could be waiting for themselves.

        Returns True; with ``timeout`` (seconds), False if the work is not done by then, like
        ``threading.Event.wait`` (failures then stay recorded for a later wait).
        """
        cdef stream_t* s = self.s
        cdef double limit = timeout_seconds(timeout)
        cdef double end = mono_now() + limit
        stream_check_not_worker()
        if self._scheduler is not None:
            if current_scheduler() is self._scheduler:
                raise StreamError(
                    f"{self!r}.wait() inside a task of its own coroutine scheduler (a while or "
                    "case..of expression, or a task spawned on it): the stream waits for that "
                    "control flow, which would wait for the stream; yield WaitFor(stream) instead")
            while True:
                left = 0.1 if limit < 0 else min(0.1, max(end - mono_now(), 0))
                if self._scheduler.join(left):
                    break
                if 0 <= limit and end <= mono_now():
                    return False
                PyErr_CheckSignals()
        box = list(<list>s.errors)      # failures recorded but not raised yet, then new ones
        (<list>s.waiters).append(box)
        try:
            self.kick()
            if self._device is not None:
                done = self._device.drain(self, -1 if limit < 0 else max(end - mono_now(), 0.0))
            else:
                done = stream_drain(s, -1 if limit < 0 else max(end - mono_now(), 0.0))
        finally:
            waiters = <list>s.waiters
            for i in range(len(waiters)):
                if waiters[i] is box:
                    del waiters[i]
                    break
        if not done:
            return False
        if box:
            del (<list>s.errors)[:]
            self._raise_errors(box)
        return True

    def _waiting(self):
        """Number of wait() calls in progress on this stream (for tests)."""
        return len(<list>self.s.waiters)

    def _drain(self):
        """Block until everything enqueued so far is done, without raising its errors."""
        if self._device is not None:
            self._device.drain(self, -1)
            return
        self.kick()
        stream_drain(self.s)

    def _take_errors(self):
        """The failures recorded and not raised yet, as [(where, exc)], taken (as wait()
        takes them; wait()s in progress still see them). Never blocks: a task enqueued on this
        stream after some work (nnc.pipeline's stages) reads the failures of that work."""
        cdef list errors = <list>self.s.errors
        found = list(errors)
        del errors[:]
        return found

    def _raise_errors(self, list found):
        raise self._error(found)

    def _error(self, list found):
        """The StreamError reporting ``found`` [(where, exc)], the first as its __cause__."""
        where, first = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        err = StreamError(f"{where} failed on {self!r}: {error_repr(first)}{more}")
        err.__cause__ = first
        return err

    def as_future(self, loop=None):
        """An asyncio.Future of ``loop`` (default: the running loop) that completes once all
        work enqueued so far is done: result None, or the StreamError wait() would raise.
        Completed by this stream's worker, not by a thread per wait (nnc.stream.waiting)."""
        from nnc.stream.waiting import stream_future

        return stream_future(self, loop)

    def __await__(self):
        """``await s``: as ``s.wait()``, without blocking the event loop (see as_future)."""
        return self.as_future().__await__()

    def _enqueue_cmd(self, Cmd cmd not None, Backend backend not None, list inputs,
                     list outputs):
        """cmd_exec(..., stream=self): run the validated command here, asynchronously, as the
        bound work of the one bind path (nnc.cmd.command.cmd_bind) in a task that owns its
        references."""
        cdef stream_task_t t
        cdef nnc_bound_t b
        cdef int n = len(inputs) + len(outputs)
        if self._device is not None and (backend.device == "cpu" or cmd.fn is not None):
            raise CommandError(f"{cmd.name}/{backend.name} is a CPU backend; {self!r} runs "
                               "GPU backends only")
        cdef nnc_tensor_t** io = <nnc_tensor_t**>malloc(sizeof(nnc_tensor_t*) * (n + 1))
        if io == NULL:
            raise MemoryError()
        try:
            call = cmd_bind(cmd, backend, inputs, outputs, io, &b)
        except BaseException:
            free(io)
            raise
        if b.kind == BOUND_NONE:
            free(io)
            return
        _task_init(&t, b.kind)
        t.bound = b                     # its io is the array malloc'd above (TASK_OWNS_IO)
        t.bound.flags |= TASK_OWNS_IO | TASK_OWNS_PY | (TASK_LAUNCH if b.flags & BOUND_DEVICE
                                                        else 0)
        if trace_on:
            t.label = trace_label(cmd.name)
        # The task owns the Cmd (its param struct), the tensors and the call until it has run.
        keep = (cmd, tuple(inputs + outputs), call)
        Py_INCREF(keep)
        Py_INCREF(cmd)
        t.keep = <PyObject*>keep
        t.ctx = <PyObject*>cmd
        if call is not None:            # b borrows fn and args from call; the task owns them
            Py_INCREF(call[0])
            Py_INCREF(call[1])
        try:
            self.push(&t)
        except BaseException:
            free(io)
            Py_DECREF(keep)
            Py_DECREF(cmd)
            Py_XDECREF(t.bound.fn)
            Py_XDECREF(t.bound.args)
            raise

    def __enter__(self):
        """``with s:`` is a scope that joins s on exit; it does not make s "current" (nnc
        has no current stream: work goes to a stream only when passed ``stream=s``)."""
        return self

    def __exit__(self, exc_type, exc, tb):
        """Wait for s. When the block raised, its exception propagates unchanged: s is still
        drained, and a failure of s is added to it as a note (then forgotten, as reported).
        After KeyboardInterrupt nothing is waited for; s keeps its work and failures."""
        if exc is None:
            self.wait()
            return False
        if not isinstance(exc, Exception):
            return False                # Ctrl-C, SystemExit: leave at once
        try:
            self.wait()
        except StreamError as e:
            _add_note(exc, f"while leaving 'with {self!r}', the stream also failed: {e}")
        return False

    def __repr__(self):
        return f"<nnc.Stream {self.kind} #{self.index}>"

    def __reduce__(self):
        raise TypeError("an nnc.Stream cannot be copied or pickled: it is a live queue of "
                        "enqueued work run by nnc's worker pool; make a new nnc.Stream() instead")


cdef class Signal:
    """A CUDA-event-like signal (NNC: ccv_nnc_stream_signal_t)."""

    def __cinit__(self, kind="cpu"):
        self.kind = _parse_kind(kind)
        self.latest = NULL
        if self.kind != "cpu":
            self._device = _devices.signal(self.kind)     # the CUDA event (nnc.cuda)

    def __dealloc__(self):
        record_release(self.latest)

    @property
    def emitted(self):
        """True once an emit of this signal has been enqueued."""
        if self._device is not None:
            return self._device.emitted
        return self.latest != NULL

    def query(self):
        """True if the latest emit has happened (or the signal was never emitted)."""
        cdef bint done = True
        if self._device is not None:
            return self._device.query()
        with nogil:
            pthread_mutex_lock(&signal_lock)
            if self.latest != NULL:
                done = self.latest.done
            pthread_mutex_unlock(&signal_lock)
        return done

    def wait(self, timeout=None):
        """Block the calling thread until the latest emit enqueued so far has happened (at
        once if the signal was never emitted); True, or False if ``timeout`` seconds passed
        first (as threading.Event.wait). NNC: ccv_nnc_stream_signal_wait from the host;
        CUDA: cudaEventSynchronize.

        The GIL is released while waiting; Ctrl-C interrupts the wait (not the work). A failure
        on the emitting stream does not stop its later emits, so this returns; the failure is
        raised by that stream's wait(). Refused (StreamError) on a stream worker thread, as
        Stream.wait(): it could be the worker that has to emit the signal (nnc.stream.waiting).
        """
        if self._device is not None:
            stream_check_not_worker("Signal.wait()")
            return self._device.wait(timeout_seconds(timeout))
        from nnc.stream.waiting import signal_wait

        return signal_wait(self, timeout)

    def synchronize(self):
        """Wait without a timeout (the CUDA event's name for ``wait()``)."""
        self.wait()

    def _reserve(self):
        """Waits enqueued from now on wait for the next emit (see signal_reserve)."""
        signal_reserve(self)

    def _set(self):
        """Mark the latest emit done now, from the host (see signal_set)."""
        signal_set(self)

    def __repr__(self):
        return f"<nnc.Signal {self.kind}{'' if self.emitted else ' (never emitted)'}>"

    def __reduce__(self):
        raise TypeError("an nnc.Signal cannot be copied or pickled: it records emits of "
                        "running streams; make a new nnc.Signal() instead")


cdef int stream_emit(Stream s, Signal sig, bint wake=True) except -1:
    cdef stream_task_t t
    cdef signal_record_t* r
    if s._device is not None or sig._device is not None:
        _check_mix(s, sig, True)
        return s._device.emit(s, sig)
    # An emit claims the pending reservation (Signal._reserve: waits enqueued since then wait
    # for this emit), reserving a fresh record first when none is pending.
    if sig.latest == NULL or not sig.latest.reserved:
        signal_reserve(sig)
    pthread_mutex_lock(&signal_lock)
    r = sig.latest
    r.reserved = 0
    r.refs += 1
    pthread_mutex_unlock(&signal_lock)
    _task_init(&t, TASK_EMIT)
    t.record = r
    try:
        s.push(&t, wake)
    except BaseException:
        signal_set(sig)
        record_release(r)
        raise
    return 0


cdef int signal_reserve(Signal sig) except -1:
    """Make the next emit of sig its latest record now, before that emit is enqueued.

    Waits enqueued from now on wait for that future emit (a CUDA event cannot do this; the
    coroutine runner needs it to make the caller's stream wait for work it has not enqueued
    yet). The holder must later emit sig on a stream or call signal_set, or waiters hang.
    """
    cdef signal_record_t* old
    cdef signal_record_t* r
    if sig._device is not None:
        sig._device.reserve()           # GPU streams that wait on it hold their later work
        return 0
    r = record_new()
    if r == NULL:
        raise MemoryError()
    r.reserved = 1
    pthread_mutex_lock(&signal_lock)
    old = sig.latest
    sig.latest = r
    pthread_mutex_unlock(&signal_lock)
    record_release(old)
    return 0


cdef int signal_set(Signal sig) noexcept:
    """Mark sig's latest record done from the host and wake its waiters (the fallback that
    keeps a reserved emit from hanging its waiters when it can no longer be enqueued)."""
    if sig._device is not None:
        try:
            sig._device.set()
        except BaseException:
            pass                        # set() only releases held work; it does not fail
        return 0
    pthread_mutex_lock(&signal_lock)
    if sig.latest != NULL and not sig.latest.done:
        record_done(sig.latest)
    pthread_mutex_unlock(&signal_lock)
    return 0


cdef int stream_wait_signal(Stream s, Signal sig, bint wake=True) except -1:
    cdef stream_task_t t
    cdef signal_record_t* r
    if s._device is not None or sig._device is not None:
        _check_mix(s, sig, False)
        return s._device.wait_signal(s, sig)
    pthread_mutex_lock(&signal_lock)
    r = sig.latest
    if r != NULL and r.done:
        r = NULL  # already reached: nothing to wait for
    if r != NULL:
        r.refs += 1
    pthread_mutex_unlock(&signal_lock)
    if r == NULL:
        return 0
    _task_init(&t, TASK_WAIT)
    t.record = r
    try:
        s.push(&t, wake)
    except BaseException:
        record_release(r)
        raise
    return 0


cdef int stream_store_count(Stream s, Tensor count, long long value, bint wake=True) except -1:
    """Enqueue ``count[0] = value`` (an int64 tensor a graph run keeps alive): a loop's count,
    set in stream order without the GIL."""
    cdef stream_task_t t
    _task_init(&t, TASK_STORE)
    t.bound.flags = TASK_NOW            # a GPU stream stores it at enqueue (worker.pxd)
    t.arg = count.t.data
    t.value = value
    s.push(&t, wake)
    return 0


cdef int stream_add_error(Stream s, str where, object exc) except -1:
    """Record a failure on s from the host, as a failing task would (with the GIL)."""
    return stream_keep_error(s.s, (where, exc))


cdef int stream_move_errors(Stream src, Stream dst) except -1:
    """Hand the failures recorded on src, not raised yet, to dst, whose wait() raises them."""
    cdef list errors = <list>src.s.errors
    if src is dst or not errors:
        return 0
    moved = list(errors)
    del errors[:]
    for entry in moved:
        stream_keep_error(dst.s, <tuple>entry)
    return 0


# -- tracing: every live stream times its tasks (nnc.trace) -------------------------------------

def trace_start(tracer):
    """Start recording (nnc.trace): tasks are named as they are enqueued (nnc.base.trace_switch) and
    the pool thread running a stream times them into that stream's trace buffer."""
    cdef Stream st
    tracing_begin(tracer)
    for st in list(_live):
        pthread_mutex_lock(&st.s.lock)
        st.s.trace = 1
        st.s.trace_size = 0
        pthread_mutex_unlock(&st.s.lock)


def trace_stop():
    """Stop recording; drain every stream; return [(stream index, [event tuples])].

    Each drain waits for what its stream had when the drain began, never for what other
    threads keep enqueueing (stream_drain). Then every live stream stops recording, those made
    meanwhile and those a KeyboardInterrupt left undrained included: a stream made after
    tracing_end starts with trace_on 0, and a task still running finds its stream's flag
    cleared under the lock and writes nothing (_trace_add), so no buffer grows after this."""
    cdef Stream st
    cdef trace_event_t* buf
    cdef trace_event_t* ev
    cdef Py_ssize_t i, size
    out = []
    try:
        for st in list(_live):
            st._drain()
    finally:
        tracing_end()
        streams = list(_live)
        for st in streams:
            pthread_mutex_lock(&st.s.lock)
            st.s.trace = 0
            pthread_mutex_unlock(&st.s.lock)
    for st in streams:
        # Take the buffer under the lock, then build Python objects after unlocking: the GIL is
        # never taken while a stream lock is held (docs/threading.md).
        pthread_mutex_lock(&st.s.lock)
        buf = <trace_event_t*>st.s.trace_buf
        size = st.s.trace_size
        st.s.trace_buf = NULL
        st.s.trace_size = 0
        st.s.trace_cap = 0
        pthread_mutex_unlock(&st.s.lock)
        try:
            events = []
            for i in range(size):
                ev = buf + i
                events.append((ev.t0, ev.t1, ev.kind, ev.node, ev.label, ev.record))
        finally:
            free(buf)
        if events:
            out.append((st.index, events))
    return out


# cmd_exec(stream=s) reaches streams through this registration (nnc.cmd.command sits below this
# layer).
cmd_register_stream(Stream, Stream._enqueue_cmd)
