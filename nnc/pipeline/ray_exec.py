"""Pipeline stages on Ray actors: ``pipeline.build(cfg, executor="ray")`` (docs/pipeline.md, "Ray").

One actor per stage. A graph stage travels to its actor as a :class:`GraphPack` (the graph,
its tensors' bytes and its named inputs and outputs: nnc/pipeline/graph_pack.py) and is rebuilt
there; a function stage travels as its function (Ray pickles it with cloudpickle). Tensors go
from stage to stage as Ray ObjectRefs: the driver submits every stage of an input at once, each
call taking the ObjectRefs of its sources, so data never returns to the driver between stages
and Ray starts a stage when its arguments exist. On one node a NumPy array in Ray's object store
is read without a copy; the stage copies it into its input tensor (the graph's memory is fixed)
and returns views of its output tensors, which Ray serialises into the store as the call returns.

Each actor runs its calls one at a time in submission order (Ray's default for an actor), so
stage k of input n+1 runs while stage k+1 runs input n: the pipeline. ``depth`` bounds the inputs
in flight as in the local executor: ``run()`` refuses a new input while ``depth`` are
outstanding. An exception in a stage fails that input's ObjectRefs (and, through Ray, those of
the stages that take them); ``get_output`` raises it for that input as a ``PipelineError`` and
the later inputs go on.

State (driver side): ``_actors`` (one handle per stage, None once closed), ``_inputs`` (global
input name -> the array given by ``set_input`` since the last ``run``), ``_flight`` (one entry
per input run and not yet returned, oldest first: the ObjectRefs of the global outputs).
"""

import collections

import numpy as np

from nnc.pipeline.config import PipelineError
from nnc.pipeline.graph_pack import graph_pack, graph_unpack

START_TIMEOUT = 120.0   # seconds an actor may take to start and rebuild its stage at build time


class StageWorker:
    """The body of one stage's actor (``ray.remote`` wraps it at build time).

    ``kind`` is ``"graph"`` (payload: a GraphPack; inputs are copied into its input tensors and
    the graph runs) or ``"function"`` (payload: ``fn``, called as the local executor calls it).
    """

    def __init__(self, name, kind, payload, input_names, n_outputs):
        self.name = name                  # the stage's module name, for error messages
        self.kind = kind
        self.input_names = input_names    # the order of run()'s arguments
        self.n_outputs = n_outputs
        if kind == "graph":
            self.graph, inputs, self.outputs = graph_unpack(payload)
            self.inputs = [inputs[n] for n in input_names]
        else:
            self.fn = payload

    def ready(self):
        return True

    def run(self, *arrays):
        try:
            if self.kind == "graph":
                for name, t, a in zip(self.input_names, self.inputs, arrays):
                    a = np.asarray(a)
                    if a.shape != t.shape or a.dtype != t.dtype:
                        raise PipelineError(f"input {name!r} is {a.dtype}{list(a.shape)}, the "
                                            f"stage takes {t.dtype}{list(t.shape)}")
                    np.copyto(t.numpy(), a)
                self.graph.run()
                outs = [t.numpy() for t in self.outputs]
            else:
                outs = _call_function(self.fn, arrays, self.n_outputs)
        except PipelineError as e:
            raise PipelineError(f"stage {self.name!r}: {e}") from e
        except Exception as e:
            raise PipelineError(f"stage {self.name!r} failed: {e!r}") from e
        if self.n_outputs == 1:
            return outs[0]
        if self.n_outputs == 0:
            return None
        return tuple(outs)


def _call_function(fn, arrays, n_outputs):
    """A function stage's outputs as a list of arrays, checked for count."""
    result = fn(*arrays)
    if n_outputs == 1 and not isinstance(result, (tuple, list)):
        result = [result]
    result = list(result) if result is not None else []
    if len(result) != n_outputs:
        raise PipelineError(f"the function returned {len(result)} outputs, not {n_outputs}")
    return [np.asarray(r) for r in result]


def _import_ray():
    try:
        import ray
    except ImportError as e:
        raise PipelineError("executor=\"ray\" needs Ray: pip install \"nnc-graph[ray]\"") from e
    return ray


class RayPipelineModule:
    """A built pipeline whose stages run on Ray actors; the API of the local PipelineModule."""

    def __init__(self, stages, input_specs, outputs, depth, resources=None,
                 start_timeout=START_TIMEOUT):
        """``stages``: in topological order, each ``(name, kind, payload, [(input name, source)],
        n_outputs)`` where a source is ``("input", global name)`` or ``("stage", k, index)``;
        ``input_specs``: global name -> (dtype, shape); ``outputs``: [(stage k, index)]."""
        ray = _import_ray()
        self._ray = ray
        self._stages = stages
        self._input_specs = input_specs
        self._outputs = outputs
        self._depth = depth
        self._inputs = {}
        self._flight = collections.deque()
        self._actors = []
        resources = dict(resources or {})
        names = {s[0] for s in stages}
        for key in resources:
            if key not in names:
                raise PipelineError(f"resources name {key!r}, which is no stage "
                                    f"(stages: {sorted(names)})")
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        remote = ray.remote(StageWorker)
        try:
            for name, kind, payload, ins, n_out in stages:
                options = {"num_cpus": 0}
                options.update(resources.get(name, {}))
                try:
                    actor = remote.options(**options).remote(
                        name, kind, payload, [n for n, _ in ins], n_out)
                except (TypeError, ValueError) as e:
                    raise PipelineError(f"stage {name!r}: bad Ray resources {options!r}: "
                                        f"{e}") from e
                self._actors.append(actor)
            ready = [a.ready.remote() for a in self._actors]
            done, pending = ray.wait(ready, num_returns=len(ready), timeout=start_timeout)
            if pending:
                late = [stages[ready.index(p)][0] for p in pending]
                raise PipelineError(f"the Ray actors of stages {late} did not start within "
                                    f"{start_timeout:g} s (resources they ask for: "
                                    f"{[resources.get(n, {'num_cpus': 0}) for n in late]})")
            for ref, stage in zip(ready, stages):
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as e:
                    raise PipelineError(f"stage {stage[0]!r} could not be rebuilt in its Ray "
                                        f"actor: {e}") from e
        except BaseException:
            self.close()
            raise

    def _check_open(self):
        if self._actors is None:
            raise PipelineError("the pipeline is closed")

    def set_input(self, name, array):
        self._check_open()
        spec = self._input_specs.get(name)
        if spec is None:
            raise PipelineError(f"no global input {name!r} (inputs: "
                                f"{sorted(self._input_specs)})")
        dtype, shape = spec
        a = np.asarray(array)
        if a.dtype != np.dtype(dtype) or a.shape != tuple(shape):
            raise PipelineError(f"input {name!r} takes {np.dtype(dtype)}{list(shape)}, not "
                                f"{a.dtype}{list(a.shape)}")
        self._inputs[name] = np.array(a, copy=True)

    def run(self):
        """Submit one input through every stage; returns at once."""
        self._check_open()
        missing = sorted(set(self._input_specs) - set(self._inputs))
        if missing:
            raise PipelineError(f"run() before set_input for {missing}")
        if len(self._flight) >= self._depth:
            raise PipelineError(f"{len(self._flight)} inputs are in flight (depth "
                                f"{self._depth}); take outputs with get_output() first")
        ray = self._ray
        put = {name: ray.put(a) for name, a in self._inputs.items()}
        self._inputs = {}
        refs = []
        for (name, _, _, ins, n_out), actor in zip(self._stages, self._actors):
            args = [put[src[1]] if src[0] == "input" else refs[src[1]][src[2]]
                    for _, src in ins]
            out = actor.run.options(num_returns=max(n_out, 1)).remote(*args)
            refs.append([out] if n_out <= 1 else list(out))
        self._flight.append([refs[k][i] for k, i in self._outputs])

    def has_next_output(self):
        self._check_open()
        if not self._flight:
            return False
        first = self._flight[0]
        ready, _ = self._ray.wait(first, num_returns=len(first), timeout=0)
        return len(ready) == len(first)

    def get_output(self, block=False, timeout=None):
        """The outputs of the oldest input still in flight, or None if they are not ready
        (``block=False``) or nothing is in flight; raises that input's stage error."""
        self._check_open()
        if not self._flight:
            return None
        first = self._flight[0]
        wait = (timeout if timeout is not None else None) if block else 0
        ready, _ = self._ray.wait(first, num_returns=len(first), timeout=wait)
        if len(ready) < len(first):
            return None
        self._flight.popleft()
        try:
            return list(self._ray.get(first))
        except self._ray.exceptions.RayError as e:
            cause = getattr(e, "cause", None)
            raise PipelineError(str(cause) if cause is not None else str(e)) from e

    def num_executing(self):
        self._check_open()
        return len(self._flight)

    def close(self):
        """Kill the actors; idempotent. Outputs not yet taken are dropped."""
        if self._actors is None:
            return
        actors, self._actors = self._actors, None
        self._flight.clear()
        for a in actors:
            try:
                self._ray.kill(a)
            except Exception:   # noqa: BLE001 - an actor that already died needs no kill
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_actors", None) and getattr(self, "_ray", None) is not None:
            self.close()


def pack_graph_stage(name, graph, inputs, outputs):
    """A graph stage's payload for its actor; PipelineError naming the stage if it cannot go."""
    return graph_pack(graph, inputs, outputs, what=f"stage {name!r}")
