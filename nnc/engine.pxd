# nnc.Engine (docs/engine.md): MXNet's dependency engine on lanes of CPU streams. Its C
# state (vars, ops) is declared in nnc/engine_op.pxd.

from nnc.engine_op cimport engine_t, op_t
from nnc.worker cimport stream_t, stream_task_t


cdef enum:
    LANES_MAX = 64                      # bound on an engine's lane streams


cdef class Engine:
    cdef engine_t* e                    # shared with its vars and in-flight ops (a reference)
    cdef readonly bint naive            # ops run synchronously in push (MXNet's NaiveEngine)
    cdef readonly bint closed
    # Lanes: this engine's CPU streams, made up front (a stream costs no thread), so a push
    # never makes Python objects while it changes state. Host only (GIL).
    cdef list _lanes
    cdef stream_t* lane_s[LANES_MAX]
    cdef long long lane_tail[LANES_MAX]  # seq of the last op pushed on each lane
    cdef int n_lanes
    cdef void** cand                    # push scratch: the ops a push depends on
    cdef Py_ssize_t cap_cand
    cdef stream_task_t* tasks           # push scratch: the tasks it enqueues
    cdef Py_ssize_t cap_tasks
    cdef int n_vars
    cdef object _last_cfn               # the last C fn pushed (a CFUNC), and its address
    cdef size_t _last_addr
    cdef long long _stamp               # bumped by 2 per _vars call: var_t.stamp values
    cdef dict _streams                  # caller's streams used since the last wait_all
    cdef dict _buffers                  # (device, lo, hi) -> [var, vars it overlaps]
    cdef list _recording                # entries of the active record() region, or None

    cdef int _commit(self, op_t* op, tuple reads, tuple muts, object stream) except -1
    cdef int _pick_lane(self, Py_ssize_t nc) noexcept
    cdef int _check_var(self, object v, str what) except -1
    cdef tuple _vars(self, object read, object mutate)
    cdef object _check_stream(self, object stream)
    cdef int _finish_push(self, object stream) except -1
    cdef list _buffer(self, object tensor)
    cdef bint _drain(self, double limit) except -1
