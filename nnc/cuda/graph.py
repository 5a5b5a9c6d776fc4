"""``nnc.cuda.graph``, the earlier path of CUDA-graph capture (nnc/cuda/capture.py): the same
module object, kept because code and documentation written before the rename import it; the
word "graph" in nnc names the concrete graph (nnc.graph)."""

import sys

from nnc.cuda import capture

sys.modules[__name__] = capture
