"""Running a statically scheduled graph on CUDA streams, and capturing it into a CUDA graph.

NNC: ccv_nnc_graph_run_with_schedule's GPU path (streams are CUDA streams, signals CUDA events)
and, beyond NNC, Nimble-style capture and replay (research/peers.md §3). A :class:`GpuRun` is
built once from ``static_schedule(g, stream_type="gpu")``: the backend of every node is chosen
up front, each schedule stream becomes a :class:`~nnc.cuda.driver.CudaStream` and each signal
a :class:`~nnc.cuda.driver.CudaEvent`. ``enqueue(stream)`` forks from the caller's stream
(one event), launches every node on its stream after its waits, and joins every stream back
(one event each): the fork/join shape that stream capture requires. :func:`capture` records
that into a :class:`~nnc.cuda.driver.CudaGraph`, so a replay costs one cuGraphLaunch however
many nodes the graph has.

Graphs with while or case..of nodes are refused here (their control flow needs the host); on a
GPU they would keep the coroutine path, which is not wired to CUDA streams yet (docs/gpu.md).
"""

import numpy as np

from nnc._core import GraphError, ScheduleError
from nnc.cuda.driver import CudaEvent, CudaGraph, CudaStream, check, device, driver

__all__ = ["GpuRun", "capture", "run", "to_gpu"]

_CONTROL = ("WHILE", "CASE_OF")


def _node_device(e, default):
    """The GPU a node runs on: its first GPU output's, else its first GPU input's."""
    for t in list(e.outputs) + list(e.inputs):
        if t is not None and t.device != "cpu":
            return int(t.device[4:])
    return default


def _transfer_groups(e, first):
    """A DATA_TRANSFER node's (input, output) pairs by the GPU each copy runs on (the output's
    GPU, else the input's), ``first`` (the node's own GPU) first; None if a pair is host to
    host (no GPU backend takes it; GpuRun reports that)."""
    groups = {first: []}
    for x, y in zip(e.inputs, e.outputs):
        dev = y.device if y.device != "cpu" else x.device
        if dev == "cpu":
            return None
        groups.setdefault(int(dev[4:]), []).append((x, y))
    return {d: p for d, p in groups.items() if p}


def _copies(pairs):
    from nnc.cuda import memory

    def op(stream):
        for x, y in pairs:
            memory.copy(y, x, stream)

    return op


class GpuRun:
    """A graph's static GPU schedule turned into CUDA streams, events and chosen backends.

    Schedule stream k becomes one CudaStream per device that k's nodes run on (a node runs on
    its outputs' GPU, so a graph spanning two GPUs gets streams on each; a DATA_TRANSFER whose
    outputs are on several GPUs gets a stream on each, joined back before its signals); signal
    k becomes a CudaEvent on the device of the node that emits it (an event is recorded on a
    stream of its own device), and waits on it work across devices.
    """

    def __init__(self, graph, schedule=None):
        from nnc.cmd import cmd_backends_for

        sched = graph.schedule if schedule is None else schedule
        if sched is None or sched.stream_type == "cpu":
            raise ScheduleError("run the graph through static_schedule(g, stream_type='gpu') "
                                "first")
        if sched.stale:
            raise ScheduleError("the graph changed after it was scheduled; schedule it again")
        self.device = device(sched.stream_type)
        self.graph, self.schedule = graph, sched
        self.nodes = []
        streams = {}                    # (schedule stream, ordinal) -> CudaStream
        signal_dev = {}                 # signal -> ordinal of the node emitting it
        for e in sched.order:
            cmd = e.cmd
            if cmd.name in _CONTROL:
                raise GraphError(f"{e!r} is a {cmd.name} node: graphs with control flow cannot "
                                 "run as a CUDA stream schedule or be captured")
            es = sched[e]
            if len(es.streams) != 1:
                raise ScheduleError(f"{e!r} has {len(es.streams)} streams; nnc's schedules give "
                                    "every node one")
            ordinal = _node_device(e, self.device.ordinal)

            def stream_on(dev, k=es.streams[0]):
                if (k, dev) not in streams:
                    streams[(k, dev)] = CudaStream(dev)
                return streams[(k, dev)]

            for sig in es.signals:
                signal_dev[sig] = ordinal
            groups = _transfer_groups(e, ordinal) if cmd.name == "DATA_TRANSFER" else None
            if groups is not None and len(groups) > 1:
                self._ops(e, cmd, stream_on(ordinal), cmd_backends_for)   # a GPU backend takes it
                # Copies to several GPUs: a stream on each (copies into GPU d run on d's),
                # joined into the first before the node's signals are recorded.
                parts = [(stream_on(dev), [_copies(pairs)], None if i == 0 else CudaEvent(dev))
                         for i, (dev, pairs) in enumerate(groups.items())]
            else:
                s0 = stream_on(ordinal)
                ops = [] if cmd.name == "NOOP" else self._ops(e, cmd, s0, cmd_backends_for)
                parts = [(s0, ops, None)]
            self.nodes.append((parts, es.signals, es.waits))
        self.streams = list(streams.values())
        self.events = [CudaEvent(signal_dev.get(k, self.device.ordinal))
                       for k in range(sched.signal_count)]
        self._begin = {}                # ordinal of the caller's stream -> fork event
        self.joins = [CudaEvent(s.device) for s in self.streams]

    @staticmethod
    def _ops(e, cmd, stream, cmd_backends_for):
        """The node's work as ops ``op(stream)``: prepared launches (parameters packed once)
        when the backend can prepare and no tensor can move, else one backend call."""
        ins, outs = list(e.inputs), list(e.outputs)
        cands = [cmd.backend_object] if cmd.pinned else cmd_backends_for(cmd, ins, outs)
        if not cands or cands[0] is None or cands[0].device == "cpu":
            raise GraphError(f"{e!r}: no GPU backend accepts its tensors (GPU runs need every "
                             "tensor of a node on the GPU, or DATA_TRANSFER)")
        fn = cands[0].py_exec
        prepare = getattr(fn, "prepare", None)
        if prepare is not None and not any(t is not None and t.movable for t in ins + outs):
            return prepare(cmd, ins, outs, stream)
        return [lambda s: fn(cmd, ins, outs, stream=s)]

    def enqueue(self, stream):
        """Enqueue one run after the work already on ``stream``; returns at once."""
        begin = self._begin.get(stream.device.ordinal)
        if begin is None:
            begin = self._begin[stream.device.ordinal] = CudaEvent(stream.device)
        stream.emit(begin)
        for s in self.streams:
            s.wait_signal(begin)            # also makes each stream's device current here
        # The hot loop: raw driver calls on handles (CudaStream.emit/wait_signal check their
        # arguments and the thread's context on every call; both were settled above and in
        # __init__). A failed call raises CUDAError through check().
        cu = driver()
        record, wait = cu.cuEventRecord, cu.cuStreamWaitEvent
        handles = [e.handle for e in self.events]
        current = None
        for parts, signals, waits in self.nodes:
            for s, ops, join in parts:
                if s.device is not current:     # graphs over several GPUs switch contexts
                    current = s.device
                    current.make_current()
                h = s.handle
                for w in waits:
                    r = wait(h, handles[w], 0)
                    if r[0]:
                        check(r, "cuStreamWaitEvent")
                for op in ops:
                    op(s)
                if join is not None:
                    check(record(join.handle, h), "cuEventRecord")
            s = parts[0][0]
            if len(parts) > 1:
                current = s.device
                current.make_current()
                for _, _, join in parts[1:]:
                    check(wait(s.handle, join.handle, 0), "cuStreamWaitEvent")
            h = s.handle
            for sig in signals:
                r = record(handles[sig], h)
                if r[0]:
                    check(r, "cuEventRecord")
        for s, join in zip(self.streams, self.joins):
            s.emit(join)
            stream.wait_signal(join)


def run(graph, stream=None):
    """Run a GPU-scheduled graph once: enqueue on ``stream`` and return, or without a stream
    run on the device's synchronous stream and wait. Builds a :class:`GpuRun` each call (new
    streams and events): to run a graph repeatedly, keep a GpuRun and call its enqueue."""
    r = GpuRun(graph)
    s = stream if stream is not None else r.device.sync_stream()
    r.enqueue(s)
    if stream is None:
        s.wait()
    return r


def capture(graph, stream=None, warmup=True):
    """Capture one run of a GPU-scheduled graph into a CudaGraph; ``cg.replay(stream)`` reruns
    it on the same tensors. Nothing runs during capture itself. With ``warmup`` (the default,
    as Nimble does) the graph first runs once, eagerly, so every kernel is compiled and loaded
    and every staging buffer exists before capture: module loading and allocation are not
    stream work, and in a capturing thread they may be refused."""
    r = GpuRun(graph)
    s = stream if stream is not None else CudaStream(r.device)
    if warmup:
        r.enqueue(s)
        s.wait()
    cg = CudaGraph.capture(s, lambda: r.enqueue(s))
    cg.runner = r                   # keeps the streams, events and tensors alive
    return cg


def to_gpu(graph, device="gpu"):
    """A copy of a CPU graph whose every tensor lives on ``device``: returns ``(new_graph,
    mapping)`` where mapping takes each CPU tensor's memory owner to its GPU copy.

    Each distinct memory owner (an ndarray, with every view of it) is copied once, and views
    stay views at the same offsets and strides, so zero-copy concat slices (Inception's) keep
    aliasing their buffers. Commands are rebuilt from name and parameters (backends are chosen
    again, for the GPU); edges, sources and destinations follow the original. Graphs with
    while or case..of nodes are refused.
    """
    from nnc.cmd import Cmd
    from nnc.cuda import memory
    from nnc.graph.graph import Graph

    owners = {}                     # id(owner ndarray) -> (owner, GPU tensor of it)

    def convert(t):
        if t is None:
            return None
        owner = t._owner_object
        if not isinstance(owner, np.ndarray):
            raise GraphError(f"{t!r} is not host memory nnc can copy to a GPU")
        entry = owners.get(id(owner))
        if entry is None:
            entry = owners[id(owner)] = (owner, memory.from_numpy(owner, device))
        base = owner.__array_interface__["data"][0]
        offset, rem = divmod(t.data_ptr - base, t.dtype.itemsize)
        if rem or entry[1].dtype != t.dtype:
            raise GraphError(f"{t!r} is a view with another dtype or alignment than its memory")
        return entry[1].view(t.shape, offset=offset, strides=t.strides)

    new = Graph()
    nodes = {}
    for e in graph.execs:
        if e.cmd.name in _CONTROL:
            raise GraphError(f"{e!r} is a {e.cmd.name} node; to_gpu copies graphs without "
                             "control flow")
        cmd = Cmd(e.cmd.name, **e.cmd.params)
        nodes[e.index] = new.exec(cmd, [convert(t) for t in e.inputs],
                                  [convert(t) for t in e.outputs], name=e.name)
    for e in graph.execs:
        for o in e.outgoings:
            new.concat(nodes[e.index], nodes[o.index])
    new.sources = [nodes[e.index] for e in graph.sources]
    new.destinations = [nodes[e.index] for e in graph.destinations]
    return new, {id(o): t for o, t in owners.values()}
