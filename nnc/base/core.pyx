"""Errors, datatype codes and limits shared by every nnc module.

NNC: ccv_nnc_tfb.h (datatype and memory codes), ccv_nnc.h (CCV_NNC_EXEC_* return codes).
Every exception nnc raises derives from :class:`NNCError`; the subclasses also derive from the
built-in exception a NumPy user would expect (``ValueError``, ``TypeError``, ``RuntimeError``),
so existing ``except ValueError`` code keeps working.
"""

import numbers
import os

from cpython.object cimport Py_TYPE

MAX_DIM = NNC_MAX_DIM

# NNC_DEBUG=1 in the environment at import: invariant checks, hazard checks and live-object
# counters (docs/dev.md, "Debug mode").
DEBUG = os.environ.get("NNC_DEBUG", "0") not in ("", "0")

DATATYPES = {
    "uint8": NNC_8U,
    "int32": NNC_32S,
    "float32": NNC_32F,
    "int64": NNC_64S,
    "float64": NNC_64F,
    "float16": NNC_16F,
}
DATATYPE_NAMES = {code: name for name, code in DATATYPES.items()}

STATUS_NAMES = {
    NNC_SUCCESS: "SUCCESS",
    NNC_INVALID: "INVALID",
    NNC_NO_KERNEL: "NO_KERNEL",
    NNC_OOM: "OOM",
}


class NNCError(Exception):
    """Base class of every error nnc raises."""


class TensorError(NNCError, ValueError):
    """A tensor cannot be made or used: unsupported dtype, layout, shape or device."""


class CommandError(NNCError, ValueError):
    """Unknown command or backend, no backend for these tensors, or a shape / dtype mismatch."""


class GraphError(NNCError, ValueError):
    """A graph is malformed: a cycle, a node of another graph, bad sources or destinations."""


class StreamError(NNCError, RuntimeError):
    """A command failed asynchronously; raised by ``Stream.wait()`` with the cause chained."""


class ScheduleError(NNCError, RuntimeError):
    """A schedule does not enforce a dependency of its graph."""


class EngineError(NNCError, RuntimeError):
    """nnc.Engine: a bad push (a var twice, in both lists, of another engine or deleted; a fn
    that is neither callable nor an nnc.engine.engine.CFUNC), or an op that failed: raised by
    wait_for_var / wait_all, naming the op, with the original exception as ``__cause__``."""


class HazardWarning(UserWarning):
    """Debug mode (NNC_DEBUG=1): a graph being scheduled has unordered nodes whose memory
    overlaps, one of them writing (nnc.graph_hazards). A warning, not an error, because such a
    graph is legal and runs correctly on one thread; on several streams its result is a race.
    Turn it into an error with ``-W error::nnc.HazardWarning``."""


class CUDAError(NNCError, RuntimeError):
    """CUDA is unavailable (the message says why), a GPU does not exist, or a CUDA call failed."""


cdef str _type_name(object obj):
    """obj's type's name from C: a metaclass cannot make it raise."""
    return Py_TYPE(obj).tp_name.decode("utf-8", "replace")


cpdef str error_repr(object obj):
    """``repr(obj)`` for an error message, even when obj's class makes its repr raise (a
    user's exception or callable): the text then names the class and what its repr raised
    (both read from C, which no metaclass can make raise). The failure being reported is
    never replaced by its repr's: the object goes on as it is (an exception as the
    ``__cause__`` of the error that reports it)."""
    try:
        return repr(obj)
    except BaseException as e:
        # Named here, not raised, whatever it is (a KeyboardInterrupt too): see above.
        return f"<{_type_name(obj)} object: its repr raised {_type_name(e)}>"


cpdef double timeout_seconds(object timeout, object error=None) except? -2:
    """A wait's ``timeout`` argument as seconds, the one check every ``timeout=`` of nnc makes:
    -1 for None or +inf (wait forever), 0 for a negative value (as ``threading.Event.wait``),
    else the number. ``error`` (default :class:`StreamError`): the NNCError subclass raised
    for NaN or anything but a real number (a bool, a str: not a duration)."""
    cdef double t
    if timeout is None:
        return -1
    if type(timeout) is float:
        t = timeout
    elif isinstance(timeout, numbers.Real) and not isinstance(timeout, bool):
        try:
            t = float(timeout)
        except OverflowError:           # an int beyond a double (10**400): as +-inf
            t = float("inf") if timeout > 0 else 0.0
    else:
        raise (StreamError if error is None else error)(
            f"timeout must be a number of seconds or None, not {type(timeout).__qualname__}")
    if t != t:
        raise (StreamError if error is None else error)(
            "timeout must be a number of seconds or None, not NaN")
    if t == float("inf"):
        return -1
    return t if t > 0 else 0.0


def get_include():
    """Return the folder holding nnc's ``.pxd`` files and the C API headers (``nnc.h``,
    ``nnc_types.h``; docs/capi.md): the nnc package's own folder, one above this module's."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
