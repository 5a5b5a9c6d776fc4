"""Layer 3, beside the stream layer like nnc.cuda: the convolution family's GPU backends:
ref.py, GPU_REF (the direct kernel of nnc/cuda/kernels/conv.cu), and cudnn.py,
GPU_OPT through cuDNN's frontend.

They launch through nnc.cuda (nnc.cuda.runner), so no module of layers 0-3 outside the CUDA side
imports them (tests/project/test_sourcecode.py); nnc/cuda/builtins.py registers them at import
nnc, after the family's CPU backends.
"""
