"""The local executor: each stage on its own nnc CPU stream (nnc/pipeline/local.py)."""

from nnc.pipeline.config import Plan
from nnc.pipeline.runtime import PipelineModule

def build(plan: Plan, *, depth: int) -> LocalPipeline: ...

class LocalPipeline(PipelineModule):
    def __init__(self, plan: Plan, depth: int) -> None: ...
