"""Pipeline stages on Ray actors (nnc/pipeline/ray_exec.py)."""

from typing import Any, Literal

from nnc.pipeline.config import Module, PipelineError, Plan, _Spec
from nnc.pipeline.runtime import Job, PipelineModule

START_TIMEOUT: float

class StageWorker:
    input_names: list[str]
    module: Module
    def __init__(
        self, name: str, kind: Literal["graph", "function"], payload: Any,
        input_names: list[str], input_specs: dict[str, _Spec], output_specs: list[_Spec],
    ) -> None: ...
    def ready(self) -> bool: ...
    def run(self, *arrays: Any) -> tuple[Any, ...]: ...

class StageRaised(PipelineError):
    original: BaseException
    def __init__(self, original: BaseException) -> None: ...
    def __reduce__(self) -> tuple[type[StageRaised], tuple[BaseException]]: ...

def build(
    plan: Plan, *, depth: int = 4, resources: dict[str, dict[str, Any]] | None = None,
    start_timeout: float | None = ...,
) -> RayPipelineModule: ...

class RayPipelineModule(PipelineModule):
    def __init__(
        self, plan: Plan, depth: int, resources: dict[str, dict[str, Any]] | None = None,
        start_timeout: float | None = ...,
    ) -> None: ...
    def _submit(self, job: Job) -> None: ...
    def _shutdown(self) -> None: ...
