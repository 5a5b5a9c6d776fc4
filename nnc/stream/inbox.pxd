from cpython.object cimport PyObject

from nnc.base.sync cimport pthread_cond_t, pthread_mutex_t


# One posted wake-up on its way to an inbox. Made with the GIL (inbox_message), delivered
# without it (inbox_deliver), turned back into a Python object by Inbox.take.
ctypedef struct inbox_msg_t:
    void* box                           # the inbox_t it goes to (holds one of its refs)
    PyObject* item                      # owned reference: what take() returns
    inbox_msg_t* next                   # the next message in the inbox's list


# The C state of an Inbox, shared with the messages in flight; freed when refs drops to 0.
# Everything below lock is guarded by it.
ctypedef struct inbox_t:
    pthread_mutex_t lock
    pthread_cond_t cond                 # signalled when a message arrives
    inbox_msg_t* head                   # delivered messages, oldest first; NULL when empty
    inbox_msg_t* tail                   # last delivered message; valid only if head != NULL
    int refs                            # the Inbox object (until dealloc) + messages in flight
    int closed                          # the Inbox object is gone: deliveries are dropped


cdef class Inbox:
    cdef inbox_t* b


cdef inbox_msg_t* inbox_message(Inbox box, object item) except NULL
cdef void inbox_deliver(void* msg) noexcept nogil
cdef void inbox_discard(void* msg) noexcept
