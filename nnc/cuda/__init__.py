"""CUDA detection: is a usable NVIDIA GPU here, and if not, why not.

Layer 3, beside nnc.stream: layers 0-3 never import it; it fills their device tables when
``import nnc`` registers it. nnc.cuda.capture (CUDA-graph capture of a run) is a runner, layer 6.
The GPU backends live with their command families (nnc/cmd/<family>/gpu/, this layer too), made
by nnc.cuda.runner and registered by nnc.cuda.builtins.

NNC: ccv_nnc_device_count / the GPU half of ccv_nnc_init. Nothing here imports cuda-bindings at
``import nnc``: the probe runs on the first call of :func:`available` (or of anything that needs
a GPU), takes a lock, and caches its answer for the process. It never raises; every GPU request
made while CUDA is unavailable raises :class:`nnc.CUDAError` carrying the cached reason, e.g.
``no CUDA driver (libcuda.so.1 not found)``.

The probe checks, cheapest first (docs/gpu.md):

1. ``NNC_DISABLE_CUDA`` set to anything but ""/"0": disabled.
2. ``cuda.bindings`` (the cuda-bindings package: ``pip install 'nnc-graph[cuda]'``) is
   importable, found without importing it (importing the driver module costs ~80 ms).
3. ``libcuda.so.1`` loads with ctypes (no driver -> OSError, 0.2 ms), before cuda.bindings is
   imported at all; cuda.bindings would otherwise raise its own DynamicLibNotFoundError on the
   first driver call.
4. ``cuDriverGetVersion`` (which needs no cuInit) reports at least the CUDA major version the
   installed cuda-bindings was built for: cuda-bindings 13.x needs a CUDA 13 driver (NVIDIA
   driver >= 580.65.06 on Linux). An older driver is reported as "driver too old", with both
   versions, instead of failing later on the first call the old driver lacks.
5. ``cuInit(0)`` succeeds (a driver without a device returns CUDA_ERROR_NO_DEVICE; a too-old
   driver CUDA_ERROR_INSUFFICIENT_DRIVER) and ``cuDeviceGetCount`` finds at least one device.

``cuInit`` runs in the probing process only: call nothing here before ``fork`` (multiprocessing,
pytest-xdist) if the children need CUDA.

:func:`set_precision` / :func:`precision`: the float32 math GPU_OPT's convolutions and GEMMs may
use, "ieee" (strict float32, the default) or "tf32" (tensor cores with inputs rounded to TF32),
process-wide like ``torch.backends.cuda.matmul.fp32_precision``. docs/gpu.md states when it is
read and the error bound of each.
"""

import ctypes
import importlib.util
import os
import threading

from nnc.base import device as _device
from nnc.base.core import CUDAError, NNCError
from nnc.stream.stream import stream_register_device

__all__ = ["PRECISIONS", "CUDAError", "PrecisionError", "available", "device_count", "parse_gpu",
           "precision", "require", "set_precision", "unavailable_reason"]

_DRIVER_LIBRARY = "libcuda.so.1"
# The oldest Linux NVIDIA driver of each CUDA major version (minor-version compatibility: any
# driver of that major runs bindings of any minor); cuda-bindings' install page states them.
_MIN_LINUX_DRIVER = {12: "525.60.13", 13: "580.65.06"}

# The values of set_precision: "ieee" keeps float32 convolutions and GEMMs on IEEE float32
# arithmetic (no tensor cores), "tf32" lets cuDNN and cuBLAS round their float32 inputs to TF32
# (10 mantissa bits) for tensor cores, still accumulating in float32.
PRECISIONS = ("ieee", "tf32")
_precision = "ieee"                 # one of PRECISIONS; read by every float32 GPU_OPT enqueue

_lock = threading.Lock()
_status = None                      # (device_count, reason): reason is None iff count > 0


def _bindings_installed():
    try:
        return importlib.util.find_spec("cuda.bindings") is not None
    except (ImportError, ValueError):
        # A parent package that is not a package, or a module whose __spec__ is None.
        return False


def _error_name(err):
    return getattr(err, "name", None) or f"error {int(err)}"


def _bindings_major():
    """The CUDA major version the installed cuda-bindings targets (13 for 13.4.4), or None."""
    try:
        from cuda.bindings import __version__
        return int(__version__.split(".")[0])
    except Exception:  # an odd install: skip the version check rather than fail the probe
        return None


def _cuda_version(v):
    """CUDA's integer version (12040) as text ("12.4")."""
    return f"{v // 1000}.{v % 1000 // 10}"


def _driver_too_old(cu, need_major):
    """None if the driver reports CUDA need_major or newer; else the reason, naming both."""
    if need_major is None:
        return None
    err, version = cu.cuDriverGetVersion()
    if int(err) != 0:
        return f"cuDriverGetVersion failed: {_error_name(err)}"
    version = int(version)
    if version >= need_major * 1000:
        return None
    floor = _MIN_LINUX_DRIVER.get(need_major)
    driver = f"; NVIDIA driver >= {floor} on Linux" if floor else ""
    return (f"CUDA driver too old: found CUDA {_cuda_version(version)}, need CUDA {need_major}.0 "
            f"or newer for cuda-bindings {need_major}.x{driver}")


def _probe_driver(cu, need_major):
    """(device_count, reason) from driver module ``cu``: version, cuInit, device count."""
    try:
        reason = _driver_too_old(cu, need_major)
        if reason is not None:
            return 0, reason
        (err,) = cu.cuInit(0)
        if int(err) != 0:
            if int(err) == int(cu.CUresult.CUDA_ERROR_NO_DEVICE):
                return 0, "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)"
            if int(err) == int(cu.CUresult.CUDA_ERROR_INSUFFICIENT_DRIVER):
                return 0, ("CUDA driver too old: cuInit returned CUDA_ERROR_INSUFFICIENT_DRIVER "
                           f"(cuda-bindings {need_major or '?'}.x)")
            return 0, f"cuInit failed: {_error_name(err)}"
        err, count = cu.cuDeviceGetCount()
        if int(err) != 0:
            return 0, f"cuDeviceGetCount failed: {_error_name(err)}"
    except Exception as e:  # the probe must never raise, even on a broken install
        # cuda.pathfinder raises DynamicLibNotFoundError (a RuntimeError) when the driver
        # library is present for ctypes but not loadable for the bindings.
        return 0, f"CUDA driver not usable: {type(e).__name__}: {e}"
    if count <= 0:
        return 0, "no CUDA device (cuDeviceGetCount returned 0)"
    return int(count), None


def _probe():
    """Return (device_count, reason); reason names why no GPU can be used, else None."""
    flag = os.environ.get("NNC_DISABLE_CUDA", "")
    if flag not in ("", "0"):
        return 0, f"CUDA disabled by NNC_DISABLE_CUDA={flag}"
    if not _bindings_installed():
        return 0, "cuda-bindings is not installed (pip install 'nnc-graph[cuda]')"
    try:
        ctypes.CDLL(_DRIVER_LIBRARY)
    except OSError:
        return 0, f"no CUDA driver ({_DRIVER_LIBRARY} not found)"
    try:
        from cuda.bindings import driver as cu
    except ImportError as e:
        return 0, f"cuda.bindings failed to import: {e}"
    return _probe_driver(cu, _bindings_major())


def _get_status():
    global _status
    status = _status
    if status is None:
        with _lock:
            if _status is None:
                _status = _probe()
            status = _status
    return status


def _reset():
    """Forget the cached probe (tests only: the real answer cannot change in a process)."""
    global _status
    with _lock:
        _status = None


def available():
    """True if cuda-bindings, an NVIDIA driver and at least one GPU are present. Never raises."""
    return _get_status()[0] > 0


def unavailable_reason():
    """Why CUDA cannot be used (a sentence), or None when it can."""
    return _get_status()[1]


def device_count():
    """The number of usable GPUs (0 when CUDA is unavailable)."""
    return _get_status()[0]


def parse_gpu(spec):
    """The ordinal of a GPU device string ("gpu" is "gpu:0"); None if spec is not one.

    Only the syntax is checked (by nnc.base.device's one parser); :func:`require` checks that the
    GPU exists.
    """
    try:
        ordinal = _device.parse_device(spec)
    except _device.DeviceError:
        return None
    return ordinal if ordinal >= 0 else None


def require(ordinal=0, what="this"):
    """Raise CUDAError unless GPU ``ordinal`` can be used; ``what`` names the request."""
    count, reason = _get_status()
    if reason is not None:
        raise CUDAError(f"{what} needs CUDA, which is unavailable: {reason}")
    if not 0 <= ordinal < count:
        raise CUDAError(f"{what}: there is no gpu:{ordinal} ({count} CUDA device(s) found)")


class PrecisionError(NNCError, ValueError):
    """A value :func:`set_precision` does not know."""


def set_precision(value):
    """Let GPU_OPT's float32 CONVOLUTION and GEMM use TF32 tensor cores (``"tf32"``) or keep
    them strict IEEE float32 (``"ieee"``, the default), for the whole process.

    Read each time a float32 GPU_OPT node is enqueued (an eager ``cmd_exec``, each node of each
    ``Graph.run`` on a GPU stream, autotune's trial runs), so it takes effect from the next
    run of every graph, bound or not; a CUDA graph captured earlier (nnc.cuda.capture.capture)
    replays the precision it was captured with. float16 and float64 do not depend on it.
    Needs no GPU. Anything but "ieee" or "tf32" raises :class:`PrecisionError`.
    """
    global _precision
    if not isinstance(value, str) or value not in PRECISIONS:
        raise PrecisionError(f"unknown CUDA float32 precision {value!r}; expected one of "
                             f"{', '.join(map(repr, PRECISIONS))}")
    _precision = value


def precision():
    """The float32 precision GPU_OPT uses now: "ieee" (the default) or "tf32"."""
    return _precision


def _memory_table():
    from nnc.cuda import memory  # imports the driver module: only on the first GPU use

    return memory.device_table()


# The tensor layer (below this one) reaches GPUs only through nnc.base.device's table.
_device.register_gpu(require, _memory_table)


class _StreamKinds:
    """The GPU kinds of nnc.Stream and nnc.Signal, registered with the stream layer below
    (which never imports nnc.cuda). Nothing is imported from cuda-bindings until a GPU stream
    or signal is made."""

    @staticmethod
    def parse(kind):
        ordinal = parse_gpu(kind)
        if ordinal is None:
            raise NNCError(f"unknown stream kind {kind!r}; expected 'cpu', 'gpu' or 'gpu:N'")
        require(ordinal, f"a {kind!r} stream or signal")
        return f"gpu:{ordinal}"

    @staticmethod
    def stream(kind):
        from nnc.cuda.gpu_stream import GpuStream

        return GpuStream(kind)

    @staticmethod
    def signal(kind):
        from nnc.cuda.gpu_stream import GpuSignal

        return GpuSignal(kind)


# The stream layer (beside this one) reaches GPU streams only through this registration.
stream_register_device(_StreamKinds())
