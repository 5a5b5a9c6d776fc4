"""BLAS for nnc's C backends (nnc/ops/cpu_blas.pyx)."""

config: str
