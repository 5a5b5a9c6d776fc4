"""A concrete graph as plain picklable data, to rebuild it in another process (a Ray actor).

nnc's ``Graph`` is a Cython object over C state and cannot be pickled as such. :func:`graph_pack`
records what rebuilding it needs: each node's command (``Cmd`` pickles itself; a custom command's
function goes with it through Ray's cloudpickle), its tensors, name and chosen backend, the edges,
sources and destinations; and the memory of the tensors, kept as one byte buffer per *memory
group* (tensors whose byte ranges overlap), so that views keep aliasing each other after
:func:`graph_unpack` (a concat buffer and the views its branches write stay one buffer).

Not packable (``PipelineError`` at pack time, naming the node): ``while``/``case..of`` nodes (their
sub-graphs and expressions live in the parent process), tensors that are not CPU ``Tensor``
objects (MultiViews; GPU tensors, whose device memory and CUDA context belong to this process).
"""

import ctypes

import numpy as np

from nnc.graph.graph import Graph
from nnc.pipeline.config import PipelineError
from nnc.tensor.tensor import Tensor

_ALIGN = 64             # each group keeps its address modulo this in the copy


def tensor_extent(t, where):
    """[lo, hi) bytes of a CPU tensor's elements and the address of element 0 (also
    nnc.pipeline.split's, which groups overlapping tensors the same way); ``where`` starts the
    PipelineError for anything else."""
    if not isinstance(t, Tensor):
        raise PipelineError(f"{where}: {t!r} is not an nnc.Tensor")
    if t.device != "cpu":
        raise PipelineError(f"{where}: {t!r} is on {t.device}; pipeline.split and the Ray "
                            "executor take CPU graphs only (device memory and CUDA state "
                            "belong to this process and cannot be sent to another; a GPU stage "
                            "runs with the local executor)")
    item = t.dtype.itemsize
    lo = hi = first = t.data_ptr
    if t.size == 0:
        return lo, lo, first
    for n, s in zip(t.shape, t.strides):
        step = (n - 1) * s * item
        if step < 0:
            lo += step
        else:
            hi += step
    return lo, hi + item, first


class GraphPack:
    """What :func:`graph_unpack` needs; only ints, strings, tuples, Cmds and uint8 arrays.

    Invariants: every tensor index in ``nodes``, ``inputs`` and ``outputs`` is < len(tensors);
    every tensor's bytes lie inside its group's buffer.
    """

    def __init__(self, buffers, groups_lo, tensors, nodes, edges, sources, destinations,
                 inputs, outputs):
        self.buffers = buffers            # one uint8 ndarray per memory group: its bytes
        self.groups_lo = groups_lo        # each group's start address modulo _ALIGN
        self.tensors = tensors            # (group, byte offset of element 0, shape, dtype, strides)
        self.nodes = nodes                # (cmd, input indices, output indices, name, backend)
        self.edges = edges                # (from node, to node) positions in ``nodes``
        self.sources = sources            # node positions
        self.destinations = destinations  # node positions
        self.inputs = inputs              # (name, tensor index) for each named input
        self.outputs = outputs            # tensor index of each output


def graph_pack(graph, inputs, outputs, what="graph"):
    """Pack ``graph`` with its named ``inputs`` ({name: Tensor}) and ``outputs`` (Tensors)."""
    execs = graph.execs
    tensors = {}
    for e in execs:
        if e.cmd.info.control:
            raise PipelineError(f"{what}: {e.cmd.name} node {e!r} cannot be sent to another "
                                "process (its sub-graphs and expressions live in this one)")
        for t in (*e.inputs, *e.outputs):
            if t is not None:
                tensor_extent(t, f"{what}: node {e!r}")
                tensors.setdefault(id(t), t)
    for t in (*inputs.values(), *outputs):
        tensor_extent(t, f"{what}: an input or output")
        tensors.setdefault(id(t), t)
    spans = sorted((tensor_extent(t, what), key) for key, t in tensors.items())
    groups = []                          # [lo, hi] per group
    group_of = {}
    for (lo, hi, _), key in spans:
        if groups and lo < groups[-1][1] and hi > lo:
            groups[-1][1] = max(groups[-1][1], hi)
        else:
            groups.append([lo, hi])
        group_of[key] = len(groups) - 1
    buffers = [np.frombuffer(ctypes.string_at(lo, hi - lo), np.uint8) if hi > lo
               else np.empty(0, np.uint8) for lo, hi in groups]
    index = {}
    records = []
    for key, t in tensors.items():
        gi = group_of[key]
        _, _, first = tensor_extent(t, what)
        index[key] = len(records)
        records.append((gi, first - groups[gi][0], t.shape, t.dtype.str, t.strides))
    position = {e.index: k for k, e in enumerate(execs)}
    nodes = []
    edges = []
    for k, e in enumerate(execs):
        nodes.append((e.cmd, tuple(None if t is None else index[id(t)] for t in e.inputs),
                      tuple(None if t is None else index[id(t)] for t in e.outputs),
                      e.name, e.backend))
        edges.extend((k, position[b.index]) for b in e.outgoings)
    return GraphPack(buffers, [lo % _ALIGN for lo, _ in groups], records, nodes, edges,
                     [position[e.index] for e in graph.sources],
                     [position[e.index] for e in graph.destinations],
                     [(name, index[id(t)]) for name, t in inputs.items()],
                     [index[id(t)] for t in outputs])


def graph_unpack(pack):
    """Rebuild a packed graph: ``(graph, {name: Tensor}, [Tensor])`` over fresh memory."""
    memory = []
    for buf, mod in zip(pack.buffers, pack.groups_lo):
        raw = np.empty(len(buf) + _ALIGN, np.uint8)
        shift = (mod - raw.ctypes.data) % _ALIGN
        mine = raw[shift:shift + len(buf)]
        mine[:] = buf
        memory.append(mine)
    tensors = []
    for gi, offset, shape, dtype, strides in pack.tensors:
        dt = np.dtype(dtype)
        # A contiguous 1-d Tensor over the bytes the tensor spans, then a view of it, because
        # Tensor() wraps only C-contiguous arrays.
        lo = hi = offset
        for n, s in zip(shape, strides):
            step = (n - 1) * s * dt.itemsize
            if step < 0:
                lo += step
            else:
                hi += step
        if 0 in shape:
            tensors.append(Tensor(np.empty(shape, dt)))
            continue
        flat = Tensor(memory[gi][lo:hi + dt.itemsize].view(dt))
        tensors.append(flat.view(shape, offset=(offset - lo) // dt.itemsize, strides=strides))
    g = Graph()
    made = []
    for cmd, ins, outs, name, backend in pack.nodes:
        e = g.exec(cmd, [None if i is None else tensors[i] for i in ins],
                   [None if i is None else tensors[i] for i in outs], name=name)
        if backend is not None and e.backend != backend:
            e.backend = backend
        made.append(e)
    for a, b in pack.edges:
        g.concat(made[a], made[b])
    g.sources = [made[k] for k in pack.sources]
    g.destinations = [made[k] for k in pack.destinations]
    return (g, {name: tensors[i] for name, i in pack.inputs},
            [tensors[i] for i in pack.outputs])
