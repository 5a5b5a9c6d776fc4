"""Frozen memory: weights that can never change, and the packed copies kernels keep of them.

A kernel that reads its weights in its own layout (packed panels, transformed Winograd tiles)
packs them on every call unless it may keep the packed copy, and it may keep one only if the
weights can never change. Frozen memory is memory nnc allocates itself (64-byte aligned), fills
once and hands to NumPy only read-only: every ndarray over it has for base a
:class:`FrozenMemory`, whose buffer is read-only, so NumPy refuses to make any of them (or any
view of them) writable, and a tensor over it is read-only, which no command may write
(nnc.cmd.command.cmd_validate). ``Tensor.freeze()`` and ``Graph.freeze()`` move weights into it
(docs/design.md, "Constant weights").

A process-wide registry holds every live block of frozen memory, sorted by address, and per
block the packed copies made of it, keyed by (data pointer, format key, bytes). Kernels call
:c:func:`constant_pack` without the GIL on any thread: a binary search under one mutex finds
the block ``data`` lies in (NULL when none: the caller packs into scratch per call), and the
first caller of a key makes the copy outside the mutex while later ones wait for it. A block
and its packed copies are freed together when its FrozenMemory goes (the last array or tensor
over it), after any copy being made of it is finished.
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_FillInfo
from libc.stdint cimport uintptr_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memmove, memset
from posix.unistd cimport usleep

import numpy as np

from nnc.base.core import TensorError
from nnc.base.device import ArrayInterface

from nnc.base.sync cimport (
    pthread_cond_broadcast, pthread_cond_init, pthread_cond_t, pthread_cond_wait, pthread_create,
    pthread_join, pthread_mutex_init, pthread_mutex_lock, pthread_mutex_t, pthread_mutex_unlock,
    pthread_t,
)

cdef extern from "<stdlib.h>" nogil:
    void* aligned_alloc(size_t alignment, size_t size)

# Packed copies sit on transparent huge pages. Kernels stream them once a run (ResNet-50's 7x7
# layers: 8 MB of weights for 49 pixels; Inception-V3's 3x3 and 1x1 maps at 75x75: 57 MB for 9
# pixels or 1), and with 4 KiB pages each panel spans dozens of pages whose TLB misses stall the
# loads and stop the kernel's and the hardware's prefetches (measured: 83 -> 91 GFLOP/s on
# ResNet-50's 7x7 layers, cold; Inception-V3 at 75x75 12-15 % faster once its copies of 64 KiB
# to 2 MiB sat on huge pages too).
# - A copy of 2 MiB or more starts on a 2 MiB boundary and asks for huge pages over its whole
#   2 MiB spans (the tail stays in small pages, so no memory is wasted).
# - A copy of 64 KiB up to 2 MiB is carved from a shared *chunk*: NNC_CHUNK bytes on a 2 MiB
#   boundary, huge pages asked for over all of it, copies placed one after another on 4 KiB
#   boundaries. A chunk's pages are faulted in as copies touch them, so a chunk costs its used
#   part rounded up to one huge page, not its size. A chunk keeps a count of the copies in it
#   and is freed when the last one goes, except the newest, which is reused from its start
#   (copies of freed models do not pile up; a chunk some copies still hold keeps its holes).
# - Smaller copies: aligned_alloc (a huge page would be mostly empty, and they are cached).
# Where the system has no such pages (or THP is "never"), madvise fails or does nothing.
cdef extern from *:
    """
    #include <pthread.h>
    #include <stdlib.h>
    #ifdef __linux__
    #include <sys/mman.h>
    #endif
    enum { NNC_HUGE_PAGE = 2 << 20, NNC_CHUNK_MIN = 64 << 10, NNC_CHUNK = 32 << 20,
           NNC_CHUNK_ALIGN = 4096 };
    static int nnc_huge_pages = 1;

    /* A chunk of copies. Invariant (under nnc_chunk_mutex): used <= NNC_CHUNK; live is the
     * number of copies in [lo, lo + used) not yet freed; the list's head is the newest. */
    typedef struct nnc_chunk {
        struct nnc_chunk* next;
        char* lo;
        size_t used;
        size_t live;
    } nnc_chunk_t;
    static nnc_chunk_t* nnc_chunks = NULL;
    static pthread_mutex_t nnc_chunk_mutex = PTHREAD_MUTEX_INITIALIZER;

    static void nnc_huge_advise(void* mem, size_t nbytes) {
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        madvise(mem, nbytes / NNC_HUGE_PAGE * NNC_HUGE_PAGE, MADV_HUGEPAGE);
    #else
        (void)mem; (void)nbytes;
    #endif
    }

    static void* nnc_chunk_alloc(size_t nbytes) {
        nnc_chunk_t* c;
        void* mem = NULL;
        nbytes = (nbytes + NNC_CHUNK_ALIGN - 1) / NNC_CHUNK_ALIGN * NNC_CHUNK_ALIGN;
        pthread_mutex_lock(&nnc_chunk_mutex);
        c = nnc_chunks;
        if (c == NULL || NNC_CHUNK - c->used < nbytes) {
            c = (nnc_chunk_t*)calloc(1, sizeof(nnc_chunk_t));
            if (c == NULL || posix_memalign(&mem, NNC_HUGE_PAGE, NNC_CHUNK) != 0) {
                free(c);
                pthread_mutex_unlock(&nnc_chunk_mutex);
                return NULL;
            }
            nnc_huge_advise(mem, NNC_CHUNK);
            c->lo = (char*)mem;
            c->next = nnc_chunks;
            nnc_chunks = c;
        }
        mem = c->lo + c->used;
        c->used += nbytes;
        c->live++;
        pthread_mutex_unlock(&nnc_chunk_mutex);
        return mem;
    }

    static void* nnc_packed_alloc(size_t nbytes) {
        void* mem = NULL;
        if (nbytes < NNC_CHUNK_MIN || !nnc_huge_pages)
            return aligned_alloc(64, (nbytes + 63) / 64 * 64);
        if (nbytes < NNC_HUGE_PAGE)
            return nnc_chunk_alloc(nbytes);
        if (posix_memalign(&mem, NNC_HUGE_PAGE, nbytes) != 0)
            return NULL;
        nnc_huge_advise(mem, nbytes);
        return mem;
    }

    /* Frees what nnc_packed_alloc returned: a copy in a chunk leaves it (the chunk goes with
     * its last copy, the newest one is reused), any other is free()d. */
    static void nnc_packed_free(void* mem) {
        nnc_chunk_t** link;
        nnc_chunk_t* c;
        if (mem == NULL)
            return;
        pthread_mutex_lock(&nnc_chunk_mutex);
        for (link = &nnc_chunks; (c = *link) != NULL; link = &c->next) {
            if ((char*)mem >= c->lo && (char*)mem < c->lo + NNC_CHUNK) {
                if (--c->live == 0) {
                    if (c == nnc_chunks) {
                        c->used = 0;
                    } else {
                        *link = c->next;
                        free(c->lo);
                        free(c);
                    }
                }
                pthread_mutex_unlock(&nnc_chunk_mutex);
                return;
            }
        }
        pthread_mutex_unlock(&nnc_chunk_mutex);
        free(mem);
    }

    /* In a forked child only the forking thread lives: a lock another thread held at the fork
     * would never be released (the list is consistent: it changes in a few stores). */
    static void nnc_chunk_after_fork(void) {
        pthread_mutex_init(&nnc_chunk_mutex, NULL);
    }

    /* Chunks alive, copies in them, bytes carved from them (for tests). */
    static void nnc_chunk_stats(size_t* chunks, size_t* live, size_t* used) {
        nnc_chunk_t* c;
        *chunks = *live = *used = 0;
        pthread_mutex_lock(&nnc_chunk_mutex);
        for (c = nnc_chunks; c != NULL; c = c->next) {
            (*chunks)++;
            *live += c->live;
            *used += c->used;
        }
        pthread_mutex_unlock(&nnc_chunk_mutex);
    }
    """
    int nnc_huge_pages
    void* nnc_packed_alloc(size_t nbytes) nogil
    void nnc_packed_free(void* mem) nogil
    void nnc_chunk_stats(size_t* chunks, size_t* live, size_t* used) nogil
    void nnc_chunk_after_fork() nogil
    int pthread_atfork(void (*prepare)() noexcept nogil, void (*parent)() noexcept nogil,
                       void (*child)() noexcept nogil) nogil

cdef enum:
    _ALIGN = 64


# One packed copy. Invariant: mem is NULL iff making (its maker is filling it outside the mutex).
ctypedef struct packed_t:
    packed_t* next
    const void* data
    unsigned long long key
    size_t nbytes
    void* mem
    int making


# One block of frozen memory. Invariant: in _ranges iff its FrozenMemory is alive; lo is 64-byte
# aligned and [lo, hi) its exported bytes (empty for a 0-byte block).
ctypedef struct frozen_t:
    char* lo
    char* hi
    packed_t* packed                    # its packed copies, newest first
    size_t packed_bytes                 # sum of their nbytes (made ones only)
    int making                          # copies of it being made now (its free waits for 0)


# The registry: _count blocks sorted by lo in _ranges[0:_count] (_cap allocated). Every field,
# and every packed_t and frozen_t reachable from it, is read and written under _mutex only.
cdef pthread_mutex_t _mutex
cdef pthread_cond_t _made               # broadcast whenever a copy is made or given up
cdef frozen_t** _ranges = NULL
cdef Py_ssize_t _count = 0
cdef Py_ssize_t _cap = 0
pthread_mutex_init(&_mutex, NULL)
pthread_cond_init(&_made, NULL)


cdef void _after_fork_child() noexcept nogil:
    """In a forked child: the registry's and the chunks' locks as new (a thread that held one
    at the fork is gone; what they guard changes only in short critical sections)."""
    pthread_mutex_init(&_mutex, NULL)
    pthread_cond_init(&_made, NULL)
    nnc_chunk_after_fork()


pthread_atfork(NULL, NULL, _after_fork_child)


cdef inline size_t _rounded(size_t nbytes) noexcept nogil:
    """An aligned_alloc size: a positive multiple of the alignment."""
    return ((nbytes if nbytes else 1) + _ALIGN - 1) // _ALIGN * _ALIGN


cdef Py_ssize_t _find(const void* p) noexcept nogil:
    """Index of the block p lies in, or -1 (under _mutex)."""
    cdef Py_ssize_t lo = 0, hi = _count, mid
    cdef const char* c = <const char*>p
    while lo < hi:                      # the first block whose lo is above p
        mid = (lo + hi) // 2
        if _ranges[mid].lo <= c:
            lo = mid + 1
        else:
            hi = mid
    if lo > 0 and c < _ranges[lo - 1].hi:
        return lo - 1
    return -1


cdef bint constant_contains(const void* p) noexcept nogil:
    cdef bint found
    pthread_mutex_lock(&_mutex)
    found = _find(p) >= 0
    pthread_mutex_unlock(&_mutex)
    return found


cdef const void* constant_pack(const void* data, unsigned long long key, size_t nbytes,
                               constant_pack_f fn, void* arg) noexcept nogil:
    cdef Py_ssize_t i
    cdef frozen_t* r
    cdef packed_t* p
    cdef packed_t** link
    cdef void* mem
    pthread_mutex_lock(&_mutex)
    while True:
        i = _find(data)
        if i < 0:
            pthread_mutex_unlock(&_mutex)
            return NULL
        r = _ranges[i]
        p = r.packed
        while p != NULL and not (p.data == data and p.key == key and p.nbytes == nbytes):
            p = p.next
        if p == NULL:
            break
        if not p.making:
            mem = p.mem
            pthread_mutex_unlock(&_mutex)
            return mem
        pthread_cond_wait(&_made, &_mutex)  # another thread is making it: wait, look again
    # First use of this key: claim it, then make it outside the mutex (packing takes as long
    # as a pass over the weights; lookups of other blocks must not wait for it).
    p = <packed_t*>calloc(1, sizeof(packed_t))
    if p == NULL:
        pthread_mutex_unlock(&_mutex)
        return NULL
    p.data = data
    p.key = key
    p.nbytes = nbytes
    p.making = 1
    p.next = r.packed
    r.packed = p
    r.making += 1
    pthread_mutex_unlock(&_mutex)
    mem = nnc_packed_alloc(_rounded(nbytes))
    if mem != NULL:
        fn(arg, mem)
    pthread_mutex_lock(&_mutex)
    r.making -= 1
    if mem == NULL:
        link = &r.packed                # give the claim up: a waiter will try again
        while link[0] != p:
            link = &link[0].next
        link[0] = p.next
        free(p)
    else:
        p.mem = mem
        p.making = 0
        r.packed_bytes += nbytes
    pthread_cond_broadcast(&_made)
    pthread_mutex_unlock(&_mutex)
    return mem


cdef int _register(frozen_t* r) except -1:
    """Insert r into the registry, keeping it sorted (with the GIL: FrozenMemory's init)."""
    global _ranges, _cap, _count
    cdef frozen_t** grown
    cdef Py_ssize_t i
    pthread_mutex_lock(&_mutex)
    if _count == _cap:
        grown = <frozen_t**>realloc(_ranges, sizeof(frozen_t*) * (_cap * 2 if _cap else 64))
        if grown == NULL:
            pthread_mutex_unlock(&_mutex)
            raise MemoryError()
        _ranges = grown
        _cap = _cap * 2 if _cap else 64
    i = _count
    while i > 0 and _ranges[i - 1].lo > r.lo:
        _ranges[i] = _ranges[i - 1]
        i -= 1
    _ranges[i] = r
    _count += 1
    pthread_mutex_unlock(&_mutex)
    return 0


cdef void _unregister(frozen_t* r) noexcept nogil:
    """Remove r from the registry once no copy of it is being made; free its packed copies."""
    global _count
    cdef Py_ssize_t i
    cdef packed_t* p
    cdef packed_t* nxt
    pthread_mutex_lock(&_mutex)
    while r.making:
        pthread_cond_wait(&_made, &_mutex)
    for i in range(_count):
        if _ranges[i] == r:
            memmove(&_ranges[i], &_ranges[i + 1], sizeof(frozen_t*) * (_count - i - 1))
            _count -= 1
            break
    p = r.packed
    r.packed = NULL
    pthread_mutex_unlock(&_mutex)
    while p != NULL:
        nxt = p.next
        nnc_packed_free(p.mem)
        free(p)
        p = nxt


cdef class FrozenMemory:
    """A block of frozen memory: read-only to NumPy, freed with the packed copies made of it
    when the last array or tensor over it goes. Made by nnc only (``frozen_array``)."""

    def __init__(self):
        raise TypeError("frozen memory is made by nnc.tensor.constant.frozen_array")

    def __dealloc__(self):
        cdef frozen_t* r = <frozen_t*>self._range
        if r == NULL:
            return
        self._range = NULL
        with nogil:
            _unregister(r)              # may wait for a copy another thread is making
        free(r.lo)
        free(r)

    def __getbuffer__(self, Py_buffer* buf, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("frozen memory is read-only: weights made constant never change "
                              "(copy them to change a copy)")
        PyBuffer_FillInfo(buf, self, self._lo, self._nbytes, 1, flags)

    def __releasebuffer__(self, Py_buffer* buf):
        pass

    @property
    def nbytes(self):
        return self._nbytes

    def __reduce__(self):
        raise TypeError("frozen memory is not pickled itself; pickle the array or tensor over it")


cdef FrozenMemory _frozen_new(Py_ssize_t nbytes):
    cdef FrozenMemory m = FrozenMemory.__new__(FrozenMemory)
    cdef frozen_t* r = <frozen_t*>calloc(1, sizeof(frozen_t))
    if r == NULL:
        raise MemoryError()
    r.lo = <char*>aligned_alloc(_ALIGN, _rounded(nbytes))
    if r.lo == NULL:
        free(r)
        raise MemoryError()
    r.hi = r.lo + nbytes
    try:
        _register(r)
    except BaseException:
        free(r.lo)
        free(r)
        raise
    m._range = r
    m._lo = r.lo
    m._nbytes = nbytes
    return m


cdef object frozen_array(object array, object dtype=None):
    cdef FrozenMemory m
    src = np.asarray(array) if dtype is None else np.asarray(array, dtype=dtype)
    if src.dtype.hasobject:
        raise TensorError(f"frozen memory holds numbers, not {src.dtype} objects")
    m = _frozen_new(src.nbytes)
    # Filled through a writable ndarray that lives only for this copy (NumPy does the strides
    # and the cast); every array handed out afterwards has the read-only buffer for base.
    fill = np.asarray(ArrayInterface({
        "version": 3, "shape": src.shape, "typestr": src.dtype.str,
        "data": (<uintptr_t>m._lo, False), "strides": None,
    }, m))
    fill[...] = src
    del fill
    return np.frombuffer(m, dtype=src.dtype, count=src.size).reshape(src.shape)


def _huge_pages(on=None):
    """Whether packed copies of 64 KiB or more go on huge pages (for A/B runs; copies made
    before keep theirs); returns the previous setting."""
    global nnc_huge_pages
    old = bool(nnc_huge_pages)
    if on is not None:
        nnc_huge_pages = 1 if on else 0
    return old


def _chunk_stats():
    """``(chunks, copies, bytes)``: the chunks packed copies of 64 KiB to 2 MiB are carved
    from, the copies in them, the bytes carved (for tests)."""
    cdef size_t chunks, live, used
    nnc_chunk_stats(&chunks, &live, &used)
    return int(chunks), int(live), int(used)


def frozen_copy(array, dtype=None):
    """A read-only, C-contiguous ndarray in new frozen memory holding a copy of ``array``
    (cast to ``dtype`` when given). ``nnc.Tensor(frozen_copy(a))`` is a frozen tensor made
    with one copy; the memory lives as long as an array or tensor over it."""
    return frozen_array(array, dtype)


cdef const void* _data_of(object x) except? NULL:
    """The first element's address of a Tensor (data_ptr) or an ndarray."""
    if isinstance(x, np.ndarray):
        return <const void*><uintptr_t>x.__array_interface__["data"][0]
    ptr = getattr(x, "data_ptr", None)
    if not isinstance(ptr, int):
        raise TensorError(f"expected an nnc.Tensor or a NumPy ndarray, not {type(x).__name__}")
    if getattr(x, "device", "cpu") != "cpu":
        return NULL                     # device memory is never frozen
    return <const void*><uintptr_t>ptr


def frozen_block(x):
    """``(address, bytes, packed bytes)`` of the block of frozen memory that ``x`` (a Tensor or
    an ndarray) lies in, or None when it is not frozen: accounting (Graph.memory) counts each
    block once however many tensors view it."""
    cdef const void* p = _data_of(x)
    cdef Py_ssize_t i
    cdef frozen_t* r
    pthread_mutex_lock(&_mutex)
    i = _find(p) if p != NULL else -1
    if i < 0:
        pthread_mutex_unlock(&_mutex)
        return None
    r = _ranges[i]
    out = (<uintptr_t>r.lo, <Py_ssize_t>(r.hi - r.lo), <Py_ssize_t>r.packed_bytes)
    pthread_mutex_unlock(&_mutex)
    return out


def is_frozen(x):
    """True if ``x`` (a Tensor or an ndarray) lies in frozen memory (a view of it too)."""
    return frozen_block(x) is not None


def frozen_nbytes(x):
    """Bytes of the frozen memory block ``x`` lies in; 0 when it is not frozen."""
    b = frozen_block(x)
    return 0 if b is None else b[1]


def packed_nbytes(x):
    """Bytes of the packed copies kernels keep of the frozen block ``x`` lies in; 0 when none
    (or when it is not frozen)."""
    b = frozen_block(x)
    return 0 if b is None else b[2]


def frozen_count():
    """How many blocks of frozen memory are alive (each freed with its last array or tensor)."""
    pthread_mutex_lock(&_mutex)
    n = _count
    pthread_mutex_unlock(&_mutex)
    return n


# -- the test hook: constant_pack called from C, as a kernel would ------------------------------

cdef extern from *:
    """
    #define nnc_atomic_add_int(p, v) __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
    """
    int atomic_add_int "nnc_atomic_add_int"(int*, int) nogil


ctypedef struct _pack_arg_t:
    const unsigned char* src
    size_t nbytes
    size_t available                    # bytes of frozen memory from src on
    int calls                           # how many times the pack function ran (atomic)
    unsigned int sleep_us               # widens the window in which other threads ask


ctypedef struct _pack_job_t:
    const void* data
    unsigned long long key
    _pack_arg_t* arg
    const void* got


cdef void _pack_negated(void* arg, void* dst) noexcept nogil:
    """A trivial packing: the bytes from src, each inverted (zero past the frozen memory)."""
    cdef _pack_arg_t* a = <_pack_arg_t*>arg
    cdef unsigned char* d = <unsigned char*>dst
    cdef size_t i
    atomic_add_int(&a.calls, 1)
    if a.sleep_us:
        usleep(a.sleep_us)
    memset(d, 0, a.nbytes)
    for i in range(a.nbytes if a.nbytes < a.available else a.available):
        d[i] = ~a.src[i]


cdef void* _pack_thread(void* job) noexcept nogil:
    cdef _pack_job_t* j = <_pack_job_t*>job
    j.got = constant_pack(j.data, j.key, j.arg.nbytes, _pack_negated, j.arg)
    return NULL


def _pack_test(x, unsigned long long key, size_t nbytes, int threads=1, double sleep_s=0.0):
    """Call constant_pack for ``x``'s data from ``threads`` C threads at once, each without
    the GIL, packing ``nbytes`` inverted bytes. Returns (addresses each call returned, 0 for
    NULL; times the pack function ran; the packed bytes, or None). For tests only."""
    cdef const void* p = _data_of(x)
    cdef _pack_arg_t arg
    cdef _pack_job_t* jobs
    cdef pthread_t* tids
    cdef int i, started = 0
    if threads < 1:
        raise ValueError("threads must be >= 1")
    b = frozen_block(x)
    memset(&arg, 0, sizeof(arg))
    arg.src = <const unsigned char*>p
    arg.nbytes = nbytes
    arg.available = 0 if b is None else <size_t>(b[0] + b[1] - <uintptr_t>p)
    arg.sleep_us = <unsigned int>(sleep_s * 1e6)
    jobs = <_pack_job_t*>calloc(threads, sizeof(_pack_job_t))
    tids = <pthread_t*>calloc(threads, sizeof(pthread_t))
    if jobs == NULL or tids == NULL:
        free(jobs)
        free(tids)
        raise MemoryError()
    try:
        for i in range(threads):
            jobs[i].data = p
            jobs[i].key = key
            jobs[i].arg = &arg
        with nogil:
            for i in range(threads):
                if pthread_create(&tids[i], NULL, _pack_thread, &jobs[i]) != 0:
                    break
                started += 1
            for i in range(started):
                pthread_join(tids[i], NULL)
        if started < threads:
            raise OSError(f"could start only {started} of {threads} threads")
        got = [<uintptr_t>jobs[i].got for i in range(threads)]
        packed = None
        if jobs[0].got != NULL:
            packed = (<const char*>jobs[0].got)[:nbytes]
        return got, arg.calls, packed
    finally:
        free(jobs)
        free(tids)
