"""The worker pool's shared state (nnc/stream/worker_state.pyx): C-level only, nothing for
Python."""
