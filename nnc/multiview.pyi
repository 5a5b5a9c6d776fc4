"""Multiviews (nnc/multiview.pyx): one of several tensors per loop iteration.
NNC: ccv_nnc_tensor_multiview_t."""

from collections.abc import Sequence
from typing import Literal

from typing_extensions import disjoint_base

from nnc.graph.graph import Graph
from nnc.tensor import Tensor, _Shape

@disjoint_base
class MultiView(Tensor):
    @property
    def versions(self) -> tuple[Tensor, ...]: ...
    @property
    def kind(self) -> int: ...
    @property
    def repeat(self) -> int: ...
    @property
    def anchor(self) -> Graph | None: ...
    @property
    def current(self) -> int: ...
    def __init__(
        self,
        versions: Sequence[Tensor],
        anchor: Graph | None = None,
        kind: Literal["K0N", "K1N", "PHI"] = "K0N",
    ) -> None: ...
    @property
    def kind_name(self) -> Literal["K0N", "K1N", "PHI"]: ...
    def synchronize(self, t: Tensor) -> None: ...
    def view(
        self, shape: _Shape, offset: int = 0, strides: _Shape | None = None
    ) -> Tensor: ...
