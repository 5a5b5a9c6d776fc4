"""A fake of the cudnn-frontend surface nnc.cmd.convolution.gpu.cudnn uses, over
tests/fakes/cuda_driver.py.

It accepts exactly the calls and keywords nnc makes (tests/cuda/test_cuda_cudnn.py checks each one
against the real frontend where ``cudnn`` is importable), enforces the frontend's call order
(validate, build_operation_graph, create_execution_plans, check_support, build_plans before
get_workspace_size and execute), and emulates conv_fprop (+ bias, + ReLU) in NumPy on the fake
device memory through FakeDriver._run, so a capturing stream records it and replay reruns it.
Each execute checks the variant pack (exactly the graph's operands, each a plain int inside a
fake device buffer large enough for its declared dims and strides), the workspace (the size
the plan asked for, inside a device buffer), and the handle (live, bound to a live stream of
the context it was made in). ``refuse(desc) -> reason or None`` makes check_support decline.

Plans: the heuristics list ``candidates`` (:class:`Candidate`: engine id, knobs, numerical
notes, workspace and a known cost in microseconds), in that order. As the real frontend, the
note filter keeps barred plans in the list (indices stay stable) and refuses them by index
with ValueError; an engine in ``declined`` refuses to build (cudnnGraphNotSupportedError);
``create_execution_plan`` appends a recorded (engine id, knobs), which builds only where it
names a candidate. Executing a plan advances the fake's ``clock`` by the plan's cost when the
work runs (at once, or at replay where a stream captured it), so install()'s clock makes every
timing exact and deterministic.
"""

import enum
import threading
import weakref

import numpy as np

from .cuda_kernels import _arr


class data_type(enum.Enum):  # noqa: N801  (the frontend's names)
    FLOAT = 0
    DOUBLE = 1
    HALF = 2


class heur_mode(enum.Enum):  # noqa: N801
    A = 0
    B = 1
    FALLBACK = 2


class numerical_note(enum.Enum):  # noqa: N801
    TENSOR_CORE = 0
    DOWN_CONVERT_INPUTS = 1
    REDUCED_PRECISION_REDUCTION = 2
    FFT = 3
    NONDETERMINISTIC = 4
    WINOGRAD = 5
    WINOGRAD_TILE_4x4 = 6
    WINOGRAD_TILE_6x6 = 7
    WINOGRAD_TILE_13x13 = 8
    STRICT_NAN_PROP = 9


class knob_type(enum.Enum):  # noqa: N801  (a few of the frontend's KnobType_t members)
    SWIZZLE = 1
    TILE_SIZE = 2
    STAGES = 7


class cudnnGraphNotSupportedError(Exception):  # noqa: N801, N818
    pass


class Candidate:
    """One plan the fake heuristics propose: ``engine`` id, ``knobs`` ({knob_type: int}),
    numerical ``notes``, ``workspace`` bytes (None: the fake's default) and ``cost`` (us)."""

    def __init__(self, engine, cost, knobs=None, notes=(), workspace=None):
        self.engine, self.cost, self.knobs = engine, cost, dict(knobs or {})
        self.notes, self.workspace = tuple(notes), workspace

    @property
    def name(self):
        knobs = ",".join(f"{k.name}={v}" for k, v in sorted(self.knobs.items(),
                                                            key=lambda kv: kv[0].value))
        return f"fake_eng{self.engine}[{knobs}]"

    def same(self, engine, knobs):
        return engine == self.engine and knobs == self.knobs


# The heuristics' order: the first is today's untimed choice; the fastest float32-legal one is
# engine 3 (engine 11 is faster but uses TF32 tensor cores, which float32 plans deselect).
CANDIDATES = (Candidate(7, 30.0, {knob_type.TILE_SIZE: 2}),
              Candidate(3, 10.0, {knob_type.SWIZZLE: 1, knob_type.STAGES: 3}, workspace=8192),
              Candidate(11, 5.0, notes=(numerical_note.TENSOR_CORE,)),
              Candidate(5, 20.0))


_NUMPY = {data_type.FLOAT: np.float32, data_type.DOUBLE: np.float64, data_type.HALF: np.float16}


def _tf32(v):
    """float32 values rounded to TF32 (10 mantissa bits), as a tensor-core engine reads them."""
    bits = np.asarray(v, np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(v), rounded, v)


class Handle:
    def __init__(self, backend_handle, ctx):
        self.backend_handle, self.ctx, self.stream = backend_handle, ctx, 0


class Tensor:
    _uids = iter(range(1, 1 << 62))      # as the frontend's: distinct positive ints

    def __init__(self, name, dim, stride, dtype, virtual):
        self.uid = next(Tensor._uids)
        self.name, self.dim, self.stride = name, list(dim), list(stride) if stride else None
        self.data_type, self.is_virtual, self.output = dtype, virtual, False

    def set_output(self, value):
        self.output = bool(value)
        self.is_virtual = not value
        return self

    def set_dim(self, dim):
        self.dim = [int(d) for d in dim]
        return self

    def set_stride(self, stride):
        self.stride = [int(s) for s in stride]
        return self

    def set_data_type(self, dtype):
        assert isinstance(dtype, data_type), dtype
        self.data_type = dtype
        return self


def _ints(v, n, what):
    assert isinstance(v, list) and len(v) == n and all(type(i) is int for i in v), (what, v)
    return v


class FakeCudnn:
    """The ``cudnn`` module as nnc sees it; one per test (``install``)."""

    data_type = data_type
    heur_mode = heur_mode
    numerical_note = numerical_note
    knob_type = knob_type
    cudnnGraphNotSupportedError = cudnnGraphNotSupportedError
    __version__ = "1.32.0+fake"

    def __init__(self, driver, workspace=4096, refuse=None, candidates=CANDIDATES,
                 declined=()):
        self.driver = driver
        self.workspace = workspace      # bytes a plan asks for unless its Candidate says
        self.refuse = refuse            # desc -> reason (str) or None
        self.candidates = list(candidates)  # what create_execution_plans lists, in order
        self.declined = set(declined)   # engine ids whose plans refuse to build
        self.lock = threading.Lock()
        self.now = 0.0                  # the fake clock (seconds): executed plans' costs
        self.handles = []               # every Handle made, in order
        self.builds = []                # desc of every graph that built a plan (once each)
        self.plan_builds = []           # engine id of every plan built, in order
        self.deselected = []            # numerical notes deselected per built graph
        self.executions = []            # (handle, stream, workspace ptr, desc) as enqueued
        self.timed = []                 # (handle, engine) of each execute_plan_at_index
        self.ordered_calls = 0          # executes that passed buffers in tensor_uids order
        fake = self

        class pygraph(_Graph):  # noqa: N801
            cudnn = fake

        self.pygraph = pygraph

    def backend_version(self):
        return 92000

    def clock(self):
        """The fake time in seconds: the sum of the costs of the plans executed so far."""
        with self.lock:
            return self.now

    def create_handle(self):
        ctx = getattr(self.driver._current, "ctx", None)
        assert ctx is not None, "cudnn.create_handle with no current CUDA context"
        with self.lock:
            h = Handle(0x7000 + len(self.handles), ctx)
            self.handles.append(h)
        return h

    def set_stream(self, handle, stream):
        assert isinstance(handle, Handle) and handle.backend_handle is not None
        assert type(stream) is int, f"set_stream takes the stream as an int, not {stream!r}"
        assert stream in self.driver.live_streams, "set_stream to a stream that is not live"
        assert self.driver.ctx_of[stream] == handle.ctx, "the stream is on another device"
        handle.stream = stream

    def get_stream(self, handle):
        return handle.stream

    def destroy_handle(self, handle):
        assert isinstance(handle, Handle) and handle.backend_handle is not None, "destroyed twice"
        handle.backend_handle = None
        handle.stream = None


class _Graph:
    cudnn = None                        # the FakeCudnn (set by the per-fake subclass)

    def __init__(self, name="test_graph", io_data_type=None, intermediate_data_type=None,
                 compute_data_type=None, handle=None):
        for dt in (io_data_type, intermediate_data_type, compute_data_type):
            assert isinstance(dt, data_type), dt
        assert handle is None or isinstance(handle, Handle)
        self.handle, self.dtype = handle, io_data_type
        self.compute = (intermediate_data_type, compute_data_type)
        self.tensors, self.conv, self.bias_t, self.relu_on, self.y = [], None, None, False, None
        self.stage = "open"

    def tensor(self, dim, stride=None, data_type=None, name=""):
        assert name and data_type is not None
        _ints(dim, 4, "dim")
        _ints(stride, 4, "stride")
        t = Tensor(name, dim, stride, data_type, False)
        self.tensors.append(t)
        return t

    def _virtual(self, name, dim):
        t = Tensor(name, dim, None, None, True)
        self.tensors.append(t)
        return t

    def conv_fprop(self, image, weight, pre_padding, post_padding, stride, dilation,
                   compute_data_type=None, name=""):
        assert self.conv is None and compute_data_type is not None
        for v, what in ((pre_padding, "pre"), (post_padding, "post"), (stride, "stride"),
                        (dilation, "dilation")):
            _ints(v, 2, what)
        x, w = image, weight
        outs = [(x.dim[2 + i] + pre_padding[i] + post_padding[i] - w.dim[2 + i]) // stride[i] + 1
                for i in range(2)]
        self.conv = dict(x=x, w=w, pre=pre_padding, post=post_padding, stride=stride,
                         dilation=dilation, compute=compute_data_type)
        self.y = self._virtual(f"{name}::Y", [x.dim[0], w.dim[0], *outs])
        return self.y

    def bias(self, input, bias, compute_data_type=None, name=""):  # noqa: A002
        assert input is self.y and self.bias_t is None and not self.relu_on
        self.bias_t = bias
        self.y = self._virtual(f"{name}::OUT", input.dim)
        return self.y

    def relu(self, input, compute_data_type=None, name=""):  # noqa: A002
        assert input is self.y and not self.relu_on
        self.relu_on = True
        self.y = self._virtual(f"{name}::OUT", input.dim)
        return self.y

    def _step(self, before, after):
        assert self.stage == before, f"{after} called after {self.stage}, not after {before}"
        self.stage = after

    def validate(self):
        self._step("open", "validated")
        assert self.y.output and self.y.stride and self.y.data_type == self.dtype
        for t in self.tensors:
            if not t.is_virtual:
                assert all(d > 0 for d in t.dim), f"{t.name}: dims must be positive: {t.dim}"
        c = self.conv
        x, w = c["x"], c["w"]
        assert x.dim[1] % w.dim[1] == 0 and w.dim[0] % (x.dim[1] // w.dim[1]) == 0

    def build_operation_graph(self):
        self._step("validated", "graph")

    def create_execution_plans(self, heuristics=None):
        self._step("graph", "plans")
        assert heuristics and all(isinstance(h, heur_mode) for h in heuristics)
        self.notes = []
        self.plans = list(self.cudnn.candidates)
        self.built, self.selected = set(), None

    def deselect_numeric_notes(self, notes):
        assert self.stage == "plans", "note filters need the plans made"
        assert all(isinstance(n, numerical_note) for n in notes)
        self.notes.extend(notes)
        return self

    def desc(self):
        c = self.conv
        return dict(x=(c["x"].dim, c["x"].stride), w=(c["w"].dim, c["w"].stride),
                    y=(self.y.dim, self.y.stride), pre=c["pre"], post=c["post"],
                    stride=c["stride"], groups=c["x"].dim[1] // c["w"].dim[1],
                    bias=self.bias_t is not None, relu=self.relu_on, dtype=self.dtype,
                    compute=(*self.compute, c["compute"]))

    def check_support(self):
        self._step("plans", "supported")
        reason = self.cudnn.refuse(self.desc()) if self.cudnn.refuse else None
        if reason:
            self.stage = "refused"
            raise cudnnGraphNotSupportedError(reason)

    def _plan(self, index):
        assert self.stage in ("supported", "built"), f"plan {index} used at stage {self.stage}"
        assert type(index) is int, index
        if not 0 <= index < len(self.plans):
            raise IndexError(f"plan index {index} out of range for {len(self.plans)} plan(s)")
        c = self.plans[index]
        if any(n in self.notes for n in c.notes):
            raise ValueError(f"plan {index} ({c.name!r}) is excluded by a note filter")
        return c

    def get_execution_plan_count(self):
        assert self.stage in ("supported", "built")
        return len(self.plans)

    def get_plan_name_at_index(self, index):
        return self.plans[index].name

    def get_engine_and_knobs_at_index(self, index):
        c = self.plans[index]
        return c.engine, dict(c.knobs)

    def get_workspace_size_plan_at_index(self, index):
        c = self._plan(index)
        return self.cudnn.workspace if c.workspace is None else c.workspace

    def create_execution_plan(self, engine_id, knobs=None):
        assert self.stage in ("supported", "built"), "nnc replays after check_support"
        assert type(engine_id) is int and isinstance(knobs, dict), (engine_id, knobs)
        assert all(isinstance(k, knob_type) and type(v) is int for k, v in knobs.items()), knobs
        known = [c for c in self.cudnn.candidates if c.same(engine_id, knobs)]
        # An unknown configuration is appended all the same; it fails when built.
        self.plans.append(known[0] if known else Candidate(engine_id, 0.0, knobs,
                                                           notes=("unknown",)))
        return self

    def build_plan_at_index(self, index):
        c = self._plan(index)
        if "unknown" in c.notes or c.engine in self.cudnn.declined:
            raise cudnnGraphNotSupportedError(f"{c.name} does not build")
        with self.cudnn.lock:
            if not self.built:
                self.cudnn.builds.append(self.desc())
                self.cudnn.deselected.append(list(self.notes))
            self.cudnn.plan_builds.append(c.engine)
        self.built.add(index)
        self.selected, self.stage = index, "built"
        return self

    def build_plans(self):
        for i in range(len(self.plans)):
            try:
                self.build_plan_at_index(i)
                return
            except (ValueError, cudnnGraphNotSupportedError):
                continue
        raise cudnnGraphNotSupportedError("no plan in the list could be built")

    def get_workspace_size(self):
        assert self.stage == "built"
        return self.get_workspace_size_plan_at_index(self.selected)

    def execute(self, tensor_dict, workspace=None, handle=None, tensor_uids=None):
        assert self.stage == "built", "execute before build_plans"
        self._launch(tensor_dict, workspace, handle, tensor_uids, self.selected, False)

    def execute_plan_at_index(self, tensor_dict, workspace=None, index=0, handle=None,
                              tensor_uids=None):
        self._plan(index)
        assert index in self.built, f"plan {index} executed before it was built"
        self._launch(tensor_dict, workspace, handle, tensor_uids, index, True)

    def _launch(self, tensor_dict, workspace, handle, tensor_uids, index, timing):
        plan = self.plans[index]
        ws_size = self.get_workspace_size_plan_at_index(index)
        if tensor_uids is not None:     # the ordered form: buffers in tensor_uids' order
            assert type(tensor_dict) is list and len(tensor_dict) == len(tensor_uids)
            assert len(set(tensor_uids)) == len(tensor_uids), "repeated uids"
            by_uid = {t.uid: t for t in self.tensors}
            tensor_dict = {by_uid[u]: p for u, p in zip(tensor_uids, tensor_dict)}
            if not timing:
                self.cudnn.ordered_calls += 1
        fake, drv = self.cudnn, self.cudnn.driver
        assert isinstance(handle, Handle) and handle.backend_handle is not None, "bad handle"
        assert handle.stream in drv.live_streams, "the handle's stream is not live"
        assert getattr(drv._current, "ctx", None) == handle.ctx, "not in the handle's context"
        operands = [t for t in self.tensors if not t.is_virtual]
        assert set(tensor_dict) == set(operands), "the variant pack is not the graph's operands"
        np_dt = _NUMPY[self.dtype]
        for t, ptr in tensor_dict.items():
            assert type(ptr) is int and ptr, f"{t.name}: a device pointer is a plain int"
            span = sum((d - 1) * s for d, s in zip(t.dim, t.stride)) + 1
            span *= np.dtype(np_dt).itemsize
            _inside(drv, ptr, span, t.name)
        if ws_size:
            assert type(workspace) is int, "workspace must be a device address"
            _inside(drv, workspace, ws_size, "workspace")
        with fake.lock:
            if timing:
                fake.timed.append((handle, plan.engine))
            else:
                fake.executions.append((handle, handle.stream, workspace, self.desc()))
        ptrs = {t.name: p for t, p in tensor_dict.items()}
        views = {t.name: (t.dim, t.stride) for t in operands}
        bias = self.bias_t.name if self.bias_t is not None else None
        yname = self.y.name
        # A tensor-core engine reads float32 operands as TF32 (float32 plans under "ieee"
        # deselect such engines; under "tf32" the timed choice may be one).
        tf32 = self.dtype == data_type.FLOAT and numerical_note.TENSOR_CORE in plan.notes
        conv, relu = self.conv, self.relu_on

        def run():
            x = _view(ptrs, views, conv["x"].name, np_dt)
            w = _view(ptrs, views, conv["w"].name, np_dt)
            if tf32:
                x, w = _tf32(x), _tf32(w)
            x, w = x.astype(np.float64), w.astype(np.float64)
            acc = _conv_nchw(x, w, conv["pre"], conv["post"], conv["stride"])
            if bias is not None:
                acc += _view(ptrs, views, bias, np_dt).astype(np.float64)
            if relu:
                acc = np.where(acc < 0, 0.0, acc)
            _view(ptrs, views, yname, np_dt)[...] = acc
            with fake.lock:
                fake.now += plan.cost * 1e-6

        drv._run(run, handle.stream)


def _inside(drv, ptr, nbytes, what):
    for base, buf in drv.buffers.items():
        if base <= ptr and ptr + nbytes <= base + buf.nbytes:
            return
    raise AssertionError(f"{what}: [{ptr:#x}, +{nbytes}) is not inside one device buffer")


def _view(ptrs, views, name, dt):
    dim, stride = views[name]
    return _arr(ptrs[name], dt, dim, stride)


def _conv_nchw(x, w, pre, post, stride):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    groups, og = c // cg, o // (c // cg)
    xp = np.zeros((n, c, h + pre[0] + post[0], wd + pre[1] + post[1]))
    xp[:, :, pre[0]:pre[0] + h, pre[1]:pre[1] + wd] = x
    ho = (xp.shape[2] - kh) // stride[0] + 1
    wo = (xp.shape[3] - kw) // stride[1] + 1
    acc = np.zeros((n, o, ho, wo))
    for g in range(groups):
        ci, co = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, ci, i:i + stride[0] * (ho - 1) + 1:stride[0],
                           j:j + stride[1] * (wo - 1) + 1:stride[1]]
                acc[:, co] += np.einsum("nchw,oc->nohw", patch, w[co, :, i, j])
    return acc


def install(monkeypatch, driver, cache_dir, **config):
    """Make nnc.cmd.convolution.gpu.cudnn use a new FakeCudnn over FakeDriver ``driver`` until the
    test ends (fresh plan caches and handles, the fake's clock for timing, timed plans on, and the
    disk cache in ``cache_dir``: never the user's); returns it."""
    from nnc.cmd.convolution.gpu import cudnn as cudnn_conv

    fake = FakeCudnn(driver, **config)
    monkeypatch.setattr(cudnn_conv, "_status", (fake, None))
    monkeypatch.setattr(cudnn_conv, "_devices", weakref.WeakKeyDictionary())
    monkeypatch.setattr(cudnn_conv, "_clock", fake.clock)
    monkeypatch.setattr(cudnn_conv, "TUNE", None)
    monkeypatch.setattr(cudnn_conv, "_cache_warned", set())
    monkeypatch.delenv("NNC_CUDNN_TUNE", raising=False)
    monkeypatch.setenv("NNC_CACHE_DIR", str(cache_dir))
    return fake
