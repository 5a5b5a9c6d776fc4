"""CUDA detection and the errors of GPU requests (nnc/cuda/__init__.py; docs/gpu.md).

These run everywhere. The "installed, no driver" path is the real one on a machine with
cuda-bindings but no NVIDIA driver (CI); the other paths replace the pieces the probe looks at.
"""

import ctypes
import subprocess
import sys
import types

import numpy as np
import pytest

import nnc
from nnc import cuda

NO_GPU = pytest.mark.skipif(nnc.cuda_available(), reason="checks the errors of a machine without "
                            "a usable GPU; this one has one")


@pytest.fixture
def fresh_probe(monkeypatch):
    """Probe again under the test's patches, and forget that answer afterwards."""
    monkeypatch.delenv("NNC_DISABLE_CUDA", raising=False)
    cuda._reset()
    yield
    cuda._reset()


def _installed():
    return cuda._bindings_installed()


def _driver_present():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_import_nnc_imports_no_cuda_module():
    code = ("import sys, nnc; bad = [m for m in sys.modules if m.startswith('cuda.')]; "
            "assert not bad, bad; nnc.cuda_available(); print(nnc.cuda_unavailable_reason())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_answer_is_cached_and_consistent(fresh_probe, monkeypatch):
    calls = []
    real = cuda._probe

    def counting():
        calls.append(1)
        return real()

    monkeypatch.setattr(cuda, "_probe", counting)
    first = nnc.cuda_available()
    for _ in range(3):
        assert nnc.cuda_available() is first
        reason = nnc.cuda_unavailable_reason()
    assert len(calls) == 1
    assert isinstance(first, bool)
    assert (reason is None) == first
    assert (cuda.device_count() > 0) == first


def test_not_installed(fresh_probe, monkeypatch):
    # A None entry in sys.modules makes both find_spec and import see "no such module".
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    assert nnc.cuda_available() is False
    assert "cuda-bindings is not installed" in nnc.cuda_unavailable_reason()
    with pytest.raises(nnc.CUDAError, match="cuda-bindings is not installed"):
        nnc.Tensor.empty((2,), device="gpu")


@pytest.mark.skipif(not _installed() or _driver_present(),
                    reason="needs cuda-bindings installed and no NVIDIA driver (the CI machine)")
def test_installed_without_driver(fresh_probe):
    assert nnc.cuda_available() is False
    assert nnc.cuda_unavailable_reason() == "no CUDA driver (libcuda.so.1 not found)"
    assert cuda.device_count() == 0


def test_disabled_by_environment(fresh_probe, monkeypatch):
    monkeypatch.setenv("NNC_DISABLE_CUDA", "1")
    assert nnc.cuda_available() is False
    assert "NNC_DISABLE_CUDA" in nnc.cuda_unavailable_reason()


class _Err(int):
    """Stands in for a CUresult member: int-valued, with a name."""

    def __new__(cls, value, name):
        self = int.__new__(cls, value)
        self.name = name
        return self


def _fake_driver(monkeypatch, init=0, count=1, raises=None, driver=13000, bindings="13.4.4"):
    """Make the probe see a driver library and a fake cuda.bindings.driver: cuDriverGetVersion
    says ``driver`` (CUDA's integer version) and the bindings say they are ``bindings``."""
    drv = types.SimpleNamespace(CUresult=types.SimpleNamespace(
        CUDA_ERROR_NO_DEVICE=_Err(100, "CUDA_ERROR_NO_DEVICE"),
        CUDA_ERROR_INSUFFICIENT_DRIVER=_Err(35, "CUDA_ERROR_INSUFFICIENT_DRIVER")))

    def cu_init(flags):
        if raises is not None:
            raise raises
        return (_Err(init, {0: "CUDA_SUCCESS", 100: "CUDA_ERROR_NO_DEVICE",
                            35: "CUDA_ERROR_INSUFFICIENT_DRIVER"}.get(init, "CUDA_ERROR_UNKNOWN")),)

    drv.cuInit = cu_init
    drv.cuDeviceGetCount = lambda: (_Err(0, "CUDA_SUCCESS"), count)
    drv.cuDriverGetVersion = lambda: (_Err(0, "CUDA_SUCCESS"), driver)
    pkg = types.ModuleType("cuda.bindings")
    pkg.driver = drv
    pkg.__version__ = bindings
    monkeypatch.setitem(sys.modules, "cuda.bindings", pkg)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
    monkeypatch.setattr(cuda, "_bindings_installed", lambda: True)
    monkeypatch.setattr(cuda.ctypes, "CDLL", lambda name: object())


@pytest.mark.parametrize("kw, reason", [
    (dict(init=100), "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)"),
    (dict(init=35), "CUDA driver too old: cuInit returned CUDA_ERROR_INSUFFICIENT_DRIVER "
                    "(cuda-bindings 13.x)"),
    (dict(init=999), "cuInit failed: CUDA_ERROR_UNKNOWN"),
    (dict(driver=12040), "CUDA driver too old: found CUDA 12.4, need CUDA 13.0 or newer for "
                         "cuda-bindings 13.x; NVIDIA driver >= 580.65.06 on Linux"),
    (dict(driver=12090, bindings="12.9.4", count=0),
     "no CUDA device (cuDeviceGetCount returned 0)"),
    (dict(driver=11080, bindings="12.9.4"), "CUDA driver too old: found CUDA 11.8, need CUDA "
                                            "12.0 or newer for cuda-bindings 12.x; NVIDIA driver "
                                            ">= 525.60.13 on Linux"),
    (dict(count=0), "no CUDA device (cuDeviceGetCount returned 0)"),
    (dict(raises=RuntimeError("cannot load")), "CUDA driver not usable: RuntimeError: cannot "
                                               "load"),
])
def test_driver_without_usable_device(fresh_probe, monkeypatch, kw, reason):
    _fake_driver(monkeypatch, **kw)
    assert nnc.cuda_available() is False
    assert nnc.cuda_unavailable_reason() == reason
    with pytest.raises(nnc.CUDAError, match="unavailable: " + reason.split(" (")[0]):
        nnc.Tensor.zeros((2,), device="gpu:0")


@pytest.mark.parametrize("driver", [13000, 13010, 14000])
def test_driver_new_enough(fresh_probe, monkeypatch, driver):
    # Any driver of the bindings' major version or newer passes (minor-version compatibility).
    _fake_driver(monkeypatch, driver=driver)
    assert nnc.cuda_available() is True
    assert nnc.cuda_unavailable_reason() is None


def test_bindings_version_unreadable_skips_the_check(fresh_probe, monkeypatch):
    _fake_driver(monkeypatch, driver=9000, bindings="unknown")
    assert nnc.cuda_available() is True


def test_driver_version_query_fails(fresh_probe, monkeypatch):
    _fake_driver(monkeypatch)
    sys.modules["cuda.bindings.driver"].cuDriverGetVersion = lambda: (
        _Err(3, "CUDA_ERROR_NOT_INITIALIZED"), 0)
    assert nnc.cuda_available() is False
    assert nnc.cuda_unavailable_reason() == "cuDriverGetVersion failed: CUDA_ERROR_NOT_INITIALIZED"


def test_old_driver_through_the_runtime_fake():
    # tests/fakes/cuda_driver.py's driver, with the real bindings' enums: the probe asks the version
    # before cuInit and names both versions; a CUDA 13 driver passes to the device count.
    from fakes.cuda_driver import Checked, FakeDriver, real
    if real is None:
        pytest.skip("cuda-bindings is not installed (the fake borrows its enums)")
    old = FakeDriver(count=2, driver_version=12080)
    count, reason = cuda._probe_driver(Checked(old), 13)
    assert count == 0 and reason.startswith("CUDA driver too old: found CUDA 12.8, need CUDA 13.0")
    assert old.calls == ["cuDriverGetVersion"]
    new = FakeDriver(count=2, driver_version=13000)
    assert cuda._probe_driver(Checked(new), 13) == (2, None)
    assert new.calls == ["cuDriverGetVersion", "cuInit", "cuDeviceGetCount"]


def test_gpu_ordinal_beyond_device_count(fresh_probe, monkeypatch):
    _fake_driver(monkeypatch, count=2)
    assert nnc.cuda_available() is True and cuda.device_count() == 2
    assert nnc.cuda_unavailable_reason() is None
    cuda.require(1, "x")
    with pytest.raises(nnc.CUDAError, match=r"no gpu:2 \(2 CUDA device"):
        nnc.Tensor.empty((2,), device="gpu:2")
    with pytest.raises(nnc.CUDAError, match="no gpu:5"):
        nnc.static_schedule(nnc.Graph(), stream_type="gpu:5")


@NO_GPU
def test_every_gpu_request_names_the_reason():
    reason = nnc.cuda_unavailable_reason()
    g = nnc.Graph()
    g.exec(nnc.Cmd("SET", value=1.0), [], [nnc.Tensor(np.zeros(2, np.float32))])
    requests = [
        lambda: nnc.Tensor.empty((2, 3), device="gpu"),
        lambda: nnc.Tensor.zeros((2, 3), dtype="float64", device="gpu:0"),
        lambda: nnc.Stream("gpu"),
        lambda: nnc.Stream("gpu:1"),
        lambda: nnc.Signal("gpu"),
        lambda: nnc.static_schedule(g, stream_type="gpu"),
        lambda: nnc.static_schedule(g, stream_type="gpu:0", max_streams=2),
    ]
    for request in requests:
        with pytest.raises(nnc.CUDAError) as info:
            request()
        assert reason in str(info.value) and "needs CUDA" in str(info.value)
        assert isinstance(info.value, nnc.NNCError) and isinstance(info.value, RuntimeError)
    assert g.schedule is None  # the failed call left no schedule behind


@pytest.mark.parametrize("spec", ["gpu:x", "gpu:-1", "gpu:", "GPU", "gpu0", " gpu", "gpu:1.0",
                                  "tpu", "cuda:0", "gpu:٣", 0, None.__class__])
def test_malformed_device_strings(spec):
    assert cuda.parse_gpu(spec) is None
    with pytest.raises(nnc.TensorError, match="unknown device"):
        nnc.Tensor.empty((2,), device=spec)
    with pytest.raises(nnc.NNCError, match="unknown stream kind"):
        nnc.Stream(spec)
    with pytest.raises(nnc.NNCError, match="unknown stream kind"):
        nnc.Signal(spec)
    with pytest.raises(nnc.DeviceError, match="unknown device"):
        nnc.static_schedule(nnc.Graph(), stream_type=spec)


def test_parse_gpu():
    assert [cuda.parse_gpu(s) for s in ("gpu", "gpu:0", "gpu:3", "gpu:12")] == [0, 0, 3, 12]
    assert cuda.parse_gpu("cpu") is None


def test_gpu_benchmark_without_gpu_says_why_and_exits_0():
    import json
    import os
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, NNC_DISABLE_CUDA="1")
    out = subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--json"], cwd=root, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("no GPU: CUDA disabled by NNC_DISABLE_CUDA=1")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["gpu"] is None and "NNC_DISABLE_CUDA" in report["reason"]
    assert report["benchmark"] == "gpu" and report["nnc"] and report["date"]
