"""GPU_OPT of CONVOLUTION: cuDNN through NVIDIA's cudnn-frontend Python API (``import cudnn``).

One file of ~800 lines: the plans, their timing, the disk cache and the execute all key on one
geometry record and share one per-device lock. Its documented path ``nnc.cuda.cudnn_conv`` is this
same module (nnc/cuda/cudnn_conv.py makes it so), so setting ``TUNE`` there reaches it.

NNC: cmd/convolution/gpu/ccv_nnc_conv_gpu_cudnn.cu. GPU_REF's direct convolution is a
reference kernel; this backend hands the same NHWC convolution, with its fused bias + ReLU
epilogue, to cuDNN's graph API. Registered at ``import nnc`` with priority 20 (GPU_REF: 15),
so it is the default choice wherever it accepts; ``autotune`` may still pick either.
Registering imports neither cuda-bindings nor cudnn: the frontend is imported the first time a
GPU convolution asks (:func:`available`), and where it is missing GPU_REF runs everything.

Layout mapping (cuDNN describes every tensor as NCHW dims with arbitrary strides):

- x [N, H, W, C] (N = 1 for [H, W, C]) with pixel stride p: dims [N, C, H, W], strides
  [H*W*p, 1, W*p, p]; p > C is a channel slice of a wider buffer (a concat's input).
- w [O, kh, kw, C/g] contiguous: dims [O, C/g, kh, kw], strides [kh*kw*C/g, 1, kw*C/g, C/g]
  (cuDNN's KRSC layout); cuDNN infers the group count from C / (C/g).
- bias [O]: dims [1, O, 1, 1]; out [N, Ho, Wo, O] with pixel stride q: like x.
- padding (top, left, bottom, right) becomes pre_padding [top, left] and post_padding
  [bottom, right]; stride as given, dilation 1 (nnc's convolution has none).

One cuDNN graph per geometry (shapes, pixel strides, padding, stride, groups, dtype, float32
precision, bias, ReLU) and device, built once (validate, build_operation_graph,
create_execution_plans with heuristics A then FALLBACK, check_support, then the plan: see
"Timed plans" in docs/gpu.md) and shared by every stream of the device. Plans exclude engines
whose numerical notes lose accuracy (down-converted inputs, reduced-precision reductions, FFT,
large Winograd tiles), and float32 plans under nnc.cuda.precision() "ieee" also TF32 tensor
cores, so the results keep docs/commands.md's float32 bound like GPU_REF's; under "tf32"
tensor-core engines may run them (docs/gpu.md: the TF32 bound). The precision is part of the
key, and a prepared float32 node looks its plan up again when it changes
(nnc.cuda.runner.ByPrecision). float16 runs with io_data_type HALF and compute FLOAT (tensor
cores, float32 accumulation, the fused bias + ReLU in float32). float64 is not registered:
cuDNN serves double convolutions only through its pre-compiled single-operation engines, not
the runtime-fusion engines a bias + ReLU epilogue needs, so GPU_REF runs float64.

Each CudaStream gets its own cuDNN handle bound to it (``stream.library``, destroyed when the
stream closes) with a lock, so two threads enqueuing onto one stream never interleave on it;
the plan's workspace is the stream's (``memory.workspace``). ``accept`` builds the plan: a
configuration cuDNN declines, or an operand not 16-byte aligned (the frontend declares every
tensor 16-byte aligned), is not accepted and GPU_REF runs it. Zero-size outputs do nothing;
zero input channels (which cuDNN cannot describe) run GPU_REF's kernel: bias (+ ReLU).

Timed plans (as PyTorch's ``cudnn.benchmark``): on a geometry's first use on a device, every
candidate plan the heuristics list is built and timed on scratch buffers, on a private stream
and handle, and the fastest median wins (ties: the heuristics' order). The winner's (engine id,
knobs) is cached on disk (:func:`cache_path`), keyed by the cuDNN and frontend versions, the
device's name and compute capability and the geometry, so a later process rebuilds exactly that
plan without timing; a cached choice that no longer builds is timed again and overwritten.
``NNC_CUDNN_TUNE=0`` (or :data:`TUNE` = False) keeps the heuristics' first plan that builds,
untimed and uncached; so does a first use while the thread captures a CUDA graph (timing
synchronises, which a capture refuses). :func:`implementation` says what a node runs.

Written against cudnn-frontend 1.32 and tested against tests/fakes/cudnn_frontend.py; docs/gpu.md
lists what a GPU must still confirm.
"""

import inspect
import json
import os
import sqlite3
import statistics
import threading
import time
import warnings
import weakref

import numpy as np

import nnc.cuda as _cuda
from nnc.base.core import CUDAError
from nnc.cmd.convolution.gpu.ref import bias_act
from nnc.cmd.convolution.gpu.ref import conv_body as _reference_conv
from nnc.cuda import memory
from nnc.cuda.driver import CudaGraph, CudaStream, check, device, driver
from nnc.cuda.runner import operands, pixel_stride, runner, same_gpu, tensors_of

__all__ = ["ALIGN", "BACKEND", "CACHE_FILE", "HINT", "LIBRARY", "PRIORITY", "TUNE", "available",
           "cache_path", "describe", "geometry", "implementation", "plan", "register",
           "unavailable_reason"]

BACKEND = "GPU_OPT"
PRIORITY = 20
HINT = "pip install 'nnc-graph[gpu-opt]'"
ALIGN = 16                          # bytes: the alignment the frontend declares for tensors
LIBRARY = "cudnn"                   # CudaStream.library key of the per-stream handle
# Numerical notes no plan may carry: engines that convert inputs to a narrower type, reduce in
# less than float32, or lose accuracy to FFT / large Winograd tiles.
_LOSSY_NOTES = ("DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "WINOGRAD_TILE_6x6",
                "WINOGRAD_TILE_13x13")
# And a float32 plan under precision "ieee": TF32 tensor cores (10-bit mantissa inputs).
_TF32_NOTES = ("TENSOR_CORE",)
# cuDNN's io types by dtype (NumPy's dtype.str) and the type each computes in.
_IO = {"<f2": "HALF", "<f4": "FLOAT", "<f8": "DOUBLE"}
_COMPUTE = {"<f2": "FLOAT", "<f4": "FLOAT", "<f8": "DOUBLE"}

# Timing: each candidate runs once eagerly (loads its kernels, and proves it runs), then
# _REPEAT back-to-back executes are captured into one CUDA graph that is replayed _TRIALS
# times; the median replay over _REPEAT is the candidate's time. Replaying a graph keeps the
# frontend's ~100 us Python execute out of the measurement: what is timed is the device work
# a captured schedule replays.
_REPEAT = 4
_TRIALS = 5
TUNE = None                         # True / False override NNC_CUDNN_TUNE; None follows it
CACHE_FILE = "cudnn_plans.sqlite3"
# The timing clock (tests/fakes/cudnn_frontend.py installs its own).
_clock = time.perf_counter

_status = None                      # (cudnn module or None, reason or None), probed once
_status_lock = threading.Lock()
_devices = weakref.WeakKeyDictionary()      # Device -> _DeviceState
_devices_lock = threading.Lock()


def _probe():
    try:
        import cudnn
    except Exception as e:  # ImportError, or a broken install failing inside its import
        return None, f"nvidia-cudnn-frontend is not installed ({HINT}): {e}"
    try:
        cudnn.backend_version()         # loads libcudnn
    except Exception as e:
        return None, f"the cuDNN library cannot be loaded ({HINT}): {e}"
    return cudnn, None


def _load():
    global _status
    if _status is None:
        with _status_lock:
            if _status is None:
                _status = _probe()
    return _status


def available():
    """Whether cuDNN can be used (the frontend imports and libcudnn loads); cached."""
    return _load()[0] is not None


def unavailable_reason():
    """Why cuDNN cannot be used (naming the extra to install), or None when it can."""
    return _load()[1]


def _module():
    cu, reason = _load()
    if cu is None:
        raise CUDAError(f"CONVOLUTION/{BACKEND} needs cuDNN: {reason}")
    return cu


class _Plan:
    """One built cuDNN graph and its operand tensors; ``lock`` serialises execute calls,
    since the frontend keeps per-graph state in Python that it does not guard. ``epilogue``:
    cuDNN declined the fused bias / ReLU, so this plan is the bare convolution and nnc's
    bias_act kernel finishes the node. ``choice``: how the selected plan was picked (a
    :class:`_Choice`); ``workspace`` is that plan's."""

    __slots__ = ("graph", "x", "w", "bias", "y", "workspace", "lock", "epilogue", "choice")

    def __init__(self, graph, x, w, bias, y, workspace, epilogue=False, choice=None):
        self.graph, self.x, self.w, self.bias, self.y = graph, x, w, bias, y
        self.workspace = int(workspace)
        self.lock = threading.Lock()
        self.epilogue = epilogue
        self.choice = choice


class _Choice:
    """How a graph's plan was selected. ``how``: "timed" (fastest of ``candidates`` timed
    here), "cached" (the disk cache's winner, timed by an earlier process over ``candidates``)
    or "heuristic" (the heuristics' first plan that builds, untimed: ``note`` says why).
    ``us``: the winner's median in microseconds (None when untimed); ``name``: the frontend's
    plan name; ``engine``, ``knobs``: what create_execution_plan replays (None where the
    frontend has no such pair for the plan); ``timings``: (plan index, name, median us) of
    every candidate timed here, in the heuristics' order (empty unless "timed")."""

    __slots__ = ("how", "name", "us", "candidates", "note", "engine", "knobs", "timings")

    def __init__(self, how, name, us=None, candidates=0, note=None, engine=None, knobs=None,
                 timings=()):
        self.how, self.name, self.us, self.candidates = how, name, us, int(candidates)
        self.note, self.engine, self.knobs = note, engine, knobs
        self.timings = tuple(timings)


class _DeviceState:
    """A device's plans (geometry key -> _Plan, or the reason cuDNN declined it) and the
    handle plans are built with (never executed on: each stream executes on its own)."""

    def __init__(self, cu, dev):
        dev.make_current()              # a cuDNN handle belongs to the current device
        self.build_handle = cu.create_handle()
        self.lock = threading.Lock()    # serialises builds; plans is read without it
        self.plans = {}


def _state(cu, dev):
    st = _devices.get(dev)
    if st is None:
        with _devices_lock:
            st = _devices.get(dev)
            if st is None:
                st = _devices[dev] = _DeviceState(cu, dev)
    return st


def geometry(cmd, inputs, outputs, precision=None):
    """The key of a convolution's cuDNN graph: (dtype, float32 precision, N, H, W, C, x pixel
    stride, O, kh, kw, C/groups, Ho, Wo, out pixel stride, (sh, sw), (top, left, bottom,
    right), bias?, relu?). The precision is ``precision`` (default: nnc.cuda.precision()) for
    float32 and None for the dtypes it does not affect."""
    x, w, bias, out = operands(inputs, outputs)
    n = x.shape[0] if x.ndim == 4 else 1
    dt = np.dtype(x.dtype).str
    if dt != "<f4":
        precision = None
    elif precision is None:
        precision = _cuda.precision()
    return (dt, precision, n, *x.shape[-3:], pixel_stride(x), *w.shape,
            out.shape[-3], out.shape[-2], pixel_stride(out), tuple(cmd.params["stride"]),
            tuple(cmd.params["padding"]), bias is not None,
            cmd.params.get("activation") == "relu")


def _layouts(key):
    """The NCHW (dims, strides) cuDNN is given for each operand of geometry ``key``: x, w,
    bias (None without one) and y (see the module's layout mapping)."""
    (_, _, n, h, wd, c, xps, o, kh, kw, cg, ho, wo, ops, _, _, has_bias, _) = key
    return (([n, c, h, wd], [h * wd * xps, 1, wd * xps, xps]),
            ([o, cg, kh, kw], [kh * kw * cg, 1, kw * cg, cg]),
            ([1, o, 1, 1], [o, 1, o, o]) if has_bias else None,
            ([n, o, ho, wo], [ho * wo * ops, 1, wo * ops, ops]))


def describe(cu, key, handle=None):
    """The cuDNN graph of geometry ``key`` and its operands: (graph, x, w, bias or None, y).

    Only records the graph (the frontend needs no driver for that); :func:`_prepared` plans it.
    """
    dt, (sh, sw), (pt, pl, pb, pr), relu = key[0], key[14], key[15], key[17]
    (xd, xs), (wdim, ws), lb, (yd, ys) = _layouts(key)
    f = getattr(cu.data_type, _IO[dt])
    acc = getattr(cu.data_type, _COMPUTE[dt])
    g = cu.pygraph(io_data_type=f, intermediate_data_type=acc, compute_data_type=acc,
                   handle=handle)
    x = g.tensor(name="x", dim=xd, stride=xs, data_type=f)
    w = g.tensor(name="w", dim=wdim, stride=ws, data_type=f)
    # Cross-correlation, the frontend's default mode (as nnc's CONVOLUTION: no kernel flip).
    y = g.conv_fprop(image=x, weight=w, pre_padding=[pt, pl], post_padding=[pb, pr],
                     stride=[sh, sw], dilation=[1, 1], compute_data_type=acc, name="conv")
    bias = None
    if lb is not None:
        bias = g.tensor(name="b", dim=lb[0], stride=lb[1], data_type=f)
        y = g.bias(input=y, bias=bias, compute_data_type=acc, name="bias")
    if relu:
        y = g.relu(input=y, compute_data_type=acc, name="relu")
    y.set_output(True).set_dim(yd).set_stride(ys)
    y.set_data_type(f)
    return g, x, w, bias, y


def _notes_excluded(key):
    """The numerical notes plan ``key`` may not carry (key[1]: its float32 precision)."""
    return _LOSSY_NOTES + (_TF32_NOTES if key[0] == "<f4" and key[1] != "tf32" else ())


def _declined(cu):
    # What the frontend raises when no engine serves a graph (cuDNN status errors surface
    # as RuntimeError from its bindings).
    return (cu.cudnnGraphNotSupportedError, NotImplementedError, RuntimeError)


def _prepared(cu, st, key):
    """Graph ``key`` planned up to its candidate list (validate, build_operation_graph,
    create_execution_plans with heuristics A then FALLBACK, the numerical-note filter,
    check_support): (graph, x, w, bias, y). Raises a decline where no engine serves it."""
    parts = describe(cu, key, st.build_handle)
    g = parts[0]
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cu.heur_mode.A, cu.heur_mode.FALLBACK])
    g.deselect_numeric_notes([getattr(cu.numerical_note, k) for k in _notes_excluded(key)])
    g.check_support()
    return parts


def _builds(cu, g, i):
    """Build plan i of g (which also selects it); False where cuDNN declines it, or where the
    note filter bars it (the frontend keeps barred plans in the list, so indices stay stable,
    and refuses them by index with ValueError)."""
    try:
        g.build_plan_at_index(i)
    except (*_declined(cu), ValueError):
        return False
    return True


def _first_built(cu, g):
    """The index of the heuristics' first plan that builds (build_plans' own choice), built
    and selected."""
    for i in range(g.get_execution_plan_count()):
        if _builds(cu, g, i):
            return i
    raise cu.cudnnGraphNotSupportedError("no candidate plan of this graph builds")


def _heuristic(g, i, note):
    return _Choice("heuristic", g.get_plan_name_at_index(i), note=note)


def _capturing():
    """Whether this thread is capturing a CUDA graph (nnc.cuda.capture.capture, or any
    CudaGraph.capture): timing synchronises and allocates, which a capture refuses."""
    from nnc.cuda import driver as drv
    from nnc.cuda.gpu_stream import capturing

    return capturing() or getattr(drv._tls, "deferred", None) is not None


def _tuning():
    """Whether new geometries are timed (and the disk cache used): TUNE, else NNC_CUDNN_TUNE
    (on unless "0", "false", "no" or "off")."""
    if TUNE is not None:
        return bool(TUNE)
    return os.environ.get("NNC_CUDNN_TUNE", "1").strip().lower() not in ("0", "false", "no",
                                                                        "off")


# -- timing -----------------------------------------------------------------------------------

def _ordered_pack(graph, pack):
    """``pack`` (frontend tensor -> device address) in the frontend's ordered form: (uids,
    addresses), or (None, None) where the frontend lacks it or a uid is missing or repeated
    (the mapping form needs none)."""
    if not _ordered(graph):
        return None, None
    uids = [getattr(t, "uid", None) for t in pack]
    if all(isinstance(u, int) for u in uids) and len(set(uids)) == len(uids):
        return uids, list(pack.values())
    return None, None


def _scratch(dev, stream, key):
    """Zeroed device buffers the size of geometry ``key``'s operands (x, w, bias or None, y):
    candidates are timed on these, never on a node's tensors (in use elsewhere, or a slice of
    a concat buffer); zeroed because garbage may hold NaNs or denormals that skew a timing."""
    item = np.dtype(key[0]).itemsize
    bufs = []
    for layout in _layouts(key):
        if layout is None:
            bufs.append(None)
            continue
        nbytes = (sum((d - 1) * s for d, s in zip(*layout)) + 1) * item
        buf = memory.DeviceBuffer(dev, nbytes)
        bufs.append(buf)
        check(driver().cuMemsetD8Async(buf.ptr, 0, nbytes, stream.handle), "cuMemsetD8Async")
    return bufs


def _time_plan(dev, g, i, pack, handle, stream):
    """Median microseconds of plan i of g: run once eagerly (its kernels load, and it proves
    it runs), then _REPEAT executes captured into one CUDA graph, replayed _TRIALS times on
    ``stream``. Raises where the plan fails to run or to be captured."""
    uids, ptrs = _ordered_pack(g, pack)
    nbytes = g.get_workspace_size_plan_at_index(i)
    ws_buf = memory.DeviceBuffer(dev, nbytes) if nbytes else None
    ws = ws_buf.ptr if ws_buf is not None else None

    def run():
        if uids is not None:
            g.execute_plan_at_index(ptrs, ws, index=i, handle=handle, tensor_uids=uids)
        else:
            g.execute_plan_at_index(pack, ws, index=i, handle=handle)

    try:
        run()
        stream.wait()
        captured = CudaGraph.capture(stream, lambda: [run() for _ in range(_REPEAT)])
        try:
            times = []
            for _ in range(_TRIALS):
                t0 = _clock()
                captured.replay(stream)
                stream.wait()
                times.append((_clock() - t0) * 1e6 / _REPEAT)
        finally:
            captured.close()
    finally:
        if ws_buf is not None:
            ws_buf.close()
    return statistics.median(times)


def _time_candidates(cu, dev, key, parts, indices):
    """Time plans ``indices`` of graph parts[0] on scratch buffers, on a private stream and
    handle (no node's stream, workspace or data is touched): ({index: median us}, {index or
    "setup": why it was not timed})."""
    g, x, w, bias, y = parts
    times, failed = {}, {}
    stream = handle = None
    bufs = []
    try:
        stream = CudaStream(dev)
        handle = cu.create_handle()
        cu.set_stream(handle, int(stream.handle))
        bufs = _scratch(dev, stream, key)
        pack = {t: b.ptr for t, b in zip((x, w, bias, y), bufs) if t is not None}
        for i in indices:
            try:
                times[i] = _time_plan(dev, g, i, pack, handle, stream)
            except Exception as e:  # a candidate that cannot run or be captured is no choice
                failed[i] = f"{type(e).__name__}: {e}"
    except Exception as e:  # no stream, handle or scratch memory: nothing can be timed
        failed["setup"] = f"{type(e).__name__}: {e}"
    finally:
        if stream is not None and stream.handle is not None:
            try:
                stream.wait()           # the scratch buffers and handle outlive their work
            except Exception as e:
                failed.setdefault("setup", f"{type(e).__name__}: {e}")
        if handle is not None:
            cu.destroy_handle(handle)
        for b in bufs:
            if b is not None:
                b.close()
        if stream is not None:
            stream.close()
    return times, failed


def _recorded(g, i):
    """Plan i's (engine id, knobs as JSON): what create_execution_plan replays; (None, None)
    where the frontend has no such pair (a plan delegating to the backend's own choice)."""
    try:
        engine, knobs = g.get_engine_and_knobs_at_index(i)
    except (NotImplementedError, ValueError, RuntimeError):
        return None, None
    rows = sorted([getattr(k, "name", None), int(getattr(k, "value", k)), int(v)]
                  for k, v in (knobs or {}).items())
    return int(engine), json.dumps(rows)


def _knobs_of(cu, text):
    """The {knob_type: int} dict a cached knobs JSON names (by the enum member's name where
    it has one, else by its value)."""
    kinds = getattr(cu, "knob_type", None)
    knobs = {}
    for name, value, v in json.loads(text):
        knobs[getattr(kinds, name) if name is not None and hasattr(kinds, name) else value] = v
    return knobs


def _timed(cu, st, dev, key):
    """Graph ``key`` with its fastest candidate selected: (parts, _Choice). Every plan that
    builds is timed; the fastest median wins, ties going to the heuristics' order. Where no
    candidate could be timed, the first that builds runs, untimed (as before timing existed)."""
    parts = _prepared(cu, st, key)
    g = parts[0]
    built = [i for i in range(g.get_execution_plan_count()) if _builds(cu, g, i)]
    if not built:
        raise cu.cudnnGraphNotSupportedError("no candidate plan of this graph builds")
    times, failed = _time_candidates(cu, dev, key, parts, built)
    if not times:
        g.build_plan_at_index(built[0])
        why = "; ".join(f"{k}: {v}" for k, v in failed.items())
        return parts, _heuristic(g, built[0], f"no candidate could be timed ({why})")
    best = min(times, key=lambda i: (times[i], i))
    timings = [(i, g.get_plan_name_at_index(i), times[i]) for i in sorted(times)]
    g.build_plan_at_index(best)         # select it: execute() runs the selected plan
    engine, knobs = _recorded(g, best)
    return parts, _Choice("timed", g.get_plan_name_at_index(best), times[best], len(times),
                          engine=engine, knobs=knobs, timings=timings)


def _from_cache(cu, st, key, entry):
    """Graph ``key`` with the disk cache's plan replayed and selected: (parts, _Choice), or
    None where that plan no longer builds (a stale entry: another cuDNN build, driver or
    filter), which is then timed again and overwritten."""
    try:
        parts = _prepared(cu, st, key)
        g = parts[0]
        g.create_execution_plan(entry["engine"], _knobs_of(cu, entry["knobs"]))
        last = g.get_execution_plan_count() - 1
        g.build_plan_at_index(last)
        name = g.get_plan_name_at_index(last)
    except Exception:  # declined, barred, unknown engine or knob: re-time, never run it
        return None
    return parts, _Choice("cached", name, entry["us"], entry["candidates"],
                          engine=entry["engine"], knobs=entry["knobs"])


def _selected(cu, st, dev, key):
    """Graph ``key`` planned with its plan chosen, built and selected: (parts, _Choice).
    Timing on: the disk cache's choice, else the fastest candidate (then cached); timing off,
    or first used while capturing a CUDA graph: the heuristics' first plan that builds."""
    if not _tuning():
        parts = _prepared(cu, st, key)
        return parts, _heuristic(parts[0], _first_built(cu, parts[0]), "timing is off")
    ckey = _cache_key(cu, dev, key)
    entry = _cache_get(ckey)
    stale = False
    if entry is not None:
        found = _from_cache(cu, st, key, entry)
        if found is not None:
            return found
        stale = True
    if _capturing():
        parts = _prepared(cu, st, key)
        return parts, _heuristic(parts[0], _first_built(cu, parts[0]),
                                 "first used while capturing a CUDA graph: not timed")
    parts, choice = _timed(cu, st, dev, key)
    if stale:
        choice.note = "the cached plan no longer builds: timed again"
    if choice.how == "timed" and choice.engine is not None:
        _cache_put(ckey, choice)
    return parts, choice


# -- the disk cache ---------------------------------------------------------------------------

_cache_warned = set()                # cache paths already warned about (once per process)


def cache_path():
    """The disk cache of timed plans: ``cudnn_plans.sqlite3`` in ``$NNC_CACHE_DIR`` (default
    ``$XDG_CACHE_HOME/nnc``, else ``~/.cache/nnc``); None when NNC_CACHE_DIR is set to ""
    (no disk cache). Deleting the file clears it."""
    folder = os.environ.get("NNC_CACHE_DIR")
    if folder is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                 ".cache")
        folder = os.path.join(base, "nnc")
    return os.path.join(folder, CACHE_FILE) if folder else None


def _cache_key(cu, dev, key):
    """(cuDNN backend version, frontend version, device name, compute capability, geometry
    with the numerical-note filter): a plan is only replayed where all of these match."""
    notes = ",".join(_notes_excluded(key))
    return (int(cu.backend_version()), str(getattr(cu, "__version__", "")), dev.name,
            int(dev.arch), f"{key!r} deselect={notes}")


_SCHEMA = ("CREATE TABLE IF NOT EXISTS plans (backend INTEGER, frontend TEXT, device TEXT, "
           "arch INTEGER, geometry TEXT, engine INTEGER NOT NULL, knobs TEXT NOT NULL, "
           "name TEXT, us REAL, candidates INTEGER, "
           "PRIMARY KEY (backend, frontend, device, arch, geometry))")


def _cache_failed(path, e):
    """A cache error costs only the cache: warn once per file, and go on uncached."""
    if path not in _cache_warned:
        _cache_warned.add(path)
        warnings.warn(f"nnc: the cuDNN plan cache {path} cannot be used ({type(e).__name__}: "
                      f"{e}); plans are timed without it (delete the file to reset it)",
                      RuntimeWarning, stacklevel=2)


def _cache_get(ckey):
    """The cached choice of ``ckey`` as a dict (engine, knobs, name, us, candidates), or None
    (no entry, no cache file, or a cache that cannot be read)."""
    path = cache_path()
    if path is None or not os.path.exists(path):
        return None
    try:
        con = sqlite3.connect(path, timeout=10)
        try:
            row = con.execute("SELECT engine, knobs, name, us, candidates FROM plans WHERE "
                              "backend=? AND frontend=? AND device=? AND arch=? AND geometry=?",
                              ckey).fetchone()
        finally:
            con.close()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return None                 # a writer made the file but no table yet
        _cache_failed(path, e)
        return None
    except (sqlite3.Error, OSError) as e:
        _cache_failed(path, e)
        return None
    if row is None:
        return None
    engine, knobs, name, us, candidates = row
    return {"engine": engine, "knobs": knobs, "name": name, "us": us,
            "candidates": candidates or 0}


def _cache_put(ckey, choice):
    """Record (or overwrite) ``ckey``'s winner; sqlite's locking orders concurrent writers
    (the last write wins: each is a complete, valid entry)."""
    path = cache_path()
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        con = sqlite3.connect(path, timeout=10)
        try:
            with con:
                con.execute(_SCHEMA)
                con.execute("INSERT OR REPLACE INTO plans VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (*ckey, choice.engine, choice.knobs, choice.name, choice.us,
                             choice.candidates))
        finally:
            con.close()
    except (sqlite3.Error, OSError) as e:
        _cache_failed(path, e)


# -- plans per device -------------------------------------------------------------------------

def _plan_of(cu, st, dev, key):
    """The plan of geometry ``key`` (built once, under st.lock), or the reason cuDNN
    declined it. Fused bias / ReLU that cuDNN declines falls back to the bare convolution
    (whose plan is shared by every epilogue of that geometry) plus nnc's epilogue kernel:
    cuDNN's fused float32 engines may all be ones _prepared's note filter excludes."""
    found = st.plans.get(key)
    if found is None:
        dev.make_current()
        try:
            (g, x, w, bias, y), choice = _selected(cu, st, dev, key)
            found = _Plan(g, x, w, bias, y, g.get_workspace_size(), choice=choice)
        except _declined(cu) as e:
            found = f"{type(e).__name__}: {e}"
            bare = key[:-2] + (False, False)
            if bare != key:
                base = _plan_of(cu, st, dev, bare)
                if isinstance(base, _Plan):
                    found = _Plan(base.graph, base.x, base.w, None, base.y, base.workspace,
                                  epilogue=True, choice=base.choice)
                    found.lock = base.lock      # one graph: one lock
        st.plans[key] = found
    return found


def plan(dev, cmd, inputs, outputs, precision=None):
    """The device's plan for this convolution under float32 ``precision`` (default:
    nnc.cuda.precision()), built on first use, or None when cuDNN declines the configuration,
    fused or bare."""
    cu = _module()
    st = _state(cu, dev)
    key = geometry(cmd, inputs, outputs, precision)
    found = st.plans.get(key)
    if found is None:
        with st.lock:
            found = _plan_of(cu, st, dev, key)
    return found if isinstance(found, _Plan) else None


def _node_plan(dev, cmd, inputs, outputs, precision=None):
    """The plan _body runs this node with, or None where GPU_REF's kernel runs it: zero input
    channels (which cuDNN cannot describe), or operands cuDNN cannot take (tensors accept did
    not see: autotune's scratch copies, tensors a loop re-pointed)."""
    x = inputs[0]
    if not x.shape[-1] or not _aligned(tensors_of(inputs, outputs)):
        return None
    return plan(dev, cmd, inputs, outputs, precision)


def implementation(cmd, inputs, outputs):
    """What GPU_OPT runs for this convolution, as a dict: ``impl`` "cudnn fused" (cuDNN runs
    the whole node, its bias / ReLU fused), "cudnn + epilogue" (cuDNN's bare convolution, then
    nnc's bias / ReLU kernel), "GPU_REF" (the reference kernel) or "none" (a zero-size output:
    nothing runs); ``plan``: the frontend's plan name; ``choice``: "timed", "cached" or
    "heuristic"; ``us``: the plan's timed median in microseconds; ``candidates``: how many plans
    were timed; ``note``: why the plan is untimed or was re-timed, or why GPU_REF runs. Builds
    (and times) the plan where this geometry is new on the device."""
    rec = {"impl": "GPU_REF", "plan": None, "choice": None, "us": None, "candidates": 0,
           "note": None}
    cu, reason = _load()
    if cu is None:
        rec["note"] = reason
        return rec
    if not _accept(cmd, inputs, outputs):
        rec["note"] = "GPU_OPT does not accept this node"
        return rec
    out = outputs[0]
    if out.size == 0:
        rec["impl"] = "none"
        return rec
    p = _node_plan(device(out.device), cmd, inputs, outputs)
    if p is None:
        rec["note"] = "zero input channels or operands cuDNN cannot take"
        return rec
    c = p.choice
    rec.update(impl="cudnn + epilogue" if p.epilogue else "cudnn fused", plan=c.name,
               choice=c.how, us=c.us, candidates=c.candidates, note=c.note)
    return rec


def _aligned(ts):
    return all(t.data_ptr % ALIGN == 0 for t in ts)


class _StreamHandle:
    """A cuDNN handle bound to one CudaStream: that stream's ``library(LIBRARY)`` state."""

    def __init__(self, cu, stream):
        stream.device.make_current()
        self.cu = cu
        self.lock = threading.Lock()    # one enqueuing thread at a time on the handle
        self.handle = cu.create_handle()
        cu.set_stream(self.handle, int(stream.handle))

    def close(self):
        with self.lock:
            handle, self.handle = self.handle, None
        if handle is not None:
            self.cu.destroy_handle(handle)


def _ordered(graph):
    """Whether ``graph.execute`` takes the buffers as a list in ``tensor_uids``' order (the
    frontend's "ordered" form, 1.32 and later): its variant pack is then read in C++ in one
    crossing, where the mapping form is inspected operand by operand in Python (an H100
    measured about 100 us a call that way, more than the convolutions of Inception-V3 take)."""
    try:
        return "tensor_uids" in inspect.signature(graph.execute).parameters
    except (TypeError, ValueError):
        return False


class _Execute:
    """One convolution's cuDNN call with its variant pack built once: ``op(cuda_stream)``.
    ``uids``: the operands' uids for the ordered form (``ptrs`` in that order), or None
    where the frontend lacks it and ``pack`` (tensor -> address) is passed instead."""

    __slots__ = ("plan", "pack", "uids", "ptrs")
    # A GPU stream may capture it into a CUDA graph of its node (nnc.cuda._ccall.NodeGraph):
    # the plan and pointers never change, and the workspace captured stays valid while the
    # stream is open (a stream's workspace grows by retiring, never freeing, its buffers).
    capturable = True

    def __init__(self, plan, pack):
        self.plan, self.pack = plan, pack
        self.uids, self.ptrs = _ordered_pack(plan.graph, pack)

    def __call__(self, stream):
        cu = _module()
        state = stream.library(LIBRARY, lambda: _StreamHandle(cu, stream))
        ws = memory.workspace(stream, self.plan.workspace) if self.plan.workspace else None
        stream.device.make_current()    # cuDNN launches in the calling thread's context
        with state.lock, self.plan.lock:
            if state.handle is None:
                raise CUDAError(f"{stream!r} is closed")
            if self.uids is not None:
                self.plan.graph.execute(self.ptrs, ws, handle=state.handle,
                                        tensor_uids=self.uids)
            else:
                self.plan.graph.execute(self.pack, ws, handle=state.handle)


def _body(dev, sink, cmd, inputs, outputs):
    x, w, bias, out = operands(inputs, outputs)
    if out.size == 0:
        return
    p = _node_plan(dev, cmd, inputs, outputs, sink.precision)
    if p is None:
        _reference_conv(dev, sink, cmd, inputs, outputs)
        return
    pack = {p.x: x.data_ptr, p.w: w.data_ptr, p.y: out.data_ptr}
    if bias is not None and not p.epilogue:
        pack[p.bias] = bias.data_ptr
    sink.call(_Execute(p, pack))
    if p.epilogue:
        # Same stream, after the convolution: stream order is all the ordering needed.
        bias_act(dev, sink, bias, cmd.params.get("activation") == "relu", out)


def _accept(cmd, inputs, outputs):
    """cuDNN (nvidia-cudnn-frontend) installed; NHWC tensors on one GPU, pixels evenly
    spaced with unit channel stride, w and bias contiguous, every operand 16-byte aligned, in a
    configuration cuDNN builds a plan for.

    Pinned while cuDNN is unavailable: CUDAError naming the extra to install.
    """
    cu, reason = _load()
    if cu is None:
        if cmd.pinned and cmd.backend == BACKEND:
            raise CUDAError(f"CONVOLUTION/{BACKEND} needs cuDNN: {reason}")
        return False
    if cmd.params.get("activation") not in (None, "relu") or len(inputs) > 3:
        return False                    # its epilogue is bias and ReLU: no clamp, no residual
    ts = tensors_of(inputs, outputs)
    x, out = inputs[0], outputs[0]
    if not same_gpu(ts) or pixel_stride(x) is None or pixel_stride(out) is None:
        return False
    if not all(t.is_contiguous for t in inputs[1:] if t is not None):
        return False
    if out.size == 0 or x.shape[-1] == 0:
        return True                     # nothing to do, or bias (+ ReLU) by the reference
    if not _aligned(ts):
        return False
    return plan(device(out.device), cmd, inputs, outputs) is not None


def register():
    """Register GPU_OPT for CONVOLUTION (once, at import nnc; imports no CUDA library)."""
    from nnc.cmd.command import register_backend

    register_backend("CONVOLUTION", BACKEND, runner(_body, name=BACKEND, precise=True),
                     datatypes=("float16", "float32"), accept=_accept, priority=PRIORITY,
                     device="gpu")
