"""nnc.onnx.InferenceSession: load once, run many times, in ONNX Runtime's shape (docs/onnx.md,
"Sessions").

    sess = nnc.onnx.InferenceSession("model.onnx")
    (y,) = sess.run(None, {sess.get_inputs()[0].name: x})

A session owns one loaded graph, its input and output tensors and (with a schedule) one CPU
stream. Runs are serialised by a lock: the graph's tensors are the only buffers, so a run writes
the feeds into them, runs the graph and copies the outputs out before the next run may start.
Two threads calling ``run`` on one session both get correct results, one after the other;
parallel runs of one model take a session each.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time

import numpy as np

from nnc.base.parallel import set_intra_op_threads
from nnc.onnx import OnnxError, OnnxTypeError
from nnc.onnx._load import load
from nnc.schedule.schedule import static_schedule
from nnc.stream.stream import Stream

logger = logging.getLogger("nnc")

# ONNX Runtime's spelling of a tensor's element type, by NumPy dtype (nnc's graphs hold these).
_ORT_TYPES = {
    np.dtype(np.float32): "tensor(float)",
    np.dtype(np.float64): "tensor(double)",
    np.dtype(np.float16): "tensor(float16)",
    np.dtype(np.int8): "tensor(int8)",
    np.dtype(np.uint8): "tensor(uint8)",
    np.dtype(np.int16): "tensor(int16)",
    np.dtype(np.uint16): "tensor(uint16)",
    np.dtype(np.int32): "tensor(int32)",
    np.dtype(np.uint32): "tensor(uint32)",
    np.dtype(np.int64): "tensor(int64)",
    np.dtype(np.uint64): "tensor(uint64)",
    np.dtype(np.bool_): "tensor(bool)",
}


class SessionError(OnnxError):
    """A session used wrongly: run after ``close()``, an output name the model does not have."""


class FeedError(SessionError, ValueError):
    """An ``input_feed`` the model cannot take: a name it has no input of, an input left out, an
    array of another shape or dtype (not cast, as ONNX Runtime does not), or no array at all.
    The message names the input."""


class NodeArg:
    """One input or output of a session, as ONNX Runtime's ``NodeArg``: ``name`` (the ONNX
    name), ``shape`` (a list of ints: the shape fixed at load), ``type`` (ONNX Runtime's
    spelling, e.g. ``"tensor(float)"``) and ``dtype`` (the NumPy dtype)."""

    def __init__(self, name, shape, dtype):
        self.name = name
        self.shape = list(shape)
        self.dtype = np.dtype(dtype)
        self.type = _ORT_TYPES.get(self.dtype, f"tensor({self.dtype.name})")

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class InferenceSession:
    """An ONNX model loaded once into an nnc graph, run with NumPy feeds (ONNX Runtime's API).

    ``model``: a path, serialized bytes or an ``onnx.ModelProto`` (as :func:`nnc.onnx.load`).
    ``schedule``: a ``nnc.static_schedule`` policy (``"rank"``, the default): runs go to the
    schedule's CPU streams; ``None`` runs the nodes one after the other on the calling thread.
    ``simplify``: ``Graph.simplify()`` first (fusions). ``autotune``: ``Graph.autotune()``
    (``True``: 3 trials; an int: that many), picking each node's fastest backend. Order: load,
    simplify, autotune, schedule. ``intra_op_threads``: passed to ``nnc.set_intra_op_threads``,
    which is **process-wide** (every graph and session of the process; ``None`` leaves it as
    it is). ``progress``: ``progress(stage, done, total)`` is called as each step starts
    (``stage`` one of ``"load"``, ``"simplify"``, ``"autotune"``, ``"schedule"``, with the
    steps done so far and the steps in all) and once more as ``("ready", total, total)``;
    whatever it raises propagates, and the session is not made. Each step is also logged at
    INFO on the ``"nnc"`` logger with its time. ``input_shapes``, ``dtype``, ``base_dir``,
    ``max_bytes``: passed to :func:`nnc.onnx.load`.

    Thread safety: ``run`` and ``run_async`` may be called from any threads; runs of one
    session are serialised by a lock (its graph's tensors are its only buffers), and each
    returns fresh arrays of its own. ``graph`` is the loaded ``nnc.Graph``: running or changing
    it directly bypasses that lock.
    """

    def __init__(self, model, *, schedule="rank", simplify=True, autotune=False,
                 intra_op_threads=None, progress=None, input_shapes=None, dtype="float32",
                 base_dir=None, max_bytes=None):
        if schedule is not None and not isinstance(schedule, str):
            raise OnnxTypeError(f"schedule must be a policy name or None, not {schedule!r}")
        if progress is not None and not callable(progress):
            raise OnnxTypeError(f"progress must be callable or None, not {progress!r}")
        if isinstance(autotune, bool):
            trials = 3 if autotune else 0
        elif isinstance(autotune, int) and autotune >= 1:
            trials = autotune
        else:
            raise OnnxTypeError(f"autotune must be a bool or an int >= 1, not {autotune!r}")
        # Set before anything is built or runs, so a bad value raises before the load's work.
        if intra_op_threads is not None:
            set_intra_op_threads(intra_op_threads)
        self._closed = True             # until built: close() and __del__ find nothing to free
        self._lock = threading.Lock()   # held for a whole run: feeds in, graph, outputs out
        self._executor = None           # run_async's worker, made on first use
        self._stream = None
        steps = ["load"] + ["simplify"] * bool(simplify) + ["autotune"] * bool(trials)
        steps += ["schedule"] * (schedule is not None)
        total = len(steps)

        def step(done, stage, what):
            if progress is not None:
                progress(stage, done, total)
            start = time.perf_counter()
            result = what()
            logger.info("nnc.onnx session: %s took %.3f s", stage, time.perf_counter() - start)
            return result

        loaded = step(0, "load", lambda: load(
            model, input_shapes=input_shapes, dtype=dtype, base_dir=base_dir,
            max_bytes=max_bytes))
        g = loaded.graph
        done = 1
        if simplify:
            fused = step(done, "simplify", g.simplify)
            logger.info("nnc.onnx session: simplify rewrote %d node(s)", fused)
            done += 1
        if trials:
            step(done, "autotune", lambda: g.autotune(trials))
            done += 1
        if schedule is not None:
            step(done, "schedule", lambda: static_schedule(g, policy=schedule))
            self._stream = Stream("cpu")
        if progress is not None:
            progress("ready", total, total)
        self._graph = g
        self._inputs = dict(zip(loaded.input_names, loaded.inputs))
        self._outputs = dict(zip(loaded.output_names, loaded.outputs))
        self._input_args = [NodeArg(n, t.shape, t.dtype) for n, t in self._inputs.items()]
        self._output_args = [NodeArg(n, t.shape, t.dtype) for n, t in self._outputs.items()]
        self._closed = False

    @property
    def graph(self):
        """The loaded ``nnc.Graph`` (simplified, tuned and scheduled as asked)."""
        self._check_open()
        return self._graph

    def get_inputs(self):
        """The model's inputs, in its order: a list of :class:`NodeArg`."""
        return list(self._input_args)

    def get_outputs(self):
        """The model's outputs, in its order: a list of :class:`NodeArg`."""
        return list(self._output_args)

    def run(self, output_names, input_feed):
        """Run the model on ``input_feed`` (``{input name: array}``, every input exactly once,
        of its shape and dtype) and return the outputs named by ``output_names`` (``None``: all,
        in the model's order) as a list of fresh NumPy arrays: nothing a later run overwrites.
        Raises :class:`FeedError` for a bad feed, :class:`SessionError` for an unknown output
        name or a closed session, and whatever the graph's run raises."""
        names = self._output_names(output_names)
        feeds = self._feeds(input_feed)
        return self._run(names, feeds)

    def run_async(self, output_names, input_feed):
        """``run`` on the session's worker thread: returns a ``concurrent.futures.Future`` of
        the list ``run`` would return (``asyncio.wrap_future`` makes it awaitable). The feeds
        are checked and copied before this returns, so the caller may reuse its arrays at once;
        every error, a bad feed's included, is the future's exception (a BaseException raised
        while checking the feeds, such as KeyboardInterrupt, is raised here instead)."""
        future = concurrent.futures.Future()
        try:
            names = self._output_names(output_names)
            feeds = {k: np.array(v, copy=True) for k, v in self._feeds(input_feed).items()}
            with self._lock:
                self._check_open()
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(
                        max_workers=1, thread_name_prefix="nnc-session")
                executor = self._executor
        except Exception as e:
            future.set_exception(e)
            return future
        # The executor's worker sets any BaseException the run raises as the future's.
        return executor.submit(self._run, names, feeds)

    def close(self):
        """Wait for the runs in progress and queued (run_async), then drop the graph; later
        calls of ``run`` raise :class:`SessionError`. Closing twice is harmless."""
        executor = self._executor
        if executor is not None:
            executor.shutdown(wait=True)
        with self._lock:
            self._closed = True
            self._executor = None
            self._graph = self._stream = None
            self._inputs = self._outputs = {}

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def _check_open(self):
        if self._closed:
            raise SessionError("the InferenceSession is closed")

    def _output_names(self, output_names):
        if output_names is None:
            return [a.name for a in self._output_args]
        if isinstance(output_names, str):
            raise SessionError(f"output_names must be a list of names or None, not the string "
                               f"{output_names!r}")
        names = list(output_names)
        known = {a.name for a in self._output_args}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SessionError(f"the model has no output named {', '.join(map(repr, unknown))}; "
                               f"its outputs are {sorted(known)}")
        return names

    def _feeds(self, input_feed):
        """Check ``input_feed`` against the inputs; returns ``{name: ndarray}``."""
        if not hasattr(input_feed, "items"):
            raise FeedError(f"input_feed must be a dict of input name -> array, not "
                            f"{type(input_feed).__name__}")
        args = {a.name: a for a in self._input_args}
        feeds = {}
        for name, value in input_feed.items():
            arg = args.get(name)
            if arg is None:
                raise FeedError(f"input_feed names {name!r}, which is no input of the model; its "
                                f"inputs are {sorted(args)}")
            if not isinstance(value, np.ndarray):
                raise FeedError(f"input {name!r}: expected a numpy.ndarray, got "
                                f"{type(value).__name__}")
            if value.dtype != arg.dtype:
                raise FeedError(f"input {name!r}: expected dtype {arg.dtype} ({arg.type}), got "
                                f"{value.dtype} (not cast: convert it with .astype)")
            if list(value.shape) != arg.shape:
                raise FeedError(f"input {name!r}: expected shape {tuple(arg.shape)}, got "
                                f"{value.shape}")
            feeds[name] = value
        missing = [n for n in args if n not in feeds]
        if missing:
            raise FeedError(f"input_feed lacks the input(s) {', '.join(map(repr, missing))}")
        return feeds

    def _run(self, names, feeds):
        with self._lock:
            self._check_open()
            for name, value in feeds.items():
                self._inputs[name].numpy()[...] = value
            if self._stream is None:
                self._graph.run()
            else:
                self._graph.run(stream=self._stream)
                try:
                    self._stream.wait()
                except BaseException:
                    # Ctrl-C interrupts the wait, not the work: the run must end before the lock
                    # lets another write the inputs.
                    self._drain()
                    raise
            # Copies, made under the lock: the next run overwrites the graph's tensors.
            return [np.array(self._outputs[n].numpy(), copy=True) for n in names]

    def _drain(self):
        """Wait, uninterruptibly, for the stream's work to end (its failures were raised)."""
        while True:
            try:
                self._stream.wait()
                return
            except KeyboardInterrupt:
                continue
            except Exception:
                return
