"""Benchmarks for nnc: run one with ``python -m benchmarks.NAME [--json]`` from the repository root.

Each benchmark compares nnc with its alternatives side by side in one process and reports ratios,
because our machines are shared and noisy; results go in ``docs/benchmarks.md``.

Importing this package pins BLAS to one thread (``OPENBLAS_NUM_THREADS=1``, likewise OpenMP and
MKL) before any benchmark imports NumPy, so that a thread pool warming up or competing for the
machine's few cores never shows up as dispatch cost. Set the variables yourself before Python
starts if you need other values: an existing setting is kept.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
del _var
