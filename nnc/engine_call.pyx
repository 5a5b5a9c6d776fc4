"""ENGINE_CALL: the command a recorded engine region's C ops become (nnc.engine_record), so
that replaying the recorded graph calls each C function ``int fn(void* arg)`` from C without
the GIL, as the engine does, instead of through ctypes under the GIL.

The call is data: the node's one input is an int64 tensor ``[address, argument, check]`` that
``call_tensor`` made (one command and one C backend serve every function). Only tensors made
here are accepted, so a Cmd("ENGINE_CALL") cannot be pointed at an arbitrary address by
accident: the command's check refuses any other tensor when a node is made, and the C backend,
which can also be called directly (Backend.exec), refuses a tensor of another shape or type or
whose check word is not ``address ^ argument ^`` a per-process random key. The trust is the
engine's own — the address came from a ctypes function pointer the caller pushed.
docs/engine.md, "Record".
"""

import secrets
import weakref

import numpy as np

from nnc._core import CommandError

from nnc._core cimport NNC_64S, NNC_INVALID
from nnc.cmd cimport nnc_cmd_param_t, register_c_backend
from nnc.tensor cimport nnc_tensor_t

from nnc.cmd import register_command
from nnc.tensor import Tensor

ctypedef int (*call_f)(void*) noexcept nogil

# The call tensors' arrays call_tensor made: id(array) -> (weak reference to it, what the call
# needs alive: the ctypes function and argument objects). An entry goes when its array does
# (a recorded graph keeps its tensors, and so their arrays, alive). Read by _check.
_issued = {}


def _root(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


# The check word's key, random per process (set once at import, read-only after).
cdef unsigned long long _key = secrets.randbits(64)


cdef int _call(const nnc_cmd_param_t* param, nnc_tensor_t** inputs, int input_size,
               nnc_tensor_t** outputs, int output_size, void* context) noexcept nogil:
    cdef const unsigned long long* p
    cdef int k
    if input_size != 1 or inputs[0] == NULL:
        return NNC_INVALID
    for k in range(output_size):
        if outputs[k] != NULL:
            return NNC_INVALID
    if (inputs[0].datatype != NNC_64S or inputs[0].device != -1 or inputs[0].count != 3
            or not inputs[0].contiguous):
        return NNC_INVALID
    p = <const unsigned long long*>inputs[0].data
    if p[0] == 0 or p[2] != (p[0] ^ p[1] ^ _key):
        return NNC_INVALID
    return (<call_f><size_t>p[0])(<void*><size_t>p[1])


def call_tensor(address, arg, keep=None):
    """The read-only int64 tensor ``[address, arg, check]`` of one recorded call of the C
    function at ``address`` (non-zero) with ``arg`` (an address or 0); ``keep``: objects that
    must live as long as the tensor (the ctypes function and argument the addresses came
    from)."""
    if not isinstance(address, int) or address <= 0 or not isinstance(arg, int) or arg < 0:
        raise CommandError(f"ENGINE_CALL needs a function address > 0 and an argument >= 0, "
                           f"not {address!r}, {arg!r}")
    if address >= 1 << 64 or arg >= 1 << 64:
        raise CommandError(f"ENGINE_CALL: {address!r}, {arg!r} are not 64-bit addresses")
    a = np.array([address, arg, address ^ arg ^ _key], dtype=np.uint64).astype(np.int64)
    a.flags.writeable = False
    t = Tensor(a)
    key = id(a)
    _issued[key] = (weakref.ref(a), keep)
    weakref.finalize(a, _issued.pop, key, None)
    return t


def _check(cmd, inputs, outputs):
    if len(inputs) != 1 or any(o is not None for o in outputs):
        raise CommandError("ENGINE_CALL takes one input (its call tensor) and no outputs")
    a = None if inputs[0] is None else _root(inputs[0].numpy())
    entry = None if a is None else _issued.get(id(a))
    if entry is None or entry[0]() is not a:
        raise CommandError("ENGINE_CALL runs only call tensors made by "
                           "nnc.engine_call.call_tensor (a recorded engine region's C ops)")


register_command("ENGINE_CALL", inplace="any", check=_check)
register_c_backend("ENGINE_CALL", "CPU_REF", _call, NNC_64S, True, None, None, True)
