"""Layer 7 top. TVM's pipeline executor on nnc: stages (graphs or functions) wired by a
:class:`PipelineConfig`, several inputs in flight at once (docs/pipeline.md).

    cfg = pipeline.PipelineConfig()
    cfg.inputs["data_a"] = (m1, "data_0")
    cfg.connect(m1, 0, m2, "x")
    cfg.outputs.append((m2, 0))
    pm = pipeline.build(cfg, depth=4)
    pm.set_input("data_a", array)
    pm.run()                            # returns at once while fewer than depth are in flight
    outputs = pm.get_output()           # the next input's outputs, in input order

This module sits on top of nnc: nothing else in the package imports it.
"""

import importlib

from nnc.pipeline.config import (
    Module,
    PipelineConfig,
    PipelineError,
    Plan,
    Sink,
    Source,
    StagePlan,
)
from nnc.pipeline.runtime import PipelineModule
from nnc.pipeline.split import partition, split

# executor name -> module whose build(plan, depth=..., **options) returns a PipelineModule.
# Imported on first use, so an executor's optional dependencies load only when it is asked for.
EXECUTORS = {
    "local": "nnc.pipeline.local",
    "ray": "nnc.pipeline.ray_exec",
}


def build(cfg, *, depth=4, executor="local", **options):
    """A running :class:`PipelineModule` for ``cfg`` (checked complete first).

    ``depth``: how many inputs may be in flight at once (``run()`` blocks, or with
    ``block=False`` raises, while that many are); ``executor``: ``"local"`` (every stage on
    its own nnc stream in this process) or ``"ray"`` (every stage on its own Ray actor:
    options ``resources`` {stage name: Ray actor options} and ``start_timeout`` seconds; needs
    the ``ray`` extra); ``options`` go to the executor.
    """
    if not isinstance(cfg, PipelineConfig):
        raise PipelineError(f"build needs a pipeline.PipelineConfig, not {type(cfg).__name__}")
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise PipelineError(f"depth must be an int >= 1, not {depth!r}")
    if executor not in EXECUTORS:
        raise PipelineError(f"unknown executor {executor!r} (known: "
                            f"{', '.join(sorted(EXECUTORS))})")
    plan = cfg.plan()
    return importlib.import_module(EXECUTORS[executor]).build(plan, depth=depth, **options)


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
