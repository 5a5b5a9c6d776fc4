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
stage k of input n+1 runs while stage k+1 runs input n: the pipeline. The caller's side
(``set_input``, ``run`` with its ``depth`` back-pressure, ``get_output`` in input order,
``close``) is the local executor's: :class:`RayPipelineModule` subclasses
nnc/pipeline/runtime.py's ``PipelineModule`` and only submits and watches. Each stage call
returns its outputs and a small status; a watcher thread waits on the statuses with
``ray.wait`` (without pulling data to the driver), fetches only the global outputs, and reports
each finished stage. An exception in a stage fails that input's ObjectRefs (and, through Ray,
those of the stages that take them): ``get_output`` raises it for that input as a
``PipelineError`` naming the stage, and later inputs go on.
"""

import threading

import numpy as np

from nnc._core import timeout_seconds
from nnc.pipeline.config import Module, PipelineError
from nnc.pipeline.graph_pack import graph_pack, graph_unpack
from nnc.pipeline.runtime import _WAIT_SLICE, PipelineModule

START_TIMEOUT = 120.0   # seconds an actor may take to start and rebuild its stage at build time
_INLINE_BYTES = 100 * 1024      # Ray's own limit for passing an argument inline


class StageWorker:
    """The body of one stage's actor (``ray.remote`` wraps it at build time): the stage rebuilt
    as a ``pipeline.Module`` of this process, run with the checks the local executor makes
    (``Module.check_inputs``, ``load``, ``call``).

    ``kind`` is ``"graph"`` (payload: a GraphPack) or ``"function"`` (payload: the function,
    with the declared ``input_specs`` and ``output_specs``).
    """

    def __init__(self, name, kind, payload, input_names, input_specs, output_specs):
        self.input_names = input_names    # the order of run()'s arguments
        if kind == "graph":
            graph, inputs, outputs = graph_unpack(payload)
            self.module = Module(graph, inputs=inputs, outputs=outputs, name=name)
        else:
            self.module = Module.function(payload, inputs=input_specs,
                                          outputs=output_specs, name=name)

    def ready(self):
        return True

    def run(self, *arrays):
        """One input: the outputs, then True. An exception goes to the driver as it is (the
        driver names the stage and the input), failing every return of this call."""
        m = self.module
        checked = m.check_inputs(dict(zip(self.input_names, arrays)))
        if m.graph is None:
            outs = m.call(checked)
        else:
            m.load(checked)
            m.graph.run()
            # views: Ray copies each return value into its store as this call returns
            outs = [t.numpy() for t in m.output_tensors]
        return (*outs, True)


def _import_ray():
    try:
        import ray
    except ImportError as e:
        raise PipelineError("executor=\"ray\" needs Ray: pip install \"nnc-graph[ray]\"") from e
    return ray


def build(plan, *, depth=4, resources=None, start_timeout=START_TIMEOUT):
    """``pipeline.build(cfg, executor="ray", ...)``: a :class:`RayPipelineModule` for ``plan``
    (``cfg.plan()``). ``resources``: stage module name -> options of its actor;
    ``start_timeout``: seconds the actors may take to start and rebuild their stages."""
    return RayPipelineModule(plan, depth, resources, start_timeout)


class RayPipelineModule(PipelineModule):
    """A built pipeline whose stages run on Ray actors (the caller's side is the local
    executor's: nnc/pipeline/runtime.py).

    Beside the base state: ``_actors`` (one handle per stage, in plan order), ``_watch`` (the
    (job, stage position, ObjectRef) of every stage call not yet seen finished, guarded by
    ``_cond``'s lock), and one watcher thread that waits on them with ``ray.wait`` and reports
    each finished stage to the base (``job.fail`` first if it raised).
    """

    def __init__(self, plan, depth, resources=None, start_timeout=START_TIMEOUT):
        ray = _import_ray()
        super().__init__(plan, depth)
        self._ray = ray
        self._actors = []
        self._watch = []
        self._stop = False
        self._watcher = None
        start_limit = timeout_seconds(start_timeout, PipelineError)
        if resources is not None and not isinstance(resources, dict):
            raise PipelineError(f"resources must be a dict stage name -> Ray options, not "
                                f"{resources!r}")
        resources = dict(resources or {})
        names = [st.module.name for st in plan.stages]
        for key, opts in resources.items():
            if key not in names:
                raise PipelineError(f"resources name {key!r}, which is no stage "
                                    f"(stages: {', '.join(names)})")
            if not isinstance(opts, dict):
                raise PipelineError(f"resources[{key!r}] must be a dict of Ray actor "
                                    f"options, not {opts!r}")
        payloads = []
        for st in plan.stages:
            m = st.module
            if m.graph is not None:
                payloads.append(("graph", graph_pack(m.graph, m.input_tensors,
                                                     m.output_tensors,
                                                     what=f"stage {m.name!r}")))
            else:
                payloads.append(("function", m.fn))
        # Which outputs the driver fetches: only the global ones come back from the store.
        self._fetch = [[] for _ in plan.stages]
        for stage, index in plan.outputs:
            if index not in self._fetch[stage]:
                self._fetch[stage].append(index)
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        remote = ray.remote(StageWorker)
        try:
            for st, (kind, payload) in zip(plan.stages, payloads):
                m = st.module
                options = {"num_cpus": 0}
                options.update(resources.get(m.name, {}))
                try:
                    actor = remote.options(**options).remote(
                        m.name, kind, payload, [n for n, _ in st.inputs], m.input_specs,
                        m.output_specs)
                except (TypeError, ValueError) as e:
                    raise PipelineError(f"stage {m.name!r}: bad Ray actor options "
                                        f"{options!r}: {e}") from e
                self._actors.append(actor)
            ready = [a.ready.remote() for a in self._actors]
            _, pending = ray.wait(ready, num_returns=len(ready),
                                  timeout=None if start_limit < 0 else start_limit)
            if pending:
                late = [names[ready.index(p)] for p in pending]
                raise PipelineError(f"the Ray actors of stages {late} did not start within "
                                    f"{start_timeout:g} s (their options: "
                                    f"{[resources.get(n, {'num_cpus': 0}) for n in late]})")
            for ref, name in zip(ready, names):
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as e:
                    raise PipelineError(f"stage {name!r} could not be rebuilt in its Ray "
                                        f"actor: {_cause(e)}") from e
        except BaseException:
            self._kill()
            raise
        self._watcher = threading.Thread(target=self._watch_loop, daemon=True,
                                         name="nnc-pipeline-ray")
        self._watcher.start()

    def _submit(self, job):
        """Submit every stage of ``job`` at once (lock held; ``.remote()`` does not block)."""
        ray = self._ray
        # A large input goes into the object store once (stages on other nodes fetch it from
        # there); a small one rides inline with each call, which saves a round trip.
        put = {name: ray.put(a) if a.nbytes >= _INLINE_BYTES else a
               for name, a in job.inputs.items()}
        refs = []
        for k, (st, actor) in enumerate(zip(self.plan.stages, self._actors)):
            args = [put[src.name] if src.stage < 0 else refs[src.stage][src.output]
                    for _, src in st.inputs]
            # the outputs, then a status (True): small, so the watcher learns of a failure
            # without pulling a stage's data to the driver
            out = actor.run.options(num_returns=st.module.num_outputs + 1).remote(*args)
            refs.append(list(out))
            self._watch.append((job, k, refs[-1]))
        self._cond.notify_all()

    def _watch_loop(self):
        """Report finished stage calls to the base, in the order Ray finishes them."""
        ray = self._ray
        while True:
            with self._cond:
                while not self._watch and not self._stop:
                    self._cond.wait(_WAIT_SLICE)
                if self._stop and not self._watch:
                    return
                heads = [refs[-1] for _, _, refs in self._watch]
            try:
                done, _ = ray.wait(heads, num_returns=1, timeout=_WAIT_SLICE,
                                   fetch_local=False)
            except BaseException as e:  # noqa: BLE001 - Ray went away (ray.shutdown() makes
                # its calls raise SystemExit); the thread must still complete every input
                with self._cond:
                    items, self._watch = self._watch, []
                for job, k, _ in items:
                    job.fail(self.plan.stages[k].module.name,
                             PipelineError(f"Ray stopped under the pipeline: {e!r}"))
                    self._stage_done(job)
                continue
            if not done:
                continue
            finished = set(done)
            with self._cond:
                items = [w for w in self._watch if w[2][-1] in finished]
                self._watch = [w for w in self._watch if w[2][-1] not in finished]
            for job, k, refs in items:
                self._finish(job, k, refs)

    def _finish(self, job, k, refs):
        """Stage k of job is done: read its status (small), then fetch its global outputs;
        or record its error for this input."""
        ray = self._ray
        name = self.plan.stages[k].module.name
        try:
            ray.get(refs[-1])
            if job.error is None:
                for index in self._fetch[k]:
                    # a private, writable array like the local executor's (the store's is
                    # read-only and lives only as long as the ObjectRef)
                    job.values[(k, index)] = np.array(ray.get(refs[index]))
        except ray.exceptions.RayError as e:
            job.fail(name, _cause(e))
        except BaseException as e:  # noqa: BLE001 - reported for this input, never lost (Ray
            # raises SystemExit once shut down)
            job.fail(name, e)
        self._stage_done(job)

    def _kill(self):
        for a in self._actors:
            try:
                self._ray.kill(a)
            except Exception:       # noqa: BLE001 - an actor that already died needs no kill
                pass
        self._actors = []

    def _shutdown(self):
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join()
        self._kill()


def _cause(e):
    """The exception a Ray error carries from the actor (ours names the stage), or e."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e
