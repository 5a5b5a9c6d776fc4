from nnc.stream cimport stream_t


cdef class Worker:
    cdef stream_t* s                    # NULL once the thread has exited; guarded by the GIL
    cdef readonly int index             # the stream's creation number
    cdef readonly object thread         # the threading.Thread running _run
