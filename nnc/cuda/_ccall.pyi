"""The driver calls a GPU stream makes for every graph node, from C (nnc/cuda/_ccall.pyx)."""

from typing_extensions import disjoint_base

from nnc.cuda.driver import Device
from nnc.cuda.runner import Launch

__all__ = ["CCalls", "CLaunch", "NAMES", "calls_of", "enabled", "null_entry_points"]

NAMES: tuple[str, ...]

def enabled() -> bool: ...
def null_entry_points() -> dict[str, int]: ...
@disjoint_base
class CCalls: ...

@disjoint_base
class CLaunch:
    def __init__(self, launch: Launch) -> None: ...

def calls_of(device: Device) -> CCalls | None: ...
