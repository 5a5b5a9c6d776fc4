"""MXNet's mutation-aware dependency engine on nnc's worker pool.

MXNet: include/mxnet/engine.h (NewVariable, PushAsync, WaitForVar, WaitForAll, DeleteVariable)
with ThreadedEngine's completion-time dispatch: an op is handed to the pool only once nothing it
depends on is running; until then it waits, linked into the successor list of one earlier op,
whose completion releases it (nnc/engine/op.pyx). Var state is updated at push time by the host
only (GIL held), so workers touch no var list and take no engine lock. docs/engine.md explains
the design, the error rule and who owns what.

One file of ~770 lines because it is one cdef class: Cython keeps a class's methods in its module,
and the Engine's push, wait and delete paths share its private state; the ops' C state and
their running are nnc/engine/op.pyx, recording into a graph nnc/engine/region_graph.py.
"""

import ctypes
import os
import weakref

from nnc.base.core import EngineError

from cpython.object cimport PyObject
from libc.stdlib cimport free, realloc
from libc.string cimport memset

from nnc.cmd.command cimport (
    BOUND_C, BOUND_DEVICE, BOUND_NONE, Backend, Cmd, cmd_bind, cmd_select, cmd_validate,
    nnc_bound_t, tensor_list,
)
from nnc.engine.op cimport (
    OP_C, OP_CMD_C, OP_NONE, OP_PY, EngineVar, engine_new, engine_t, engine_unref,
    nnc_engine_add, nnc_engine_set, op_abort, op_discard, op_new, op_park,
    op_record, op_reserve_deps, op_run, op_t, op_unref, readers_add, reclaim, trash_flush,
    var_t,
)
from nnc.stream.stream cimport Stream, timeout_seconds
from nnc.base.sync cimport pthread_mutex_lock, pthread_mutex_unlock, sched_yield
from nnc.tensor.tensor cimport Tensor, nnc_tensor_t
from nnc.stream.record cimport signal_record_t
from nnc.stream.waiting cimport record_wait
from nnc.stream.worker cimport (
    TASK_CALL, TASK_WAIT, mono_now, pool_generation, pool_refusing, pool_start, pool_submit,
    record_release, signal_lock, stream_check_not_worker, stream_drain, stream_enqueue,
    stream_t,
)
from nnc.base.parallel cimport thread_context


# A C function an op may run: int fn(void* arg), 0 on success (MXNet's PushAsync callbacks,
# reduced to what a C function needs). ctypes caches the type, so any
# ctypes.CFUNCTYPE(c_int, c_void_p) made elsewhere is this very class.
CFUNC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
cdef object _CFuncPtr = ctypes._CFuncPtr
cdef tuple _PTR_TYPES = (ctypes.c_void_p, ctypes.c_char_p, ctypes._Pointer)
cdef tuple _EMPTY = ()


cdef extern from "Python.h":
    void Py_IncRef(PyObject*)           # NULL-safe, and no temporary reference in between
    void Py_DecRef(PyObject*)


cdef inline EngineVar _new_var(Engine eng):
    cdef EngineVar v = EngineVar.__new__(EngineVar)
    nnc_engine_add(&eng.e.refs, 1)
    v.e = eng.e
    v.id = eng.n_vars
    eng.n_vars += 1
    return v


cdef object _c_address(object fn):
    """The function pointer a CFUNC holds, checked."""
    if type(fn) is not CFUNC:
        raise EngineError(f"a C fn must be an nnc.engine.engine.CFUNC (ctypes.CFUNCTYPE(c_int, "
                          f"c_void_p)), not {type(fn).__name__}")
    cdef size_t p = (<size_t*><size_t>ctypes.addressof(fn))[0]
    if p == 0:
        raise EngineError("a C fn is a NULL function pointer")
    return p


cdef size_t _c_arg(object arg) except? 0:
    """arg= as the void* a C fn gets: None, an int address, or a ctypes pointer."""
    if arg is None:
        return 0
    if type(arg) is int or (isinstance(arg, int) and not isinstance(arg, bool)):
        if arg < 0 or arg > 0xFFFFFFFFFFFFFFFF:
            raise EngineError(f"arg={arg} is not an address")
        return <size_t>arg
    if isinstance(arg, _PTR_TYPES):
        return ctypes.cast(arg, ctypes.c_void_p).value or 0
    raise EngineError(f"arg must be None, an int address or a ctypes pointer, not "
                      f"{type(arg).__name__}")


cdef object _var_seq(object seq, str what):
    """read= or mutate= as a list or tuple (itself when it is one: a push iterates it without
    running Python code in between, so no other thread can change it meanwhile)."""
    if type(seq) is tuple or type(seq) is list:
        return seq
    if isinstance(seq, EngineVar):
        raise EngineError(f"{what} must be a list of EngineVars, not one EngineVar")
    try:
        return tuple(seq)
    except TypeError:
        raise EngineError(f"{what} must be a list of EngineVars, not "
                          f"{type(seq).__name__}") from None


cdef inline void _dep_add(op_t* op, op_t* w, long long seq) noexcept:
    """Make w (NULL: none) a dep of op, pushed as ``seq``, unless it already is."""
    if w != NULL and w.mark != seq:
        w.mark = seq
        op.deps[op.n_deps] = w
        op.n_deps += 1


cdef inline int _newest(op_t** deps, int n) noexcept:
    """The index of the newest (highest push number) of n deps, 0 if none: the one an op
    parks on at push (op_park then goes through the others in order; a full sort cost more
    than it saved)."""
    cdef int i, best = 0
    for i in range(1, n):
        if deps[i].seq > deps[best].seq:
            best = i
    return best


cdef inline int _check_usable(Engine eng) except -1:
    """EngineError unless eng may be used here: its __init__ ran (an object made by
    Engine.__new__, or by a subclass whose __init__ skips Engine's, has no C state), and not in
    a process forked after it was made (its ops may be in flight on pool threads the child does
    not have: they never complete there, so waits would block for good). Inline, two plain C
    compares: every push runs it."""
    if eng.e == NULL:
        raise EngineError("this Engine is not initialised: its __init__ never ran (a "
                          "subclass's __init__ must call super().__init__())")
    if eng.generation != pool_generation():
        raise EngineError("this engine was made before the process forked; its ops may "
                          "be running on threads the child does not have: make a new "
                          "engine in the child")
    return 0


cdef class Engine:
    """MXNet's dependency engine: ``push`` ops tagged with the vars they read and mutate; they
    run in parallel on nnc's pool, in an order that respects read-after-write, write-after-read
    and write-after-write on every var (docs/engine.md)."""

    def __cinit__(self):
        self.e = NULL
        self.tasks = NULL
        self._vars = NULL

    def __init__(self, naive=False):
        if self.e != NULL:
            raise EngineError("Engine.__init__ called twice")
        env = os.environ.get("NNC_ENGINE", "")
        if env not in ("", "naive", "threaded"):
            raise EngineError(f"NNC_ENGINE={env!r}: expected 'naive' or 'threaded'")
        self._naive = bool(naive) or env == "naive"
        self._buffers = {}
        self._recording = None
        self.generation = pool_generation()
        if not self._naive:
            pool_start()
        self.e = engine_new()

    def __dealloc__(self):
        cdef engine_t* e = self.e
        free(self.tasks)
        free(self._vars)
        if e != NULL:
            self.e = NULL
            nnc_engine_add(&e.refs, -self.credit)   # never the last: the Engine's is left
            self.credit = 0
            nnc_engine_set(&e.orphan)
            reclaim(e)
            trash_flush(e)
            engine_unref(e)

    def __repr__(self):
        if self.e == NULL:
            return "<nnc.Engine not initialised>"
        kind = "naive" if self._naive else "threaded"
        return f"<nnc.Engine {kind}{' closed' if self._closed else ''}>"

    @property
    def naive(self):
        """True if ops run synchronously inside push (MXNet's NaiveEngine)."""
        _check_usable(self)
        return self._naive

    @property
    def closed(self):
        """True once close() ran: pushes are refused."""
        _check_usable(self)
        return self._closed

    cdef int _check_var(self, object v, str what) except -1:
        if not isinstance(v, EngineVar):
            raise EngineError(f"{what}: expected an EngineVar, not {type(v).__name__}")
        if (<EngineVar>v).e != self.e:
            if (<EngineVar>v).e == NULL:
                raise EngineError(f"{what}: {v!r} was not made by Engine.new_var (its "
                                  f"__init__ never ran)")
            raise EngineError(f"{what}: {v!r} belongs to another engine")
        if (<EngineVar>v).v.deleted:
            raise EngineError(f"{what}: {v!r} was deleted (delete_var)")
        return 0

    cdef int _commit(self, op_t* op, var_t** vars, Py_ssize_t nr, Py_ssize_t nm,
                     object stream) except -1:
        """Make op depend on the earlier ops of the vars it reads (vars[:nr]) and mutates
        (vars[nr:nr + nm], checked by _check_ptrs), update the vars, then dispatch it: on the
        pool once nothing it depends on is running (completion-time dispatch, MXNet's), on
        ``stream`` behind waits, or inline (naive). No Python code runs from here to the
        dispatch (nothing is allocated or released: the GIL alone keeps pushes from several
        threads apart, see docs/engine.md)."""
        cdef engine_t* e = self.e
        cdef Py_ssize_t need = nr, i, j, nw = 0
        cdef var_t* v
        cdef op_t* w
        cdef long long seq
        cdef stream_t* q = NULL
        cdef signal_record_t* r
        cdef stream_task_t* tgrown
        if e.pushed & 15 == 0:
            reclaim(e)                  # every 16 pushes: each take moves a shared line
        for i in range(nr, nr + nm):
            need += 1 + vars[i].n_readers
        try:
            op_reserve_deps(op, need)
            if stream is not None and need + 1 > self.cap_tasks:
                tgrown = <stream_task_t*>realloc(self.tasks,
                                                 sizeof(stream_task_t) * (need + 17))
                if tgrown == NULL:
                    raise MemoryError()
                self.tasks, self.cap_tasks = tgrown, need + 17
        except MemoryError:
            op_discard(e, op)           # nothing changed yet: the push simply fails
            raise
        e.pushed += 1
        seq = e.pushed
        op.seq = seq
        op.mark = seq
        op.muts = <var_t**>(op.buf + nr)   # callers made room for nr + 2 * nm
        op.mut_version = <long long*>(op.buf + nr + nm)
        # Dependencies (marked, not referenced: an op stays in its engine's limbo until
        # every op up to its mark is reclaimed): the last writer of each var read (RAW; their
        # errors skip op), then the last writer and the readers since of each var mutated
        # (WAW, WAR). op_park goes through them, skipping those done.
        for i in range(nr):
            _dep_add(op, <op_t*>vars[i].last_writer, seq)
        op.n_reads = op.n_deps
        for i in range(nr, nr + nm):
            v = vars[i]
            _dep_add(op, <op_t*>v.last_writer, seq)
            for j in range(v.n_readers):
                _dep_add(op, <op_t*>v.readers[j], seq)
        # What op may still wait for: all of them, newest first (op_park skips those done).
        op.newest = _newest(op.deps, op.n_deps)
        op.n_wait = op.n_deps
        if stream is not None:
            # A stream op keeps its place in the stream's order: enqueued now, behind waits
            # on the records of unfinished deps on other queues (stream order covers ours).
            q = (<Stream>stream).s
            try:
                for i in range(op.n_deps):
                    w = op.deps[i]
                    if w.queue == <void*>q:
                        continue
                    r = op_record(w)
                    if r == NULL:
                        continue
                    pthread_mutex_lock(&signal_lock)
                    r.refs += 1
                    pthread_mutex_unlock(&signal_lock)
                    memset(&self.tasks[nw], 0, sizeof(stream_task_t))
                    self.tasks[nw].bound.kind = TASK_WAIT
                    self.tasks[nw].record = r
                    self.tasks[nw].node = -1
                    self.tasks[nw].label = -1
                    nw += 1
            except MemoryError:
                for i in range(nw):
                    record_release(self.tasks[i].record)
                # nothing names op yet: give it back (its push number stays used, and its
                # deps keep the mark it gave them: they are recycled a little later)
                op_discard(e, op)
                raise
            op.n_wait = 0               # stream order and the waits replace parking
            memset(&self.tasks[nw], 0, sizeof(stream_task_t))
            self.tasks[nw].bound.kind = TASK_CALL
            self.tasks[nw].call = op_run
            self.tasks[nw].arg = op
            self.tasks[nw].node = -1
            self.tasks[nw].label = -1
            nw += 1
            op.context = &q.context
        elif op.kind == OP_CMD_C:
            op.context = thread_context()   # used only if it runs inline (naive)
        # The vars now name this op.
        for i in range(nr):
            readers_add(e, vars[i], op)
        for i in range(nr, nr + nm):
            v = vars[i]
            if v.last_writer != NULL:
                op_unref(e, <op_t*>v.last_writer)
            for j in range(v.n_readers):
                op_unref(e, <op_t*>v.readers[j])
            v.n_readers = 0
            op.refs += 1
            v.last_writer = op
            Py_IncRef(v.owner)
            v.writes += 1
            op.muts[op.n_muts] = v
            op.mut_version[op.n_muts] = v.writes
            op.n_muts += 1
        op.queue = q
        op.live_prev = e.live_tail
        if e.live_tail != NULL:
            e.live_tail.live_next = op
        else:
            e.live_head = op
        e.live_tail = op
        if self.credit == 0:
            nnc_engine_add(&e.refs, 64)
            self.credit = 64
        self.credit -= 1                # the op's reference to e, until it is handed back
        if q != NULL:
            try:
                stream_enqueue(q, self.tasks, nw)   # counts the tasks (NNC_DEBUG) once queued
            except BaseException as exc:
                for i in range(nw - 1):
                    record_release(self.tasks[i].record)
                op_abort(op, exc)
                raise
            return 0
        if op_park(op):
            # Something it depends on still runs (only the threaded engine, or a naive push
            # racing a push from another thread): that op's completer dispatches it.
            if self._naive:
                self._naive_wait(op)
            return 0
        if not self._naive:
            pool_submit(&op.job)
        elif op.kind == OP_PY:
            op_run(op)                  # naive, Python: keep the GIL (op_run takes it anyway)
        else:
            with nogil:
                op_run(op)
        return 0

    cdef int _take_vars(self, object reads, object muts) except -1:
        """Check read= and mutate= (lists or tuples of EngineVars) and list their C state in
        self._vars, reads first, for _commit. Runs no Python code but on errors."""
        cdef Py_ssize_t nr = len(reads), n = nr + len(muts), i = 0
        cdef var_t** grown
        if n > self._cap_vars:
            grown = <var_t**>realloc(self._vars, sizeof(var_t*) * max(16, 2 * n))
            if grown == NULL:
                raise MemoryError()
            self._vars, self._cap_vars = grown, max(16, 2 * n)
        for v in reads:
            self._check_var(v, "read")
            self._vars[i] = &(<EngineVar>v).v
            i += 1
        for v in muts:
            self._check_var(v, "mutate")
            self._vars[i] = &(<EngineVar>v).v
            i += 1
        return self._check_ptrs(self._vars, nr, n - nr)

    cdef int _check_ptrs(self, var_t** vars, Py_ssize_t nr, Py_ssize_t nm) except -1:
        """MXNet's rule on the vars of one push (vars[:nr] read, vars[nr:nr + nm] mutated):
        each of this engine and not deleted, none twice, none in both lists. Runs no Python
        code but on errors."""
        cdef long long stamp
        cdef Py_ssize_t i
        cdef var_t* v
        self._stamp += 2
        stamp = self._stamp
        for i in range(nr + nm):
            v = vars[i]
            what = "read" if i < nr else "mutate"
            if (<EngineVar>v.owner).e != self.e or v.deleted:
                self._check_var(<object>v.owner, what)    # raises, naming the problem
            if v.stamp == stamp:
                raise EngineError(f"{<object>v.owner!r} " + ("appears twice in read" if i < nr
                                                             else "is in both read and mutate"))
            if v.stamp == stamp + 1:
                raise EngineError(f"{<object>v.owner!r} appears twice in mutate")
            v.stamp = stamp if i < nr else stamp + 1
        return 0

    cdef object _check_stream(self, object stream):
        _check_usable(self)
        if self._closed:
            raise EngineError("the engine is closed: push refused")
        if pool_refusing():
            raise EngineError("the interpreter is exiting (nnc's exit hook stopped the worker "
                              "pool): push refused")
        if stream is None:
            return None
        if not isinstance(stream, Stream) or (<Stream>stream)._device is not None:
            raise EngineError(f"stream must be a CPU nnc.Stream, not {stream!r}")
        return stream

    cdef int _naive_wait(self, op_t* op) except -1:
        """A naive push whose op depends on one still running (pushed by another thread):
        the op's completer runs it on the pool; this push returns once it is done."""
        cdef signal_record_t* r
        pool_start()
        op.refs += 1
        try:
            r = op_record(op)
            if r != NULL:
                record_wait(r, -1)
        finally:
            op_unref(self.e, op)
        return 0

    cdef int _finish_push(self, object stream) except -1:
        trash_flush(self.e)
        if self._naive and stream is not None:
            stream_drain((<Stream>stream).s, -1)
        return 0

    def new_var(self):
        """A new var (MXNet: NewVariable); version 0, never written."""
        _check_usable(self)
        return _new_var(self)

    def push(self, fn, read=(), mutate=(), *, stream=None, name=None, priority=0, arg=None):
        """Run ``fn`` once every earlier op it conflicts with is done; returns at once.

        ``fn``: a Python callable ``fn()`` (runs under the GIL on a pool thread), or an
        :data:`CFUNC` called ``fn(arg)`` without the GIL (nonzero return: failure). ``read``
        and ``mutate``: the vars it reads and writes. ``stream``: a CPU Stream to run it on.
        ``priority`` is accepted for MXNet's signature; ops start as they become ready.
        """
        cdef op_t* op
        cdef int kind
        cdef size_t cfn = 0, carg = 0
        cdef Py_ssize_t nr, nm
        stream = self._check_stream(stream)
        reads, muts = _var_seq(read, "read"), _var_seq(mutate, "mutate")
        # The same C function again: skip the ctypes calls (_last_addr is 0 while nothing is
        # cached, when _last_cfn is None and a push of None must go on to be refused).
        if fn is self._last_cfn and self._last_addr != 0:
            cfn = self._last_addr
            carg = _c_arg(arg)
            kind = OP_C
        elif isinstance(fn, _CFuncPtr):
            cfn = _c_address(fn)
            carg = _c_arg(arg)
            kind = OP_C
            self._last_cfn, self._last_addr = fn, cfn
        elif callable(fn):
            if arg is not None:
                raise EngineError("arg= is for C functions; a Python fn takes no argument")
            kind = OP_PY
        else:
            raise EngineError(f"fn must be callable or an nnc.engine.engine.CFUNC, not "
                              f"{type(fn).__name__}")
        if name is not None and not isinstance(name, str):
            raise EngineError(f"name must be a str, not {type(name).__name__}")
        if not isinstance(priority, int):
            raise EngineError(f"priority must be an int, not {type(priority).__name__}")
        # From the check to the commit no Python code runs: the lists cannot change between.
        self._take_vars(reads, muts)
        nr, nm = len(reads), len(muts)
        op = op_new(self.e, nr + 2 * nm)   # room for _commit
        op.kind = kind
        op.cfn = <int (*)(void*) noexcept nogil>cfn
        op.arg = <void*>carg
        op.fn = <PyObject*>fn
        Py_IncRef(op.fn)
        if kind == OP_PY:
            op.args = <PyObject*>_EMPTY
            Py_IncRef(op.args)
        elif arg is not None:
            op.keep = <PyObject*>arg
            Py_IncRef(op.keep)
        if name is not None:
            op.name = <PyObject*>name
            Py_IncRef(op.name)
        self._commit(op, self._vars, nr, nm, stream)
        if self._recording is not None:
            self._recording.append(("c" if kind == OP_C else "py", fn, arg, tuple(reads),
                                    tuple(muts), name, <size_t>cfn, carg))
        self._finish_push(stream)

    cdef int push_c(self, size_t cfn, size_t carg, var_t** vars, Py_ssize_t nr,
                    Py_ssize_t nm) except -1:
        """push(fn, read=..., mutate=..., arg=carg) for a C function given as its address and
        vars given as their C state (vars[:nr] read, vars[nr:nr + nm] mutated; the caller
        keeps their EngineVars alive): nnc_engine_push, whose caller has no CFUNC object or
        Python list, skipping push's argument parsing. The op is the same OP_C op: same
        checks, dependencies and error rule."""
        cdef op_t* op
        cdef Py_ssize_t i
        if self._closed or self.e == NULL or self.generation != pool_generation() or \
                pool_refusing():
            self._check_stream(None)    # raises, naming the problem
        if cfn == 0:
            raise EngineError("a C fn is a NULL function pointer")
        self._check_ptrs(vars, nr, nm)
        op = op_new(self.e, nr + 2 * nm)   # room for _commit
        op.kind = OP_C
        op.cfn = <int (*)(void*) noexcept nogil>cfn
        op.arg = <void*>carg
        self._commit(op, vars, nr, nm, None)
        if self._recording is not None:
            self._recording.append(("c", None, None,
                                    tuple([<object>vars[i].owner for i in range(nr)]),
                                    tuple([<object>vars[i].owner for i in range(nr, nr + nm)]),
                                    None, cfn, carg))
        self._finish_push(None)
        return 0

    def var_of(self, tensor):
        """The var push_cmd uses for ``tensor``: one per root buffer (the memory its owner
        covers), shared by every view and every tensor over that buffer."""
        _check_usable(self)
        return self._buffer(tensor)[0]

    cdef list _buffer(self, object tensor):
        """[var, vars]: the buffer's own var and every var whose buffer overlaps it."""
        cdef Tensor t
        if not isinstance(tensor, Tensor):
            raise EngineError(f"expected an nnc.Tensor, not {type(tensor).__name__}")
        t = <Tensor>tensor
        key = (t.t.device, <size_t>t._lo, <size_t>t._hi)
        entry = self._buffers.get(key)
        if entry is not None:
            return entry
        v = _new_var(self)
        entry = [v, [v]]
        for (dev, lo, hi), other in self._buffers.items():
            if dev == key[0] and lo < key[2] and key[1] < hi:
                other[1].append(v)
                entry[1].append(other[0])
        buffers = self._buffers
        try:
            entry.append(weakref.ref(t._owner, lambda _, k=key, ent=entry:
                                     _forget(buffers, k, ent)))
        except TypeError:
            pass                        # an owner without weak references: kept for good
        self._buffers[key] = entry
        return entry

    def push_cmd(self, Cmd cmd not None, inputs=(), outputs=(), *, stream=None, name=None):
        """Run an nnc command as an op: it reads the vars of its inputs' buffers and mutates
        those of its outputs' (see var_of); C backends run without the GIL."""
        cdef list ins = tensor_list(inputs, "inputs"), outs = tensor_list(outputs, "outputs")
        cdef nnc_bound_t bound
        cdef op_t* op
        cdef Py_ssize_t nr, nm
        stream = self._check_stream(stream)
        for t in ins + outs:
            if t is not None and (<Tensor>t).t.device >= 0:
                raise EngineError(f"push_cmd runs CPU tensors only, not {t!r}")
        cmd_validate(cmd, ins, outs)
        b = cmd_select(cmd, ins, outs)
        mut_list = []
        for t in outs:
            if t is not None:
                for v in self._buffer(t)[1]:
                    if v not in mut_list:
                        mut_list.append(v)
        read_list = []
        for t in ins:
            if t is not None:
                for v in self._buffer(t)[1]:
                    if v not in mut_list and v not in read_list:
                        read_list.append(v)
        reads, muts = read_list, mut_list
        nr, nm = len(reads), len(muts)
        # _commit's room (nr + 2 * nm), then the bound tensors
        op = op_new(self.e, nr + 2 * nm + len(ins) + len(outs) + 1)
        try:
            call = cmd_bind(cmd, b, ins, outs, <nnc_tensor_t**>(op.buf + nr + 2 * nm), &bound)
            if bound.flags & BOUND_DEVICE:
                raise EngineError(f"{cmd.name}/{(<Backend>b).name} is a GPU backend")
            keep = (cmd, tuple(ins + outs), call)
            label = name if name is not None else cmd.name
            # Last, after any Python code: another thread may have deleted a var meanwhile.
            # Nothing is allocated from here to _commit, which reads the vars from the push
            # scratch (a collection could run a finalizer that pushes, and overwrites it).
            self._take_vars(reads, muts)
        except BaseException:
            op_discard(self.e, op)
            raise
        op.kind = (OP_CMD_C if bound.kind == BOUND_C else
                   OP_NONE if bound.kind == BOUND_NONE else OP_PY)
        op.c_exec = bound.c_exec
        op.param = bound.param
        op.io = bound.io
        op.n_in = bound.input_size
        op.n_out = bound.output_size
        op.keep = <PyObject*>keep
        Py_IncRef(op.keep)
        op.fn = bound.fn
        op.args = bound.args
        Py_IncRef(op.fn)
        Py_IncRef(op.args)
        op.name = <PyObject*>label
        Py_IncRef(op.name)
        self._commit(op, self._vars, nr, nm, stream)
        if self._recording is not None:
            self._recording.append(("cmd", cmd, (ins, outs), tuple(reads), tuple(muts), name))
        self._finish_push(stream)

    def delete_var(self, v, on_delete=None):
        """Delete ``v`` (MXNet: DeleteVariable): a write after every earlier reader and writer,
        which then calls ``on_delete()`` (memory recycling). Any later use of v is an error."""
        cdef op_t* op
        self._check_stream(None)
        self._check_var(v, "delete_var")
        if on_delete is not None and not callable(on_delete):
            raise EngineError(f"on_delete must be callable, not {type(on_delete).__name__}")
        reads, muts = (), (v,)
        label = f"delete_var({v!r})"
        self._take_vars(reads, muts)
        op = op_new(self.e, 2)             # room for _commit: one var mutated
        op.kind = OP_PY if on_delete is not None else OP_NONE
        if on_delete is not None:
            op.fn = <PyObject*>on_delete
            op.args = <PyObject*>_EMPTY
            Py_IncRef(op.fn)
            Py_IncRef(op.args)
        op.name = <PyObject*>label
        Py_IncRef(op.name)
        self._commit(op, self._vars, 0, 1, None)
        (<EngineVar>v).v.deleted = 1
        if self._recording is not None:
            self._recording.append(("delete", on_delete, None, reads, muts, "delete_var"))
        self._finish_push(None)

    def wait_for_var(self, v, timeout=None):
        """Block until every op pushed so far that mutates ``v`` is done (MXNet: WaitForVar);
        True, or False if ``timeout`` seconds passed first. Raises the EngineError ``v``
        carries if its last write failed (docs/engine.md, "Errors")."""
        cdef double limit = timeout_seconds(timeout, EngineError)
        cdef op_t* w
        cdef signal_record_t* r
        cdef bint done = True
        _check_usable(self)
        self._check_var(v, "wait_for_var")
        stream_check_not_worker("Engine.wait_for_var()")
        w = <op_t*>(<EngineVar>v).v.last_writer
        if w == NULL:
            return True
        w.refs += 1                     # another thread may push a write meanwhile
        try:
            r = op_record(w)            # NULL: done already
            if r != NULL:
                done = record_wait(r, limit)
            err = None
            if done and w.failed:
                err = <object>w.err if w.err != NULL else EngineError(
                    "an engine op failed (out of memory while recording its error)")
        finally:
            reclaim(self.e)
            op_unref(self.e, w)
            trash_flush(self.e)
        if err is not None:
            _raise_copy(err)
        return done

    cdef bint _drain(self, double limit) except -1:
        """Wait for every op pushed so far (ops pushed meanwhile by other threads are not
        waited for): while one is not reclaimed, wait for the newest such op, which ops mostly
        finish before, so that a drain of many ops wakes this thread a few times, not once per
        op. It wakes every ``span`` too, to reclaim what has finished meanwhile: reclaiming
        thousands of ops at once, at the end, would leave the pool's threads with nothing to
        do (the span doubles, up to 100 ms, each time nothing was done). The caller checked
        _check_usable (the declarations read self.e)."""
        cdef double end = mono_now() + limit, left = limit, span = 1e-3
        cdef long long last = self.e.pushed
        cdef op_t* h
        cdef signal_record_t* r
        cdef bint done = True
        stream_check_not_worker("Engine.wait_all()")
        while True:
            if not reclaim(self.e):
                span = min(2 * span, 0.1)
            trash_flush(self.e)
            h = self.e.live_head
            if h == NULL or h.seq > last:
                return True
            h = self.e.live_tail
            while h.seq > last:
                h = h.live_prev
            h.refs += 1                 # another thread may reclaim it while this one waits
            try:
                r = op_record(h)
                if r != NULL:
                    done = record_wait(r, span if limit < 0 else min(span, left))
                else:                   # done, and its completer about to retire it
                    done = True
                    with nogil:
                        sched_yield()
            finally:
                op_unref(self.e, h)
            if limit >= 0:
                left = max(0.0, end - mono_now())
                if not done and left == 0:
                    return False

    def wait_all(self, timeout=None):
        """Block until every op pushed so far is done (MXNet: WaitForAll); True, or False if
        ``timeout`` seconds passed first. Raises the first EngineError recorded since the last
        wait_all (and forgets the others)."""
        _check_usable(self)
        if not self._drain(timeout_seconds(timeout, EngineError)):
            return False
        errors = <list>self.e.errors
        if errors:
            first = errors[0]
            del errors[:]
            _raise_copy(first)
        return True

    def close(self):
        """Wait for everything pushed, then refuse new pushes. Errors stay for wait_all."""
        _check_usable(self)
        self._drain(-1)
        self._closed = True

    def record(self):
        """``with engine.record() as g:`` — the ops pushed inside also become nodes of the
        Graph g, with the edges their vars imply (transitively reduced): a dynamic program
        traced once, to schedule statically and replay (docs/engine.md, "Record")."""
        from nnc.engine.region_graph import Recording

        _check_usable(self)
        return Recording(self)

    def _record_start(self):
        _check_usable(self)
        if self._recording is not None:
            raise EngineError("this engine is already recording")
        self._recording = []

    def _record_stop(self):
        _check_usable(self)
        entries, self._recording = self._recording, None
        return entries if entries is not None else []


cdef int _raise_copy(object err) except -1:
    """Raise a copy of a stored error: raising the stored object would attach the caller's
    frames to it, and through them whatever they reference (the engine), in a cycle through
    C that the collector cannot see."""
    copy = EngineError(*err.args)
    raise copy from err.__cause__


def _forget(dict buffers, key, entry):
    """A buffer's owner died: no op can still use it (ops keep their tensors), so its var goes
    from the registry (and from the lists of the buffers it overlapped)."""
    if buffers.get(key) is entry:
        del buffers[key]
        for other in buffers.values():
            if entry[0] in other[1]:
                other[1].remove(entry[0])
