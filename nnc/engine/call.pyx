"""ENGINE_CALL: the command a recorded engine region's C ops become (nnc.engine.region_graph), so
that replaying the recorded graph calls each C function ``int fn(void* arg)`` from C without
the GIL, as the engine does, instead of through ctypes under the GIL.

The call is data: the node's one input is an int64 tensor ``[slot, serial, check]`` that
``call_tensor`` made (one command and one C backend serve every function). The function's
address and argument are not in the tensor: they sit in a table of calls, in the slot the
tensor names, with the serial of the tensor that owns the slot. When that tensor dies its slot's
serial is cleared (and the slot later reused under a new serial), so a tensor naming a slot
with another serial is refused: a byte copy of a dead tensor can never run the function it
named (freed by then) nor the one now in its slot. A copy of a live tensor names the same slot
and serial: it runs the same function with the same argument (the only call it can reach is
one the engine issued and still keeps alive). The check word (``slot ^ serial ^`` a random
per-process key) refuses tensors made by hand. The command's check refuses, when a node is
made, any tensor that does not name a live call; the C backend, which can also be called
directly (Backend.exec), refuses the same with NNC_INVALID. docs/engine.md, "Record".
"""

import secrets
import weakref

import numpy as np

from nnc.base.core import CommandError

from libc.stdlib cimport calloc

from nnc.base.core cimport NNC_64S, NNC_INVALID
from nnc.cmd.command cimport nnc_cmd_param_t, register_c_backend
from nnc.tensor.tensor cimport nnc_tensor_t

from nnc.cmd.command import register_command
from nnc.tensor.tensor import Tensor

ctypedef int (*call_f)(void*) noexcept nogil


# Sequentially consistent atomics: a call pins its slot, then reads the serial; a tensor's
# death clears the serial, then reads the pins. Each side sees the other's write, so a call
# that found its serial is waited for, and a call pinned after the clear finds no serial.
cdef extern from *:
    """
    static inline void nnc_call_add(int* p, int v) {
        __atomic_add_fetch(p, v, __ATOMIC_SEQ_CST);
    }
    static inline int nnc_call_pins(int* p) {
        return __atomic_load_n(p, __ATOMIC_SEQ_CST);
    }
    static inline unsigned long long nnc_call_serial(unsigned long long* p) {
        return __atomic_load_n(p, __ATOMIC_SEQ_CST);
    }
    static inline void nnc_call_set_serial(unsigned long long* p, unsigned long long v) {
        __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
    }
    static inline void* nnc_call_chunk(void** p) {
        return __atomic_load_n(p, __ATOMIC_ACQUIRE);
    }
    static inline void nnc_call_set_chunk(void** p, void* v) {
        __atomic_store_n(p, v, __ATOMIC_RELEASE);
    }
    """
    void nnc_call_add(int* p, int v) noexcept nogil
    int nnc_call_pins(int* p) noexcept nogil
    unsigned long long nnc_call_serial(unsigned long long* p) noexcept nogil
    void nnc_call_set_serial(unsigned long long* p, unsigned long long v) noexcept nogil
    void* nnc_call_chunk(void** p) noexcept nogil
    void nnc_call_set_chunk(void** p, void* v) noexcept nogil


# One call a call tensor names. serial: that of the live tensor owning the slot, 0 once it died
# (or never used); address and arg are written by the host (GIL) before the serial is
# published, and stay until the slot is reused, which waits for ``running`` to be 0.
ctypedef struct call_slot_t:
    unsigned long long serial
    size_t address
    size_t arg
    int running                         # _call's in progress on the slot (pinned)


cdef enum:
    CHUNK_BITS = 10                     # slots come in chunks of 1024, never moved or freed,
    CHUNK = 1 << CHUNK_BITS             # so a call reads its slot without a lock
    MAX_CHUNKS = 16384                  # at most 16M call tensors alive at once

cdef call_slot_t* _chunks[MAX_CHUNKS]   # published by the host (release), read by calls
# Host only (GIL): slots handed out so far, the free ones, the last serial issued, what each
# live slot keeps alive (the ctypes function and argument), and slots whose tensor died while
# a call on them ran (freed once no call is pinned).
cdef Py_ssize_t _n_slots = 0
cdef list _free = []
cdef unsigned long long _serial = 0
cdef dict _keep = {}
cdef list _draining = []

# The check word's key, random per process (set once at import, read-only after).
cdef unsigned long long _key = secrets.randbits(64)


cdef call_slot_t* _slot_of(unsigned long long idx) noexcept nogil:
    """The slot a call tensor names, or NULL if no such slot was ever handed out."""
    cdef call_slot_t* chunk
    if idx >= <unsigned long long>MAX_CHUNKS * CHUNK:
        return NULL
    chunk = <call_slot_t*>nnc_call_chunk(<void**>&_chunks[idx >> CHUNK_BITS])
    if chunk == NULL:
        return NULL
    return &chunk[idx & (CHUNK - 1)]


cdef int _call(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
               nnc_tensor_t** outputs, int output_size, void* context) noexcept nogil:
    cdef const unsigned long long* p
    cdef call_slot_t* s
    cdef int k, rc
    if input_size != 1 or inputs[0] == NULL:
        return NNC_INVALID
    for k in range(output_size):
        if outputs[k] != NULL:
            return NNC_INVALID
    if (inputs[0].datatype != NNC_64S or inputs[0].device != -1 or inputs[0].count != 3
            or not inputs[0].contiguous):
        return NNC_INVALID
    p = <const unsigned long long*>inputs[0].data
    if p[1] == 0 or p[2] != (p[0] ^ p[1] ^ _key):
        return NNC_INVALID
    s = _slot_of(p[0])
    if s == NULL:
        return NNC_INVALID
    nnc_call_add(&s.running, 1)         # pinned: the slot is not reused until unpinned
    if nnc_call_serial(&s.serial) != p[1]:
        nnc_call_add(&s.running, -1)    # its tensor died: whatever the slot holds, not its call
        return NNC_INVALID
    rc = (<call_f>s.address)(<void*>s.arg)
    nnc_call_add(&s.running, -1)
    return rc


cdef Py_ssize_t _take_slot() except -1:
    """A free slot's index (host, GIL): a recycled one, else the next fresh one."""
    global _n_slots
    cdef call_slot_t* chunk
    if _free:
        return _free.pop()
    if _n_slots >= <Py_ssize_t>MAX_CHUNKS * CHUNK:
        raise CommandError(f"ENGINE_CALL: {_n_slots} call tensors are alive, the most there "
                           f"can be")
    if _chunks[_n_slots >> CHUNK_BITS] == NULL:
        chunk = <call_slot_t*>calloc(CHUNK, sizeof(call_slot_t))
        if chunk == NULL:
            raise MemoryError()
        nnc_call_set_chunk(<void**>&_chunks[_n_slots >> CHUNK_BITS], chunk)
    _n_slots += 1
    return _n_slots - 1


cdef void _retire(Py_ssize_t idx) noexcept:
    """idx's tensor died and no call runs on it: free the slot, then drop what it kept (which
    may run any Python code, even call_tensor: the table is consistent by then)."""
    keep = _keep.pop(idx, None)
    _free.append(idx)
    del keep


cdef void _sweep() noexcept:
    """Free the slots whose tensor died while a call ran, once no call is pinned on them."""
    cdef Py_ssize_t i = 0, idx
    while i < len(_draining):
        idx = _draining[i]
        if nnc_call_pins(&_slot_of(idx).running) == 0:
            del _draining[i]
            _retire(idx)
        else:
            i += 1


def _release(Py_ssize_t idx):
    """A call tensor died (its array's finalizer): no tensor names its call any more, so its
    serial goes at once (copies of its bytes are refused from now on) and its slot is freed
    once no call runs on it."""
    cdef call_slot_t* s = _slot_of(idx)
    nnc_call_set_serial(&s.serial, 0)
    if nnc_call_pins(&s.running) == 0:
        _retire(idx)
    else:
        _draining.append(idx)


def call_tensor(address, arg, keep=None):
    """The read-only int64 tensor ``[slot, serial, check]`` of one recorded call of the C
    function at ``address`` (non-zero) with ``arg`` (an address or 0); ``keep``: objects that
    must live as long as the tensor (the ctypes function and argument the addresses came
    from)."""
    global _serial
    cdef Py_ssize_t idx
    cdef call_slot_t* s
    if not isinstance(address, int) or address <= 0 or not isinstance(arg, int) or arg < 0:
        raise CommandError(f"ENGINE_CALL needs a function address > 0 and an argument >= 0, "
                           f"not {address!r}, {arg!r}")
    if address >= 1 << 64 or arg >= 1 << 64:
        raise CommandError(f"ENGINE_CALL: {address!r}, {arg!r} are not 64-bit addresses")
    _sweep()
    idx = _take_slot()
    s = _slot_of(idx)
    s.address = <size_t>address
    s.arg = <size_t>arg
    _serial += 1
    a = np.array([idx, _serial, idx ^ _serial ^ _key], dtype=np.uint64).astype(np.int64)
    a.flags.writeable = False
    _keep[idx] = keep
    nnc_call_set_serial(&s.serial, _serial)     # after address and arg: now calls may run it
    weakref.finalize(a, _release, idx)
    return Tensor(a)


def _check(cmd, inputs, outputs):
    cdef call_slot_t* s
    if len(inputs) != 1 or any(o is not None for o in outputs):
        raise CommandError("ENGINE_CALL takes one input (its call tensor) and no outputs")
    a = None if inputs[0] is None else inputs[0].numpy()
    if a is not None and a.dtype == np.int64 and a.shape == (3,):
        idx, serial, check = (int(x) & 0xFFFFFFFFFFFFFFFF for x in a)
        s = _slot_of(idx)
        if (serial != 0 and check == idx ^ serial ^ _key and s != NULL
                and nnc_call_serial(&s.serial) == serial):
            return
    raise CommandError("ENGINE_CALL runs only call tensors made by "
                       "nnc.engine.call.call_tensor (a recorded engine region's C ops) whose "
                       "recorded graph is still alive")


register_command("ENGINE_CALL", inplace="any", check=_check)
register_c_backend("ENGINE_CALL", "CPU_REF", _call, NNC_64S, True, None, None, True)
