# Stream workspaces: scratch memory C backends reuse run after run (NNC keeps BLAS and cuDNN
# workspaces per stream context: ccv_nnc_stream_context_get_workspace). The lowest layer: every
# runner owns contexts (a stream, a graph's sequential runs, a synchronous cmd_exec) and C
# backends of any layer read them; nothing here imports nnc.

# What a C backend gets as its ``context``. Owned by a stream (nnc.stream.worker's stream_t), a
# graph (its sequential runs) or one synchronous cmd_exec; only the thread running the backend
# touches it, and only through nnc_workspace. Freed with its owner (nnc_context_free).
ctypedef struct nnc_stream_context_t:
    void* workspace                     # aligned to 64 bytes; NULL until first asked for
    size_t workspace_size               # bytes usable at workspace


# ``size`` bytes of context's scratch memory (grown as needed, never shrunk; contents are not
# kept across a growth), or NULL if out of memory or context is NULL.
cdef void* nnc_workspace(void* context, size_t size) noexcept nogil
cdef void nnc_context_free(nnc_stream_context_t* context) noexcept nogil

# The calling thread's own context (with the GIL), for synchronous calls such as cmd_exec: one
# per thread, reused call after call, freed when the thread ends. A backend runs to completion
# before the thread's next call, so calls never share it at once.
cdef nnc_stream_context_t* thread_context() except NULL
