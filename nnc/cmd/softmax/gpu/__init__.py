"""Layer 3, beside the stream layer like nnc.cuda: the softmax family's GPU backend:
ref.py, GPU_REF (kernel in nnc/cuda/kernels/softmax.cu).

They launch through nnc.cuda (nnc.cuda.runner), so no module of layers 0-3 outside the CUDA side
imports them (tests/project/test_sourcecode.py); nnc/cuda/builtins.py registers them at import
nnc, after the family's CPU backends.
"""
