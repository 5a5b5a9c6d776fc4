"""nnc.base.device: the one device-string parser, the array-interface holder, the GPU table."""

import numpy as np
import pytest

import nnc
from nnc.base import device

BAD = ["gpu:", "gpu:-1", "GPU", "cuda", 3, None, "gpu:x", "gpu0", " gpu", "gpu:1.0", "cpu:0",
       "gpu:٣", b"cpu", "", 0.0]


def test_parse_device_good_strings():
    assert device.parse_device("cpu") == -1
    assert [device.parse_device(s) for s in ("gpu", "gpu:0", "gpu:3", "gpu:12")] == [0, 0, 3, 12]


@pytest.mark.parametrize("spec", BAD, ids=repr)
def test_parse_device_bad_strings_raise_one_error(spec):
    with pytest.raises(nnc.DeviceError, match=r"unknown device .*expected 'cpu', 'gpu' or "
                                              r"'gpu:N'") as info:
        device.parse_device(spec)
    # One class for every caller: an NNCError, a TensorError (a device is a tensor's
    # property first) and a ValueError.
    assert isinstance(info.value, nnc.NNCError) and isinstance(info.value, nnc.TensorError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("spec", ["gpu:", "gpu:-1", "GPU", "cuda", 3], ids=repr)
def test_every_caller_raises_the_same_error(spec):
    msg = str(pytest.raises(nnc.DeviceError, device.parse_device, spec).value)
    with pytest.raises(nnc.DeviceError) as t:
        nnc.Tensor.empty((2,), device=spec)
    with pytest.raises(nnc.DeviceError) as s:
        nnc.static_schedule(nnc.Graph(), stream_type=spec)
    with pytest.raises(nnc.DeviceError) as d:
        nnc.from_dlpack(np.ones(2), device=spec)
    assert str(t.value) == str(s.value) == str(d.value) == msg


def test_require_device_cpu_is_free_and_gpu_goes_through_nnc_cuda():
    device.require_device(-1)
    if not nnc.cuda_available():
        with pytest.raises(nnc.CUDAError, match="gpu:7"):
            device.require_device(7, "gpu:7")


def test_gpu_table_without_nnc_cuda(monkeypatch):
    monkeypatch.setattr(device, "_require", None)
    monkeypatch.setattr(device, "_load", None)
    monkeypatch.setattr(device, "_memory", None)
    with pytest.raises(nnc.CUDAError, match="not loaded"):
        device.require_device(0, "gpu:0")
    with pytest.raises(nnc.CUDAError, match="not loaded"):
        device.gpu_memory("empty")
    with pytest.raises(TypeError):
        device.register_gpu(None, None)


def test_gpu_table_refuses_an_incomplete_registration(monkeypatch):
    monkeypatch.setattr(device, "_memory", None)
    monkeypatch.setattr(device, "_load", lambda: {"empty": print})
    with pytest.raises(nnc.CUDAError, match="lacks"):
        device.gpu_memory("empty")


def test_array_interface_holder_keeps_its_owner_alive():
    owner = np.arange(6, dtype=np.float32)
    iface = dict(owner.__array_interface__)
    a = np.asarray(device.ArrayInterface(iface, owner))
    assert a.base.owner is owner and np.shares_memory(a, owner)
    v = nnc.Tensor(np.ones((2, 3), np.float32)).view((3,), offset=2)
    assert isinstance(v.numpy().base, device.ArrayInterface)  # tensor.pyx uses this holder
