"""The worker pool's shared state (nnc/pool.pyx): C-level only, nothing for Python."""
