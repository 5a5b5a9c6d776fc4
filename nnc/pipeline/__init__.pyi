from typing import Any

from nnc.pipeline.config import Module as Module
from nnc.pipeline.config import PipelineConfig as PipelineConfig
from nnc.pipeline.config import PipelineError as PipelineError
from nnc.pipeline.config import Plan as Plan
from nnc.pipeline.config import Sink as Sink
from nnc.pipeline.config import Source as Source
from nnc.pipeline.config import StagePlan as StagePlan
from nnc.pipeline.runtime import PipelineModule as PipelineModule
from nnc.pipeline.split import partition as partition
from nnc.pipeline.split import split as split

EXECUTORS: dict[str, str]

def build(
    cfg: PipelineConfig, *, depth: int = 4, executor: str = "local", **options: Any
) -> PipelineModule: ...

__all__ = [
    "EXECUTORS",
    "Module",
    "PipelineConfig",
    "PipelineError",
    "PipelineModule",
    "Plan",
    "Sink",
    "Source",
    "StagePlan",
    "build",
    "partition",
    "split",
]
