"""Stream workspaces: the scratch memory a C backend gets through its ``context`` argument.

NNC: ccv_nnc_stream_context_get_workspace. See workspace.pxd for the struct and who owns it, and
docs/threading.md ("Stream workspaces"). C programs reach it through the C ABI's
``nnc_stream_workspace`` (nnc.capi.capi).
"""

import threading

from libc.stdlib cimport free


cdef extern from "<stdlib.h>" nogil:
    void* aligned_alloc(size_t alignment, size_t size)


cdef void* nnc_workspace(void* context, size_t size) noexcept nogil:
    cdef nnc_stream_context_t* c = <nnc_stream_context_t*>context
    cdef size_t rounded
    if c == NULL:
        return NULL
    if size <= c.workspace_size and c.workspace != NULL:
        return c.workspace
    # Round up to 64 bytes (aligned_alloc wants a multiple of the alignment) and grow by half
    # again, so a backend asking for slightly more each run does not reallocate every run.
    rounded = ((size + size // 2 + 63) // 64) * 64
    free(c.workspace)
    c.workspace = aligned_alloc(64, rounded)
    c.workspace_size = rounded if c.workspace != NULL else 0
    return c.workspace


cdef void nnc_context_free(nnc_stream_context_t* context) noexcept nogil:
    free(context.workspace)
    context.workspace = NULL
    context.workspace_size = 0


cdef class _ThreadContext:
    """The calling thread's context for synchronous calls (cmd_exec): kept in a
    threading.local, so repeated calls reuse one workspace, freed when the thread ends."""
    cdef nnc_stream_context_t c

    def __dealloc__(self):
        nnc_context_free(&self.c)


_local = threading.local()


cdef nnc_stream_context_t* thread_context() except NULL:
    cdef _ThreadContext holder
    try:
        holder = _local.context
    except AttributeError:
        holder = _ThreadContext()
        _local.context = holder
    return &holder.c
