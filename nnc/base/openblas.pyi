"""BLAS for nnc's C backends (nnc/base/openblas.pyx)."""

import numpy as np

config: str

def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, trans_b: bool = False) -> None: ...
