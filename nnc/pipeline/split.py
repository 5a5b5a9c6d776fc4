"""Automatic splitting of a concrete graph into pipeline stages (docs/pipeline.md, "Splitting").

TVM's pipeline RFC left this as a "future possibility"; nnc does it in three steps:

1. **Order and costs.** The nodes that ``run()`` runs, in ``graph.topsort()`` order, each with a
   cost in seconds (``costs``: measured with ``graph.profile()`` by default).
2. **Partition.** :func:`partition` cuts that order into ``k`` contiguous, non-empty runs whose
   largest summed cost is as small as possible (a dynamic program over prefix sums). A cut of a
   topological order only ever cuts edges that go forward, so stage i never waits on stage j > i.
3. **Memory.** Stages run at the same time on different inputs, so two stages must never share
   memory that one of them writes. Every tensor a node touches belongs to a *memory group*: the
   union of tensors whose byte ranges overlap (a concat buffer and the views its branches write
   form one group). Groups no node writes and that hold no global input (weights, constants) are
   shared by every stage, read-only. Every other group that a stage touches gets a private copy
   in that stage (initialised with the group's bytes at split time), with each tensor of the
   group re-made as a view of the copy at the same offset and strides. A stage that touches such
   a group takes its whole content from the previous stage that touched it (or from the global
   input it holds) and hands it on to the next stage that touches it; the global outputs come
   from the last stage that touched their group. The original graph's activation memory is never
   used by the stages, so the graph stays usable on its own.
4. **Order.** A graph edge between stages that no hand-over carries, and a stage that nothing
   would bind into the config, get a one-byte order token (:func:`_order_stages`): the config
   holds exactly ``k`` stages and every dependency of the graph.
"""

import ctypes
import math
import numbers

import numpy as np

from nnc.cmd.command import Cmd
from nnc.graph.graph import Graph
from nnc.pipeline.config import Module, PipelineConfig, PipelineError
from nnc.pipeline.graph_pack import tensor_extent
from nnc.tensor.tensor import Tensor

_ALIGN = 64             # a copy keeps each group's address modulo this (SIMD loads care)


def partition(costs, stages):
    """Cut a sequence of costs into ``stages`` contiguous non-empty runs whose largest sum is the
    smallest possible; returns the ``stages - 1`` cut positions (run i is ``costs[cut[i-1]:
    cut[i]]``). Ties go to the earliest cuts.

    The dynamic program: best[j][i] is the smallest largest-run sum of cutting the first i costs
    into j runs, = min over p of max(best[j-1][p], sum(costs[p:i])). best[j-1][p] grows with p and
    the last run's sum shrinks, so the optimum sits where they cross: a binary search finds it,
    which makes the whole O(stages * n log n).

    Each cost must be a finite real >= 0 (PipelineError otherwise). They are scaled by a power
    of two that brings the largest to [0.5, 1) first: exact (but that a cost below 2**-1000
    of the largest counts as 0), so the cuts are those of the costs as given, and no sum can
    overflow (costs near the float limit summed to inf, and
    runs compared equal at inf came out empty).
    """
    costs = list(costs)
    n = len(costs)
    if isinstance(stages, bool) or not isinstance(stages, numbers.Integral):
        raise PipelineError(f"stages must be an int, not {stages!r}")
    if not 1 <= stages <= n:
        raise PipelineError(f"stages must be between 1 and the number of nodes ({n}), "
                            f"not {stages}")
    for i, c in enumerate(costs):
        if isinstance(c, bool) or not isinstance(c, numbers.Real) or not math.isfinite(c) \
                or c < 0:
            raise PipelineError(f"cost {i} must be a finite number >= 0, not {c!r}")
    scale = -math.frexp(max(float(c) for c in costs))[1]
    prefix = [0.0] * (n + 1)
    for i, c in enumerate(costs):
        prefix[i + 1] = prefix[i] + math.ldexp(float(c), scale)
    best = prefix[:]                     # best[i] for j = 1: one run over the first i costs
    choice = []                          # choice[j-2][i]: where run j starts, for j >= 2
    for j in range(2, stages + 1):
        new = [math.inf] * (n + 1)
        pick = [0] * (n + 1)
        for i in range(j, n + 1):
            lo, hi = j - 1, i - 1        # the last run is costs[p:i], p in [lo, hi]
            while lo < hi:               # first p where best[p] >= the last run's sum
                mid = (lo + hi) // 2
                if best[mid] >= prefix[i] - prefix[mid]:
                    hi = mid
                else:
                    lo = mid + 1
            for p in (lo - 1, lo):
                if j - 1 <= p <= i - 1:
                    v = max(best[p], prefix[i] - prefix[p])
                    if v < new[i]:
                        new[i], pick[i] = v, p
        best = new
        choice.append(pick)
    cuts = []
    i = n
    for pick in reversed(choice):
        i = pick[i]
        cuts.append(i)
    return cuts[::-1]


def _node_costs(graph, order, costs):
    """One cost in seconds per node of ``order``, from what ``split(costs=...)`` accepts."""
    if costs is None or (isinstance(costs, str) and costs == "profile"):
        costs = {}
        for e, seconds in graph.profile(3):
            costs[e] = seconds
    elif callable(costs) and not isinstance(costs, dict):
        fn = costs
        costs = {}
        for e in order:
            try:
                costs[e] = fn(e)
            except PipelineError:
                raise
            except Exception as exc:
                raise PipelineError(f"the costs function failed on {e!r}: {exc!r}") from exc
    if not isinstance(costs, dict):
        raise PipelineError("costs must be None (measure with graph.profile()), \"profile\", a "
                            "dict {GraphExec or node index: seconds} or a callable(GraphExec) "
                            f"-> seconds, not {costs!r}")
    out = []
    for e in order:
        v = costs.get(e, costs.get(e.index))
        if v is None:
            raise PipelineError(f"costs give no cost for node {e!r}")
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) \
                or v < 0:
            raise PipelineError(f"the cost of {e!r} must be finite and >= 0 seconds, not {v!r}")
        out.append(float(v))
    return out


def _extent(t):
    return tensor_extent(t, "split")


class _Group:
    """Tensors whose byte ranges overlap (transitively): they are copied and handed on whole."""

    def __init__(self, index, lo, hi):
        self.index = index     # position among the groups, by address
        self.lo = lo           # [lo, hi): the union of the members' byte ranges
        self.hi = hi
        self.written = False   # some node writes a member
        self.input = None      # the global input name whose tensor this group is, or None
        self.stages = []       # the stages whose nodes touch a member, ascending, no repeats
        self.cover = None      # a contiguous member spanning exactly [lo, hi), or None

    @property
    def dynamic(self):
        """Its content changes from one input to the next: it needs a copy in each stage."""
        return self.written or self.input is not None


def _group_tensors(tensors):
    """Memory groups of ``tensors`` (id -> Tensor): returns id -> _Group."""
    spans = sorted((_extent(t), i) for i, t in tensors.items())
    of = {}
    groups = []
    for (lo, hi, _), i in spans:
        if groups and lo < groups[-1].hi and hi > lo:
            g = groups[-1]
            g.hi = max(g.hi, hi)
        else:
            g = _Group(len(groups), lo, hi)
            groups.append(g)
        of[i] = g
    for i, t in tensors.items():
        g = of[i]
        lo, hi, _ = _extent(t)
        if lo == g.lo and hi == g.hi and t.is_contiguous and g.cover is None:
            g.cover = t
    return of


def _view_of(buf, base, t):
    """A Tensor like t over ``buf``, the copy of the bytes that start at address ``base``."""
    lo, hi, first = _extent(t)
    item = t.dtype.itemsize
    if t.size == 0:
        return Tensor.empty(t.shape, t.dtype)
    flat = Tensor(buf[lo - base:hi - base].view(t.dtype))
    if t.is_contiguous and first == lo:
        return flat.view(t.shape)
    return flat.view(t.shape, offset=(first - lo) // item, strides=t.strides)


class _StageMemory:
    """One stage's private copies of the dynamic groups it touches."""

    def __init__(self):
        self.buffers = {}      # group index -> uint8 ndarray holding the group's bytes
        self.tensors = {}      # id(original tensor) -> its re-made view in this stage
        self.covers = {}       # group index -> the tensor spanning the whole copy

    def buffer(self, g):
        buf = self.buffers.get(g.index)
        if buf is None:
            n = g.hi - g.lo
            raw = np.empty(n + _ALIGN, np.uint8)
            shift = (g.lo - raw.ctypes.data) % _ALIGN
            buf = raw[shift:shift + n]
            if n:
                buf[:] = np.frombuffer(ctypes.string_at(g.lo, n), np.uint8)
            self.buffers[g.index] = buf
        return buf

    def remap(self, t, g):
        """t as a view of this stage's copy of g (the same object for the same t)."""
        out = self.tensors.get(id(t))
        if out is None:
            out = _view_of(self.buffer(g), g.lo, t)
            self.tensors[id(t)] = out
        return out

    def cover(self, g):
        """The tensor a stage hands on for g: its covering member, else the raw bytes."""
        out = self.covers.get(g.index)
        if out is None:
            if g.cover is not None:
                out = self.remap(g.cover, g)
            else:
                out = Tensor(self.buffer(g))
            self.covers[g.index] = out
        return out


def _default_inputs(order, written, preds):
    """The first input of each node without predecessors, when no node writes it: nnc's
    commands take data first and weights after (CONVOLUTION x, w, b; GEMM a, w, bias)."""
    found = []
    for e in order:
        if preds[e.index]:
            continue
        ins = e.inputs
        if ins and ins[0] is not None and id(ins[0]) not in written \
                and all(ins[0] is not t for t in found):
            found.append(ins[0])
    if len(found) == 1:
        return {"input": found[0]}
    return {f"input_{i}": t for i, t in enumerate(found)}


def split(graph, stages=2, costs=None, inputs=None, outputs=None):
    """Cut ``graph`` into ``stages`` pipeline stages of balanced cost; returns a ready
    :class:`PipelineConfig` whose modules are exactly ``stage0`` .. ``stage{k-1}``, every node
    in one of them (docs/pipeline.md).

    ``costs``: None or ``"profile"`` (measure: the graph runs three times under
    ``graph.profile()``), a dict {GraphExec or node index: seconds}, or a callable(GraphExec)
    -> seconds. ``inputs``: {name: Tensor}, the pipeline's global inputs (default: the first input
    of each node without predecessors that no node writes, named ``input`` or ``input_0``, ...).
    ``outputs``: the Tensors that become global outputs 0, 1, ... (default: every tensor a node
    writes and no node reads, in node order).
    """
    if not isinstance(graph, Graph):
        raise PipelineError(f"split needs an nnc.Graph, not {type(graph).__name__}")
    order = graph.topsort()
    for e in order:
        if e.cmd.info.control:
            raise PipelineError(f"split cannot move {e.cmd.name} node {e!r} into a stage: a "
                                "while or case..of node belongs to its graph (its sub-graphs "
                                "have one parent); build such stages by hand with "
                                "pipeline.Module")
    if isinstance(stages, bool) or not isinstance(stages, numbers.Integral) \
            or not 1 <= stages <= len(order):
        raise PipelineError(f"stages must be an int between 1 and the number of nodes that "
                            f"run ({len(order)}), not {stages!r}")
    cost = _node_costs(graph, order, costs)
    cuts = partition(cost, int(stages))
    bounds = [0, *cuts, len(order)]
    stage_of = {}
    for s in range(stages):
        for k in range(bounds[s], bounds[s + 1]):
            stage_of[order[k].index] = s

    # Every tensor the nodes touch, what writes it, and who precedes whom.
    tensors, written, read = {}, set(), set()
    preds = {e.index: 0 for e in order}
    for e in order:
        for t in e.inputs:
            if t is not None:
                tensors[id(t)] = t
                read.add(id(t))
        for t in e.outputs:
            if t is not None:
                tensors[id(t)] = t
                written.add(id(t))
        for b in e.outgoings:
            if b.index in preds:
                preds[b.index] += 1
    group_of = _group_tensors(tensors)
    for i in written:
        group_of[i].written = True

    if inputs is None:
        inputs = _default_inputs(order, written, preds)
    if not isinstance(inputs, dict):
        raise PipelineError(f"inputs must be a dict {{name: Tensor}}, not {inputs!r}")
    for name, t in inputs.items():
        if not isinstance(name, str) or not isinstance(t, Tensor):
            raise PipelineError(f"inputs must map names to Tensors, not {name!r}: {t!r}")
        if id(t) not in tensors:
            raise PipelineError(f"input {name!r} ({t!r}) is not read by any node of the graph")
        g = group_of[id(t)]
        if id(t) in written:
            raise PipelineError(f"input {name!r} ({t!r}) is written by a node of the graph")
        if g.cover is not t or g.input is not None:
            raise PipelineError(f"input {name!r} ({t!r}) shares memory with other tensors of "
                                "the graph")
        g.input = name
    if outputs is None:
        outputs = []
        read_groups = {group_of[i].index for i in read}
        for e in order:
            for t in e.outputs:
                if t is not None and group_of[id(t)].index not in read_groups \
                        and all(t is not o for o in outputs):
                    outputs.append(t)
    outputs = list(outputs)
    for t in outputs:
        if not isinstance(t, Tensor) or id(t) not in written:
            raise PipelineError(f"output {t!r} is not a tensor written by a node of the graph")

    for e in order:
        s = stage_of[e.index]
        for t in (*e.inputs, *e.outputs):
            if t is not None:
                g = group_of[id(t)]
                if not g.stages or g.stages[-1] != s:
                    g.stages.append(s)

    # Re-make each stage's nodes over its memory, then wire the groups from stage to stage.
    memory = [_StageMemory() for _ in range(stages)]
    graphs = [Graph() for _ in range(stages)]
    made = {}
    for e in order:
        s = stage_of[e.index]

        def local(t, s=s):
            if t is None or not group_of[id(t)].dynamic:
                return t
            return memory[s].remap(t, group_of[id(t)])

        ne = graphs[s].exec(e.cmd, [local(t) for t in e.inputs],
                            [local(t) for t in e.outputs], name=e.name)
        made[e.index] = ne
    for e in order:
        for b in e.outgoings:
            if b.index in stage_of and stage_of[b.index] == stage_of[e.index]:
                graphs[stage_of[e.index]].concat(made[e.index], made[b.index])

    stage_inputs = [{} for _ in range(stages)]
    stage_outputs = [[] for _ in range(stages)]
    links = []                           # (from stage, output index, to stage, input name)
    globals_in = {}                      # global input name -> (stage, input name)
    groups = sorted({id(g): g for g in group_of.values()}.values(), key=lambda g: g.index)
    for g in groups:
        if not g.dynamic:
            continue
        name = g.input if g.input is not None else f"t{g.index}"
        for k, s in enumerate(g.stages):
            if k > 0 or g.input is not None:
                stage_inputs[s][name] = memory[s].cover(g)
            if k == 0 and g.input is not None:
                globals_in[name] = (s, name)
            if k + 1 < len(g.stages):
                links.append((s, _output_index(stage_outputs[s], memory[s].cover(g)),
                              g.stages[k + 1], name))
    finals = []
    for t in outputs:
        g = group_of[id(t)]
        s = g.stages[-1]
        finals.append((s, _output_index(stage_outputs[s], memory[s].remap(t, g))))
    if not finals:
        raise PipelineError("the graph has no global output: no node writes a tensor that "
                            "no node reads (pass outputs=[tensor, ...])")
    _order_stages(order, stage_of, stages, stage_inputs, stage_outputs, links)

    for s in range(stages):
        _anchor(graphs[s], stage_inputs[s].values(), stage_outputs[s])
    modules = [Module(graphs[s], inputs=stage_inputs[s], outputs=stage_outputs[s],
                      name=f"stage{s}") for s in range(stages)]
    cfg = PipelineConfig()
    for name, (s, iname) in globals_in.items():
        cfg.inputs[name] = (modules[s], iname)
    for s, index in finals:
        cfg.outputs.append((modules[s], index))
    for a, index, b, iname in links:
        cfg.connect(modules[a], index, modules[b], iname)
    return cfg


def _order_stages(order, stage_of, stages, stage_inputs, stage_outputs, links):
    """Add the hand-overs that order stages where no tensor does (appending to ``links``).

    A graph edge between nodes of two stages that no chain of hand-overs carries (a node
    touching no tensor, an explicit ``concat``) gets a *token*: a one-byte output of the
    earlier stage that the later one takes as an input, so it waits for the earlier stage on
    each input. A stage that still has no input and no output (all its nodes touch no tensor,
    or only shared weights) takes a token from the stage before it (stage 0 hands one to stage
    1): a pipeline holds only the modules bound into it, and that stage would never run.
    """
    after = [0] * stages                 # after[s]: bit p set when stage s waits for stage p
    into = [[] for _ in range(stages)]   # into[s]: the stages s takes hand-overs from
    for a, _, b, _ in links:
        into[b].append(a)
    crossing = [set() for _ in range(stages)]
    for e in order:
        for b in e.outgoings:
            sa, sb = stage_of[e.index], stage_of.get(b.index)
            if sb is not None and sa != sb:
                crossing[sb].add(sa)

    def token(a, b):
        name = "order"
        while name in stage_inputs[b]:
            name += "_"
        stage_inputs[b][name] = Tensor.zeros((1,), "uint8")
        out = Tensor.zeros((1,), "uint8")
        links.append((a, _output_index(stage_outputs[a], out), b, name))
        into[b].append(a)

    for b in range(stages):
        for a in into[b]:
            after[b] |= after[a] | (1 << a)
        for a in sorted(crossing[b]):
            if not after[b] >> a & 1:
                token(a, b)
                after[b] |= after[a] | (1 << a)
    for b in range(stages):
        if stages > 1 and not stage_inputs[b] and not stage_outputs[b]:
            if b > 0:
                token(b - 1, b)
            else:
                token(0, 1)


def _anchor(g, inputs, outputs):
    """Give a stage's hand-off tensors a node that reads (inputs) or writes (outputs) them
    where no node does by identity: a group's content moves whole, as its covering tensor, but
    the nodes may touch only views of it (a concat's branches write views of its buffer; a
    stage may pass a group on untouched). A NOOP node first (reading the inputs) and one last
    (declaring the outputs) keep pipeline.Module's checks true and order nothing wrongly.
    """
    execs = g.execs
    read = {id(t) for e in execs for t in e.inputs if t is not None}
    written = {id(t) for e in execs for t in e.outputs if t is not None}
    ins = [t for t in inputs if id(t) not in read]
    outs = [t for t in outputs if id(t) not in written]
    if ins:
        first = g.exec(Cmd("NOOP"), inputs=ins, name="split.in")
        has_pred = {b.index for e in execs for b in e.outgoings}
        for e in execs:
            if e.index not in has_pred:
                g.concat(first, e)
    if outs:
        last = g.exec(Cmd("NOOP"), inputs=outs, outputs=outs, name="split.out")
        for e in execs:
            if not e.outgoings:
                g.concat(e, last)


def _output_index(outs, t):
    """t's position in a stage's output list, appending it the first time."""
    for i, o in enumerate(outs):
        if o is t:
            return i
    outs.append(t)
    return len(outs) - 1
