"""Devices (layer 0, base): the one parser of device strings, the one ``__array_interface__``
holder, and the GPU table that nnc.cuda fills.

Not an NNC port (NNC names devices by integer ids in its tensor parameters). Every module that
takes a device string (tensors, DLPack, streams and signals, the C API, nnc.cuda) parses it
here, so a bad string raises the same :class:`DeviceError` with the same message everywhere.

The GPU table keeps the tensor layer below nnc.cuda: ``nnc.cuda`` registers itself when it is
imported (``nnc/__init__`` imports it, without importing cuda-bindings); tensors and DLPack then
reach GPU memory through :func:`gpu_memory`. Without a registration a GPU request raises
CUDAError, never ImportError.
"""

import re
import threading

from nnc.base.core import CUDAError, TensorError

__all__ = ["ArrayInterface", "DeviceError", "gpu_memory", "parse_device", "register_gpu",
           "require_device"]

_GPU_RE = re.compile(r"gpu(?::([0-9]+))?")      # ASCII digits only, no sign


class DeviceError(TensorError):
    """A device string names no device: only ``"cpu"``, ``"gpu"`` and ``"gpu:N"`` do.

    A TensorError (and so a ValueError) because a device is first a tensor's property."""


def parse_device(device):
    """The ordinal a device string names: -1 for ``"cpu"``, N for ``"gpu:N"`` (``"gpu"`` is
    ``"gpu:0"``). Only the syntax is checked (:func:`require_device` checks the GPU exists);
    anything else, a non-string included, raises DeviceError."""
    if device == "cpu" and isinstance(device, str):
        return -1
    m = _GPU_RE.fullmatch(device) if isinstance(device, str) else None
    if m is None:
        raise DeviceError(f"unknown device {device!r}; expected 'cpu', 'gpu' or 'gpu:N' "
                          "(N a GPU ordinal, 0 or more)")
    return int(m.group(1) or 0)


class ArrayInterface:
    """Hands NumPy a raw pointer: ``np.asarray(ArrayInterface(interface, owner))`` is an ndarray
    over ``interface`` (NumPy's ``__array_interface__`` dict) that keeps ``owner`` alive, since
    the ndarray's base is this holder. ``owner`` may be None when the caller keeps the memory
    alive (the C API's caller-owned buffers)."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, interface, owner):
        self.__array_interface__ = interface
        self.owner = owner


# -- the GPU table (filled by nnc.cuda) -------------------------------------------------------

_lock = threading.Lock()
_require = None                         # nnc.cuda's require(ordinal, what), or None
_load = None                            # returns the GPU memory table; called on first use
_memory = None                          # that table once loaded (a dict, see register_gpu)

GPU_MEMORY_KEYS = ("empty", "fill_zero", "to_host", "from_host", "synchronize", "sync_stream")


def register_gpu(require, load_memory):
    """nnc.cuda's registration (once, when it is imported). ``require(ordinal, what)`` raises
    CUDAError unless that GPU can be used; ``load_memory()`` returns a dict with the functions
    named by GPU_MEMORY_KEYS: ``empty(shape, dtype, ordinal)``, ``fill_zero(t)``,
    ``to_host(t)`` (an ndarray copy), ``from_host(array, ordinal)`` (a new GPU tensor),
    ``synchronize(ordinal)`` (wait for all work on that GPU) and ``sync_stream(ordinal)`` (the
    device's synchronous stream: ``.handle``, ``.wait()``). It is called on the first GPU use,
    so registering imports nothing heavy."""
    global _require, _load, _memory
    if not callable(require) or not callable(load_memory):
        raise TypeError("register_gpu takes two callables: require and load_memory")
    with _lock:
        _require = require
        _load = load_memory
        _memory = None


def require_device(ordinal, what="this"):
    """Nothing for the CPU (-1); for a GPU ordinal, raise CUDAError unless it can be used."""
    if ordinal < 0:
        return
    require = _require
    if require is None:
        raise CUDAError(f"{what} needs a GPU, and GPU support (nnc.cuda) is not loaded; "
                        "import nnc")
    require(ordinal, what)


def gpu_memory(name):
    """The GPU memory function ``name`` (one of GPU_MEMORY_KEYS) that nnc.cuda registered."""
    global _memory
    table = _memory
    if table is None:
        with _lock:
            if _load is None:
                raise CUDAError("GPU memory needs nnc.cuda, which is not loaded; import nnc")
            if _memory is None:
                got = dict(_load())
                missing = [k for k in GPU_MEMORY_KEYS if not callable(got.get(k))]
                if missing:
                    raise CUDAError(f"the registered GPU memory table lacks {missing}")
                _memory = got
            table = _memory
    return table[name]
