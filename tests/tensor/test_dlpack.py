"""DLPack: Tensor.__dlpack__ / __dlpack_device__ and nnc.from_dlpack (docs/design.md, "DLPack").

Round trips with NumPy share memory both ways; capsules keep their producer alive until the
consumer's deleter runs and free it when nobody consumes them; errors name the problem.
GPU paths run against the fake driver (tests/fakes/cuda_driver.py), and on a real GPU where one
exists.
"""

import gc
import sys
import threading
import weakref

import numpy as np
import pytest

import nnc
from nnc.tensor import dlpack

DTYPES = ["float16", "float32", "float64", "int32", "int64", "uint8"]


def test_numpy_to_nnc_to_numpy_shares_memory_both_ways():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = nnc.from_dlpack(a)
    assert isinstance(t, nnc.Tensor)
    assert t.shape == (3, 4) and t.dtype == np.float32 and t.device == "cpu"
    assert t.data_ptr == a.ctypes.data
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data and np.shares_memory(a, b)
    a[1, 2] = 100.0
    assert t.numpy()[1, 2] == 100.0 and b[1, 2] == 100.0
    b[0, 0] = -5.0
    assert a[0, 0] == -5.0 and t.numpy()[0, 0] == -5.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_nnc_dtype_round_trips(dtype):
    a = (np.arange(6) % 7).astype(dtype).reshape(2, 3)
    t = nnc.from_dlpack(a)
    assert t.dtype == np.dtype(dtype)
    out = np.from_dlpack(t)
    assert out.dtype == np.dtype(dtype) and np.shares_memory(out, a)
    np.testing.assert_array_equal(out, a)


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "uint16", "uint32", "uint64",
                                   "complex64", "complex128"])
def test_other_dtypes_raise_tensor_error_naming_them(dtype):
    a = np.zeros(3, dtype)
    with pytest.raises(nnc.TensorError, match="not supported") as e:
        nnc.from_dlpack(a)
    name = {"bool": "bool", "int8": "int8", "int16": "int16", "uint16": "uint16",
            "uint32": "uint32", "uint64": "uint64", "complex64": "complex64",
            "complex128": "complex128"}[dtype]
    assert name in str(e.value)


def test_a_refused_capsule_is_not_leaked():
    """On an error the capsule stays unconsumed: its destructor hands the memory back."""
    a = np.zeros(3, np.int8)
    ref = weakref.ref(a)
    with pytest.raises(nnc.TensorError):
        nnc.from_dlpack(a)
    del a
    gc.collect()
    assert ref() is None


def test_views_byte_offsets_and_negative_strides():
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    for view in (base[1], base[:, 1:3, ::2], base[::-1, :, 2], base[..., ::-2], base.T,
                 base[2, 3, 4:5]):
        t = nnc.from_dlpack(view)
        assert t.shape == view.shape
        assert t.strides == tuple(s // 8 for s in view.strides)
        np.testing.assert_array_equal(t.numpy(), view)
        assert np.shares_memory(t.numpy(), base)
        assert t.is_contiguous == view.flags.c_contiguous
        back = np.from_dlpack(t)
        np.testing.assert_array_equal(back, view)
        assert back.strides == view.strides and np.shares_memory(back, base)


def test_nnc_view_exports_its_offset_and_strides():
    t = nnc.Tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
    v = t.view((2, 3), offset=7, strides=(6, 2))
    a = np.from_dlpack(v)
    np.testing.assert_array_equal(a, t.numpy().reshape(-1)[7:19].reshape(2, 6)[:, ::2])
    a[1, 2] = -1.0
    assert t.numpy().reshape(-1)[7 + 6 + 4] == -1.0


def test_zero_d_and_empty_tensors():
    z = np.array(3.5, np.float32)
    t = nnc.from_dlpack(z)
    assert t.shape == () and t.numpy()[()] == 3.5 and np.shares_memory(t.numpy(), z)
    assert np.from_dlpack(t)[()] == 3.5
    for shape in ((0,), (3, 0), (0, 4, 5)):
        e = np.zeros(shape, np.int64)
        t = nnc.from_dlpack(e)
        assert t.shape == shape and t.size == 0
        assert np.from_dlpack(t).shape == shape
        assert np.from_dlpack(nnc.Tensor.empty(shape, "float32")).shape == shape


def test_twelve_dimensions_and_not_thirteen():
    a = np.zeros((1, 2) * 6, np.float32)
    t = nnc.from_dlpack(a)
    assert t.ndim == 12 and np.shares_memory(np.from_dlpack(t), a)
    with pytest.raises(nnc.TensorError, match="at most 12"):
        nnc.from_dlpack(np.zeros((1,) * 13, np.float32))


def test_dropped_producer_keeps_memory_alive():
    a = np.arange(5, dtype=np.float64)
    ref = weakref.ref(a)
    t = nnc.from_dlpack(a)
    del a
    gc.collect()
    assert ref() is not None           # the capsule's manager context holds it
    v = t.view((2,), offset=3)
    arr = t.numpy()
    del t
    gc.collect()
    assert ref() is not None           # the view and the ndarray still use the memory
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])
    del v, arr
    gc.collect()
    assert ref() is None                # and the producer's deleter ran


def test_exported_capsule_keeps_tensor_alive_until_the_consumer_deleter_runs():
    t = nnc.Tensor(np.arange(4, dtype=np.int32))
    owner = weakref.ref(t.numpy())
    before = sys.getrefcount(t)
    cap = t.__dlpack__(max_version=(1, 0))
    assert sys.getrefcount(t) == before + 1
    a = np.from_dlpack(_Holder(cap))    # NumPy consumes the capsule, keeps it until a dies
    del t
    gc.collect()
    assert owner() is not None
    del cap
    gc.collect()
    assert owner() is not None
    np.testing.assert_array_equal(a, [0, 1, 2, 3])
    del a
    gc.collect()
    assert owner() is None


def test_unconsumed_capsule_is_freed_by_its_destructor():
    t = nnc.Tensor(np.ones(3, np.float32))
    before = sys.getrefcount(t)
    for max_version in (None, (1, 0), (1, 3), (2, 0)):
        cap = t.__dlpack__(max_version=max_version)
        assert sys.getrefcount(t) == before + 1
        del cap
        assert sys.getrefcount(t) == before


def test_no_leak_over_many_round_trips():
    t = nnc.Tensor(np.ones((8, 8), np.float32))
    base = sys.getrefcount(t)
    for _ in range(2000):
        a = np.from_dlpack(t)
        u = nnc.from_dlpack(t)
        w = nnc.from_dlpack(a)
        del a, u, w
    gc.collect()
    assert sys.getrefcount(t) == base


def test_debug_counters_balance():
    from nnc.base import debug

    gc.collect()
    before = debug.counters()["tensors"]
    a = np.ones(4, np.float32)
    ts = [nnc.from_dlpack(nnc.from_dlpack(a)) for _ in range(50)]
    del ts
    gc.collect()
    assert debug.counters()["tensors"] == before


class _Holder:
    """Hands a ready capsule to a consumer (as a producer that already exported would)."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def test_versioned_and_legacy_capsules():
    t = nnc.Tensor(np.arange(3, dtype=np.float32))
    assert _capsule_name(t.__dlpack__()) == "dltensor"
    assert _capsule_name(t.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert _capsule_name(t.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert _capsule_name(t.__dlpack__(max_version=(1, 5))) == "dltensor_versioned"
    for cap in (t.__dlpack__(), t.__dlpack__(max_version=(1, 0))):
        u = nnc.from_dlpack(_Holder(cap))
        assert u.data_ptr == t.data_ptr
        assert _capsule_name(cap).startswith("used_")
        with pytest.raises(nnc.TensorError, match="not an unconsumed DLPack"):
            nnc.from_dlpack(_Holder(cap))   # a capsule is consumed once


def _capsule_name(cap):
    import ctypes

    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(cap).decode()


def test_read_only_memory():
    a = np.arange(4, dtype=np.float64)
    a.flags.writeable = False
    t = nnc.from_dlpack(a)              # NumPy sets the DLPack 1.x read-only flag
    assert t.readonly
    with pytest.raises(nnc.CommandError, match="read-only"):
        nnc.cmd_exec(nnc.Cmd("SET", value=1.0), [], [t])
    b = np.from_dlpack(t)               # and so does nnc: NumPy gets a read-only array
    assert not b.flags.writeable and np.shares_memory(a, b)
    # The legacy capsule cannot say read-only: refused, as NumPy refuses it, unless copied.
    with pytest.raises(nnc.DLPackError, match="read-only") as e:
        t.__dlpack__()
    assert isinstance(e.value, BufferError) and isinstance(e.value, nnc.TensorError)
    cap = t.__dlpack__(copy=True)
    c = nnc.from_dlpack(_Holder(cap))
    assert not c.readonly and not np.shares_memory(c.numpy(), a)
    np.testing.assert_array_equal(c.numpy(), a)


def test_copy_argument():
    a = np.arange(6, dtype=np.int32)
    t = nnc.from_dlpack(a, copy=True)
    assert not np.shares_memory(t.numpy(), a)
    np.testing.assert_array_equal(t.numpy(), a)
    assert np.shares_memory(nnc.from_dlpack(a, copy=False).numpy(), a)
    u = nnc.Tensor(a)
    b = np.from_dlpack(u, copy=True)
    assert not np.shares_memory(b, a)
    np.testing.assert_array_equal(b, a)
    assert np.shares_memory(np.from_dlpack(u, copy=False), a)
    with pytest.raises(nnc.TensorError, match="copy must be"):
        nnc.from_dlpack(a, copy="yes")
    with pytest.raises(nnc.DLPackError, match="copy must be"):
        u.__dlpack__(copy=1)


def test_device_and_stream_arguments_on_cpu():
    t = nnc.Tensor(np.zeros(2, np.float32))
    assert t.__dlpack_device__() == (1, 0)
    t.__dlpack__(dl_device=(1, 0))
    for stream in (0, 1, -1):
        with pytest.raises(nnc.DLPackError, match="stream must be None"):
            t.__dlpack__(stream=stream)
    for dev in ((4, 0), (1, 1), "cpu", (1,)):
        with pytest.raises(nnc.DLPackError, match="dl_device|exports to"):
            t.__dlpack__(dl_device=dev)
    with pytest.raises(nnc.DLPackError, match="max_version"):
        t.__dlpack__(max_version=1)
    assert nnc.from_dlpack(t, device="cpu").data_ptr == t.data_ptr


def test_from_dlpack_bad_objects():
    for bad in ([1, 2], 3.0, "x", None):
        with pytest.raises(nnc.TensorError, match="__dlpack__"):
            nnc.from_dlpack(bad)
    with pytest.raises(nnc.TensorError, match="PyCapsule"):
        nnc.from_dlpack(_Holder(object()))
    with pytest.raises(nnc.TensorError, match="kDLVulkan"):
        nnc.from_dlpack(_Holder(None, device=(7, 0)))
    with pytest.raises(nnc.TensorError, match="device_type"):
        nnc.from_dlpack(_Holder(None, device="cpu"))
    t = nnc.Tensor(np.zeros(2, np.float32))
    # A producer whose capsule disagrees with what __dlpack_device__ said.
    with pytest.raises(nnc.TensorError, match="is not the one"):
        nnc.from_dlpack(_Holder(_with_device(t, 2)))


def _with_device(t, kind):
    """A capsule of t whose DLTensor claims device type ``kind`` (through ctypes)."""
    import ctypes

    cap = t.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    ptr = get(cap, b"dltensor")
    # DLTensor: void* data, then DLDevice {int32 device_type, int32 device_id}.
    ctypes.c_int32.from_address(ptr + 8).value = kind
    return cap


def test_pinned_host_memory_is_cpu():
    """kDLCUDAHost (pinned host memory) is readable by the CPU: it becomes a CPU tensor."""
    a = np.arange(3, dtype=np.float32)
    t = nnc.from_dlpack(_Holder(_with_device(nnc.Tensor(a), 3), device=(3, 0)))
    assert t.device == "cpu" and np.shares_memory(t.numpy(), a)


def test_legacy_producer_without_keywords():
    class Old:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    a = np.arange(3.0)
    t = nnc.from_dlpack(Old(a))
    assert np.shares_memory(t.numpy(), a)


def test_deleter_from_another_thread():
    """A consumer may release the capsule on any thread."""
    t = nnc.Tensor(np.arange(1000, dtype=np.float32))
    ref = weakref.ref(t.numpy())
    arrays = [np.from_dlpack(t) for _ in range(8)]
    del t
    gc.collect()

    def drop():
        arrays.clear()
        gc.collect()

    th = threading.Thread(target=drop)
    th.start()
    th.join(timeout=30)
    assert not th.is_alive()
    gc.collect()
    assert ref() is None


def test_torch_round_trip_if_installed():
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]
    t = nnc.from_dlpack(x)
    assert t.data_ptr == x.data_ptr() and t.strides == tuple(x.stride())
    x[0, 0] = 42.0
    assert t.numpy()[0, 0] == 42.0
    y = torch.from_dlpack(nnc.Tensor(np.arange(4, dtype=np.int64)))
    assert y.dtype == torch.int64 and y.tolist() == [0, 1, 2, 3]
    with pytest.raises(nnc.TensorError, match="bool"):
        nnc.from_dlpack(torch.zeros(2, dtype=torch.bool))


def test_dlpack_error_is_a_buffer_error_and_a_tensor_error():
    assert issubclass(nnc.DLPackError, BufferError)
    assert issubclass(nnc.DLPackError, nnc.TensorError)
    assert issubclass(nnc.DLPackError, nnc.NNCError)
    assert dlpack.DLPackError is nnc.DLPackError


# -- GPU tensors: the fake driver (host logic and driver calls), or a real GPU ---------------

@pytest.fixture
def fake_gpu(monkeypatch):
    from fakes.cuda_driver import install, real

    if real is None:
        pytest.skip("cuda-bindings is not installed (the fake driver borrows its types)")
    from nnc.cuda import memory

    yield install(monkeypatch, count=2)
    memory._staging.clear()
    gc.collect()        # free fake buffers while the fake driver is still installed


def test_gpu_export_is_zero_copy_and_synchronises_the_device(fake_gpu):
    from nnc.cuda import memory

    t = memory.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), "gpu:1")
    assert t.__dlpack_device__() == (2, 1)
    n = fake_gpu.calls.count("cuCtxSynchronize")
    u = nnc.from_dlpack(t)              # nnc as both producer and consumer
    assert u.device == "gpu:1" and u.data_ptr == t.data_ptr and u.shape == (2, 3)
    assert fake_gpu.calls.count("cuCtxSynchronize") == n + 1
    np.testing.assert_array_equal(u.numpy(), np.arange(6).reshape(2, 3))
    # stream=-1: the consumer asks for no synchronisation.
    cap = t.__dlpack__(stream=-1, max_version=(1, 0))
    assert fake_gpu.calls.count("cuCtxSynchronize") == n + 1
    v = nnc.from_dlpack(_Holder(cap, device=(2, 1)))
    assert v.data_ptr == t.data_ptr
    # A strided GPU view keeps its offset and strides.
    w = nnc.from_dlpack(t.view((2,), offset=1, strides=(3,)))
    assert w.data_ptr == t.data_ptr + 4 and w.strides == (3,)
    np.testing.assert_array_equal(w.numpy(), [1.0, 4.0])
    del t, u, v, w, cap


def test_gpu_stream_argument_is_validated(fake_gpu):
    t = nnc.Tensor.zeros((2,), device="gpu:0")
    for ok in (None, -1, 1, 2, 12345):
        t.__dlpack__(stream=ok, max_version=(1, 0))
    for bad in (0, -2, "s", 1.5, True):
        with pytest.raises(nnc.DLPackError, match="stream must be"):
            t.__dlpack__(stream=bad)
    del t


def test_gpu_to_cpu_and_back_copies_only_when_allowed(fake_gpu):
    from nnc.cuda import memory

    t = memory.from_numpy(np.arange(4, dtype=np.int64), "gpu:0")
    with pytest.raises(nnc.DLPackError, match="needs a copy"):
        t.__dlpack__(dl_device=(1, 0), copy=False)
    with pytest.raises(nnc.DLPackError, match="needs a copy"):
        np.from_dlpack(t, device="cpu", copy=False)
    h = nnc.from_dlpack(_Holder(t.__dlpack__(dl_device=(1, 0), max_version=(1, 0))))
    assert h.device == "cpu" and h.numpy().tolist() == [0, 1, 2, 3]
    assert nnc.from_dlpack(t, device="cpu").numpy().tolist() == [0, 1, 2, 3]
    with pytest.raises(nnc.TensorError, match="copy=False"):
        nnc.from_dlpack(t, device="cpu", copy=False)
    g = nnc.from_dlpack(h, device="gpu:1")
    assert g.device == "gpu:1" and g.numpy().tolist() == [0, 1, 2, 3]
    c = nnc.Tensor(np.ones(2, np.float32))
    d = nnc.from_dlpack(_Holder(c.__dlpack__(dl_device=(2, 0), stream=-1, max_version=(1, 0)),
                                device=(2, 0)))
    assert d.device == "gpu:0" and d.numpy().tolist() == [1.0, 1.0]
    del t, h, g, d


def test_gpu_import_without_cuda_says_why():
    from nnc import cuda

    if cuda.available():
        pytest.skip("a GPU is present")
    with pytest.raises(nnc.CUDAError, match="from_dlpack of a kDLCUDA"):
        nnc.from_dlpack(_Holder(None, device=(2, 0)))


def test_gpu_round_trip_on_a_real_gpu():
    from nnc import cuda

    if not cuda.available():
        pytest.skip(f"no GPU: {cuda.unavailable_reason()}")
    from nnc.cuda import memory

    t = memory.from_numpy(np.arange(8, dtype=np.float32), "gpu:0")
    u = nnc.from_dlpack(t)
    assert u.data_ptr == t.data_ptr
    np.testing.assert_array_equal(u.numpy(), np.arange(8))
