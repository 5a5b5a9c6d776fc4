from typing import Iterable, Sequence, TypedDict

class NimbleInfo(TypedDict):
    meg_edges: list[tuple[int, int]]
    matching: list[tuple[int, int]]
    chains: list[list[int]]
    waits_bound: int

def nimble_streams(
    succ: Sequence[Iterable[int]], max_streams: int = ...
) -> tuple[list[int], NimbleInfo]: ...
