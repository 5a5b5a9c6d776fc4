"""Debug mode (nnc/base/debug.pyx): live-object counters, invariant checks, leak checks."""

from collections.abc import Callable, Mapping

from nnc.base.core import DEBUG as DEBUG
from nnc.base.core import NNCError

NAMES: tuple[str, ...]

class DebugError(NNCError, AssertionError): ...

def counters() -> dict[str, int]: ...
def enabled() -> bool: ...
def register_check(fn: Callable[[], list[str]]) -> Callable[[], list[str]]: ...
def problems() -> list[str]: ...
def check() -> None: ...
def leaks(
    baseline: Mapping[str, int], timeout: float = 10.0
) -> dict[str, tuple[int, int] | tuple[int, list[str]]]:
    """``{counter: (before, now)}``, plus ``"threads": (0, [thread names])``; {} if balanced."""
