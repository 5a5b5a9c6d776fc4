"""The "list" scheduling policy (nnc/schedule/policy_list.pyx): registered at import as
``nnc.static_schedule(g, policy="list")``; it has no Python-level names."""
