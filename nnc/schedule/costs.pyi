"""Node costs for the cost-aware scheduling policies (nnc/schedule/costs.pyx); only Cython-level
functions, reached through ``nnc.static_schedule(costs=...)``."""
