"""Run ``python -m benchmarks.gpu`` on the fake driver (tests/_fake_cuda.py), in a process of its
own: a smoke test of the whole benchmark on a machine without a GPU.

    python tests/_fake_gpu_bench.py [--gpu-opt] [benchmarks.gpu arguments...]

``--gpu-opt`` first registers a stand-in GPU_OPT backend for MAX_POOL and AVG_POOL (GPU_REF's
own kernels under the other name, preferred by priority), so the benchmark's GPU_OPT set is
built, pinned apart from GPU_REF, timed and checked. A backend registration lasts as long as
the process, which is why this runs in a child process and not inside the test session.
"""

import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

from _fake_cuda import Checked, FakeDriver, unfake_libraries  # noqa: E402

import nnc  # noqa: E402
from nnc import cuda  # noqa: E402
from nnc.cuda import backends, nvrtc  # noqa: E402
from nnc.cuda import driver as drv  # noqa: E402


def install():
    os.environ["NNC_CUDA_CACHE"] = ""
    cuda._status = (1, None)
    drv._driver = Checked(FakeDriver(count=1))
    # GPU_REF only: a real cuBLAS / cuDNN (on a GPU machine) must never see fake pointers.
    unfake_libraries(types.SimpleNamespace(setattr=setattr))
    try:
        nvrtc.nvrtc_version()
    except nnc.CUDAError:
        # Without NVRTC the fake loads any module (as tests/test_cuda_runtime.py's fixture).
        nvrtc.compile_cubin = lambda *a, **k: b"fake"


def register_stand_in_gpu_opt():
    for command, kernel in (("MAX_POOL", "max_pool"), ("AVG_POOL", "avg_pool")):
        nnc.register_backend(command, "GPU_OPT", backends.runner(backends._pool(kernel),
                                                                 name="GPU_OPT"),
                             datatypes=backends.FLOAT_TYPES, accept=backends._window_accept,
                             device="gpu", priority=16)


def main(argv):
    install()
    if "--gpu-opt" in argv:
        argv = [a for a in argv if a != "--gpu-opt"]
        register_stand_in_gpu_opt()
    from benchmarks import gpu

    return gpu.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
