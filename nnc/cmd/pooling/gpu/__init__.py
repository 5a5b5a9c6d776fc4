"""Layer 3, beside the stream layer like nnc.cuda: the pooling family's GPU backend:
ref.py, GPU_REF of MAX_POOL and AVG_POOL (kernels in nnc/cuda/kernels/conv.cu).

They launch through nnc.cuda (nnc.cuda.runner), so no module of layers 0-3 outside the CUDA side
imports them (tests/project/test_sourcecode.py); nnc/cuda/builtins.py registers them at import
nnc, after the family's CPU backends.
"""
