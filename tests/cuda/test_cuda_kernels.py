"""Every CUDA C kernel source compiles with NVRTC (nnc/cuda/nvrtc.py, nnc/cuda/kernels/*.cu).

NVRTC needs no GPU and no driver, so this runs in CI whenever the NVRTC wheel is installed
(the test extra installs it): a syntax or type error in any kernel fails here. Running the
kernels needs a GPU: tests/test_cuda_gpu.py.
"""

import sys

import pytest

from nnc import CUDAError
from nnc.cuda import nvrtc

# The architectures checked in CI: Ampere (A100) and Hopper (H100/H200).
ARCHS = (80, 90)


def _nvrtc_reason():
    try:
        nvrtc.nvrtc_version()
    except CUDAError as e:
        return str(e)
    return None


REASON = _nvrtc_reason()
needs_nvrtc = pytest.mark.skipif(REASON is not None, reason=f"NVRTC unavailable: {REASON}")


@pytest.fixture
def no_disk_cache(monkeypatch):
    monkeypatch.setenv("NNC_CUDA_CACHE", "")


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", nvrtc.KERNEL_FILES)
def test_kernel_file_compiles(name, arch, no_disk_cache):
    cubin = nvrtc.compile_cubin(nvrtc.kernel_source(name), arch, name)
    assert cubin[:4] == b"\x7fELF"
    for kernel in nvrtc.KERNELS[name]:
        for suffix in ("f16", "f32", "f64"):
            # extern "C" names appear verbatim in the ELF symbol table.
            assert f"nnc_{kernel}_{suffix}\0".encode() in cubin, (name, kernel, suffix)


@needs_nvrtc
def test_compile_error_carries_the_log(no_disk_cache):
    src = 'extern "C" __global__ void broken(float* y) { y[0] = undefined_name; }'
    with pytest.raises(CUDAError, match="undefined_name") as info:
        nvrtc.compile_cubin(src, 90, "broken.cu")
    assert "broken.cu" in str(info.value)


@needs_nvrtc
def test_cache_in_memory_and_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("NNC_CUDA_CACHE", str(tmp_path))
    src = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.0f; }'
    first = nvrtc.compile_cubin(src, 80, "k.cu")
    assert nvrtc.compile_cubin(src, 80, "k.cu") is first          # memory
    files = list(tmp_path.glob("*.cubin"))
    assert len(files) == 1 and files[0].read_bytes() == first
    nvrtc._memory.clear()
    assert nvrtc.compile_cubin(src, 80, "k.cu") == first          # disk
    assert nvrtc.compile_cubin(src, 90, "k.cu") != first          # the key includes the arch
    assert len(list(tmp_path.glob("*.cubin"))) == 2


def test_bad_arguments():
    with pytest.raises(CUDAError, match="unknown kernel file"):
        nvrtc.kernel_source("nope.cu")
    for arch in ("sm_90", 9.0, True, 10):
        with pytest.raises(CUDAError, match="compute capability"):
            nvrtc.compile_cubin("", arch)


def test_without_cuda_python(monkeypatch):
    from nnc.cuda import driver

    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setattr(driver, "_driver", None)
    with pytest.raises(CUDAError, match="needs cuda-bindings"):
        nvrtc.nvrtc_version()
    with pytest.raises(CUDAError, match="needs cuda-bindings"):
        driver.driver()


def test_without_the_nvrtc_library(monkeypatch):
    try:
        from cuda.bindings import nvrtc as bindings
    except ImportError:
        pytest.skip("cuda-bindings is not installed")

    def missing():
        raise RuntimeError('"nvrtc" not found (stands in for DynamicLibNotFoundError)')

    monkeypatch.setattr(bindings, "nvrtcVersion", missing)
    with pytest.raises(CUDAError, match="NVRTC is not available.*nvidia-cuda-nvrtc"):
        nvrtc.compile_cubin("", 90)
