"""The C state of nnc.Engine: vars and ops (nnc/engine/op.pyx, docs/engine.md)."""

from typing_extensions import disjoint_base

@disjoint_base
class EngineVar:
    @property
    def id(self) -> int:
        """Creation number within its engine."""
    @property
    def version(self) -> int: ...
    @property
    def deleted(self) -> bool: ...
    def __init__(self, *args: object, **kwargs: object) -> None: ...  # raises TypeError
