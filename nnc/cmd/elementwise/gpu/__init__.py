"""Layer 3, beside the stream layer like nnc.cuda: the element-wise family's GPU backends:
ref.py, GPU_REF of EWSUM, EWPROD, EWDIV, EWEXP, EWLOG, RELU and SCALAR_MUL (kernels in
nnc/cuda/kernels/ew.cu).

They launch through nnc.cuda (nnc.cuda.runner), so no module of layers 0-3 outside the CUDA side
imports them (tests/project/test_sourcecode.py); nnc/cuda/builtins.py registers them at import
nnc, after the family's CPU backends.
"""
