"""Handle table, per-thread error messages and argument conversion of the C API."""

from nnc.base.core import NNCError

class NullError(NNCError, ValueError):
    """A required pointer or handle is NULL (C code NNC_ERROR_NULL)."""

class HandleError(NNCError, ValueError):
    """A handle is freed, foreign or of another type (NNC_ERROR_HANDLE)."""

class RangeError(NNCError, IndexError):
    """An index or a count is out of range (NNC_ERROR_INDEX)."""

def live_handles() -> int: ...
def live_objects(kind: int) -> list[object]: ...
def parse_params(text: str) -> dict[str, object]: ...
