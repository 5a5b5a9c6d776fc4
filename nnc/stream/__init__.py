"""Layer 3 stream. Streams and signals (stream), the worker pool that runs CPU streams (worker) and
its shared state and job queue (worker_state), signal records (record), host waits (waiting), the
coroutine inbox (inbox) and the exit drain (drain). Imports layers 0-2; nnc.cuda sits beside
this layer and fills its tables.
"""

# The module this package was before the layer folders: its names stay importable here
# (``from nnc.stream import ...`` and pickles made before the move).
from nnc.stream.stream import *  # noqa: E402, F401, F403
