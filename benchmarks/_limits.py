"""The machine's limits, measured in the benchmark's own process, and a graph's work against them.

One implementation, in ``nnc/models/limits.py`` (``python -m nnc demo --streams`` prints its
times against the same limits, and nnc must not import benchmarks/): its docstring says what
``measure_limits`` measures and how ``graph_gflop`` and ``x_limit`` count. This module re-exports
it under the name the benchmarks import.
"""

from nnc.models.limits import (
    ISA_FEATURES,
    bandwidth_gbs,
    cpu_features,
    cpu_model,
    describe,
    graph_gflop,
    measure_limits,
    openblas_core,
    peak_gflops,
    read_bandwidth_gbs,
    sgemm_gflops,
    x_limit,
)

__all__ = ["ISA_FEATURES", "bandwidth_gbs", "cpu_features", "cpu_model", "describe",
           "graph_gflop", "measure_limits", "openblas_core", "peak_gflops", "read_bandwidth_gbs",
           "sgemm_gflops", "x_limit"]
