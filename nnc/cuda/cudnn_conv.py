"""``nnc.cuda.cudnn_conv``, the documented path of CONVOLUTION's GPU_OPT through cuDNN
(docs/gpu.md), is the module nnc/cmd/convolution/gpu/cudnn.py itself: the backend lives with its
family, and this path names the same module object, so ``nnc.cuda.cudnn_conv.TUNE = False`` (or
patching any other attribute here) reaches the backend.
"""

import sys

from nnc.cmd.convolution.gpu import cudnn

sys.modules[__name__] = cudnn
