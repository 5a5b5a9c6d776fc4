"""CUDA-graph capture of a graph's run on a GPU stream, and copying a CPU graph to a GPU.

NNC has no counterpart; Nimble (ATC '21) does this. ``g.run(stream=s)`` on a GPU
``nnc.Stream`` goes through the same runner as on a CPU stream (nnc/graph/run.pyx; the GPU
stream launches each node as it is enqueued, nnc/cuda/gpu_stream.pyx). :func:`capture` records
one such run into a :class:`~nnc.cuda.driver.CudaGraph`, so a replay costs one cuGraphLaunch
however many nodes the graph has.
"""

import numpy as np

from nnc._core import GraphError

__all__ = ["capture", "to_gpu"]

_CONTROL = ("WHILE", "CASE_OF")


def _refuse_control(graph, what):
    for e in graph.execs:
        if e.cmd.name in _CONTROL:
            raise GraphError(f"{e!r} is a {e.cmd.name} node: {what}")


def capture(graph, stream=None, warmup=True):
    """Capture ``graph.run(stream=stream)`` into a CudaGraph; ``cg.replay(stream)`` reruns it
    on the same tensors (``stream``: a GPU nnc.Stream; None: a new ``nnc.Stream("gpu")``).

    Nothing runs during capture itself. With ``warmup`` (the default, as Nimble does) the
    graph first runs once, eagerly, so every kernel is compiled and loaded and every staging
    buffer exists before capture: module loading and allocation are not stream work, and in a
    capturing thread they may be refused. The run's host bookkeeping (its finish, which
    moves failures to ``stream`` and marks the graph idle) runs once, at capture, not on every
    replay: a replay is device work only. Graphs with while or case..of nodes are refused
    (their control flow needs the host between launches).
    """
    from nnc.cuda.driver import CudaGraph
    from nnc.cuda.gpu_stream import device_half, set_capturing
    from nnc.stream import Stream

    _refuse_control(graph, "graphs with control flow cannot be captured into a CUDA graph")
    s = stream if stream is not None else Stream("gpu")
    device_half(s)                      # StreamError for a CPU stream
    if warmup:
        graph.run(stream=s)
        s.wait()

    def run():
        set_capturing(True)
        try:
            graph.run(stream=s)
        finally:
            set_capturing(False)

    cg = CudaGraph.capture(s, run)
    cg.source = graph               # keeps the graph (its tensors, streams, events) alive
    return cg


_FLOATS = ("float16", "float32", "float64")


def to_gpu(graph, device="gpu", dtype=None):
    """A copy of a CPU graph whose every tensor lives on ``device``: returns ``(new_graph,
    mapping)`` where mapping takes each CPU tensor's memory owner to its GPU copy.

    ``dtype`` ("float16", "float32" or "float64"): every floating-point tensor (weights,
    activations, inputs and outputs alike) is converted to it on the way (NumPy's rounding to
    nearest), so ``to_gpu(g, dtype="float16")`` makes a float16 copy of a float32 model for
    the GPU; other dtypes are copied as they are. None (the default) keeps every dtype.
    GraphError for any other dtype, and for memory the graph only reads (weights, inputs) that
    holds a finite value beyond the new dtype's range (float16: 65504).

    Each distinct memory owner (an ndarray, with every view of it) is copied once, and views
    stay views at the same offsets and strides, so zero-copy concat slices (Inception's) keep
    aliasing their buffers. Commands are rebuilt from name and parameters (backends are chosen
    again, for the GPU); edges, sources and destinations follow the original. Graphs with
    while or case..of nodes are refused.
    """
    from nnc.cmd import Cmd
    from nnc.cuda import memory
    from nnc.graph.graph import Graph

    if dtype is not None:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
        if name not in _FLOATS:
            raise GraphError(f"to_gpu converts floating-point tensors to one of {_FLOATS}, "
                             f"not {dtype!r}")
        dtype = np.dtype(name)
    owners = {}                     # id(owner ndarray) -> (owner, GPU tensor of it)
    # Memory some node writes: what it holds before a run (often garbage) does not matter.
    written = {id(t._owner_object) for e in graph.execs for t in e.outputs if t is not None}

    def converted(owner):
        if dtype is None or owner.dtype.kind != "f" or owner.dtype == dtype:
            return owner
        with np.errstate(over="ignore"):
            new = owner.astype(dtype)
        if id(owner) not in written and (np.isinf(new) & np.isfinite(owner)).any():
            # A weight or an input the graph only reads: inf would be a silently wrong answer.
            big = np.abs(owner[np.isinf(new) & np.isfinite(owner)]).max()
            raise GraphError(f"a {owner.dtype} tensor of shape {owner.shape} the graph reads "
                             f"holds {big:g}, beyond {dtype}'s largest finite value "
                             f"{np.finfo(dtype).max:g}")
        return new

    def convert(t):
        if t is None:
            return None
        owner = t._owner_object
        if not isinstance(owner, np.ndarray):
            raise GraphError(f"{t!r} is not host memory nnc can copy to a GPU")
        entry = owners.get(id(owner))
        if entry is None:
            entry = owners[id(owner)] = (owner, memory.from_numpy(converted(owner), device))
        base = owner.__array_interface__["data"][0]
        offset, rem = divmod(t.data_ptr - base, t.dtype.itemsize)
        if rem or owner.dtype != t.dtype:
            raise GraphError(f"{t!r} is a view with another dtype or alignment than its memory")
        # Offsets and strides count elements, so they hold in the converted copy too.
        return entry[1].view(t.shape, offset=offset, strides=t.strides)

    _refuse_control(graph, "to_gpu copies graphs without control flow")
    new = Graph()
    nodes = {}
    for e in graph.execs:
        cmd = Cmd(e.cmd.name, **e.cmd.params)
        nodes[e.index] = new.exec(cmd, [convert(t) for t in e.inputs],
                                  [convert(t) for t in e.outputs], name=e.name)
    for e in graph.execs:
        for o in e.outgoings:
            new.concat(nodes[e.index], nodes[o.index])
    new.sources = [nodes[e.index] for e in graph.sources]
    new.destinations = [nodes[e.index] for e in graph.destinations]
    return new, {id(o): t for o, t in owners.values()}
