"""The documented path of nnc/cmd/convolution/gpu/cudnn.py (the same module object)."""

from nnc.cmd.convolution.gpu.cudnn import *  # noqa: F403
from nnc.cmd.convolution.gpu.cudnn import __all__ as __all__
