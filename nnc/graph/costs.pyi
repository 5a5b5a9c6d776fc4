"""Node costs for the cost-aware scheduling policies (nnc/graph/costs.pyx); only Cython-level
functions, reached through ``nnc.static_schedule(costs=...)``."""
