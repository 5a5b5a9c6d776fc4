"""The local executor: every stage on its own nnc CPU stream in this process
(``build(cfg, executor="local")``, docs/pipeline.md).

Streams are serial queues run by nnc's worker pool, so a pipeline of any number of stages
costs no thread of its own. ``run()`` enqueues one input's whole trip at once, stage by stage
in the plan's topological order; on stage ``i``'s stream:

1. wait on the signal of every stage it reads from (emitted after that stage's hand-over for
   this input: a stream parks on a signal without holding a pool thread);
2. a graph stage: a task copies the input arrays into the stage's input tensors, then the
   graph's run is enqueued (``graph.run(stream=s)``: on the graph's static schedule's streams
   if it has one), then a task takes that run's failures (``Stream._take_errors``) and copies
   the output tensors into fresh arrays, the hand-over slot of this input; a function stage:
   one task calls the function and checks what it returns;
3. emit stage ``i``'s signal.

A GPU stage (``module.device`` "gpu:N") has, besides, a GPU stream of its own on that device,
and step 2 is one task on its CPU stream: it copies the inputs host -> device, enqueues the
graph's run on the GPU stream, waits for it (so the outputs are final and a failure on the
device is seen; ``_settle``), and copies the outputs device -> host into the hand-over slot.
The wait holds that pool thread while the GPU works; the stage's CPU stream keeps the order
and the signals exactly as for a CPU stage, so stages on the CPU, on a GPU or on different GPUs
mix freely: every hand-over is a host array.

So each stage handles inputs one at a time, in input order (a graph has one set of tensors),
while different stages work on different inputs at once. A stage that fails records the
failure on the input (``Job.fail``); later stages skip that input (a graph stage's enqueued
run still runs, on stale inputs, and its result is dropped), later inputs are unaffected.
Every task reports itself done to the front end (``_stage_done``), so an input always
completes, failed or not.
"""

import functools
import time

from nnc.pipeline.config import PipelineError
from nnc.pipeline.runtime import PipelineModule, stage_scope
from nnc.stream.stream import Signal, Stream

_POLL = 0.0005          # seconds between looks at a GPU stage's stream (_settle)


def _settle(gs):
    """Wait for everything enqueued on GPU stream ``gs`` and raise its recorded failures, as
    ``gs.wait()`` would. A pool thread may not call wait() (a CPU stream's work could be
    queued behind it); a GPU stream's work never is: the device and nnc's host-function
    watcher finish it, so looking at query() until it is done cannot wait for itself."""
    while not gs.query():
        time.sleep(_POLL)
    errors = gs._take_errors()
    if errors:
        raise gs._error(errors)


def build(plan, *, depth):
    """The local executor's :class:`LocalPipeline` for ``plan`` (see nnc.pipeline.build)."""
    return LocalPipeline(plan, depth)


class LocalPipeline(PipelineModule):
    """A pipeline whose stages run on nnc CPU streams of this process."""

    def __init__(self, plan, depth):
        super().__init__(plan, depth)
        self._streams = [Stream("cpu") for _ in plan.stages]    # stage i's stream
        # A GPU stage's stream for its graph's runs (None for the others); made here, so a
        # missing GPU fails build(), not an input.
        self._gpu_streams = [None if st.module.device == "cpu" else Stream(st.module.device)
                             for st in plan.stages]
        self._signals = [Signal("cpu") for _ in plan.stages]    # emitted after stage i
        self._tasks = [self._stage_tasks(i) for i in range(len(plan.stages))]

    def _stage_tasks(self, i):
        st = self.plan.stages[i]
        if st.module.graph is None:
            return (functools.partial(self._call, i),)
        if self._gpu_streams[i] is not None:
            return (functools.partial(self._gpu_run, i),)
        return (functools.partial(self._load, i), st.module.graph,
                functools.partial(self._store, i))

    def _submit(self, job):
        # Called with the front end's lock held: jobs enqueue in input order on every stream.
        stages = self.plan.stages
        reporters = 0                   # stages whose reporting task (store or call) is queued
        current = stages[0].module.name
        try:
            for i, st in enumerate(stages):
                current = st.module.name
                s = self._streams[i]
                for p in st.producers:
                    s.wait_signal(self._signals[p])
                tasks = self._tasks[i]
                s.add_callback(functools.partial(tasks[0], job))
                if len(tasks) == 1:
                    reporters += 1
                else:
                    try:
                        tasks[1].run(stream=s)
                    finally:
                        # The load task is queued: the store task must follow it whatever
                        # happened, since it reports the stage done.
                        s.add_callback(functools.partial(tasks[2], job))
                        reporters += 1
                s.emit(self._signals[i])
        except BaseException as e:
            # Stages not enqueued will never report: count them done here (the lock is
            # reentrant), so the job still completes, failed, once the queued tasks ran, and
            # close() never waits for it. A Ctrl-C landing here goes on as it is.
            job.fail(current, e)
            for _ in range(len(stages) - reporters):
                self._stage_done(job)
            if not isinstance(e, Exception):
                raise
            raise PipelineError(f"run: enqueueing input #{job.seq} on stage {current} "
                                f"failed: {e!r}") from e

    def _inputs(self, i, job):
        """Stage i's input arrays for ``job``, checked against the declared specs."""
        st = self.plan.stages[i]
        return st.module.check_inputs({
            key: job.inputs[src.name] if src.stage < 0 else job.values[(src.stage, src.output)]
            for key, src in st.inputs})

    def _load(self, i, job):
        """On stage i's stream, before its graph runs: copy the inputs into its tensors."""
        m = self.plan.stages[i].module
        with stage_scope():
            try:
                if job.error is None:
                    m.load(self._inputs(i, job))
            except BaseException as e:  # noqa: BLE001 - user code may raise anything (a
                # KeyboardInterrupt, SystemExit, GeneratorExit): it fails this input only
                job.fail(m.name, e)

    def _store(self, i, job):
        """On stage i's stream, after its graph's run: take the run's failures, hand the
        outputs over, and count the stage done."""
        m = self.plan.stages[i].module
        s = self._streams[i]
        with stage_scope():
            try:
                errors = s._take_errors()
                if errors:
                    job.fail(m.name, s._error(errors))
                elif job.error is None:
                    for j, a in enumerate(m.store()):
                        job.values[(i, j)] = a
            except BaseException as e:  # noqa: BLE001 - user code may raise anything (a
                # KeyboardInterrupt, SystemExit, GeneratorExit): it fails this input only
                job.fail(m.name, e)
            finally:
                self._stage_done(job)

    def _gpu_run(self, i, job):
        """On stage i's CPU stream, for a GPU stage: copy the inputs in, run the graph on the
        stage's GPU stream and wait for it, hand the outputs over, count the stage done."""
        m = self.plan.stages[i].module
        gs = self._gpu_streams[i]
        with stage_scope():
            try:
                if job.error is None:
                    m.load(self._inputs(i, job))
                    try:
                        m.graph.run(stream=gs)
                    except BaseException as e:
                        # Reported first; what was enqueued still runs: wait for it before
                        # the next input reuses the tensors (a failure of it comes second).
                        job.fail(m.name, e)
                        _settle(gs)
                        raise
                    _settle(gs)                 # a failure on the device raises here
                    for j, a in enumerate(m.store()):
                        job.values[(i, j)] = a
            except BaseException as e:  # noqa: BLE001 - user code may raise anything (a
                # KeyboardInterrupt, SystemExit, GeneratorExit): it fails this input only
                job.fail(m.name, e)
            finally:
                self._stage_done(job)

    def _call(self, i, job):
        """On stage i's stream: call a function stage and hand its results over."""
        m = self.plan.stages[i].module
        with stage_scope():
            try:
                if job.error is None:
                    for j, a in enumerate(m.call(self._inputs(i, job))):
                        job.values[(i, j)] = a
            except BaseException as e:  # noqa: BLE001 - user code may raise anything (a
                # KeyboardInterrupt, SystemExit, GeneratorExit): it fails this input only
                job.fail(m.name, e)
            finally:
                self._stage_done(job)

    def _shutdown(self):
        # Every input is done; what may still be queued is the last emit of each stage, which
        # the pool runs without us (it holds busy streams). Not waiting for it keeps close()
        # safe on a pool thread (inside another pipeline's stage).
        self._streams = []
        self._gpu_streams = []
        self._signals = []
        self._tasks = []
