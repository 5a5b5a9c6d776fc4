# CPU streams and signals (nnc.stream.stream) on the worker pool's queues (nnc.stream.worker,
# worker.pxd declares the C state: stream_t, stream_task_t, signal records).

from nnc.tensor.tensor cimport Tensor
from nnc.stream.worker cimport stream_t, stream_task_t, signal_record_t


cdef enum:
    STAGE_SIZE = 64                     # tasks staged by the host per hand-over (Stream.push)


# The device half of a GPU stream ("gpu:N"): nnc.cuda subclasses it and fills the registry
# (stream_register_device) when imported, so this layer never imports nnc.cuda. A Stream whose
# _device is set hands it every task, emit and wait; its stream_t keeps only the failures (it
# never has queued tasks, so it costs the pool nothing).
cdef class DeviceStream:
    cdef int push(self, Stream owner, stream_task_t* task) except -1
    cdef int emit(self, Stream owner, Signal sig) except -1
    cdef int wait_signal(self, Stream owner, Signal sig) except -1
    cdef int drain(self, Stream owner, double timeout) except -1    # 1 done, 0 timed out
    cdef int query(self) except -1


cdef class Stream:
    cdef stream_t* s
    # Tasks pushed but not yet handed to the worker: host side only, guarded by the GIL.
    # Invariant: empty whenever the host is not inside a run's enqueue loop (kick() empties it).
    cdef stream_task_t stage[STAGE_SIZE]
    cdef Py_ssize_t stage_size
    cdef object _scheduler              # nnc.coro.Scheduler, made on first use, or None
    cdef readonly str kind              # "cpu" or "gpu:N"
    cdef readonly int index             # creation number, names the worker thread and track
    cdef object __weakref__             # nnc.stream.stream._live holds streams weakly
    cdef DeviceStream _device           # None for "cpu"; the CUDA stream for "gpu:N"

    cdef int push(self, stream_task_t* task, bint wake=*) except -1
    cdef int kick(self) except -1


cdef class Signal:
    cdef signal_record_t* latest        # the last emit enqueued, or NULL if never emitted
    cdef readonly str kind
    cdef object _device                 # None for "cpu"; the CUDA event (nnc.cuda) for "gpu:N"


cdef int stream_emit(Stream s, Signal sig, bint wake=*) except -1
cdef int stream_wait_signal(Stream s, Signal sig, bint wake=*) except -1
cdef int signal_reserve(Signal sig) except -1
cdef int signal_set(Signal sig) noexcept
cdef int stream_store_count(Stream s, Tensor count, long long value, bint wake=*) except -1
cdef int stream_add_error(Stream s, str where, object exc) except -1
# For nnc.stream.waiting (host waits on signals, asyncio futures):
from nnc.base.core cimport timeout_seconds
cdef int stream_move_errors(Stream src, Stream dst) except -1
