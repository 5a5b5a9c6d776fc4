"""The C API (nnc/capi/capi.pyx): its functions are for C callers, through nnc/nnc.h.

From Python only these helpers are visible; see docs/capi.md for the C functions.
"""

__all__ = ["live_handles", "parse_params"]

def live_handles() -> int:
    """Number of live C API handles in this process."""

def parse_params(text: str) -> dict[str, object]:
    """Parse an nnc_cmd_new parameter string ("a=0.5, size=(2, 2)") into keyword arguments."""
