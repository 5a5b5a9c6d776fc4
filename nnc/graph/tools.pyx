"""Tools on a built graph, outside its run path: Graphviz text, per-node timings, autotune.

NNC: ccv_nnc_graph_dot (ccv_nnc_graph.c), ccv_nnc_graph_autotune (ccv_nnc_graph.c); the
per-node profile has no NNC counterpart. ``Graph.dot``, ``Graph.profile`` and ``Graph.autotune``
call these; they own no state. Profile and autotune hold the graph busy (Graph._enter) like a
synchronous run, so no other thread changes or runs it meanwhile.
"""

import time

from nnc.cmd import cmd_autotune

from nnc.cmd cimport Cmd
from nnc.graph.graph cimport EXEC_NOOP, Graph, GraphExec


def _on_path(sched, int i):
    return sched.stream_of(i) >= 0


def graph_dot(Graph g, bint long_form):
    """Graph.dot: Graphviz text; ``long_form`` adds shapes and the default schedule's streams,
    signals and waits."""
    cdef int i, k
    sched = g.schedule if long_form else None
    lines = ["digraph nnc_graph {", "  node [shape=box];"]
    for i in range(g._size):
        cmd = <Cmd>g._cmds[i]
        label = g._label(i)
        if cmd.backend is not None:
            label += f"\\n{cmd.backend}"
        if long_form and sched is not None and g._order_size and _on_path(sched, i):
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
        lines.append(f'  n{i} [label="{label}"];')
    for i in range(g._size):
        for k in range(g._nodes[i].outgoing_size):
            lines.append(f"  n{i} -> n{g._nodes[i].outgoings[k]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_profile(Graph g, repeat):
    """Graph.profile: run like ``run()`` ``repeat`` times, timing each node; returns
    [(GraphExec, best s)]."""
    g._enter("profile it", "running")
    best = {}
    try:
        g._prepare()
        for _ in range(int(repeat)):
            for k in range(g._order_size):
                idx = g._order[k]
                t0 = time.perf_counter()
                g._run_node(idx)
                dt = time.perf_counter() - t0
                if dt < best.get(idx, float("inf")):
                    best[idx] = dt
    finally:
        g._leave()
    return [(GraphExec._new(g, g._order[k]), best[g._order[k]])
            for k in range(g._order_size)]


def graph_autotune(Graph g, trials):
    """Graph.autotune: keep the fastest compatible backend of each node not pinned; returns
    how many nodes changed backend."""
    g._enter("autotune", "being autotuned")
    try:
        if g._dirty:
            g._compile()
        changed = 0
        # Timing runs on copies of whatever the tensors hold now; run the graph once first
        # if they are uninitialised, so that NaNs or denormals do not skew the comparison.
        for k in range(g._order_size):
            idx = g._order[k]
            cmd = <Cmd>g._cmds[idx]
            if cmd.pinned or g._nodes[idx].flags & EXEC_NOOP or cmd.fn is not None:
                continue
            best = cmd_autotune(cmd, list(g._inputs[idx]), list(g._outputs[idx]), trials)
            if best is not None and best.name != cmd.backend:
                g._set_node(idx, cmd.copy_with(best), list(g._inputs[idx]),
                            list(g._outputs[idx]))
                changed += 1
    finally:
        g._leave()
    return changed
