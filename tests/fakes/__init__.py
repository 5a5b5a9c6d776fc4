"""Fakes of the GPU libraries nnc calls, for machines without a GPU (docs/gpu.md, "Testing
without a GPU"): cuda_driver (the CUDA driver through cuda-bindings), cuda_kernels (the
GPU_REF kernels it emulates when nnc launches them), cudnn_frontend (the
cudnn-frontend surface of nnc.cmd.convolution.gpu.cudnn), cublas (nvmath-python's cuBLAS surface of
nnc.cmd.gemm.gpu.cublas), gpu_bench (benchmarks.gpu on the fake driver, run as a script), and
env (the GPU tests' fixture body: the fakes, then the real GPU where one exists).

Tests import them as ``from fakes.cuda_driver import install`` (tests/conftest.py puts tests/ on
sys.path)."""
