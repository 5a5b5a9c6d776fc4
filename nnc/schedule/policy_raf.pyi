"""RAF's "wavefront" and "asap" stream assignments (nnc/schedule/policy_raf.pyx)."""

from typing import Any

def wavefront_streams(
    succ: list[list[int]] | tuple[list[int], ...], max_streams: int = 0
) -> tuple[list[int], dict[str, Any]]: ...
def asap_streams(
    succ: list[list[int]] | tuple[list[int], ...], max_streams: int = 0
) -> tuple[list[int], dict[str, Any]]: ...
