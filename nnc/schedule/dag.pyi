"""The policies' DAG built from successor lists (nnc/schedule/dag.pyx); its methods are C-level."""

from typing_extensions import disjoint_base

@disjoint_base
class DagBuffer: ...
