"""Tools on a built graph, outside its run path: Graphviz text, per-node timings, autotune,
operator fusion.

NNC: ccv_nnc_graph_dot (ccv_nnc_graph.c), ccv_nnc_graph_autotune (ccv_nnc_graph.c),
ccv_nnc_symbolic_graph_simplify's CCV_NNC_SIMPLIFY_OPS_FUSION (on symbolic graphs there; on the
concrete graph here); the per-node profile has no NNC counterpart. ``Graph.dot``,
``Graph.profile``, ``Graph.autotune`` and ``Graph.simplify`` call these; they own no state.
Profile, autotune and simplify hold the graph busy (Graph._enter) like a synchronous run, so no
other thread changes or runs it meanwhile.
"""

import math
import time

from nnc.base.core import GraphError, NNCError
from nnc.cmd.command import Cmd as _Cmd
from nnc.cmd.cpu_cache import cache_flush_release, last_level_cache_bytes
from nnc.cmd.command import cmd_autotune, cmd_backends_for
from nnc.tensor.tensor import Tensor as _Tensor
from nnc.graph.graph import register_tools
from nnc.graph.subgraph import check_sub_idle

from nnc.cmd.command cimport BOUND_NONE, Cmd
from nnc.base.parallel cimport parallel_ready, parallel_run_begin, parallel_run_end
from nnc.graph.case_of cimport CaseOfNode
from nnc.graph.subgraph cimport ControlNode
from nnc.graph.while_node cimport WhileNode
from nnc.graph.graph cimport EXEC_CONTROL, Graph, GraphExec, exec_info_t
from nnc.tensor.tensor cimport TENSOR_FORMAT_NCHW, Tensor, tensor_same


# Fill colours of the streams (ColorBrewer "Set3", 12 colours; stream k takes k mod 12).
PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69",
           "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f")


def graph_dot(Graph g, bint long_form):
    """Graph.dot: Graphviz text. Loop bodies and case..of branches are clusters beside their
    node (nested for nested control flow). Under a default schedule, each node is filled with
    its stream's colour (a legend maps colours to stream indices) and a sub-graph's cluster is
    outlined in the colour of its node's stream (its stream 0). ``long_form`` adds tensor
    shapes and the schedule's streams, signals and waits."""
    try:
        sched = g.schedule
    except NNCError:
        sched = None                    # e.g. a cycle: draw the graph without its schedule
    lines = ["digraph nnc_graph {", "  compound=true;", "  node [shape=box];"]
    used = set()
    _dot_body(g, "n", sched, long_form, lines, "  ", used)
    if used:
        lines.append('  subgraph cluster_legend {')
        lines.append('    label="streams"; style=dashed;')
        for k in sorted(used):
            lines.append(f'    legend{k} [label="stream {k}", style=filled, '
                         f'fillcolor="{PALETTE[k % len(PALETTE)]}"];')
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


cdef int _dot_body(Graph g, str prefix, sched, bint long_form, list lines, str pad,
                   set used) except -1:
    """Append g's nodes (ids ``prefix`` + index), its edges and its sub-graph clusters."""
    cdef int i, k, stream
    for i in range(g._size):
        cmd = <Cmd>g._cmds[i]
        label = g._label(i)
        attrs = ""
        if cmd.backend is not None:
            label += f"\\n{cmd.backend}"
        stream = sched.stream_of(i) if sched is not None and g._order_size else -1
        if stream >= 0:
            used.add(stream)
            attrs = f', style=filled, fillcolor="{PALETTE[stream % len(PALETTE)]}"'
        if long_form and stream >= 0:
            es = sched[GraphExec._new(g, i)]
            label += f"\\nstream {','.join(map(str, es.streams))}"
            if es.signals:
                label += f" signal {','.join(map(str, es.signals))}"
            if es.waits:
                label += f" waits {','.join(map(str, es.waits))}"
        if long_form:
            for kind, ts in (("in", g._inputs[i]), ("out", g._outputs[i])):
                shapes = ", ".join("-" if t is None else "x".join(map(str, t.shape)) or "()"
                                   for t in ts)
                label += f"\\n{kind}: {shapes}"
        label = label.replace('"', '\\"')
        lines.append(f'{pad}{prefix}{i} [label="{label}"{attrs}];')
    for i in range(g._size):
        for k in range(g._nodes[i].outgoing_size):
            lines.append(f"{pad}{prefix}{i} -> {prefix}{g._nodes[i].outgoings[k]};")
    for i in range(g._size):
        if not g._nodes[i].flags & EXEC_CONTROL:
            continue
        fn = (<Cmd>g._cmds[i]).fn
        stream = sched.stream_of(i) if sched is not None and g._order_size else -1
        subs = ([("w", "body", (<WhileNode>fn).body)] if isinstance(fn, WhileNode) else
                [(f"b{k}", f"branch {k}", b) for k, b in (<CaseOfNode>fn).branch_items()])
        for tag, title, sub in subs:
            _dot_cluster(<Graph>sub, f"{prefix}{i}{tag}", f"{prefix}{i}", title, stream,
                         long_form, lines, pad, used)
    return 0


cdef int _dot_cluster(Graph sub, str tag, str owner, str title, int stream,
                      bint long_form, list lines, str pad, set used) except -1:
    """Draw ``sub`` as cluster ``cluster_`` + tag (its nodes: tag + "_n" + index), tied to
    its node ``owner`` by a dashed edge."""
    name = "cluster_" + tag
    prefix = tag + "_n"
    lines.append(f"{pad}subgraph {name} {{")
    lines.append(f'{pad}  label="{owner} {title}"; style=rounded;')
    if stream >= 0:
        lines.append(f'{pad}  color="{PALETTE[stream % len(PALETTE)]}"; penwidth=3;')
    _dot_body(sub, prefix, None, long_form, lines, pad + "  ", used)
    lines.append(f"{pad}}}")
    if sub._size:
        lines.append(f"{pad}{owner} -> {prefix}0 [lhead={name}, style=dashed, arrowhead=odot];")
    return 0


def _count(str method, str name, value):
    """A repeat or trial count: an int >= 1 (a bool, a float or 0 is a mistake, not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GraphError(f"Graph.{method}: {name} must be an int >= 1, not {value!r}")
    return value


def graph_profile(Graph g, repeat):
    """Graph.profile: run like ``run()`` ``repeat`` times, timing each node; returns
    [(GraphExec, best s)]."""
    cdef bint counted = False
    repeat = _count("profile", "repeat", repeat)
    g._enter("profile it", "running")
    best = {}
    try:
        g._prepare()
        # Counted as run() counts a run, so that idle pool threads spin and take parts of the
        # commands that split: a node's time is then the one it takes in a run. Uncounted, a
        # split command at two threads waited for a helper to wake from sleep (on a VM up to
        # milliseconds) and mostly ran alone.
        parallel_ready()
        counted = parallel_run_begin()
        for _ in range(repeat):
            for k in range(g._order_size):
                idx = g._order[k]
                t0 = time.perf_counter()
                g._run_node(idx)
                dt = time.perf_counter() - t0
                if dt < best.get(idx, float("inf")):
                    best[idx] = dt
    finally:
        parallel_run_end(counted)
        g._leave()
    return [(GraphExec._new(g, g._order[k]), best[g._order[k]])
            for k in range(g._order_size)]


def graph_autotune(Graph g, trials):
    """Graph.autotune: keep the fastest compatible backend of each node not pinned, in g and
    in the bodies and branches of its while and case..of nodes (NNC's recursion); returns how
    many nodes changed backend. Timed as a synchronous run runs them: with a run counted, so
    that idle pool threads take parts up to the intra-op setting (nnc.set_intra_op_threads).
    When the graph's frozen weights outgrow the last-level cache, nodes are timed cold (each
    run after a flush, cmd_autotune's ``cold``): in a run, a layer's weights come from memory,
    and a backend that reads more of them (Winograd's transform is 4x the weights) would win
    back-to-back timings it loses in the run."""
    cdef bint counted = False
    trials = _count("autotune", "trials", trials)
    cold = g.memory()["frozen_bytes"] > last_level_cache_bytes()
    g._enter("autotune", "being autotuned")
    try:
        parallel_ready()
        counted = parallel_run_begin()
        return _autotune(g, trials, cold)
    finally:
        parallel_run_end(counted)
        g._leave()
        cache_flush_release()


cdef int _autotune(Graph g, trials, bint cold) except -1:
    """graph_autotune's work on g, marked busy by the caller (or an enclosing graph is)."""
    cdef int k, idx, changed = 0
    cdef Cmd cmd
    if g._dirty:
        g._compile()
    # Timing runs on copies of whatever the tensors hold now; run the graph once first
    # if they are uninitialised, so that NaNs or denormals do not skew the comparison.
    for k in range(g._order_size):
        idx = g._order[k]
        cmd = <Cmd>g._cmds[idx]
        if g._nodes[idx].flags & EXEC_CONTROL:
            # Every body and branch, as NNC does (a branch the data never takes included):
            # each is a graph of its own, with its own run order.
            for sub in (<ControlNode>cmd.fn).subgraphs():
                check_sub_idle(sub)
                changed += _autotune(<Graph>sub, trials, cold)
            continue
        if cmd.pinned or g._nodes[idx].bound.kind == BOUND_NONE or cmd.fn is not None:
            continue
        best = cmd_autotune(cmd, list(g._inputs[idx]), list(g._outputs[idx]), trials, cold)
        if best is not None and best.name != cmd.backend:
            g._set_node(idx, cmd.copy_with(best), list(g._inputs[idx]), list(g._outputs[idx]))
            changed += 1
    return changed


cdef bint _same(object a, object b):
    """a and b are tensors over exactly the same elements (one in-place operand)."""
    return (isinstance(a, Tensor) and isinstance(b, Tensor)
            and tensor_same(&(<Tensor>a).t, &(<Tensor>b).t))


cdef list _predecessors(Graph g, int j):
    """Every node with an edge to node j."""
    cdef int i, k
    out = []
    for i in range(g._size):
        for k in range(g._nodes[i].outgoing_size):
            if g._nodes[i].outgoings[k] == j:
                out.append(i)
                break
    return out


cdef object _fusable_tail(Graph g, int idx):
    """(successor index, its Cmd) when CONVOLUTION node idx's only successor is a CPU node
    working in place on the convolution's one output, else None. NOOPs with one successor
    are looked through (a node folded before: CONVOLUTION, ADD, RELU folds whole)."""
    cdef exec_info_t* node = &g._nodes[idx]
    cdef Cmd nxt
    if node.outgoing_size != 1:
        return None
    j = node.outgoings[0]
    nxt = <Cmd>g._cmds[j]
    while nxt.name == "NOOP" and g._nodes[j].outgoing_size == 1:
        j = g._nodes[j].outgoings[0]
        nxt = <Cmd>g._cmds[j]
    outs, ins_j, outs_j = g._outputs[idx], g._inputs[j], g._outputs[j]
    if (nxt.pinned or len(outs) != 1 or len(outs_j) != 1 or not ins_j or outs[0] is None
            or outs[0].device != "cpu" or not _same(outs[0], outs_j[0])):
        return None
    return j, nxt


# Element-wise commands without parameters that a convolution applies as its activation.
_FUSED_ACTIVATIONS = {"HARD_SWISH": "hard_swish", "SWISH": "swish"}


cdef object _fused_params(Graph g, int idx, int j, Cmd conv, Cmd nxt, bint direct):
    """(params, inputs) of CONVOLUTION node idx with its successor j folded in, or None when
    j is not a fusable epilogue: an in-place RELU, CLAMP, HARD_SWISH or SWISH of the output
    (the activation), or, before any activation, an in-place ADD (p = q = 1) of the output and
    another tensor of the output's shape (the residual, added before the activation), only as
    idx's direct successor (its other predecessors become idx's: through a NOOP that could make
    a cycle)."""
    params = dict(conv.params)
    ins = list(g._inputs[idx])
    out, ins_j = g._outputs[idx][0], g._inputs[j]
    if params.get("activation") is not None:
        return None
    if nxt.name == "RELU" and len(ins_j) == 1 and _same(out, ins_j[0]):
        params["activation"] = "relu"
    elif nxt.name == "CLAMP" and len(ins_j) == 1 and _same(out, ins_j[0]):
        lo, hi = nxt.params["min"], nxt.params["max"]
        params["activation"] = "clamp"      # NaN: no bound (CLAMP's rule)
        params["clamp"] = (-math.inf if math.isnan(lo) else lo,
                           math.inf if math.isnan(hi) else hi)
    elif nxt.name in _FUSED_ACTIVATIONS and len(ins_j) == 1 and _same(out, ins_j[0]):
        params["activation"] = _FUSED_ACTIVATIONS[nxt.name]
    elif (nxt.name == "ADD" and len(ins_j) == 2 and len(ins) <= 3 and direct
          and nxt.params["p"] == 1.0 and nxt.params["q"] == 1.0):
        if _same(out, ins_j[0]):
            other = ins_j[1]
        elif _same(out, ins_j[1]):
            other = ins_j[0]
        else:
            return None
        if (other is None or tuple(other.shape) != tuple(out.shape) or other.dtype != out.dtype
                or other.device != "cpu"):
            return None
        ins += [None] * (3 - len(ins)) + [other]
    else:
        return None
    return params, ins


def graph_simplify(Graph g):
    """Graph.simplify: fold the epilogue a CONVOLUTION's only successor applies to its output in
    place into the convolution, which applies it while the rows are in registers or cache:

    - an in-place ADD (p = q = 1) of the output and another tensor of its shape becomes the
      convolution's residual (out = conv + bias + residual: ResNet's shortcut); the ADD's
      other predecessors become the convolution's, as it now reads that tensor;
    - an in-place RELU becomes ``activation="relu"``, an in-place CLAMP ``activation="clamp"``
      (ReLU6), an in-place HARD_SWISH ``activation="hard_swish"`` and an in-place SWISH
      ``activation="swish"``, after any residual.

    Folding repeats until nothing changes (CONVOLUTION, ADD, RELU becomes one node). A folded
    node becomes a NOOP, so every edge and the node count stay. Only CPU nodes whose backends
    are not pinned are folded, and only where the node's backend takes the fused command (a
    fusion never moves a node from CPU_OPT to CPU_REF).

    Then each image command (CONVOLUTION, CONVOLUTION_TRANSPOSE, the pools) on NCHW CPU tensors,
    which only CPU_REF reads, is moved to NHWC where a C backend then takes it: FORMAT_TRANSFORM
    nodes copy its NCHW inputs (weights included: they may change between runs) into new NHWC
    tensors before it and its NHWC outputs back after it, with edges from its predecessors and
    to its successors (NNC's symbolic graph inserts the same transforms where a backend wants
    another format). This adds nodes; a graph with sources or destinations set is left as it is
    (the new nodes would be outside them), as are pinned nodes.

    Returns the number of nodes folded or moved to NHWC."""
    cdef int idx, j
    cdef Cmd conv, nxt
    g._enter("simplify", "being simplified")
    try:
        fused = 0
        changed = True
        while changed:
            changed = False
            for idx in range(g._size):
                conv = <Cmd>g._cmds[idx]
                if conv.name != "CONVOLUTION" or conv.pinned:
                    continue
                tail = _fusable_tail(g, idx)
                if tail is None:
                    continue
                j, nxt = tail
                plan = _fused_params(g, idx, j, conv, nxt,
                                     j == g._nodes[idx].outgoings[0])
                if plan is None:
                    continue
                params, ins = plan
                outs = list(g._outputs[idx])
                old_ins = list(g._inputs[idx])
                try:
                    g._set_node(idx, _Cmd("CONVOLUTION", **params), ins, outs)
                except NNCError:
                    # The fused command's own check refused it (a residual overlapping the
                    # output): the node stays as it was.
                    g._set_node(idx, conv, old_ins, outs)
                    continue
                if (<Cmd>g._cmds[idx]).backend != conv.backend:
                    g._set_node(idx, conv, old_ins, outs)
                    continue
                if nxt.name == "ADD":
                    for i in _predecessors(g, j):
                        if i != idx:
                            g._edge_add(i, idx)
                g._set_node(j, _Cmd("NOOP"), [], [])
                fused += 1
                changed = True
    finally:
        g._leave()
    return fused + _nhwc_pass(g)


cdef bint _moved(object t):
    """t is a tensor an image command reads as NCHW (a 3-d or 4-d NCHW tensor)."""
    return (t is not None and (<Tensor>t).t.format == TENSOR_FORMAT_NCHW
            and ((<Tensor>t).t.ndim == 3 or (<Tensor>t).t.ndim == 4))


def _nhwc_pass(Graph g):
    """graph_simplify's second part: image nodes on NCHW tensors moved to NHWC between
    FORMAT_TRANSFORMs where that lets a C backend run them. Public Graph calls only (each
    holds the graph busy itself); returns how many nodes moved."""
    cdef int idx, n = g._size
    cdef Cmd cmd
    if g._sources is not None or g._destinations is not None:
        return 0
    moved = 0
    for idx in range(n):
        cmd = <Cmd>g._cmds[idx]
        if cmd.pinned or not (<object>cmd.info).image:
            continue
        ins, outs = list(g._inputs[idx]), list(g._outputs[idx])
        tensors = [t for t in ins + outs if t is not None]
        if not any(_moved(t) for t in tensors) or any(t.device != "cpu" for t in tensors):
            continue
        stand_in = {}                   # id(NCHW tensor) -> its NHWC copy

        def nhwc(t):
            if not _moved(t):
                return t
            if id(t) not in stand_in:
                shape = tuple(t.shape)
                stand_in[id(t)] = (t, _Tensor.empty(shape[:-3] + shape[-2:] + shape[-3:-2],
                                                    t.dtype))
            return stand_in[id(t)][1]

        new_ins, new_outs = [nhwc(t) for t in ins], [nhwc(t) for t in outs]
        fresh = _Cmd(cmd.name, **dict(cmd.params))
        best = cmd_backends_for(fresh, new_ins, new_outs)
        if not best or not best[0].is_c:
            continue                    # no faster backend for NHWC: the transforms cost only
        execs = g.execs
        node = execs[idx]
        before = [execs[i] for i in _predecessors(g, idx)]
        after = node.outgoings
        transform = _Cmd("FORMAT_TRANSFORM")
        ins_t = [g.exec(transform, [t], [stand_in[id(t)][1]])
                 for t in dict.fromkeys(t for t in ins if _moved(t))]
        # A fresh Cmd: set_io would keep the chosen CPU_REF, which still accepts NHWC.
        g._enter("simplify", "being simplified")
        try:
            g._set_node(idx, fresh, new_ins, new_outs)
            g.version += 1
            g._dirty = True
        finally:
            g._leave()
        outs_t = [g.exec(transform, [stand_in[id(t)][1]], [t])
                  for t in dict.fromkeys(t for t in outs if _moved(t))]
        for e in ins_t:
            for p in before:
                g.concat(p, e)
            g.concat(e, node)
        for e in outs_t:
            g.concat(node, e)
            for q in after:
                g.concat(e, q)
        moved += 1
    return moved


# Graph.profile, Graph.autotune, Graph.dot and Graph.simplify (the graph layer cannot import
# this one).
register_tools(graph_profile, graph_autotune, graph_dot, graph_simplify)
