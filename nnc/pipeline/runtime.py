"""The caller's side of a built pipeline, shared by every executor (docs/pipeline.md).

:class:`PipelineModule` keeps the inputs set for the next run, the inputs in flight in input
order, back-pressure (at most ``depth`` in flight), and the outputs waiting for
:meth:`~PipelineModule.get_output`. An executor subclasses it and implements ``_submit(job)``
(start one input's work; called with the module's lock held, so jobs are submitted in input
order even from several threads; it must not block) and ``_shutdown()`` (release the stages
after the last job); whatever thread finishes a stage of a job calls ``_stage_done(job)``,
and a failing stage calls ``job.fail(stage name, exception)`` first. Every job must complete:
a ``_submit`` that raises still calls ``_stage_done`` once for each stage it did not hand
on (after ``job.fail``), so the job's ``depth`` slot comes back once the handed ones report.

State, all guarded by ``_cond``'s lock:

* ``_pending``: global input name -> the array (a private copy) the next ``run()`` takes;
* ``_jobs``: the inputs run and not yet returned by ``get_output``, oldest first;
* ``_executing``: how many of them are still running (``0 <= _executing <= depth``);
* ``_closed``: set by ``close()``; every later call raises :class:`PipelineError`.
"""

import collections
import threading
import time

import numpy as np

from nnc.base.core import error_repr, timeout_seconds
from nnc.pipeline.config import PipelineError, array_mismatch, spec_str

_WAIT_SLICE = 0.1       # seconds: blocked calls wake this often so Ctrl-C gets through

# Set while this thread runs a stage's work: a blocking call there could wait for itself.
_in_stage = threading.local()


class Job:
    """One input's trip through the pipeline."""

    __slots__ = ("seq", "inputs", "values", "error", "remaining", "outputs", "done", "_lock")

    def __init__(self, seq, inputs, stages, lock):
        self.seq = seq                  # input number, from 0, in run() order
        self.inputs = inputs            # global input name -> array (private copies)
        self.values = {}                # (stage position, output index) -> array
        self.error = None               # the first stage failure (PipelineError), or None
        self.remaining = stages         # stages not yet done with this job
        self.outputs = None             # the global outputs once done without error
        self.done = False
        self._lock = lock

    def fail(self, stage, exc):
        """Record that ``stage`` (a name) failed with ``exc`` (any BaseException); later stages
        skip this job. Never raises: it runs on the path that completes the job."""
        with self._lock:
            if self.error is None:
                err = PipelineError(f"stage {stage} failed on input #{self.seq}: "
                                    f"{error_repr(exc)}")
                err.__cause__ = exc
                self.error = err


class stage_scope:
    """``with stage_scope():`` marks this thread as running a stage's work."""

    def __enter__(self):
        _in_stage.depth = getattr(_in_stage, "depth", 0) + 1

    def __exit__(self, *exc):
        _in_stage.depth -= 1
        return False


def _in_a_stage():
    return getattr(_in_stage, "depth", 0) > 0


def _deadline(timeout):
    """The monotonic time a wait of ``timeout`` seconds ends, None for forever (None or
    +inf); nnc's one check of a timeout (a negative one is 0; NaN: PipelineError)."""
    limit = timeout_seconds(timeout, PipelineError)
    return None if limit < 0 else time.monotonic() + limit


class PipelineModule:
    """A built pipeline: ``set_input``, ``run``, ``get_output`` (see docs/pipeline.md).

    Thread-safe: every call takes one lock, so calls from several threads never corrupt it;
    ``set_input`` + ``run`` pairs from different threads interleave (the inputs a run takes
    are whatever was set last), so feed from one thread or guard the pair with a lock.
    """

    def __init__(self, plan, depth):
        self.plan = plan
        self.depth = depth
        self._cond = threading.Condition()
        self._pending = {}
        self._jobs = collections.deque()
        self._executing = 0
        self._closed = False
        self._shut = False              # _shutdown() was called (once, by the first close)
        self._seq = 0
        # Declared (dtype, shape) of each global input, from the module inputs it feeds.
        self._input_specs = {name: [] for name in plan.inputs}
        for st in plan.stages:
            for key, src in st.inputs:
                if src.stage < 0:
                    self._input_specs[src.name].append(
                        (f"{st.module.name}.{key}", st.module.input_specs[key]))

    # ---- executor hooks ----

    def _submit(self, job):
        raise NotImplementedError

    def _shutdown(self):
        pass

    def _stage_done(self, job):
        """A stage finished (or skipped) ``job``; the last one completes it. Never leaves the
        job unfinished: the thread that calls it is a pool thread or a watcher, and a job that
        never completes would hang get_output() and close()."""
        with self._cond:
            job.remaining -= 1
            if job.remaining > 0:
                return
            try:
                if job.error is None:
                    job.outputs = self._collect(job)
            finally:
                job.values = {}
                job.inputs = {}
                job.done = True
                self._executing -= 1
                self._cond.notify_all()

    def _collect(self, job):
        """``job``'s global outputs from its hand-overs, or None after failing the job (an
        executor that lost a stage's result, a copy that failed)."""
        seen = set()
        outs = []
        for stage, index in self.plan.outputs:
            name = self.plan.stages[stage].module.name
            a = job.values.get((stage, index))
            if a is None:
                job.fail(name, PipelineError(f"output {index} of stage {name} was never "
                                             "handed over"))
                return None
            try:
                # Two global outputs of one module output: each gets its own array.
                outs.append(a.copy() if id(a) in seen else a)
            except BaseException as e:  # noqa: BLE001 - reported for this input (MemoryError)
                job.fail(name, e)
                return None
            seen.add(id(a))
        return outs

    # ---- the caller's API ----

    def _check_open(self, what):
        if self._closed:
            raise PipelineError(f"{what} on a closed pipeline")

    def _wait(self, ready, deadline, what):
        """Wait (lock held) until ready(); False if the deadline passed first."""
        while not ready():
            if _in_a_stage():
                raise PipelineError(f"{what} would wait inside a pipeline stage, which could "
                                    "be waiting for itself")
            left = _WAIT_SLICE
            if deadline is not None:
                left = min(left, deadline - time.monotonic())
                if left <= 0:
                    return False
            self._cond.wait(left)
        return True

    def set_input(self, name, array):
        """Copy ``array`` as global input ``name`` of the next ``run()`` (and of later runs
        until set again): the caller may reuse its array at once."""
        with self._cond:
            self._check_open("set_input")
        if name not in self._input_specs:
            raise PipelineError(f"no global input {name!r} (the pipeline's inputs: "
                                f"{', '.join(self._input_specs) or 'none'})")
        try:
            a = np.array(array, copy=True)
        except Exception as e:
            raise PipelineError(f"global input {name!r}: cannot make an array of "
                                f"{type(array).__name__}") from e
        for where, spec in self._input_specs[name]:
            why = array_mismatch(spec, a)
            if why:
                raise PipelineError(f"global input {name!r} feeds {where}, declared "
                                    f"{spec_str(spec)}: {why}")
        with self._cond:
            self._check_open("set_input")
            self._pending[name] = a

    def run(self, block=True, timeout=None):
        """Start the pipeline on the inputs set so far; returns once the input is enqueued.

        At most ``depth`` inputs are in flight: when that many are, ``run()`` waits until
        one finishes (at most ``timeout`` seconds, then PipelineError), or with
        ``block=False`` raises PipelineError ("full") at once.
        """
        deadline = _deadline(timeout)
        with self._cond:
            self._check_open("run")
            missing = [n for n in self._input_specs if n not in self._pending]
            if missing:
                raise PipelineError(f"run: global input(s) {', '.join(missing)} not set "
                                    "(set_input first)")
            if self._executing >= self.depth:
                if not block:
                    raise PipelineError(f"full: {self._executing} input(s) in flight, the "
                                        f"pipeline's depth (run(block=True) waits)")
                if not self._wait(lambda: self._closed or self._executing < self.depth,
                                  deadline, "run()"):
                    raise PipelineError(f"full: no slot freed within {timeout} s "
                                        f"({self._executing} input(s) in flight)")
                self._check_open("run")
            job = Job(self._seq, dict(self._pending), len(self.plan.stages), self._cond)
            self._seq += 1
            self._executing += 1
            self._jobs.append(job)
            try:
                self._submit(job)
            except BaseException:
                # Reported here, not by get_output; tasks already queued still complete it.
                self._jobs.remove(job)
                raise

    def has_next_output(self):
        """True if the next input's outputs (or its error) are ready."""
        with self._cond:
            self._check_open("has_next_output")
            return bool(self._jobs) and self._jobs[0].done

    def get_output(self, block=True, timeout=None):
        """The next input's global outputs (a list of arrays), in input order.

        ``block=False``: None if they are not ready. Blocking: waits at most ``timeout``
        seconds (then None). A stage that failed on that input raises PipelineError naming
        the stage (the failure as ``__cause__``); later inputs are unaffected. With no input
        in flight, a blocking call with a timeout waits for another thread's run; without a
        timeout it raises PipelineError (nothing could ever arrive).
        """
        deadline = _deadline(timeout)
        with self._cond:
            self._check_open("get_output")
            if not self._jobs and block and deadline is None:
                raise PipelineError("get_output: no input in flight (run() first, or give "
                                    "a timeout to wait for another thread's run)")
            if not (self._jobs and self._jobs[0].done):
                if not block:
                    return None
                if not self._wait(lambda: self._closed or (self._jobs and self._jobs[0].done),
                                  deadline, "get_output()"):
                    return None
                self._check_open("get_output")
            job = self._jobs.popleft()
        if job.error is not None:
            raise job.error
        return job.outputs

    def num_executing(self):
        """How many inputs are in flight (run and not finished), 0 to ``depth``."""
        with self._cond:
            return self._executing

    def close(self, timeout=None):
        """Wait for the inputs in flight, then release the stages. Outputs not taken are
        dropped; every later call (but ``close``) raises PipelineError. With ``timeout``
        (seconds) and work still running then, PipelineError (the pipeline stays closed to
        new work; call close() again to finish)."""
        deadline = _deadline(timeout)
        with self._cond:
            if self._executing and _in_a_stage():
                raise PipelineError("close() would wait inside a pipeline stage, which could "
                                    "be waiting for itself")
            self._closed = True
            self._cond.notify_all()
            if self._executing and not self._wait(lambda: self._executing == 0, deadline,
                                                  "close()"):
                raise PipelineError(f"close: {self._executing} input(s) still in flight "
                                    f"after {timeout} s")
            self._jobs.clear()
            self._pending.clear()
            shut, self._shut = not self._shut, True
        if shut:
            self._shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self._closed else f"{self._executing}/{self.depth} in flight"
        return (f"<pipeline.{type(self).__name__}: {len(self.plan.stages)} stage(s), "
                f"{state}>")
