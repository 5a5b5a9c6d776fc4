"""A pipeline's stages and how they are wired (TVM's pipeline executor config, RFC 0014).

A :class:`Module` is one stage: an nnc :class:`~nnc.Graph` with named input tensors and ordered
output tensors, or a Python function (a non-DNN stage). A :class:`PipelineConfig` binds them:

* ``cfg.inputs["data_a"] = (m1, "data_0")``: a global input feeds a module input (a list of such
  pairs feeds several);
* ``cfg.outputs.append((m3, 0))``: global output ``i`` is a module's output;
* ``cfg.connect(m1, 0, m2, "x")``: a module's output feeds another module's input.

An endpoint is a pair (owner, port). The owner is a module or the config itself (the global
side); the port is a ``str`` for an input (a module input, or a global input's name) and an
``int`` for an output (a module output index, or a global output index). So
``cfg.connect(cfg, "data_a", m1, "data_0")`` is the same binding as the ``cfg.inputs`` line
above, and ``cfg.connect(m3, 0, cfg, 0)`` sets global output 0. Every illegal binding raises
:class:`PipelineError` naming both ends, at the moment it is made: a cycle (checked on every
connect), a module bound to itself, a module input used as a source, a module output feeding a
global input, a global input feeding a module output, a global output used as a source,
an unknown input name or output index, a module input bound twice, and a dtype or shape
mismatch where both sides declare one (``None`` means "not declared": checked at run time).

Executors read the config through :meth:`PipelineConfig.plan`, which checks that it is complete
(every module input bound, at least one global output) and returns a frozen :class:`Plan`:

* ``plan.stages``: one :class:`StagePlan` per module, in a topological order (a producer before
  its consumers; ties keep the order modules first appeared in the config);
* ``stage.inputs``: ``((name, Source), ...)`` for each of the module's inputs, in the module's
  order, where ``Source(stage, output, name)`` is either a global input (``stage == -1``,
  ``name`` is the global input's name) or output ``output`` of the stage at position ``stage``
  of ``plan.stages`` (always an earlier one);
* ``stage.consumers``: per output index, the ``Sink``s it feeds, each either an input of a
  later stage (``Sink(stage, input, -1)``) or a global output (``Sink(-1, "", i)``);
* ``stage.producers``: the positions of the distinct stages it reads from, sorted;
* ``plan.inputs``: the global input names; ``plan.outputs``: per global output the ``(stage,
  output)`` it reads.

The config keeps references to its modules; a plan is a snapshot (later changes to the config
do not alter it).
"""

from collections.abc import MutableMapping
from typing import NamedTuple

import numpy as np

from nnc.base.core import NNCError
from nnc.cmd.command import Cmd, cmd_exec
from nnc.graph.graph import Graph
from nnc.tensor.tensor import Tensor


class PipelineError(NNCError):
    """A pipeline misuse: an illegal binding, an incomplete config, a bad input, a full
    pipeline with ``block=False``, a failed stage (``__cause__``: what failed), use after
    close."""


def _dtype(value, what):
    if value is None:
        return None
    try:
        return np.dtype(value)
    except TypeError as e:
        raise PipelineError(f"{what}: {value!r} is not a dtype") from e


def _shape(value, what):
    if value is None:
        return None
    try:
        dims = tuple(value)
    except TypeError:
        raise PipelineError(f"{what}: shape {value!r} is not a sequence") from None
    for d in dims:
        if d is not None and (not isinstance(d, (int, np.integer)) or isinstance(d, bool)
                              or d < 0):
            raise PipelineError(f"{what}: shape {value!r} has a dimension that is neither a "
                                "non-negative int nor None")
    return tuple(None if d is None else int(d) for d in dims)


def _spec(value, what):
    """(dtype, shape) of a function stage's declared port; either may be None (unknown)."""
    if value is None:
        return (None, None)
    if not isinstance(value, tuple) or len(value) != 2:
        raise PipelineError(f"{what}: expected (dtype, shape), either of which may be None, "
                            f"not {value!r}")
    return (_dtype(value[0], what), _shape(value[1], what))


def spec_str(spec):
    dtype, shape = spec
    d = "?" if dtype is None else str(dtype)
    s = "?" if shape is None else "(" + ", ".join("?" if x is None else str(x)
                                                  for x in shape) + ")"
    return f"{d}{s}"


def spec_mismatch(a, b):
    """Why declared specs a and b (dtype, shape) cannot meet, or None if they can."""
    if a[0] is not None and b[0] is not None and a[0] != b[0]:
        return f"dtype {a[0]} != {b[0]}"
    if a[1] is not None and b[1] is not None:
        if len(a[1]) != len(b[1]) or any(x is not None and y is not None and x != y
                                         for x, y in zip(a[1], b[1])):
            return f"shape {spec_str((None, a[1]))[1:]} != {spec_str((None, b[1]))[1:]}"
    return None


def array_mismatch(spec, array):
    """Why ``array`` does not fit the declared spec, or None."""
    return spec_mismatch(spec, (array.dtype, array.shape))


_names = 0


class Module:
    """One pipeline stage: a graph with named inputs and ordered outputs, or a function.

    ``Module(graph, inputs={"data_0": t0}, outputs=[t1, t2], name="mod1")``: each run copies
    the stage's input arrays into the named input tensors, runs ``graph`` (statically
    scheduled if it has a schedule), and copies the output tensors out. The tensors must be
    tensors that nodes of ``graph`` read (inputs) and write (outputs), on the CPU or, whole
    and contiguous, on a GPU (copied host <-> device). A graph with a GPU tensor is a *GPU
    stage* and runs on ``device``, the GPU of its first GPU input or output (else of its
    nodes' first GPU tensor); ``device`` is "cpu" for the others. The pipeline owns the
    graph while it runs: don't run or change it meanwhile.
    """

    def __init__(self, graph, inputs, outputs, name=None):
        global _names
        if not isinstance(graph, Graph):
            raise PipelineError(f"Module needs an nnc.Graph, not {type(graph).__name__} (use "
                                "Module.function for a Python stage)")
        _names += 1
        self.name = _module_name(name, _names)
        self.graph = graph
        self.fn = None
        read, written = [], []
        for e in graph.execs:
            read.extend(t for t in e.inputs if t is not None)
            written.extend(t for t in e.outputs if t is not None)
        if not isinstance(inputs, dict):
            raise PipelineError(f"module {self.name}: inputs must be a dict name -> Tensor")
        if not isinstance(outputs, (list, tuple)):
            raise PipelineError(f"module {self.name}: outputs must be a list of Tensors")
        self.input_tensors = {}
        for key, t in inputs.items():
            what = f"module {self.name} input {key!r}"
            _check_port_name(key, what)
            _check_tensor(t, read, what, "an input of")
            self.input_tensors[key] = t
        self.output_tensors = list(outputs)
        for i, t in enumerate(self.output_tensors):
            _check_tensor(t, written, f"module {self.name} output {i}", "an output of")
        self.input_specs = {k: (t.dtype, tuple(t.shape))
                            for k, t in self.input_tensors.items()}
        self.output_specs = [(t.dtype, tuple(t.shape)) for t in self.output_tensors]
        gpus = [t.device for t in (*self.input_tensors.values(), *self.output_tensors,
                                   *read, *written) if t.device != "cpu"]
        self.device = gpus[0] if gpus else "cpu"

    @classmethod
    def function(cls, fn, inputs, outputs, name=None):
        """A Python stage: ``fn(**arrays)`` returns a tuple or list of arrays (or one array).

        ``inputs`` maps each keyword to its declared ``(dtype, shape)``; ``outputs`` lists the
        declared ``(dtype, shape)`` of each result. A dtype or shape (or a dimension) may be
        None: unknown, not checked when connecting, and what arrives is checked at run time.
        """
        global _names
        if not callable(fn):
            raise PipelineError(f"Module.function needs a callable, not {type(fn).__name__}")
        self = cls.__new__(cls)
        _names += 1
        self.name = _module_name(name, _names, getattr(fn, "__name__", None))
        self.graph = None
        self.fn = fn
        self.device = "cpu"
        self.input_tensors = {}
        self.output_tensors = []
        if not isinstance(inputs, dict):
            raise PipelineError(f"module {self.name}: inputs must be a dict name -> "
                                "(dtype, shape)")
        self.input_specs = {}
        for key, spec in inputs.items():
            what = f"module {self.name} input {key!r}"
            _check_port_name(key, what)
            self.input_specs[key] = _spec(spec, what)
        if not isinstance(outputs, (list, tuple)):
            raise PipelineError(f"module {self.name}: outputs must be a list of "
                                "(dtype, shape)")
        self.output_specs = [_spec(s, f"module {self.name} output {i}")
                             for i, s in enumerate(outputs)]
        return self

    def check_inputs(self, arrays):
        """``arrays`` (input name -> array) checked against this stage's declarations: the
        same dict, or PipelineError naming the input."""
        if not isinstance(arrays, dict) or set(arrays) != set(self.input_specs):
            got = sorted(arrays) if isinstance(arrays, dict) else type(arrays).__name__
            raise PipelineError(f"module {self.name} takes inputs {list(self.input_names)}, "
                                f"got {got}")
        for key, a in arrays.items():
            spec = self.input_specs[key]
            why = array_mismatch(spec, a) if isinstance(a, np.ndarray) else "not an ndarray"
            if why:
                desc = f"{a.dtype}{a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
                raise PipelineError(f"{self.name}.{key} declared {spec_str(spec)}, got "
                                    f"{desc}: {why}")
        return arrays

    def call(self, arrays):
        """A function stage's work on checked ``arrays``: the function gets read-only views
        (other consumers may read the same arrays); its results are checked and copied (it
        may reuse its buffers). Returns the list of output arrays."""
        args = {}
        for key, a in arrays.items():
            v = a.view()
            v.flags.writeable = False
            args[key] = v
        r = self.fn(**args)
        outs = list(r) if isinstance(r, (tuple, list)) else [r]
        if len(outs) != self.num_outputs:
            raise PipelineError(f"{self.name} returned {len(outs)} value(s), declared "
                                f"{self.num_outputs}")
        result = []
        for j, o in enumerate(outs):
            a = np.array(o, copy=True)
            why = array_mismatch(self.output_specs[j], a)
            if why:
                raise PipelineError(f"{self.name} output {j} declared "
                                    f"{spec_str(self.output_specs[j])}: {why}")
            result.append(a)
        return result

    def load(self, arrays):
        """A graph stage: copy checked ``arrays`` into the input tensors (a GPU tensor by a
        DATA_TRANSFER, finished when this returns)."""
        for key, a in arrays.items():
            t = self.input_tensors[key]
            if t.device == "cpu":
                np.copyto(t.numpy(), a)
            else:
                cmd_exec(Cmd("DATA_TRANSFER"), [Tensor(np.ascontiguousarray(a))], [t])

    def store(self):
        """A graph stage: fresh copies of the output tensors (of a GPU tensor, a host copy:
        the graph's run must have finished, as every caller here waits for it)."""
        return [t.numpy().copy() if t.device == "cpu" else t.numpy()
                for t in self.output_tensors]

    def run(self, arrays):
        """Run this stage once, synchronously on the calling thread (``graph.run()``, or
        the function), with the checks a pipeline makes: ``arrays`` maps every input name to
        an array; returns the output arrays. For executors that run a stage elsewhere (a Ray
        actor) and for reference runs; not while a pipeline built from it is running."""
        arrays = self.check_inputs(arrays)
        if self.graph is None:
            return self.call(arrays)
        self.load(arrays)
        self.graph.run()        # on a GPU: finished when it returns
        return self.store()

    @property
    def input_names(self):
        return tuple(self.input_specs)

    @property
    def num_outputs(self):
        return len(self.output_specs)

    def __repr__(self):
        kind = "graph" if self.graph is not None else "function"
        return (f"<pipeline.Module {self.name!r} ({kind}): inputs "
                f"{', '.join(self.input_specs) or '-'}; {self.num_outputs} output(s)>")


def _module_name(name, n, fallback=None):
    if name is None:
        return f"{fallback}#{n}" if fallback and fallback != "<lambda>" else f"mod#{n}"
    if not isinstance(name, str) or not name:
        raise PipelineError(f"a module name must be a non-empty str, not {name!r}")
    return name


def _check_tensor(t, used, what, role):
    """A graph stage's tensor: an nnc.Tensor that nodes use (itself, or memory a node's
    tensor overlaps: a view of it, or a tensor it is a view of); on a GPU, contiguous (the
    pipeline copies it whole, and GPU copies take contiguous tensors)."""
    if not isinstance(t, Tensor):
        raise PipelineError(f"{what}: {type(t).__name__} is not an nnc.Tensor")
    if t.device != "cpu" and not t.is_contiguous:
        raise PipelineError(f"{what}: a strided view on {t.device}: a GPU stage's inputs and "
                            "outputs must be contiguous (the pipeline copies them whole)")
    if any(t is u for u in used):
        return
    if t.device != "cpu":
        lo, hi = _span(t)
        if not any(u.device == t.device and _span(u)[0] < hi and lo < _span(u)[1]
                   for u in used):
            raise PipelineError(f"{what}: that tensor (or its memory) is not {role} any node "
                                "of the graph")
        return
    a = t.numpy()
    if not any(u.device == "cpu" and np.may_share_memory(a, u.numpy()) for u in used):
        raise PipelineError(f"{what}: that tensor (or its memory) is not {role} any node of "
                            "the graph")


def _span(t):
    """[lo, hi) of the bytes a tensor's elements cover."""
    item = t.dtype.itemsize
    lo = hi = t.data_ptr
    for n, st in zip(t.shape, t.strides):
        step = (n - 1) * st * item if n else 0
        if step < 0:
            lo += step
        else:
            hi += step
    return lo, hi + (item if t.size else 0)


def _check_port_name(key, what):
    if not isinstance(key, str) or not key:
        raise PipelineError(f"{what}: an input name must be a non-empty str")


class Source(NamedTuple):
    """Where a stage input comes from: ``stage == -1``: the global input ``name``; else output
    ``output`` of the stage at that position of ``Plan.stages``."""

    stage: int
    output: int
    name: str


class Sink(NamedTuple):
    """Where a stage output goes: ``stage == -1``: global output ``output``; else the input
    named ``input`` of the stage at that position of ``Plan.stages``."""

    stage: int
    input: str
    output: int


class StagePlan(NamedTuple):
    module: Module
    inputs: tuple          # ((input name, Source), ...) in the module's input order
    consumers: tuple       # per output index: (Sink, ...)
    producers: tuple       # positions of the distinct stages read, sorted


class Plan(NamedTuple):
    stages: tuple          # StagePlan per module, producers first
    inputs: tuple          # global input names, in the order they were bound
    outputs: tuple         # per global output: (stage position, output index)


def _end(owner, port, cfg):
    """Text naming an endpoint, for messages."""
    if owner is cfg:
        return f"global input {port!r}" if isinstance(port, str) else f"global output {port}"
    if isinstance(owner, Module):
        return (f"{owner.name}.{port}" if isinstance(port, str)
                else f"{owner.name}.output({port})")
    return f"{owner!r}[{port!r}]"


class _GlobalInputs(MutableMapping):
    """``cfg.inputs``: global input name -> the module inputs it feeds (setting a name again
    replaces its bindings; deleting it unbinds them)."""

    def __init__(self, cfg):
        self._cfg = cfg
        self._targets = {}              # name -> [(module, input name), ...], never empty

    def __setitem__(self, name, value):
        if not isinstance(name, str) or not name:
            raise PipelineError(f"a global input name must be a non-empty str, not {name!r}")
        pairs = value if isinstance(value, list) else [value]
        if not pairs:
            raise PipelineError(f"global input {name!r} bound to nothing (an empty list)")
        for p in pairs:
            if not isinstance(p, tuple) or len(p) != 2:
                raise PipelineError(f"global input {name!r}: expected (module, input name) "
                                    f"or a list of them, not {p!r}")
        old = self._targets.pop(name, [])
        for m, key in old:
            self._cfg._unbind_input(m, key)
        done = []
        try:
            for m, key in pairs:
                self._cfg.connect(self._cfg, name, m, key)
                done.append((m, key))
        except PipelineError:
            for m, key in done:
                self._cfg._unbind_input(m, key)
            self._targets.pop(name, None)
            for m, key in old:
                self._cfg.connect(self._cfg, name, m, key)
            raise

    def __getitem__(self, name):
        return list(self._targets[name])

    def __delitem__(self, name):
        for m, key in self._targets.pop(name):
            self._cfg._unbind_input(m, key)

    def __iter__(self):
        return iter(list(self._targets))

    def __len__(self):
        return len(self._targets)

    def __repr__(self):
        return f"{{{', '.join(f'{k!r}: {v!r}' for k, v in self._targets.items())}}}"


class _GlobalOutputs:
    """``cfg.outputs``: global output i -> (module, output index). A list that checks what
    goes in: append, insert, ``[i] = ...``, ``del [i]``, len, iteration."""

    def __init__(self, cfg):
        self._cfg = cfg
        self._items = []

    def _check(self, value, i):
        if not isinstance(value, tuple) or len(value) != 2:
            raise PipelineError(f"global output {i}: expected (module, output index), not "
                                f"{value!r}")
        what = f"connecting {_end(value[0], value[1], self._cfg)} -> global output {i}"
        self._cfg._check_edge(value[0], value[1], self._cfg, what)
        return value

    def append(self, value):
        self._items.append(self._check(value, len(self._items)))

    def insert(self, i, value):
        self._items.insert(i, self._check(value, i))

    def __setitem__(self, i, value):
        if not isinstance(i, int):
            raise PipelineError(f"global output index must be an int, not {i!r}")
        self._items[i]                  # IndexError for a slot that does not exist
        self._items[i] = self._check(value, i)

    def __getitem__(self, i):
        return self._items[i]

    def __delitem__(self, i):
        del self._items[i]

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(list(self._items))

    def __repr__(self):
        return repr(self._items)


class PipelineConfig:
    """Stages and their bindings (see the module docstring); ``str(cfg)`` summarises them."""

    def __init__(self):
        self.inputs = _GlobalInputs(self)
        self.outputs = _GlobalOutputs(self)
        self._modules = []              # every module bound so far, in first-seen order
        self._sources = {}              # (module id, input name) -> (owner, port)
        self._edges = []                # (src module, output index, dst module, input name)

    @property
    def modules(self):
        return list(self._modules)

    def connect(self, src, src_port, dst, dst_port):
        """Bind ``src``'s port to ``dst``'s port (see the module docstring for endpoints)."""
        what = f"connecting {_end(src, src_port, self)} -> {_end(dst, dst_port, self)}"
        if dst is self and isinstance(dst_port, int):
            # Module output -> global output: the same as cfg.outputs[dst_port] = ...
            if dst_port == len(self.outputs):
                self.outputs.append((src, src_port))
            elif 0 <= dst_port < len(self.outputs):
                self.outputs[dst_port] = (src, src_port)
            else:
                raise PipelineError(f"{what}: global output {dst_port} would leave a gap "
                                    f"(there are {len(self.outputs)})")
            return
        self._check_edge(src, src_port, dst, what, dst_port)
        key = (id(dst), dst_port)
        self._sources[key] = (src, src_port)
        if src is self:
            self.inputs._targets.setdefault(src_port, []).append((dst, dst_port))
        else:
            self._edges.append((src, src_port, dst, dst_port))

    def _add_module(self, m, what):
        if any(m is x for x in self._modules):
            return
        for x in self._modules:
            if x.name == m.name:
                raise PipelineError(f"{what}: two different modules are named {m.name!r}")
            if m.graph is not None and x.graph is m.graph:
                raise PipelineError(f"{what}: modules {x.name!r} and {m.name!r} share one "
                                    "graph (a stage owns its graph's tensors)")
            mine = [*m.input_tensors.values(), *m.output_tensors]
            theirs = [*x.input_tensors.values(), *x.output_tensors]
            if any(t is u for t in mine for u in theirs):
                raise PipelineError(f"{what}: modules {x.name!r} and {m.name!r} share a "
                                    "tensor (stages run at once: each needs its own)")
        self._modules.append(m)

    def _check_side(self, owner, what):
        if isinstance(owner, PipelineConfig) and owner is not self:
            raise PipelineError(f"{what}: the global side of another config")
        if owner is not self and not isinstance(owner, Module):
            raise PipelineError(f"{what}: {owner!r} is neither a pipeline.Module nor this "
                                "config (the global side)")

    def _check_edge(self, src, src_port, dst, what, dst_port=None):
        """Raise PipelineError if src.src_port -> dst(.dst_port) is illegal. ``dst is self``
        with ``dst_port`` None: a global output."""
        self._check_side(src, what)
        self._check_side(dst, what)
        if not isinstance(src_port, (str, int)) or isinstance(src_port, bool):
            raise PipelineError(f"{what}: a port is an input name (str) or an output index "
                                f"(int), not {src_port!r}")
        if src is self:
            if isinstance(src_port, int):
                raise PipelineError(f"{what}: a global output cannot be a source")
            if dst is self:
                raise PipelineError(f"{what}: a global input can feed only module inputs")
        elif isinstance(src_port, str):
            raise PipelineError(f"{what}: a module input ({src.name}.{src_port}) cannot be a "
                                "source; bind a module output or a global input to it")
        else:
            if not 0 <= src_port < src.num_outputs:
                raise PipelineError(f"{what}: {src.name} has no output {src_port} (it has "
                                    f"{src.num_outputs})")
        if dst is self:
            if isinstance(dst_port, str):
                raise PipelineError(f"{what}: a global input can be fed only by the caller "
                                    "(set_input), not by a module output")
            self._add_module(src, what)
            return
        if not isinstance(dst_port, (str, int)) or isinstance(dst_port, bool):
            raise PipelineError(f"{what}: a port is an input name (str) or an output index "
                                f"(int), not {dst_port!r}")
        if isinstance(dst_port, int):
            if src is self:
                raise PipelineError(f"{what}: a global input can feed only module inputs, "
                                    f"not a module output ({dst.name}.output({dst_port}))")
            raise PipelineError(f"{what}: a module output cannot feed another module's "
                                f"output ({dst.name}.output({dst_port})); bind it to an input")
        if src is dst:
            raise PipelineError(f"{what}: a module cannot feed itself ({dst.name})")
        if dst_port not in dst.input_specs:
            raise PipelineError(f"{what}: {dst.name} has no input {dst_port!r} (its inputs: "
                                f"{', '.join(dst.input_names) or 'none'})")
        want = dst.input_specs[dst_port]
        if src is not self and self._reaches(dst, src):
            raise PipelineError(f"{what}: would make a cycle ({src.name} already depends "
                                f"on {dst.name})")
        if src is self:
            for m, key in self.inputs._targets.get(src_port, []):
                why = spec_mismatch(m.input_specs[key], want)
                if why:
                    raise PipelineError(f"{what}: {why} (global input {src_port!r} also "
                                        f"feeds {m.name}.{key}, {spec_str(m.input_specs[key])})")
        else:
            why = spec_mismatch(src.output_specs[src_port], want)
            if why:
                raise PipelineError(f"{what}: {why}")
        old = self._sources.get((id(dst), dst_port))
        if old is not None:
            raise PipelineError(f"{what}: {dst.name}.{dst_port} is already bound to "
                                f"{_end(old[0], old[1], self)}")
        for m in (src, dst):
            if m is not self:
                self._add_module(m, what)

    def _reaches(self, a, b):
        """True if module b depends on module a through module-to-module edges."""
        seen, todo = set(), [a]
        while todo:
            m = todo.pop()
            if m is b:
                return True
            if id(m) in seen:
                continue
            seen.add(id(m))
            todo.extend(d for s, _, d, _ in self._edges if s is m)
        return False

    def _unbind_input(self, m, key):
        src = self._sources.pop((id(m), key), None)
        if src is not None and src[0] is not self:
            self._edges = [e for e in self._edges if not (e[2] is m and e[3] == key)]

    def plan(self):
        """Check the config is complete and return the frozen :class:`Plan` executors run."""
        if not len(self.outputs):
            raise PipelineError("the pipeline has no global output (cfg.outputs.append"
                                "((module, index)))")
        for m in self._modules:
            missing = [k for k in m.input_names if (id(m), k) not in self._sources]
            if missing:
                raise PipelineError(f"module {m.name}: input(s) {', '.join(missing)} bound to "
                                    "nothing (connect a module output or a global input)")
        order, placed = [], set()
        while len(order) < len(self._modules):
            for m in self._modules:
                if id(m) not in placed and all(id(s) in placed for s, _, d, _ in self._edges
                                               if d is m):
                    order.append(m)
                    placed.add(id(m))
                    break
            else:               # connect() keeps the graph acyclic, so this cannot happen
                raise PipelineError("the module bindings form a cycle")
        pos = {id(m): i for i, m in enumerate(order)}
        sinks = {(id(m), i): [] for m in order for i in range(m.num_outputs)}
        for s, i, d, key in self._edges:
            sinks[(id(s), i)].append(Sink(pos[id(d)], key, -1))
        outputs = []
        for j, (m, i) in enumerate(self.outputs):
            sinks[(id(m), i)].append(Sink(-1, "", j))
            outputs.append((pos[id(m)], i))
        stages = []
        for m in order:
            ins = []
            for key in m.input_names:
                owner, port = self._sources[(id(m), key)]
                ins.append((key, Source(-1, -1, port) if owner is self
                            else Source(pos[id(owner)], port, "")))
            producers = tuple(sorted({src.stage for _, src in ins if src.stage >= 0}))
            consumers = tuple(tuple(sorted(sinks[(id(m), i)]))
                              for i in range(m.num_outputs))
            stages.append(StagePlan(m, tuple(ins), consumers, producers))
        return Plan(tuple(stages), tuple(self.inputs), tuple(outputs))

    def __str__(self):
        lines = ["Inputs"]
        for name, targets in self.inputs._targets.items():
            for m, key in targets:
                lines.append(f"  |{name}: {m.name}:{key}")
        lines.append("Outputs")
        for j, (m, i) in enumerate(self.outputs):
            lines.append(f"  |output({j}): {m.name}.output({i})")
        lines.append("Connections")
        for s, i, d, key in self._edges:
            lines.append(f"  |{s.name}.output({i}) -> {d.name}:{key}")
        return "\n".join(lines)

    def __repr__(self):
        return (f"<pipeline.PipelineConfig: {len(self._modules)} module(s), "
                f"{len(self.inputs)} input(s), {len(self.outputs)} output(s)>")
