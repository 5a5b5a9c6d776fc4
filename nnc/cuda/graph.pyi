"""The earlier path of nnc/cuda/capture.py (the same module object)."""

from nnc.cuda.capture import *  # noqa: F403
from nnc.cuda.capture import __all__ as __all__
