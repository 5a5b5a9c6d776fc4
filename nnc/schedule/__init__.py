"""Layer 5 schedule. Static schedules and what reads them: `Schedule` and `static_schedule`
(schedule), the builder every policy's schedule goes through, with NNC's rank policy (builder),
the other policies (policy_*), the dependency DAG (dag), costs (costs), data hazards (hazard),
verification (verify) and the simulator (simulate).
Imports layers 0-4.
"""
