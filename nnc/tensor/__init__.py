"""Layer 1 tensor. Tensors: `Tensor` and its views (tensor), DLPack in and out (dlpack),
`MultiView` (multiview), frozen memory and the packed copies kernels keep of it (constant),
persistence in NNC's SQLite tables and NNC's tensor helpers (io). Imports nnc.base.
"""

# The module this package was before the layer folders: its names stay importable here
# (``from nnc.tensor import ...`` and pickles made before the move).
from nnc.tensor.tensor import *  # noqa: E402, F401, F403
