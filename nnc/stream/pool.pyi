"""The worker pool's shared state (nnc/stream/pool.pyx): C-level only, nothing for Python."""
