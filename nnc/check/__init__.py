"""Layer 7 top. The debug invariants of every layer, checked under NNC_DEBUG=1 (invariants). Sees
every layer.
"""
