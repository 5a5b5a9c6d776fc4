"""Run ``python -m benchmarks.gpu`` on the fake driver (tests/fakes/cuda_driver.py), in a process of
its own: a smoke test of the whole benchmark on a machine without a GPU.

    python tests/fakes/gpu_bench.py [--gpu-opt] [benchmarks.gpu arguments...]

``--gpu-opt`` first registers a stand-in GPU_OPT backend for MAX_POOL, AVG_POOL and
CONVOLUTION in float16, float32 and float64 (GPU_REF's own kernels under the other name,
preferred by priority; cuDNN's
GPU_OPT CONVOLUTION is replaced, as the fake driver's pointers must never reach it), so the
benchmark's GPU_OPT set is built, pinned apart from GPU_REF, timed and checked, and a stand-in
``nnc.cuda.cudnn_conv.implementation`` that names each convolution "cudnn fused" when it fuses
a ReLU and "cudnn + epilogue" otherwise, for the report's implementation counts. A backend
registration lasts as long as the process, which is why this runs in a child process and not
inside the test session.
"""

import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(HERE)), os.path.dirname(HERE)]

import nnc  # noqa: E402
from fakes.cuda_driver import Checked, FakeDriver, unfake_libraries  # noqa: E402
from nnc import cuda  # noqa: E402
from nnc.cmd.convolution.gpu import cudnn as cudnn_conv  # noqa: E402
from nnc.cmd.convolution.gpu.ref import conv_body  # noqa: E402
from nnc.cmd.pooling.gpu.ref import pool_body  # noqa: E402
from nnc.cuda import driver as drv  # noqa: E402
from nnc.cuda import nvrtc, runner  # noqa: E402


def install():
    os.environ["NNC_CUDA_CACHE"] = ""
    cuda._status = (1, None)
    drv._driver = Checked(FakeDriver(count=1))
    # GPU_REF only: a real cuBLAS / cuDNN (on a GPU machine) must never see fake pointers.
    unfake_libraries(types.SimpleNamespace(setattr=setattr))
    try:
        nvrtc.nvrtc_version()
    except nnc.CUDAError:
        # Without NVRTC the fake loads any module (as tests/cuda/test_cuda_runtime.py's fixture).
        nvrtc.compile_cubin = lambda *a, **k: b"fake"


def stand_in_implementation(cmd, inputs, outputs):
    fused = cmd.params.get("activation") == "relu"
    return {"impl": "cudnn fused" if fused else "cudnn + epilogue", "plan": "stand-in",
            "choice": "heuristic"}


def register_stand_in_gpu_opt():
    for command, body in (("MAX_POOL", pool_body("max_pool")),
                          ("AVG_POOL", pool_body("avg_pool")),
                          ("CONVOLUTION", conv_body)):
        nnc.register_backend(command, "GPU_OPT", runner.runner(body, name="GPU_OPT"),
                             datatypes=runner.GPU_TYPES, accept=runner.window_accept,
                             device="gpu", priority=16, replace=True)
    cudnn_conv.implementation = stand_in_implementation


def main(argv):
    install()
    if "--gpu-opt" in argv:
        argv = [a for a in argv if a != "--gpu-opt"]
        register_stand_in_gpu_opt()
    from benchmarks import gpu

    return gpu.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
