"""Layer 6 run. Runners: a graph's run on streams (run), while / case..of on coroutines (flow),
profile / autotune / dot (tools). Imports layers 0-5.
"""
