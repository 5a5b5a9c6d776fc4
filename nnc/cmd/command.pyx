"""Commands, their backends, the registry, backend selection and one-command execution.

One file of ~900 lines because its parts read and write the same cdef classes (Cmd, Backend) and
bound records: Cython keeps a class's methods in its module.

NNC: ccv_nnc_cmd.c, cmd/ccv_nnc_cmd.inc. A :class:`Cmd` is a command id plus normalised
parameters; each command has one or more :class:`Backend` objects. ``CPU_REF`` defines the
semantics and accepts every case; ``CPU_OPT`` and user backends may accept a subset.

Default backend choice (documented in docs/commands.md): among the command's backends whose
datatype mask covers every tensor, whose layout rule holds (contiguous-only backends reject
strided views) and whose ``accept`` predicate (if any) says yes, take the one with the highest
priority; equal priorities go to the earlier registered. Built-in priorities: CPU_OPT 20,
CPU_REF 10, any other name 15 unless given. Unlike NNC, whose hash order puts CPU_REF first, the
fast backend is the default; ``autotune`` may still pick another by measured time.

A Python backend is ``fn(cmd, inputs, outputs)`` on lists of ndarrays (``None`` where a tensor is
absent). A C backend is an ``nnc_cmd_exec_f`` (nnc/cmd/command.pxd) that never touches Python.

Tensor formats (NNC's ``registry->tensor_formats``): an image command (``register_command(...,
image=True)``: CONVOLUTION, CONVOLUTION_TRANSPOSE, the pools, UPSAMPLE, FORMAT_TRANSFORM) reads
its 3-d and 4-d tensors by their format. Its Python CPU backends get an NCHW tensor as the NHWC
view of its array (``np.moveaxis(a, -3, -1)``: no copy), so each is written once, for NHWC; its
C and GPU backends read memory as NHWC and accept NHWC tensors only, so an NCHW node runs
CPU_REF unless ``Graph.simplify`` puts FORMAT_TRANSFORMs around it. Other commands ignore
formats, as NNC's element-wise backends accept every format.
"""

from cpython.object cimport PyObject
from libc.stdlib cimport free, malloc
from libc.string cimport memset

import operator
import pickle
import time

import numpy as np

from nnc.base.core import DATATYPE_NAMES, DATATYPES, STATUS_NAMES, CommandError
from nnc.cmd.params import CmdParams
from nnc.base.device import gpu_memory
from nnc.cmd.cpu_cache import cache_flush
from nnc.tensor.constant cimport constant_contains
from nnc.tensor.tensor cimport (
    TENSOR_FORMAT_NCHW, TENSOR_FORMAT_NHWC, Tensor, tensor_may_be_readonly, tensor_overlap,
    tensor_same, tensor_wrap,
)
from nnc.base.parallel cimport nnc_stream_context_t, parallel_ready, thread_context
from nnc.base.trace_switch cimport trace_host, trace_now, trace_on

cdef int ALL_DATATYPES = 0
for _code in DATATYPES.values():
    ALL_DATATYPES |= _code

cdef list _commands = []                # CommandInfo by id
cdef dict _by_name = {}                 # name -> CommandInfo
cdef int _seq = 0                       # registration counter for tie-breaks
# Names of the image commands (register_command(image=True)): see the module docstring.
cdef set _image_commands = set()

_DEFAULT_PRIORITY = {"CPU_OPT": 20, "CPU_REF": 10}
_INPLACE_MODES = ("none", "allow", "enforce", "any")
GIL_RELEASE_ELEMENTS = NNC_GIL_RELEASE_ELEMENTS


cdef class Backend:
    """One implementation of a command (NNC: ccv_nnc_cmd_backend_registry_t)."""

    def __init__(self):
        raise TypeError("backends are made by nnc.register_backend")

    cdef bint accepts(self, object cmd, list inputs, list outputs) except -1:
        cdef Tensor t
        # Only an image command's Python CPU backends see other formats (as NHWC views).
        cdef bint nhwc_only = (self.command in _image_commands
                               and (self.c_exec != NULL or self.device != "cpu"))
        for group in (inputs, outputs):
            for x in group:
                if x is None:
                    continue
                t = <Tensor>x
                if not (t.t.datatype & self.datatypes):
                    return False
                if (self.device == "cpu" and t.t.device >= 0) or (
                        self.device == "gpu" and t.t.device < 0):
                    return False
                if self.contiguous_only and not t.t.contiguous:
                    return False
                if nhwc_only and t.t.format != TENSOR_FORMAT_NHWC and t.t.ndim >= 3:
                    return False
        if self.accept is not None:
            return bool(self.accept(cmd, inputs, outputs))
        return True

    @property
    def is_c(self):
        """True for a C backend (callable without the GIL)."""
        return self.c_exec != NULL

    @property
    def datatype_names(self):
        return [n for n, code in DATATYPES.items() if code & self.datatypes]

    def exec(self, Cmd cmd not None, inputs, outputs):
        """Run this backend directly, without shape checks (tests and benchmarks use it)."""
        backend_run(self, cmd, tensor_list(inputs, "inputs"), tensor_list(outputs, "outputs"))

    def __reduce__(self):
        raise TypeError(f"a Backend cannot be copied or pickled: it is a registry entry (C "
                        f"function pointers included); refer to it by name, "
                        f"({self.command!r}, {self.name!r})")

    def __repr__(self):
        kind = "C" if self.c_exec != NULL else "Python"
        return f"<Backend {self.command}/{self.name} ({kind}, priority {self.priority})>"


cdef class CommandInfo:
    """A registered command: its attributes and backends (NNC: ccv_nnc_cmd_registry_t)."""

    def __init__(self):
        raise TypeError("commands are made by nnc.register_command")

    def __reduce__(self):
        raise TypeError(f"a CommandInfo cannot be copied or pickled: it is a registry entry; "
                        f"refer to it by name, nnc.command_info({self.name!r})")

    @property
    def image(self):
        """An image command: reads its 3-d and 4-d tensors by their format (module docstring)."""
        return self.name in _image_commands

    def __repr__(self):
        names = [b.name for b in self.backends]
        return f"<Command {self.name} inplace={self.inplace!r} backends={names}>"


def _lookup(name):
    info = _by_name.get(name)
    if info is None:
        known = ", ".join(sorted(_by_name))
        raise CommandError(f"unknown command {name!r}; known commands: {known}")
    return info


def register_command(name, *, inplace="none", check=None, normalize=None, replace=False,
                     image=False, alias_inputs=()):
    """Register a new command; registering a name again with the same attributes returns the
    existing one.

    ``inplace``: ``"none"`` (no output may overlap an input), ``"allow"`` (an output may be
    exactly an input; any other overlap is refused), ``"enforce"`` (output k must be input k),
    or ``"any"`` (no check, for commands such as CUSTOM that own their semantics).
    ``check(cmd, inputs, outputs)`` validates arity, shapes and dtypes and raises CommandError.
    ``normalize(params) -> params`` validates and fills in parameters.
    ``alias_inputs``: indices of inputs that may be exactly output 0 (same memory, same
    layout) whatever ``inplace`` says, as CONVOLUTION's residual (input 3) may be its output:
    out = conv + residual written over the residual; every backend of the command must then
    compute that right or not accept it.
    ``image``: the command reads its 3-d and 4-d tensors by their format (NHWC, NCHW): its
    Python CPU backends get NCHW tensors as NHWC views, its C and GPU backends NHWC tensors
    only (the module docstring).

    Re-registering an existing name: the same ``inplace``, ``check`` and ``normalize`` (the same
    objects; None agrees only with None) return the existing command unchanged; anything else
    raises CommandError naming what differs, unless ``replace=True``, which replaces the
    attributes and keeps the backends (Cmds made before see the new check and normalize).
    Built-in commands can never be replaced: register a command of your own name.
    NNC: REGISTER_COMMAND, ccv_nnc_cmd_allow_inplace / ccv_nnc_cmd_enforce_inplace.
    """
    if not isinstance(name, str) or not name:
        raise CommandError(f"command name must be a non-empty string, not {name!r}")
    if inplace not in _INPLACE_MODES:
        raise CommandError(f"inplace must be one of {_INPLACE_MODES}, not {inplace!r}")
    if check is not None and not callable(check):
        raise CommandError("check must be callable")
    if normalize is not None and not callable(normalize):
        raise CommandError("normalize must be callable")
    try:
        alias_inputs = tuple(sorted({operator.index(i) for i in alias_inputs}))
    except TypeError:
        raise CommandError(f"alias_inputs must be input indices, not {alias_inputs!r}") from None
    if any(i < 0 for i in alias_inputs):
        raise CommandError(f"alias_inputs must be input indices >= 0, not {alias_inputs!r}")
    cdef CommandInfo info = _by_name.get(name)
    if info is not None:
        differ = [what for what, old, new in (("inplace", info.inplace, inplace),
                                              ("check", info.check, check),
                                              ("normalize", info.normalize, normalize),
                                              ("image", name in _image_commands, bool(image)),
                                              ("alias_inputs", info.alias_inputs, alias_inputs))
                  if (old != new if what in ("inplace", "image", "alias_inputs")
                      else old is not new)]
        if not differ:
            return info
        if info.builtin:
            raise CommandError(
                f"{name} is a built-in command and cannot be re-registered with another "
                f"{' and '.join(differ)} (it is registered with inplace={info.inplace!r}); "
                "register a command of your own name"
            )
        if not replace:
            raise CommandError(
                f"command {name!r} is already registered with another {' and '.join(differ)} "
                f"(inplace={info.inplace!r}); pass replace=True to replace them"
            )
        info.inplace = inplace
        info.alias_inputs = alias_inputs
        info.check = check
        info.normalize = normalize
        if image:
            _image_commands.add(name)
        else:
            _image_commands.discard(name)
        return info
    info = CommandInfo.__new__(CommandInfo)
    info.name = name
    info.id = len(_commands)
    info.inplace = inplace
    info.alias_inputs = alias_inputs
    info.check = check
    info.normalize = normalize
    info.backends = []
    info.builtin = False
    if image:
        _image_commands.add(name)
    _commands.append(info)
    _by_name[name] = info
    return info


def register_control_command(name, normalize):
    """Register ``name`` as a control command (CommandInfo.control): its nodes run sub-graphs
    (nnc.graph.while_node and case_of make them; Graph.exec refuses them). For the built-in WHILE
    and CASE_OF, registered by nnc.cmd.basic; normalize(params) must accept the runner as fn."""
    cdef CommandInfo info = register_command(name, inplace="any", normalize=normalize)
    info.control = True
    return info


def seal_builtins():
    """Mark every command registered so far as built-in (``import nnc`` calls this once, after
    registering its own commands): their attributes and CPU_REF can no longer be replaced."""
    for info in _commands:
        (<CommandInfo>info).builtin = True


cdef int _datatype_mask(object datatypes) except -1:
    if datatypes is None:
        return ALL_DATATYPES
    cdef int mask = 0
    for d in datatypes:
        code = DATATYPES.get(np.dtype(d).name)
        if code is None:
            raise CommandError(f"unsupported datatype {d!r} in a backend's datatypes")
        mask |= code
    return mask


cdef bint _same_backend(Backend a, Backend b):
    return (a.c_exec == b.c_exec and a.py_exec is b.py_exec and a.datatypes == b.datatypes
            and a.contiguous_only == b.contiguous_only and a.accept is b.accept
            and a.priority == b.priority and a.release_gil == b.release_gil
            and a.device == b.device)


cdef Backend _add_backend(str command, str name, object priority, Backend b, bint replace):
    global _seq
    cdef CommandInfo info = _lookup(command)
    cdef Backend old = None
    if not isinstance(name, str) or not name:
        raise CommandError(f"backend name must be a non-empty string, not {name!r}")
    b.name = name
    b.command = command
    b.priority = int(_DEFAULT_PRIORITY.get(name, 15) if priority is None else priority)
    for x in info.backends:
        if (<Backend>x).name == name:
            old = x
    if old is not None:
        if _same_backend(old, b):
            return old                  # the same registration again (a re-imported module)
        if info.builtin and name == "CPU_REF":
            raise CommandError(f"CPU_REF of built-in command {command} defines its semantics "
                               "and cannot be replaced; register a backend of another name")
        if not replace:
            raise CommandError(
                f"{command} already has a backend {name!r} (registered with another function "
                "or other attributes); pass replace=True to replace it, or choose another name"
            )
    _seq += 1
    b.seq = _seq
    info.backends = [x for x in info.backends if x.name != name]
    info.backends.append(b)
    info.backends.sort(key=lambda x: (-x.priority, x.seq))
    return b


def register_backend(command, backend, fn, *, datatypes=None, contiguous=False, accept=None,
                     priority=None, device="cpu", replace=False):
    """Register ``fn(cmd, inputs, outputs)`` (on ndarrays) as backend ``backend`` of ``command``.

    ``datatypes``: dtypes it accepts (default: all). ``contiguous``: it rejects strided views.
    ``accept(cmd, inputs, outputs) -> bool``: any further restriction (on Tensors).
    ``priority``: default selection prefers higher (CPU_OPT 20, CPU_REF 10, others 15).
    ``device``: "cpu" (host tensors only), "gpu" (GPU tensors only) or "any" (accept decides);
    a "gpu" or "any" backend is called as ``fn(cmd, inputs, outputs, stream=None)`` on the
    Tensors themselves (docs/gpu.md).

    Registering a backend name the command already has: exactly the same registration (same
    function object and attributes) returns the existing Backend; anything else raises
    CommandError unless ``replace=True``. A built-in command's CPU_REF (its definition) can
    never be replaced. NNC: REGISTER_COMMAND_BACKEND.
    """
    if not callable(fn):
        raise CommandError(f"backend {backend!r} of {command!r} must be callable")
    if accept is not None and not callable(accept):
        raise CommandError("accept must be callable")
    if device not in ("cpu", "gpu", "any"):
        raise CommandError(f"backend device must be 'cpu', 'gpu' or 'any', not {device!r}")
    cdef Backend b = Backend.__new__(Backend)
    b.c_exec = NULL
    b.py_exec = fn
    b.datatypes = _datatype_mask(datatypes)
    b.contiguous_only = bool(contiguous)
    b.accept = accept
    b.release_gil = False
    b.device = device
    return _add_backend(command, backend, priority, b, replace)


cdef Backend register_c_backend(
    str command, str name, nnc_cmd_exec_f fn, int datatypes, bint contiguous_only,
    object accept, object priority, bint release_gil,
):
    cdef Backend b = Backend.__new__(Backend)
    b.c_exec = fn
    b.py_exec = None
    b.datatypes = datatypes
    b.contiguous_only = contiguous_only
    b.accept = accept
    b.release_gil = release_gil
    b.device = "cpu"
    return _add_backend(command, name, priority, b, False)


def commands():
    """Names of all registered commands, in registration order."""
    return [info.name for info in _commands]


def backends(command, device=None):
    """Names of ``command``'s backends, in default-selection order; with ``device="cpu"`` or
    ``"gpu"`` only those that run tensors of that device ("any" backends count for both)."""
    if device not in (None, "cpu", "gpu"):
        raise CommandError(f"device must be None, 'cpu' or 'gpu', not {device!r}")
    return [b.name for b in (<CommandInfo>_lookup(command)).backends
            if device is None or (<Backend>b).device in (device, "any")]


def command_info(command):
    """The registry entry of ``command`` (attributes and Backend objects)."""
    return _lookup(command)


# Built-in commands whose scalars are not "a": the parameters that fill param.a and param.b.
_SCALAR_KEYS = {"ADD": ("p", "q"), "MUL": ("p", None), "CLAMP": ("min", "max"),
                "LRN": ("alpha", "beta")}
# Commands with a mode (nnc/cmd/upsample, nnc/cmd/pad): the C enum value of each name.
_MODES = {("UPSAMPLE", "nearest"): UPSAMPLE_NEAREST, ("UPSAMPLE", "bilinear"): UPSAMPLE_BILINEAR,
          ("PAD", "constant"): PAD_CONSTANT, ("PAD", "reflect"): PAD_REFLECT,
          ("PAD", "edge"): PAD_EDGE}
# The element-wise family's parameterised activations (nnc/cmd/elementwise/cpu_opt_act.pyx).
_SCALAR_KEYS.update({"GELU": ("tanh", None), "HARD_SIGMOID": ("alpha", "beta"),
                     "LEAKY_RELU": ("negative_slope", None), "ELU": ("alpha", None),
                     "SELU": ("alpha", "gamma"), "CELU": ("alpha", None),
                     "THRESHOLDED_RELU": ("alpha", None)})
# The normalisation family (nnc/cmd/norm/cpu_opt.pyx): a is epsilon.
_SCALAR_KEYS.update({name: ("epsilon", None) for name in ("LAYER_NORM", "GROUP_NORM", "RMSNORM")})
# SCALED_DOT_PRODUCT_ATTENTION's scale, and is_causal as 0.0 / 1.0 (nnc/cmd/attention/).
_SCALAR_KEYS["SCALED_DOT_PRODUCT_ATTENTION"] = ("scale", "is_causal")
# CONVOLUTION's activation parameter as the C field's ACTIVATION_* value.
_ACTIVATIONS = {"relu": ACTIVATION_RELU, "clamp": ACTIVATION_CLAMP,
                "hard_swish": ACTIVATION_HARD_SWISH, "swish": ACTIVATION_SWISH}
_NORM_MAX_RANK = 12                     # nnc/cmd/norm's MAX_RANK: the axis mask's halves


cdef int _axis_mask(axes):
    """The normalisation family's axes as one int: bit i for axis i >= 0, bit
    _NORM_MAX_RANK + j for axis -(j + 1) (norm/cpu_opt.pyx resolves it for the input's rank)."""
    cdef int mask = 0
    for a in axes:
        mask |= 1 << (a if a >= 0 else _NORM_MAX_RANK - 1 - a)
    return mask


cdef class Cmd:
    """A command with parameters: ``Cmd("SCALAR_MUL", a=0.5)``, ``Cmd("GEMM", transpose_b=True)``.

    ``backend=`` pins a backend by name; otherwise it is chosen from the tensors when the command
    is executed or put into a graph. NNC: ccv_nnc_cmd_t, ccv_nnc_cmd().
    """

    def __init__(self, name, backend=None, **params):
        cdef CommandInfo info = _lookup(name)
        self.info = info
        if info.normalize is not None:
            params = info.normalize(dict(params))
        elif params:
            raise CommandError(f"{name} takes no parameters, got {sorted(params)}")
        params = dict(params)
        self.fn = params.pop("fn", None)
        self.params = CmdParams(params)
        self._fill_param()
        self._backend = None
        self.pinned = False
        if backend is not None:
            for b in info.backends:
                if b.name == backend:
                    self._backend = b
                    self.pinned = True
                    break
            else:
                raise CommandError(
                    f"{name} has no backend {backend!r}; it has {[b.name for b in info.backends]}"
                )

    def _fill_param(self):
        p = self.params
        try:
            a_key, b_key = _SCALAR_KEYS.get(self.info.name, ("a", None)) if self.info.builtin \
                else ("a", None)
            self.param.a = float(p.get(a_key, p.get("value", 0.0)))
            self.param.b = float(p[b_key]) if b_key is not None and b_key in p else 0.0
            self.param.count_include_pad = bool(p.get("count_include_pad", False))
            self.param.ceil_mode = bool(p.get("ceil_mode", False))
            self.param.c = float(p.get("bias", 0.0)) if self.info.name == "LRN" else 0.0
            self.param.transpose_a = bool(p.get("transpose_a", False))
            self.param.transpose_b = bool(p.get("transpose_b", False))
            self.param.groups = int(p.get("groups", 1))
            size = p.get("size", (1, 1))
            # LRN's size is one int (channels), the pools' a pair.
            self.param.size[0], self.param.size[1] = (size, 1) if self.info.name == "LRN" \
                else size
            if self.info.builtin and self.info.name == "CONVOLUTION_TRANSPOSE":
                # Its dilation travels in size: it has no window size of its own (the weights'
                # shape is the kernel's).
                self.param.size[0], self.param.size[1] = p["dilation"]
            self.param.stride[0], self.param.stride[1] = p.get("stride", (1, 1))
            if self.info.builtin and self.info.name in ("LAYER_NORM", "RMSNORM"):
                self.param.stride[0], self.param.stride[1] = 0, _axis_mask(p["axis"])
            elif self.info.builtin and self.info.name == "GROUP_NORM":
                self.param.stride[0] = p["group_axis"]
                self.param.stride[1] = _axis_mask(p["reduce_axis"])
            pad = p.get("padding", (0, 0, 0, 0))
            self.param.pad[0], self.param.pad[1], self.param.pad[2], self.param.pad[3] = pad
            act = p.get("activation")
            self.param.activation = _ACTIVATIONS.get(act, ACTIVATION_NONE)
            if act == "clamp":
                self.param.a, self.param.b = p["clamp"]
            name = self.info.name
            self.param.mode = _MODES.get((name, p.get("type", p.get("mode"))), 0)
            self.param.align_corners = bool(p.get("align_corners", False))
            # PAD's begin and end: one pair per axis (normalised by nnc/cmd/pad).
            for i in range(NNC_MAX_DIM):
                self.param.begin[i], self.param.end[i] = 0, 0
            if name == "PAD":
                for i, (lo, hi) in enumerate(zip(p["begin"], p["end"])):
                    self.param.begin[i], self.param.end[i] = lo, hi
            elif name == "TRANSPOSE" and self.info.builtin:
                # begin: the axes (end[0] = 1) or the permutation (end[0] = 0) as given, end[1]
                # its length (-1: longer than any tensor's rank, which the C backend refuses).
                axes = p["perm"] if p["axes"] is None else p["axes"]
                self.param.end[0] = p["axes"] is not None
                self.param.end[1] = len(axes) if len(axes) <= NNC_MAX_DIM else -1
                for i in range(min(len(axes), NNC_MAX_DIM)):
                    self.param.begin[i] = axes[i]
        except (TypeError, ValueError, OverflowError) as e:
            raise CommandError(
                f"{self.info.name}: bad parameters {p!r} (a, value: numbers; size, stride: "
                f"pairs of ints; padding: four ints): {e}"
            ) from None

    @staticmethod
    def custom(fn, name="CUSTOM"):
        """A command running ``fn(inputs, outputs)`` on lists of ndarrays (None if absent)."""
        if not callable(fn):
            raise CommandError(f"CUSTOM needs a callable, not {type(fn).__name__}")
        return Cmd(name, fn=fn)

    cdef Cmd copy_with(self, Backend backend):
        cdef Cmd c = Cmd.__new__(Cmd)
        c.info = self.info
        c.param = self.param
        c.params = self.params
        c.fn = self.fn
        c._backend = backend
        c.pinned = self.pinned
        return c

    def __copy__(self):
        return self                     # immutable: parameters are frozen when it is made

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        """Pickles as its command name, parameters, CUSTOM function and pinned backend name;
        unpickling runs ``Cmd(name, backend=..., **params)`` again, so the command (and a
        pinned backend) must be registered under the same names where it is unpickled."""
        if self.info.control:
            raise TypeError(f"a {self.info.name} command cannot be pickled: it runs the "
                            "sub-graphs of its node, which live in that graph")
        if self.fn is not None:
            try:
                pickle.dumps(self.fn)
            except Exception as e:
                raise TypeError(
                    f"Cmd {self.info.name!r} cannot be pickled: its function {self.fn!r} cannot "
                    f"be ({type(e).__name__}: {e}); pickle needs a function defined at module "
                    "level, not a lambda or a closure"
                ) from None
        return (_cmd_from_pickle, (self.info.name, dict(self.params), self.fn,
                                   self._backend.name if self.pinned else None))

    @property
    def name(self):
        return self.info.name

    @property
    def backend(self):
        """The chosen backend's name, or None until one is chosen."""
        return None if self._backend is None else self._backend.name

    @property
    def backend_object(self):
        return self._backend

    def __getattr__(self, key):
        try:
            return self.params[key]
        except KeyError:
            raise AttributeError(key) from None

    def __repr__(self):
        args = [repr(self.info.name)]
        args += [f"{k}={v!r}" for k, v in self.params.items()]
        if self.fn is not None:
            args.append(f"fn={getattr(self.fn, '__name__', self.fn)!r}")
        if self._backend is not None:
            args.append(f"backend={self._backend.name!r}")
        return f"Cmd({', '.join(args)})"


def _cmd_from_pickle(name, params, fn, backend):
    if fn is not None:
        params = {**params, "fn": fn}
    return Cmd(name, backend=backend, **params)


cdef list tensor_list(object items, str what):
    """Normalise a tensor argument: a Tensor, an ndarray (wrapped zero-copy), None, or a list."""
    if items is None:
        return []
    if isinstance(items, (Tensor, np.ndarray)):
        items = (items,)
    cdef list out = []
    for x in items:
        if x is None or isinstance(x, Tensor):
            out.append(x)
        elif isinstance(x, np.ndarray):
            out.append(tensor_wrap(x))
        else:
            raise CommandError(
                f"{what} must be nnc.Tensor, numpy.ndarray or None, not {type(x).__name__}"
            )
    return out


cdef bint _overlaps(Tensor a, Tensor b) except -1:
    """Exact aliasing test: byte ranges first (cheap), then NumPy's exact solver for strided
    views, so two channel slices of one concat buffer do not count as overlapping."""
    if not tensor_overlap(&a.t, &b.t):
        return False
    if a.t.contiguous and b.t.contiguous:
        return True
    try:
        return np.shares_memory(a.numpy(), b.numpy(), max_work=1 << 20)
    except np.exceptions.TooHardError:
        return True  # undecided within the budget: refuse, never risk a silent race


cdef int cmd_validate(Cmd cmd, list inputs, list outputs) except -1:
    """Run the command's own check, then the generic read-only and aliasing rules."""
    cdef CommandInfo info = cmd.info
    cdef Tensor a, b
    cdef int i, j
    if info.check is not None:
        info.check(cmd, inputs, outputs)
    for j, x in enumerate(outputs):
        if x is None or not tensor_may_be_readonly(<Tensor>x):
            continue
        if (<Tensor>x).readonly:
            raise CommandError(f"output {j} of {info.name} wraps a read-only array")
        raise CommandError(
            f"output {j} of {info.name} may be re-pointed at read-only memory by a loop (a "
            "MultiView version, the multiview it is synchronised to, or a carry-over source "
            "wraps a read-only array); write a writable copy instead"
        )
    if info.inplace == "any":
        return 0
    if info.inplace == "enforce":
        for j in range(min(len(inputs), len(outputs))):
            a, b = inputs[j], outputs[j]
            if a is None or b is None or not tensor_same(&a.t, &b.t):
                raise CommandError(
                    f"{info.name} runs in place: output {j} must be the same tensor as input {j}"
                )
    for j in range(len(outputs)):
        if outputs[j] is None:
            continue
        b = outputs[j]
        for i in range(len(inputs)):
            if inputs[i] is None:
                continue
            a = inputs[i]
            if not _overlaps(a, b):
                continue
            if ((info.inplace in ("allow", "enforce") or (j == 0 and i in info.alias_inputs))
                    and tensor_same(&a.t, &b.t)):
                continue
            if info.inplace == "none":
                why = f"{info.name} cannot run in place"
            else:
                why = "only an exact alias (same memory, same layout) is allowed"
            raise CommandError(f"output {j} of {info.name} overlaps input {i}: {why}")
        for i in range(j):
            if outputs[i] is not None and _overlaps(outputs[i], b):
                raise CommandError(f"outputs {i} and {j} of {info.name} overlap")
    return 0


cdef str _describe(list inputs, list outputs):
    kinds = set()
    for x in inputs + outputs:
        if x is not None:
            t = <Tensor>x
            fmt = ""
            if t.t.format != TENSOR_FORMAT_NHWC and t.t.ndim >= 3:
                fmt = f" {t.format}"
            kinds.add(f"{'' if t.t.device < 0 else f'gpu:{t.t.device} '}"
                      f"{DATATYPE_NAMES[t.t.datatype]}{fmt}{'' if t.t.contiguous else ' strided'}")
    return ", ".join(sorted(kinds)) or "no"


cdef str _accept_rule(Backend b):
    """'; ' and the first paragraph of b's accept predicate's docstring (what it requires,
    e.g. "3x3 kernels, stride 1"), or '' when it has none: a refusal then says why."""
    doc = getattr(b.accept, "__doc__", None) if b.accept is not None else None
    if not isinstance(doc, str):
        return ""
    doc = doc.strip()
    name = getattr(b.accept, "__name__", None)
    if isinstance(name, str) and doc.startswith(name + "("):
        doc = doc.partition("\n")[2].strip()   # Cython's embedded signature line
    if not doc:
        return ""
    return "; " + " ".join(doc.split("\n\n")[0].split()).rstrip(".")


cdef Backend cmd_select(Cmd cmd, list inputs, list outputs):
    """The backend a run uses: the pinned one (which must accept), else the default choice."""
    cdef Backend b
    if cmd.pinned:
        b = cmd._backend
        if not b.accepts(cmd, inputs, outputs):
            where = "" if b.device == "any" else f"{b.device} "
            raise CommandError(
                f"backend {b.name} of {cmd.info.name} does not accept "
                f"{_describe(inputs, outputs)} tensors (it takes {where}{b.datatype_names}"
                f"{_accept_rule(b)})"
            )
        return b
    for b in cmd.info.backends:
        if b.accepts(cmd, inputs, outputs):
            return b
    offered = "; ".join(f"{b.name}: {', '.join(b.datatype_names)}" for b in cmd.info.backends)
    raise CommandError(
        f"no backend of {cmd.info.name} accepts {_describe(inputs, outputs)} tensors "
        f"({offered or 'no backends registered'})"
    )


cdef bint tensors_movable(list tensors) except -1:
    cdef object t
    for t in tensors:
        if t is not None and (<Tensor>t).movable:
            return True
    return False


cdef object _py_array(object x, bint image):
    """The ndarray a Python CPU backend gets for tensor x: an image command's NCHW tensor as
    its NHWC view (channels moved last, no copy), anything else as it is."""
    cdef Tensor t
    if x is None:
        return None
    t = <Tensor>x
    if image and t.t.format == TENSOR_FORMAT_NCHW and (t.t.ndim == 3 or t.t.ndim == 4):
        return np.moveaxis(t.numpy(), -3, -1)
    return t.numpy()


def _dyn_call(fn, cmd, tuple inputs, tuple outputs, bint image=False):
    """A Python backend call on movable tensors: take their ndarrays at call time."""
    ins = [_py_array(t, image) for t in inputs]
    outs = [_py_array(t, image) for t in outputs]
    if cmd is None:
        fn(ins, outs)
    else:
        fn(cmd, ins, outs)


cdef object cmd_bind(Cmd cmd, Backend b, list inputs, list outputs, nnc_tensor_t** io,
                     nnc_bound_t* out):
    """Bind ``cmd`` run by backend ``b`` on these (validated) tensors into ``out``.

    ``io`` receives the tensors' C views (len(inputs) + len(outputs) slots; the caller owns it
    and keeps the Tensors alive). Returns what owns ``out.fn`` and ``out.args`` (keep it as
    long as ``out`` may run), or None. The one place that decides how work runs: C without the
    GIL above NNC_GIL_RELEASE_ELEMENTS output elements, C with it, a Python backend on arrays
    made now (or at call time when a loop may re-point a tensor), a GPU backend on Tensors.
    """
    cdef int n_in = len(inputs), i
    cdef Py_ssize_t elements = 0
    tensors = inputs + outputs
    for i, t in enumerate(tensors):
        io[i] = NULL if t is None else &(<Tensor>t).t
        if t is not None and i >= n_in:
            elements += (<Tensor>t).t.count
    memset(out, 0, sizeof(nnc_bound_t))
    out.param = &cmd.param
    out.io = io
    out.input_size = n_in
    out.output_size = len(outputs)
    movable = tensors_movable(tensors)
    if movable:
        out.flags |= BOUND_MOVABLE
    if cmd.info.name == "NOOP":
        out.kind = BOUND_NONE
        return None
    if b.c_exec != NULL and cmd.fn is None:
        out.kind = BOUND_C
        out.c_exec = b.c_exec
        if b.release_gil and elements >= NNC_GIL_RELEASE_ELEMENTS:
            out.flags |= BOUND_NOGIL
        return None
    if b.device != "cpu" and cmd.fn is None:
        # A GPU backend takes the Tensors (device memory has no ndarray).
        call = (b.py_exec, (cmd, list(inputs), list(outputs)))
        out.flags |= BOUND_DEVICE
    elif movable:
        # A loop may re-point these tensors: make the ndarrays at call time.
        call = (_dyn_call, (cmd.fn, None, tuple(inputs), tuple(outputs)) if cmd.fn is not None
                else (b.py_exec, cmd, tuple(inputs), tuple(outputs),
                      cmd.info.name in _image_commands))
    else:
        image = cmd.fn is None and cmd.info.name in _image_commands
        ins = [_py_array(t, image) for t in inputs]
        outs = [_py_array(t, image) for t in outputs]
        call = (cmd.fn, (ins, outs)) if cmd.fn is not None else (b.py_exec, (cmd, ins, outs))
    out.kind = BOUND_PY
    out.fn = <PyObject*>call[0]
    out.args = <PyObject*>call[1]
    return call


cdef int backend_run(Backend b, Cmd cmd, list inputs, list outputs) except -1:
    """Run ``b`` on validated tensors now, through the bind path, with the calling thread's
    scratch memory (nnc.base.parallel.thread_context: reused call after call)."""
    cdef int n = len(inputs) + len(outputs), rc
    cdef nnc_bound_t bound
    cdef nnc_stream_context_t* context = thread_context()
    cdef nnc_tensor_t** io = <nnc_tensor_t**>malloc(sizeof(nnc_tensor_t*) * (n + 1))
    if io == NULL:
        raise MemoryError()
    try:
        parallel_ready()
        call = cmd_bind(cmd, b, inputs, outputs, io, &bound)
        rc = cmd_bound_run(&bound, context)
    finally:
        free(io)
    if rc != 0:
        raise CommandError(f"backend {b.name} of {cmd.info.name} failed: "
                           f"{STATUS_NAMES.get(rc, rc)}")
    del call
    return 0


# The stream layer above registers its enqueue function here when it is imported
# (nnc.stream.stream.Stream._enqueue_cmd for nnc.Stream, of either kind): this layer never imports
# it.
cdef object _stream_type = None
cdef object _stream_enqueue = None


def cmd_register_stream(stream_type, enqueue):
    """nnc.stream.stream's registration: cmd_exec(stream=s) accepts instances of ``stream_type`` and
    hands them to ``enqueue(s, cmd, backend, inputs, outputs)``."""
    global _stream_type, _stream_enqueue
    _stream_type, _stream_enqueue = stream_type, enqueue


def cmd_exec(Cmd cmd not None, inputs=(), outputs=(), stream=None):
    """Run one command (NNC: ccv_nnc_cmd_exec).

    Inputs and outputs are Tensors, ndarrays (wrapped zero-copy) or None. Shapes, dtypes and
    aliasing are checked first; the backend is the pinned one or the default choice. Without a
    stream it runs now on the calling thread; with ``stream=s`` it is enqueued on s and this
    returns at once (failures surface from ``s.wait()`` as StreamError).
    """
    ins = tensor_list(inputs, "inputs")
    outs = tensor_list(outputs, "outputs")
    if stream is not None and (_stream_type is None or not isinstance(stream, _stream_type)):
        raise CommandError(f"stream must be an nnc.Stream, not {type(stream).__name__}")
    cmd_validate(cmd, ins, outs)
    b = cmd_select(cmd, ins, outs)
    cdef double t0
    if stream is None and trace_on:
        t0 = trace_now()                # nnc.trace: a slice named after the command
        try:
            backend_run(b, cmd, ins, outs)
        finally:
            trace_host(cmd.name, "cmd", t0, trace_now(), {"backend": (<Backend>b).name})
    elif stream is None:
        backend_run(b, cmd, ins, outs)
    else:
        _stream_enqueue(stream, cmd, b, ins, outs)   # registered by nnc.stream.stream


def cmd_backends_for(Cmd cmd not None, inputs, outputs):
    """Backends of ``cmd`` that accept these tensors, in default-selection order."""
    ins = tensor_list(inputs, "inputs")
    outs = tensor_list(outputs, "outputs")
    return [b for b in cmd.info.backends if (<Backend>b).accepts(cmd, ins, outs)]


def _scratch(list inputs, list outputs):
    """Copies of the tensors for timing, keeping exact in-place aliases aliased (as NNC does)."""
    made = []

    def copy_of(x):
        cdef Tensor t, u
        if x is None:
            return None
        t = <Tensor>x
        if t.t.device < 0 and constant_contains(t.t.data):
            # Frozen: nothing can write it, so the backends read it itself, as the run will
            # (with the packed copies kept for it: a scratch copy would time packing too).
            return x
        for orig, dup in made:
            u = <Tensor>orig
            if tensor_same(&t.t, &u.t):
                return dup
        host = np.array(t.numpy(), copy=True, order="C")
        # A GPU tensor's scratch copy stays on its GPU, so GPU backends are timed too.
        dup = Tensor(host) if t.t.device < 0 else gpu_memory("from_host")(host, t.t.device)
        (<Tensor>dup).t.format = t.t.format     # backends read it as the tensor's
        made.append((t, dup))
        return dup

    return [copy_of(x) for x in inputs], [copy_of(x) for x in outputs]


def cmd_autotune(Cmd cmd not None, inputs, outputs, trials=3, cold=False):
    """Time every backend that accepts these tensors on scratch copies; return the fastest.

    NNC: ccv_nnc_cmd_autotune (best of 3 trials; in-place aliasing kept on the scratch copies;
    frozen inputs are read as they are). A backend that raises is dropped. When a C backend
    accepts the tensors only C backends are timed: a Python backend holds the GIL while it runs
    (another stream's Python work waits) and NumPy's BLAS may start threads of its own against
    nnc's pool, which a timing of the node alone does not see. ``cold=True`` (CPU tensors only)
    flushes the caches before each timed run and reads the non-frozen inputs back in: how a
    layer meets its weights (or a backend's kept transform of them) in a network too large for
    the cache, where back-to-back timings would favour a backend whose bigger weights only fit
    in cache while it is timed alone (Graph.autotune decides). Returns the Backend, or None if
    none accepts.
    """
    ins = tensor_list(inputs, "inputs")
    outs = tensor_list(outputs, "outputs")
    candidates = [b for b in cmd.info.backends if (<Backend>b).accepts(cmd, ins, outs)]
    if cmd.pinned:
        return cmd._backend
    if any((<Backend>b).c_exec != NULL for b in candidates):
        candidates = [b for b in candidates if (<Backend>b).c_exec != NULL]
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    s_in, s_out = _scratch(ins, outs)
    cold = bool(cold) and all(x is None or (<Tensor>x).t.device < 0 for x in s_in + s_out)
    best = {}
    for _ in range(int(trials)):
        for b in list(candidates):
            if cold:
                cache_flush(s_in)
            t0 = time.perf_counter()
            try:
                # Scratch copies may hold garbage (uninitialised buffers): timing only.
                with np.errstate(all="ignore"):
                    backend_run(b, cmd, s_in, s_out)
            except Exception:
                candidates.remove(b)
                best.pop(b, None)
                continue
            dt = time.perf_counter() - t0
            if dt < best.get(b, float("inf")):
                best[b] = dt
    if not best:
        return None
    return min(best, key=lambda b: (best[b], -b.priority, b.seq))
