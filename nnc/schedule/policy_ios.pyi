"""IOS's dynamic program over stages as the "ios" scheduling policy
(nnc/schedule/policy_ios.pyx)."""

from collections.abc import Sequence
from typing import Any

def set_ios_options(
    *,
    block_size: int = ...,
    max_stage_ops: int = ...,
    max_num_groups: int = ...,
    max_group_size: int = ...,
    max_states: int = ...,
    stage_overhead: float = ...,
    cores: int = ...,
    barriers: bool = ...,
) -> dict[str, Any]: ...
def ios_stages(
    succ: Sequence[Sequence[int]],
    costs: Sequence[float] | None = None,
    max_streams: int = 0,
    *,
    block_size: int = ...,
    max_stage_ops: int = ...,
    max_num_groups: int = ...,
    max_group_size: int = ...,
    max_states: int = ...,
    stage_overhead: float = ...,
    cores: int = ...,
    barriers: bool = ...,
) -> tuple[list[int], dict[str, Any]]: ...
