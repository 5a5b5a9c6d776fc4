"""Layer 7 top. The C ABI: the functions C programs call through nnc.h (capi) and the handle table
(handle). Sees every layer.
"""

# The module this package was before the layer folders: its names stay importable here
# (``from nnc.capi import ...`` and pickles made before the move).
from nnc.capi.capi import *  # noqa: E402, F401, F403
from nnc.capi.capi import __pyx_capi__  # noqa: E402, F401  (C programs built against older headers import nnc.capi)
