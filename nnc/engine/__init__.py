"""Layer 7 top. MXNet's dependency engine beside the graph: `Engine` (engine), its vars and ops
(op), C ops recorded into graphs (call) and an engine region recorded as a graph (region_graph).
Sees every layer.
"""

# The module this package was before the layer folders: its names stay importable here
# (``from nnc.engine import ...`` and pickles made before the move).
from nnc.engine.engine import *  # noqa: E402, F401, F403
