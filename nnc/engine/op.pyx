"""The C state of nnc.Engine: vars, ops and the engine's shared state, and running one op.

MXNet: ThreadedVar and OprBlock (src/engine/threaded_engine.h), reshaped around lock-free
successor lists: an op is made and recycled by the host, waits on one earlier op at a time
(op_park), runs once on a pool thread when ready (op_job, or op_run on a stream or inline),
releases the ops waiting for it and is handed back on its engine's retired list. nnc.engine.engine
builds the Engine (push, wait, record) on this; docs/engine.md, "Who owns what", says which
thread touches which field under which lock.
"""

import traceback

from nnc.base.core import EngineError

from cpython.object cimport PyObject
from libc.stdlib cimport free, malloc, realloc
from posix.stdlib cimport posix_memalign
from libc.limits cimport LLONG_MAX
from libc.string cimport memset

from nnc.base.core cimport error_repr
from nnc.cmd.command cimport PyObject_Call
from nnc.base.sync cimport pthread_mutex_lock, pthread_mutex_unlock
from nnc.stream.worker cimport (
    pool_job_t, pool_submit, record_done, record_new, record_release, signal_lock,
)
from nnc.base.parallel cimport nnc_stream_context_t


cdef extern from "Python.h":
    void Py_IncRef(PyObject*)           # NULL-safe, and no temporary reference in between
    void Py_DecRef(PyObject*)


# The error an op fails with when even building its EngineError runs out of memory: made ahead,
# so that the failure is still stored on its vars and seen by wait_all.
cdef object _fail_fallback = EngineError(
    "an engine op failed (out of memory while recording its error)")


# -- workers: running one op ----------------------------------------------------------------

cdef str _op_label(op_t* op):
    """The op's name for errors: its name=, else what it runs (built defensively: the fn is
    user code, and so are its attributes and repr)."""
    if op.name != NULL:
        return <str>op.name
    if op.kind == OP_C:
        return f"C function at {<size_t>op.cfn:#x}"
    if op.fn != NULL:
        fn = <object>op.fn
        try:
            name = getattr(fn, "__qualname__", None)
            if type(name) is str and name:
                return name
        except BaseException:
            pass
        return error_repr(fn)
    return "op"


cdef inline void _op_mark_failed(op_t* op) noexcept nogil:
    """op failed or was skipped (before it completes): ops reading what it wrote skip."""
    if not op.failed:
        op.failed = 1
        nnc_engine_add(&(<engine_t*>op.engine).n_failed, 1)


cdef void _op_fail(op_t* op, object exc, str what) noexcept:
    """Store a failure on op (GIL held): an EngineError naming it, chained to ``exc``, also
    recorded for wait_all. Never raises, whatever ``exc`` is (any object a user raised: its
    attributes, repr and notes are user code)."""
    cdef engine_t* e = <engine_t*>op.engine
    if exc is not None:
        _drop_frames(exc)
    try:
        err = EngineError(f"engine op {_op_label(op)!r} failed: {what}")
        err.__cause__ = exc
    except BaseException:
        err = None                      # out of memory: still a failure, below
    if err is None:
        # The preallocated error (nothing to allocate) keeps the failure visible to readers
        # and to wait_all.
        err = _fail_fallback
    op.err = <PyObject*>err
    Py_IncRef(op.err)
    _op_mark_failed(op)
    try:
        (<list>e.errors).append(err)
    except BaseException:
        pass                            # out of memory: the vars still carry it


cdef void _drop_frames(object exc) noexcept:
    """The error is kept by C (the op), out of the cycle collector's sight, and a traceback's
    frames reach their locals and callers (the engine, in the naive engine the pushing code): a
    cycle nobody would free. So the cause keeps where it failed as text, in a note, and drops
    the frames. Best effort: an exception that refuses a note still fails its op."""
    try:
        tb = exc.__traceback__
        if tb is None:
            return
        exc.__traceback__ = None
        where = "engine op traceback:\n" + "".join(traceback.format_tb(tb))
        del tb
        if hasattr(exc, "add_note"):
            exc.add_note(where)
        else:                           # Python 3.10: __notes__ is just an attribute
            exc.__notes__ = [*getattr(exc, "__notes__", ()), where]
    except BaseException:
        pass


cdef void _op_rc(op_t* op, int rc) noexcept with gil:
    _op_fail(op, None, f"{'C function' if op.kind == OP_C else 'backend'} returned {rc}")


cdef void _op_py(op_t* op) noexcept with gil:
    try:
        PyObject_Call(op.fn, op.args, NULL)
    except BaseException as exc:
        _op_fail(op, exc, error_repr(exc))


cdef void _op_skip(op_t* op, op_t* bad) noexcept with gil:
    """op reads a var whose last write failed: it does not run, and carries that error."""
    Py_IncRef(bad.err)
    op.err = bad.err
    _op_mark_failed(op)


cdef void _engine_free(engine_t* e) noexcept with gil:
    """The last reference to e is gone (no Engine, var or op uses it): free the ops it holds."""
    cdef op_t* op = e.retired
    cdef op_t* nxt
    e.retired = NULL
    while op != NULL:                   # orphaned by the Engine: nobody reclaims them now
        nxt = op.next
        _op_reclaim_refs(op)
        _op_clear(op)
        free(op.buf)
        free(op.deps)
        free(op)
        op = nxt
    _limbo_drain(e, LLONG_MAX)          # nothing runs any more: all of it is recyclable
    op = e.free_ops
    while op != NULL:
        nxt = op.next
        free(op.buf)
        free(op.deps)
        free(op)
        op = nxt
    e.free_ops = NULL
    trash_flush(e)
    free(e.trash)
    Py_DecRef(e.errors)
    free(e)


cdef void engine_unref(engine_t* e) noexcept nogil:
    if nnc_engine_add(&e.refs, -1) == 0:
        _engine_free(e)


cdef enum:
    GO_ON_MAX = 64                      # ops a pool job runs in a row before it queues the next


cdef inline void _op_exec(op_t* op, void* context) noexcept nogil:
    """Skip op if a var it reads carries an error, else run it; then publish its vars'
    versions. Takes the GIL only for Python work and failures."""
    cdef op_t* bad = NULL
    cdef int i, rc = 0
    if op.n_muts:                       # the host wrote it at push: fetched while op runs
        nnc_engine_prefetch(op.muts, 1)
    # Every dep completed before op runs, and a failed dep bumped n_failed before that (the
    # acquire that saw it complete makes the bump visible here): 0 means none of them failed.
    if nnc_engine_state(&(<engine_t*>op.engine).n_failed):
        for i in range(op.n_reads):
            if op.deps[i].failed:
                bad = op.deps[i]
                break
    if bad != NULL:
        _op_skip(op, bad)
    elif op.kind == OP_C:
        rc = op.cfn(op.arg)
        if rc != 0:
            _op_rc(op, rc)
    elif op.kind == OP_CMD_C:
        rc = op.c_exec(op.param, op.io, op.n_in, op.io + op.n_in, op.n_out, context)
        if rc != 0:
            _op_rc(op, rc)
    elif op.kind == OP_PY:
        _op_py(op)
    _op_publish(op)


cdef inline void _op_publish(op_t* op) noexcept nogil:
    """op's writes are complete (run, failed or skipped): its vars reach their versions."""
    cdef int i
    for i in range(op.n_muts):
        nnc_engine_publish(&op.muts[i].version, op.mut_version[i])


cdef bint op_is_done(op_t* op) noexcept nogil:
    return nnc_engine_peek(<void**>&op.succ) == OP_DONE


cdef inline bint _succ_link(op_t* w, edge_t* edge) noexcept nogil:
    """Push edge onto w's successor list (lock-free); False if w completed first (the list is
    OP_DONE), and then nobody will release edge's op for w."""
    cdef void* head = nnc_engine_peek(<void**>&w.succ)
    while head != OP_DONE:
        edge.next = <edge_t*>head
        if nnc_engine_cas(<void**>&w.succ, &head, edge):
            return True
    return False


cdef inline void _record_finish(signal_record_t* r) noexcept nogil:
    """Mark an op's record done (waking its waiters) and drop the completer's reference."""
    pthread_mutex_lock(&signal_lock)
    record_done(r)
    pthread_mutex_unlock(&signal_lock)
    record_release(r)


cdef inline op_t* _wait_dep(op_t* op, int i) noexcept nogil:
    """The i-th dep op parks on: the newest first, then the others in push-time order."""
    return op.deps[op.newest if i == 0 else (i - 1 if i <= op.newest else i)]


cdef bint op_park(op_t* op) noexcept nogil:
    """Make op wait for the next earlier op it depends on that is not done yet (the newest
    comes first: the one likely to finish last, and once it has, the others mostly have too);
    True once parked there, False when nothing it waits for is left (it may run).
    Called by the host at push, then by each completer that releases it: one thread at a time,
    which owns wait_at meanwhile (the exchange that took op's edge orders the previous owner's
    writes before it). Each dependency is looked at about once. (MXNet registers an op with
    every var's queue at once; one registration at a time costs a completer one edge per op
    instead of one per dependency, about 20 in RandSumExpr.)"""
    cdef op_t* w
    cdef int i = op.wait_at, k
    op.wait_edge.op = op
    if i > 0:
        # A completer goes through the rest, most of them done by now: ask for all their
        # lines at once rather than one miss after the other.
        for k in range(i, op.n_wait):
            nnc_engine_prefetch(&_wait_dep(op, k).succ, 1)
    while i < op.n_wait:
        w = _wait_dep(op, i)
        nnc_engine_own(&w.succ)         # read, and written if w is still running
        # Before the edge is published: once it is, w's completer may park op elsewhere at
        # once. w is done by the time op is released, or is skipped now.
        op.wait_at = i + 1
        if _succ_link(w, &op.wait_edge):
            return True
        i += 1
    return False


cdef op_t* _op_complete(op_t* op, bint go_on) noexcept nogil:
    """op ran: mark it done, release what waits for it and hand it back to the host. A
    released op parks on the next op it waits for, or is ready: dispatched on the pool, except
    the one that waited longest when ``go_on``, which is returned for the caller to run next (a
    chain then stays on one thread, with no hand-over). op must not be touched once it is on
    the retired list: the host may recycle it."""
    cdef engine_t* e = <engine_t*>op.engine
    cdef edge_t* edge = <edge_t*>nnc_engine_take(<void**>&op.succ, OP_DONE)
    cdef edge_t* nxt_edge
    cdef op_t* ready
    cdef op_t* keep = NULL
    cdef signal_record_t* record = NULL
    cdef void* head
    # The edges belong to the waiting ops (and to op, for its record): read each one's next
    # before releasing its op, which may park it elsewhere at once.
    while edge != NULL:
        # The edge lies in the waiting op, whose parker (the host, mostly) wrote it last, and
        # op_park writes it again.
        nnc_engine_own(edge)
        nxt_edge = edge.next
        if nxt_edge != NULL:
            nnc_engine_own(nxt_edge)
        ready = edge.op
        if ready == NULL:
            record = op.record          # op_record gave the completer a reference
        elif not op_park(ready):
            if not go_on:
                pool_submit(&ready.job)
            else:
                # Keep the one parked first (the list is last-in first-out): the oldest,
                # most likely on the critical path; the others go to the pool. Keeping the
                # newest made the busy RandSumExpr about 4 % slower.
                if keep != NULL:
                    pool_submit(&keep.job)
                keep = ready
        edge = nxt_edge
    head = nnc_engine_peek(<void**>&e.retired)
    while True:
        op.next = <op_t*>head
        if nnc_engine_cas(<void**>&e.retired, &head, op):
            break
    if record != NULL:                  # after retiring: a woken host finds op reclaimable
        _record_finish(record)
    if nnc_engine_state(&e.orphan):
        _reclaim_orphan(e)
    engine_unref(e)                     # the op's reference; ops it released hold their own
    return keep


cdef void op_run(void* p) noexcept nogil:
    """Run one op as a stream task (TASK_CALL) or inline (naive engine), with its context."""
    cdef op_t* op = <op_t*>p
    _op_exec(op, op.context)
    _op_complete(op, False)


cdef void op_job(pool_job_t* job, nnc_stream_context_t* context) noexcept nogil:
    """Run one ready op as a pool job (the thread's own scratch context), then, up to
    GO_ON_MAX in a row, an op its completion made ready (MXNet runs a released op on the
    completing thread too, when it can)."""
    cdef op_t* op = <op_t*>job
    cdef int n = 0
    while op != NULL:
        _op_exec(op, context)
        n += 1
        op = _op_complete(op, n < GO_ON_MAX)


cdef void _reclaim_orphan(engine_t* e) noexcept with gil:
    """The Engine is gone: nobody else will reclaim what this worker just retired."""
    reclaim(e)
    trash_flush(e)


# -- host: op lifetime (GIL held) ----------------------------------------------------------

cdef void _trash(engine_t* e, PyObject* obj) noexcept:
    """Queue one reference for trash_flush (NULL: nothing)."""
    cdef PyObject** grown
    cdef Py_ssize_t cap
    if obj == NULL:
        return
    if e.n_trash == e.cap_trash:
        cap = max(64, 2 * e.cap_trash)
        grown = <PyObject**>realloc(e.trash, sizeof(PyObject*) * cap)
        if grown == NULL:
            Py_DecRef(obj)      # out of memory: drop it now (cannot lose it)
            return
        e.trash = grown
        e.cap_trash = cap
    e.trash[e.n_trash] = obj
    e.n_trash += 1


cdef void trash_flush(engine_t* e) noexcept:
    """Drop the queued references. Each may run Python code, which may push (and queue more):
    the loop takes them one at a time from the end, so it sees those too."""
    cdef PyObject* obj
    while e.n_trash > 0:
        e.n_trash -= 1
        obj = e.trash[e.n_trash]
        Py_DecRef(obj)


cdef void _op_reclaim_refs(op_t* op) noexcept:
    """Drop what a completed op needed only to run: its vars and Python references (its deps
    hold no reference: see limbo)."""
    cdef engine_t* e = <engine_t*>op.engine
    cdef int i
    op.n_deps = 0
    for i in range(op.n_muts):
        _trash(e, op.muts[i].owner)
    op.n_muts = 0
    _trash(e, op.fn)
    _trash(e, op.args)
    _trash(e, op.keep)
    _trash(e, op.name)
    op.fn = op.args = op.keep = op.name = NULL


cdef void _op_clear(op_t* op) noexcept:
    _trash(<engine_t*>op.engine, op.err)
    op.err = NULL
    record_release(op.record)
    op.record = NULL


cdef void op_unref(engine_t* e, op_t* op) noexcept:
    """Drop a reference; at 0 op goes to the limbo (later ops may still read its state
    and its error until they run)."""
    op.refs -= 1
    if op.refs == 0:
        op.next = NULL
        if e.limbo_tail != NULL:
            e.limbo_tail.next = op
        else:
            e.limbo_head = op
        e.limbo_tail = op


cdef void _limbo_drain(engine_t* e, long long safe) noexcept:
    """Recycle the oldest unreferenced ops whose mark is at most ``safe``, a push number up to
    which every op is reclaimed (completed): none of those still parks on them or reads their
    failure. The limbo is in the order refs reached 0, roughly that of marks: an op whose mark
    is not passed yet holds back the ones behind it for a while, never for good."""
    cdef op_t* op = e.limbo_head
    while op != NULL and op.mark <= safe:
        e.limbo_head = op.next
        _op_clear(op)
        op.next = e.free_ops
        e.free_ops = op
        op = e.limbo_head
    if op == NULL:
        e.limbo_tail = NULL


cdef bint reclaim(engine_t* e) noexcept:
    """Take back the ops workers finished: drop their run-time references and the in-flight
    one; True if there were any. Python references dropped here may run arbitrary code (a
    __del__), which is why this runs before a push touches any state, never in the middle."""
    cdef op_t* op
    cdef op_t* nxt
    if nnc_engine_peek(<void**>&e.retired) == NULL:
        return False
    op = <op_t*>nnc_engine_take(<void**>&e.retired, NULL)
    while op != NULL:
        nxt = op.next
        _live_unlink(e, op)
        _op_reclaim_refs(op)
        op_unref(e, op)
        op = nxt
    _limbo_drain(e, e.pushed if e.live_head == NULL else e.live_head.seq - 1)
    return True


cdef inline void _live_unlink(engine_t* e, op_t* op) noexcept:
    if op.live_prev != NULL:
        op.live_prev.live_next = op.live_next
    else:
        e.live_head = op.live_next
    if op.live_next != NULL:
        op.live_next.live_prev = op.live_prev
    else:
        e.live_tail = op.live_prev
    op.live_prev = op.live_next = NULL


cdef op_t* op_new(engine_t* e, Py_ssize_t slots) except NULL:
    """A clean op (refs 1, no record yet) with room for ``slots`` pointers in buf."""
    cdef op_t* op = e.free_ops
    cdef void** buf
    cdef op_t** deps
    cdef int cap_deps
    if op != NULL:
        e.free_ops = op.next
        if op.next != NULL:             # the next push's op: its lines come meanwhile
            nnc_engine_prefetch(op.next, sizeof(op_t))
    else:
        if posix_memalign(<void**>&op, 64, sizeof(op_t)) != 0:
            raise MemoryError()
        op.buf = NULL
        op.buf_cap = 0
        op.deps = NULL
        op.cap_deps = 0
    buf = op.buf
    slots = max(slots, 8)
    if op.buf_cap < slots:
        buf = <void**>realloc(op.buf, sizeof(void*) * slots)
        if buf == NULL:
            op.next = e.free_ops
            e.free_ops = op
            raise MemoryError()
        op.buf_cap = slots
    slots = op.buf_cap
    deps, cap_deps = op.deps, op.cap_deps
    memset(op, 0, sizeof(op_t))
    op.buf = buf
    op.buf_cap = slots
    op.deps, op.cap_deps = deps, cap_deps
    op.job.run = op_job
    op.refs = 1
    op.engine = e
    return op


cdef int op_reserve_deps(op_t* op, Py_ssize_t n) except -1:
    """Room for n ops in op.deps, at least doubled, 16 at least (host, before a push changes
    any state)."""
    cdef op_t** grown
    if n > op.cap_deps:
        n = max(n, 16, 2 * op.cap_deps)
        grown = <op_t**>realloc(op.deps, sizeof(op_t*) * n)
        if grown == NULL:
            raise MemoryError()
        op.deps, op.cap_deps = grown, <int>n
    return 0


cdef signal_record_t* op_record(op_t* op) except? NULL:
    """op's signal record, done once op has completed (host, GIL): made on first demand (a
    wait_for_var, wait_all, or a stream= op waiting for op); NULL if op is done already.
    MemoryError if none can be made."""
    cdef signal_record_t* r = op.record
    if r != NULL:
        return r
    if op_is_done(op):
        return NULL
    r = record_new()
    if r == NULL:
        raise MemoryError()
    r.refs = 2                          # op's, and its completer's (not published yet)
    op.record = r
    op.record_edge.op = NULL
    if not _succ_link(op, &op.record_edge):
        _record_finish(r)               # op completed meanwhile, without seeing the record
    return r


cdef int readers_add(engine_t* e, var_t* v, op_t* op) except -1:
    """Append op to v's readers; when the list is full, first drop readers already done (a
    var read many times between writes keeps only the readers a write must still wait for)."""
    cdef Py_ssize_t i, n = 0
    cdef void* tmp
    cdef void** grown
    if v.n_readers == v.cap_readers:
        for i in range(v.n_readers):     # partition: running readers first, done ones after
            if not op_is_done(<op_t*>v.readers[i]):
                tmp = v.readers[n]
                v.readers[n] = v.readers[i]
                v.readers[i] = tmp
                n += 1
        for i in range(n, v.n_readers):
            op_unref(e, <op_t*>v.readers[i])
        v.n_readers = n
    if v.n_readers == v.cap_readers:
        grown = <void**>realloc(v.readers, sizeof(void*) * max(8, 2 * v.cap_readers))
        if grown == NULL:
            raise MemoryError()
        v.readers = grown
        v.cap_readers = max(8, 2 * v.cap_readers)
    op.refs += 1
    v.readers[v.n_readers] = op
    v.n_readers += 1
    return 0


cdef void op_discard(engine_t* e, op_t* op) noexcept:
    """Give back an op that was never committed (its push failed validation late)."""
    _op_reclaim_refs(op)
    _op_clear(op)
    op.next = e.free_ops
    e.free_ops = op


cdef void op_abort(op_t* op, object exc) noexcept:
    """An op whose tasks could not be enqueued (out of memory, interpreter exiting): it fails
    with ``exc`` and completes at once, so ops depending on it are skipped, never stuck."""
    _op_fail(op, exc, f"could not be enqueued: {error_repr(exc)}")
    _op_publish(op)
    _op_complete(op, False)


cdef engine_t* engine_new() except NULL:
    cdef engine_t* e = <engine_t*>malloc(sizeof(engine_t))
    if e == NULL:
        raise MemoryError()
    memset(e, 0, sizeof(engine_t))
    errors = []
    e.errors = <PyObject*>errors
    Py_IncRef(e.errors)
    e.refs = 1
    return e


cdef class EngineVar:
    """A dependency tag of one :class:`Engine` (MXNet's VarHandle): ops name the vars they read
    and mutate. Made by :meth:`Engine.new_var` or :meth:`Engine.var_of`."""

    def __cinit__(self):
        memset(&self.v, 0, sizeof(var_t))
        self.v.owner = <PyObject*>self
        self.e = NULL

    def __init__(self):
        raise TypeError("make vars with Engine.new_var()")

    @property
    def version(self):
        """Writes to this var completed so far (MXNet's var version)."""
        return nnc_engine_load(&self.v.version)

    @property
    def deleted(self):
        """True once delete_var was pushed for it."""
        return bool(self.v.deleted)

    def __repr__(self):
        state = " deleted" if self.v.deleted else ""
        return f"<nnc.EngineVar #{self.id} version={self.version}{state}>"

    def __dealloc__(self):
        cdef engine_t* e = self.e
        cdef Py_ssize_t i
        if e == NULL:
            return
        if self.v.last_writer != NULL:
            op_unref(e, <op_t*>self.v.last_writer)
        for i in range(self.v.n_readers):
            op_unref(e, <op_t*>self.v.readers[i])
        free(self.v.readers)
        self.v.readers = NULL
        self.v.n_readers = 0
        self.v.last_writer = NULL
        self.e = NULL
        engine_unref(e)
