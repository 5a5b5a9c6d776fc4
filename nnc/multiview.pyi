from collections.abc import Sequence

from nnc.graph.graph import Graph
from nnc.tensor import Tensor

class MultiView(Tensor):
    versions: tuple[Tensor, ...]
    kind: int
    repeat: int
    anchor: Graph | None
    current: int
    def __init__(
        self, versions: Sequence[Tensor], anchor: Graph | None = ..., kind: str = ...
    ) -> None: ...
    @property
    def kind_name(self) -> str: ...
    def synchronize(self, t: Tensor) -> None: ...
