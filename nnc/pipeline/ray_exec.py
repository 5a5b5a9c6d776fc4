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
import time

import numpy as np

from nnc.base.core import error_repr, timeout_seconds
from nnc.pipeline.config import Module, PipelineError
from nnc.pipeline.graph_pack import graph_pack, graph_unpack
from nnc.pipeline.runtime import _WAIT_SLICE, PipelineModule

START_TIMEOUT = 120.0   # seconds an actor may take to start and rebuild its stage at build time
_INLINE_BYTES = 100 * 1024      # Ray's own limit for passing an argument inline
_SHUTDOWN_GRACE = 3.0   # seconds a failure that is Ray's waits to see whether Ray shuts down


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
        """One input: the outputs, then True. Whatever the stage raises goes to the driver
        inside a :class:`StageRaised` (the driver names the stage and the input), failing
        every return of this call."""
        m = self.module
        try:
            checked = m.check_inputs(dict(zip(self.input_names, arrays)))
            if m.graph is None:
                outs = m.call(checked)
            else:
                m.load(checked)
                m.graph.run()
                # views: Ray copies each return value into its store as this call returns
                outs = [t.numpy() for t in m.output_tensors]
        except BaseException as e:  # noqa: BLE001 - this input's failure only (as it is, Ray
            # would cancel the task on a KeyboardInterrupt and end the actor on SystemExit)
            raise StageRaised(e) from None
        return (*outs, True)


class StageRaised(PipelineError):
    """What a stage raised in its actor, carried to the driver, which fails the input with
    ``original``. It tells the stage's own failures from Ray's (an argument lost, an actor
    gone, a shutdown under way), and carries what Ray would not carry as it is: a
    BaseException that is no Exception (Ray turns a ``KeyboardInterrupt`` into a cancelled
    task, and a ``SystemExit`` ends the actor) or an exception whose ``repr()`` raises (Ray's
    error report calls it; its own repr never touches ``original``). Pickles with it."""

    def __init__(self, original):
        super().__init__(f"the stage raised {type(original).__qualname__}")
        self.original = original        # the exception the stage raised

    def __reduce__(self):
        return (type(self), (self.original,))


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
        self._lost = False              # Ray was seen shut down: set once, never cleared
        # The Ray calls made while the pipeline runs, without Ray's auto-init: after
        # ray.shutdown() they raise instead of starting a new local cluster.
        self._ray_put = _no_auto_init(ray.put)
        self._ray_get = _no_auto_init(ray.get)
        self._ray_wait = _no_auto_init(ray.wait)
        self._ray_kill = _no_auto_init(ray.kill)
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

    def _ray_lost(self, grace=0.0):
        """True once Ray was shut down under the pipeline (remembered: a cluster started
        again later holds none of this pipeline's actors).

        ``grace``: seconds to keep looking. For a Ray call that failed in a way no stage
        causes: ``ray.shutdown()`` tears the driver's state down before it marks Ray
        uninitialised, and a call in between fails with whatever that teardown left (a
        ValueError about unknown object owners, SystemExit)."""
        deadline = time.monotonic() + grace
        while not self._lost:
            if not self._ray.is_initialized():
                self._lost = True
            elif time.monotonic() >= deadline:
                break
            else:
                time.sleep(0.01)
        return self._lost

    def _lost_error(self, job, what="was lost in flight"):
        return PipelineError(f"Ray was shut down (ray.shutdown()) under the pipeline: input "
                             f"#{job.seq} {what} (build the pipeline again after ray.init())")

    def _submit(self, job):
        """Submit every stage of ``job`` at once (lock held; ``.remote()`` does not block).

        Ray must still run: any ``ray`` call made after ``ray.shutdown()`` would start a new
        local cluster by itself. A submission that fails fails the job and counts the stages
        not handed to Ray done, so the job completes (its depth slot comes back) once the
        handed ones are seen finished."""
        watched = 0
        try:
            if self._ray_lost():
                raise self._lost_error(job, "cannot be submitted")
            # A large input goes into the object store once (stages on other nodes fetch it
            # from there); a small one rides inline with each call, which saves a round trip.
            put = {name: self._ray_put(a) if a.nbytes >= _INLINE_BYTES else a
                   for name, a in job.inputs.items()}
            refs = []
            for k, (st, actor) in enumerate(zip(self.plan.stages, self._actors)):
                args = [put[src.name] if src.stage < 0 else refs[src.stage][src.output]
                        for _, src in st.inputs]
                # the outputs, then a status (True): small, so the watcher learns of a
                # failure without pulling a stage's data to the driver
                out = actor.run.options(num_returns=st.module.num_outputs + 1).remote(*args)
                refs.append(list(out))
                self._watch.append((job, k, refs[-1]))
                watched += 1
        except BaseException as e:
            # Ray's own errors here are bare Exceptions ("Can't find actor"), and SystemExit
            # once it is shut down: reported as the pipeline's, the job completed.
            stages = self.plan.stages
            job.fail(stages[min(watched, len(stages) - 1)].module.name, e)
            for _ in range(len(stages) - watched):
                self._stage_done(job)
            if isinstance(e, PipelineError):
                raise
            if self._ray_lost(_SHUTDOWN_GRACE):
                raise self._lost_error(job, "cannot be submitted") from e
            if not isinstance(e, Exception):
                raise
            raise PipelineError(f"run: submitting input #{job.seq} to Ray failed: "
                                f"{error_repr(e)}") from e
        finally:
            self._cond.notify_all()

    def _watch_loop(self):
        """Report finished stage calls to the base, in the order Ray finishes them. Every
        watched call is reported exactly once, whatever happens to Ray: the inputs in flight
        complete, so get_output() and close() never wait for a call nobody watches."""
        while True:
            with self._cond:
                while not self._watch and not self._stop:
                    self._cond.wait(_WAIT_SLICE)
                if self._stop and not self._watch:
                    return
                heads = [refs[-1] for _, _, refs in self._watch]
            try:
                if self._ray_lost():    # no ray call then: it would start a cluster again
                    raise _RayLost
                done, _ = self._ray_wait(heads, num_returns=1, timeout=_WAIT_SLICE,
                                   fetch_local=False)
            except BaseException as e:  # noqa: BLE001 - Ray went away (ray.shutdown() makes
                # its calls raise SystemExit); the thread must still complete every input
                with self._cond:
                    items, self._watch = self._watch, []
                for job, k, _ in items:
                    self._fail_lost(job, k, e)
                continue
            if not done:
                continue
            finished = set(done)
            with self._cond:
                items = [w for w in self._watch if w[2][-1] in finished]
                self._watch = [w for w in self._watch if w[2][-1] not in finished]
            for job, k, refs in items:
                self._finish(job, k, refs)

    def _fail_lost(self, job, k, exc):
        """Stage k of job can never be seen finished (Ray is gone, or waiting failed)."""
        name = self.plan.stages[k].module.name
        if self._ray_lost(_SHUTDOWN_GRACE):
            err = self._lost_error(job)
            if not isinstance(exc, _RayLost):
                err.__cause__ = exc
        else:
            err = PipelineError(f"waiting for Ray failed: {error_repr(exc)}")
            err.__cause__ = exc
        job.fail(name, err)
        self._stage_done(job)

    def _finish(self, job, k, refs):
        """Stage k of job is done: read its status (small), then fetch its global outputs;
        or record its error for this input."""
        ray = self._ray
        name = self.plan.stages[k].module.name
        try:
            self._ray_get(refs[-1])
            if job.error is None:
                for index in self._fetch[k]:
                    # a private, writable array like the local executor's (the store's is
                    # read-only and lives only as long as the ObjectRef)
                    job.values[(k, index)] = np.array(self._ray_get(refs[index]))
        except BaseException as e:  # noqa: BLE001 - reported for this input, never lost (Ray
            # raises SystemExit once shut down)
            # The stage's own failure comes as a StageRaised; anything else is Ray's, which
            # a shutdown under way causes too (the actors lose their arguments' owner).
            cause = _cause(e) if isinstance(e, ray.exceptions.RayError) else e
            if isinstance(cause, StageRaised):
                job.fail(name, cause.original)
            elif self._ray_lost(_SHUTDOWN_GRACE):
                err = self._lost_error(job)
                err.__cause__ = e
                job.fail(name, err)
            else:
                job.fail(name, cause)
        self._stage_done(job)

    def _kill(self):
        actors, self._actors = self._actors, []
        if self._ray_lost():            # the actors went with Ray; a kill would restart it
            return
        for a in actors:
            try:
                self._ray_kill(a)
            except BaseException:   # noqa: BLE001 - an actor that already died needs no kill
                pass                # (SystemExit: Ray shut down meanwhile)

    def _shutdown(self):
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            # Every input is done, so the watcher has nothing left and ends within a wait
            # slice; bounded all the same, as it is a daemon thread.
            self._watcher.join(10 * _WAIT_SLICE + 1.0)
        self._kill()


class _RayLost(Exception):
    """Raised inside the watcher when it finds Ray shut down."""


def _no_auto_init(fn):
    """A Ray API function (``ray.get``, ``ray.wait``, ...) without the wrapper Ray puts around
    it that calls ``ray.init()`` first when Ray is not initialised: the bare function raises
    then. The wrapper keeps the function as ``__wrapped__`` (functools.wraps); any other
    wrapping (Ray Client mode) stays."""
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_name == "auto_init_wrapper" \
            and callable(getattr(fn, "__wrapped__", None)):
        return fn.__wrapped__
    return fn


def _cause(e):
    """The exception a Ray error carries from the actor (ours names the stage), or e."""
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, BaseException) else e
