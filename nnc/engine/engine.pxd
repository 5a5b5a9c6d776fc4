# nnc.Engine (docs/engine.md): MXNet's dependency engine on nnc's worker pool (ready ops are
# pool jobs; stream= ops go on the caller's CPU stream). Its C state (vars, ops) is declared in
# nnc/engine/op.pxd.

from nnc.engine.op cimport engine_t, op_t, var_t
from nnc.stream.worker cimport stream_task_t


cdef class Engine:
    # Shared with its vars and in-flight ops (a reference); NULL until __init__ ran (every
    # method refuses then: _check_usable).
    cdef engine_t* e
    cdef bint _naive                    # ops run synchronously in push (MXNet's NaiveEngine)
    cdef bint _closed
    cdef int generation                 # the pool's fork generation when made (_check_usable)
    # References to e taken ahead for the next ops pushed (one each, dropped by the worker that
    # completes it): one atomic add per 64 pushes on a line the workers keep writing.
    cdef int credit
    cdef stream_task_t* tasks           # push scratch: the tasks it enqueues
    cdef Py_ssize_t cap_tasks
    cdef int n_vars
    # The last C fn pushed (a CFUNC) and its address, nonzero; _last_addr is 0 while none is
    # cached (then _last_cfn means nothing: it starts as None, which push must not take for it).
    cdef object _last_cfn
    cdef size_t _last_addr
    cdef long long _stamp               # bumped by 2 per _vars call: var_t.stamp values
    cdef dict _buffers                  # (device, lo, hi) -> [var, vars it overlaps]
    # Push scratch: the vars of the push being made, read= then mutate= (_take_vars).
    cdef var_t** _vars
    cdef Py_ssize_t _cap_vars
    cdef list _recording                # entries of the active record() region, or None

    cdef int push_c(self, size_t cfn, size_t carg, var_t** vars, Py_ssize_t nr,
                    Py_ssize_t nm) except -1
    cdef int _commit(self, op_t* op, var_t** vars, Py_ssize_t nr, Py_ssize_t nm,
                     object stream) except -1
    cdef int _check_var(self, object v, str what) except -1
    cdef int _take_vars(self, object reads, object muts) except -1
    cdef int _check_ptrs(self, var_t** vars, Py_ssize_t nr, Py_ssize_t nm) except -1
    cdef object _check_stream(self, object stream)
    cdef int _naive_wait(self, op_t* op) except -1
    cdef int _finish_push(self, object stream) except -1
    cdef list _buffer(self, object tensor)
    cdef bint _drain(self, double limit) except -1
