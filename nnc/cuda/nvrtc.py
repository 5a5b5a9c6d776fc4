"""Run-time compilation of nnc's CUDA C kernels with NVRTC, cached by (source, architecture).

NNC compiles its kernels with nvcc at build time; nnc compiles at run time, for the device's own
architecture, so the package ships CUDA C sources (``nnc/cuda/kernels/*.cu``) and needs no CUDA
toolkit to build. NVRTC comes from the ``nvidia-cuda-nvrtc`` wheel
(``pip install 'nnc-graph[cuda]'``) through ``cuda.bindings.nvrtc``, which finds it with
cuda-pathfinder (a dependency of cuda-bindings), and works without a GPU or a driver, so CI
compile-checks every kernel (tests/cuda/test_cuda_kernels.py).

The result is a cubin for ``sm_XY`` (not PTX: PTX from an NVRTC newer than the driver may fail
to load; a cubin for the exact architecture does not). Cache: in memory for the process, and on
disk under ``$NNC_CUDA_CACHE`` (default ``~/.cache/nnc/cubin``; set it to "" to turn the disk
cache off), keyed by a hash of the source, the options, the architecture and NVRTC's version.
"""

import hashlib
import os
import pathlib
import threading

from nnc.base.core import CUDAError

__all__ = ["KERNELS", "KERNEL_FILES", "compile_cubin", "kernel_source", "nvrtc_version"]

_DIR = pathlib.Path(__file__).resolve().parent / "kernels"
# Kernel file -> the kernels it defines; each exists as nnc_<name>_f16, _f32 and _f64.
KERNELS = {
    "ew.cu": ("ewsum", "ewprod", "ewdiv", "ewexp", "ewlog", "relu", "scalar_mul", "set",
              "bias_act"),
    "softmax.cu": ("softmax",),
    "gemm.cu": ("gemm",),
    "conv.cu": ("conv", "conv_transpose", "max_pool", "avg_pool"),
}
KERNEL_FILES = tuple(KERNELS)
OPTIONS = ("--std=c++17", "-default-device")

_lock = threading.Lock()
_memory = {}                        # key -> cubin bytes


def kernel_source(name):
    """The full source NVRTC compiles for kernel file ``name`` (common.cuh prepended)."""
    if name not in KERNEL_FILES:
        raise CUDAError(f"unknown kernel file {name!r}; nnc has {KERNEL_FILES}")
    common = (_DIR / "common.cuh").read_text()
    return f"{common}\n#line 1 \"{name}\"\n{(_DIR / name).read_text()}"


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise CUDAError(f"NVRTC needs cuda-bindings (pip install 'nnc-graph[cuda]'): "
                        f"{e}") from None
    return nvrtc


def _check(nvrtc, result, what):
    err = result[0]
    if int(err) != 0:
        raise CUDAError(f"{what} failed: {getattr(err, 'name', int(err))}")
    return result[1] if len(result) == 2 else result[1:]


def nvrtc_version():
    """(major, minor) of the NVRTC library; CUDAError if it cannot be loaded."""
    nvrtc = _nvrtc()
    try:
        return tuple(_check(nvrtc, nvrtc.nvrtcVersion(), "nvrtcVersion"))
    except RuntimeError as e:
        if isinstance(e, CUDAError):
            raise
        # cuda.pathfinder's DynamicLibNotFoundError: no libnvrtc on this machine.
        raise CUDAError(f"NVRTC is not available ({e}); pip install 'nnc-graph[cuda]' installs "
                        "the nvidia-cuda-nvrtc wheel") from None


def _cache_dir():
    path = os.environ.get("NNC_CUDA_CACHE")
    if path is None:
        path = os.path.join(os.path.expanduser("~"), ".cache", "nnc", "cubin")
    return path or None


def _compile(nvrtc, source, name, options):
    prog = _check(nvrtc, nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if int(err) != 0:
            size = _check(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            text = log.rstrip(b"\0 ").decode(errors="replace")
            raise CUDAError(f"NVRTC could not compile {name} ({' '.join(options)}):\n{text}")
        size = _check(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_cubin(source, arch, name="nnc.cu", options=()):
    """Compile CUDA C ``source`` to a cubin for ``sm_<arch>`` (e.g. 90); cached. CUDAError on a
    compile error (with NVRTC's log) or when NVRTC is unavailable."""
    if isinstance(arch, bool) or not isinstance(arch, int) or arch < 50:
        raise CUDAError(f"arch must be a compute capability as an int such as 90, not {arch!r}")
    nvrtc = _nvrtc()
    version = nvrtc_version()
    options = (*OPTIONS, f"--gpu-architecture=sm_{arch}", *options)
    h = hashlib.sha256()
    for part in (source, name, repr(options), repr(version)):
        h.update(part.encode())
        h.update(b"\0")
    key = h.hexdigest()
    with _lock:
        cubin = _memory.get(key)
    if cubin is not None:
        return cubin
    folder = _cache_dir()
    path = os.path.join(folder, f"{key}.cubin") if folder else None
    if path and os.path.exists(path):
        with open(path, "rb") as f:
            cubin = f.read()
    if not cubin:
        cubin = _compile(nvrtc, source, name, options)
        if path:
            try:
                os.makedirs(folder, exist_ok=True)
                tmp = f"{path}.{os.getpid()}.{threading.get_ident()}"
                with open(tmp, "wb") as f:
                    f.write(cubin)
                os.replace(tmp, path)   # atomic: a concurrent reader sees all or nothing
            except OSError:
                pass                    # a read-only home only loses the disk cache
    with _lock:
        _memory[key] = cubin
    return cubin
