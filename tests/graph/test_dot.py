"""Graph.dot: sub-graphs as clusters, nodes coloured by stream (NNC: ccv_nnc_graph_dot)."""

import re
import shutil
import subprocess
import warnings

import numpy as np
import pytest

import nnc
from nnc.run.tools import PALETTE


def structure(text):
    """Check the DOT text's structure by hand; return {cluster name: [node ids in it]}."""
    assert text.startswith("digraph nnc_graph {") and text.rstrip().endswith("}")
    depth, stack, clusters = 0, [], {}
    for line in text.splitlines():
        depth += line.count("{") - line.count("}")
        assert depth >= 0, line
        m = re.match(r"\s*subgraph (cluster_\w+) \{$", line)
        if m:
            stack.append(m.group(1))
            clusters[m.group(1)] = []
        elif line.strip() == "}" and stack:
            stack.pop()
        m = re.match(r"\s*(\w+) \[label=", line)
        if m:
            for name in stack:
                clusters[name].append(m.group(1))
    assert depth == 0
    return clusters


def parse(text):
    """Parse with pydot where installed (a real DOT grammar); else the textual check only."""
    pydot = pytest.importorskip("pydot")
    with warnings.catch_warnings():     # pydot's own use of deprecated pyparsing names
        warnings.simplefilter("ignore", DeprecationWarning)
        (graph,) = pydot.graph_from_dot_data(text)
    return graph


def nested_graph():
    """g: a -> while(body: noop -> m -> case..of(b0 | b1)) -> z."""
    g, body, b0, b1 = nnc.Graph(), nnc.Graph(), nnc.Graph(), nnc.Graph()
    x = nnc.Tensor(np.ones(1, np.float32))
    y = nnc.Tensor.zeros((1,), dtype="float32")
    a = g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [x], name="a")
    noop = body.exec(nnc.Cmd("NOOP"))
    m = body.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [x], name="m")
    body.concat(noop, m)
    c = body.case_of([x], [y], name="pick")
    body.concat(m, c)
    body.set_case_of_expr(c, lambda v: int(v[0]) % 2)
    b0.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [y], name="even")
    b1.exec(nnc.Cmd("SCALAR_MUL", a=-1.0), [x], [y], name="odd")
    body.set_case_of(c, b0, 0)
    body.set_case_of(c, b1, 1)
    body.set_while_expr(lambda count: count < 2, [], [noop])
    w = g.while_(body, name="loop")
    z = g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [y], name="z")
    g.concat(a, w)
    g.concat(w, z)
    return g


def test_sub_graphs_are_clusters_nested_like_the_graphs():
    g = nested_graph()
    for long_form in (False, True):
        text = g.dot(long=long_form)
        clusters = structure(text)
        assert set(clusters) == {"cluster_n1w", "cluster_n1w_n2b0", "cluster_n1w_n2b1"}
        assert clusters["cluster_n1w"] == ["n1w_n0", "n1w_n1", "n1w_n2", "n1w_n2b0_n0",
                                           "n1w_n2b1_n0"]
        assert clusters["cluster_n1w_n2b1"] == ["n1w_n2b1_n0"]
        assert "n1 -> n1w_n0 [lhead=cluster_n1w" in text
        assert "n1w_n0 -> n1w_n1;" in text and "n1w_n1 -> n1w_n2;" in text
        assert 'label="#0 odd (SCALAR_MUL)' in text
        assert "fillcolor" not in text                     # no schedule: no colours
    assert "in: 1" in g.dot(long=True)


def test_nodes_are_coloured_by_stream_with_a_legend():
    g = nnc.Graph()
    x = nnc.Tensor(np.ones(1, np.float32))
    outs = [nnc.Tensor.zeros((1,), dtype="float32") for _ in range(4)]
    src = g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [x], [outs[0]], name="src")
    mids = [g.exec(nnc.Cmd("SCALAR_MUL", a=1.0), [outs[0]], [outs[i]], name=f"mid{i}")
            for i in (1, 2, 3)]
    for n in mids:
        g.concat(src, n)
    sched = nnc.static_schedule(g)
    text = g.dot()
    structure(text)
    colour_of = {}
    for m in re.finditer(r'(n\d+) \[label="[^"]*", style=filled, fillcolor="(#\w+)"\]', text):
        colour_of[int(m.group(1)[1:])] = m.group(2)
    assert len(colour_of) == 4
    for e in [src] + mids:
        k = sched[e].streams[0]
        assert colour_of[e.index] == PALETTE[k % len(PALETTE)]
    assert len(set(colour_of.values())) == sched.stream_count
    legend = re.findall(r'legend(\d+) \[label="stream (\d+)", style=filled, fillcolor="(#\w+)"',
                        text)
    assert sorted(int(k) for k, _, _ in legend) == list(range(sched.stream_count))
    assert all(c == PALETTE[int(k)] for k, _, c in legend)
    assert "stream " in g.dot(long=True) and "waits" not in g.dot()


def test_scheduled_sub_graph_cluster_takes_its_node_stream_colour():
    g = nested_graph()
    sched = nnc.static_schedule(g)
    text = g.dot()
    k = sched[g.execs[1]].streams[0]
    body = text[text.index("subgraph cluster_n1w {"):]
    assert f'color="{PALETTE[k % len(PALETTE)]}"' in body.splitlines()[2]


def test_quotes_in_names_are_escaped():
    g = nnc.Graph()
    g.exec(nnc.Cmd("NOOP"), name='say "hi"')
    assert r'say \"hi\"' in g.dot()
    structure(g.dot())


def test_pydot_parses_every_form():
    g = nested_graph()
    nnc.static_schedule(g)
    for long_form in (False, True):
        graph = parse(g.dot(long=long_form))
        names = {s.get_name() for s in graph.get_subgraphs()}
        assert {"cluster_n1w", "cluster_legend"} <= names


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graphviz_renders_it(tmp_path):
    g = nested_graph()
    nnc.static_schedule(g)
    for long_form in (False, True):
        out = subprocess.run(["dot", "-Tsvg"], input=g.dot(long=long_form), text=True,
                             capture_output=True, timeout=60)
        assert out.returncode == 0 and "<svg" in out.stdout, out.stderr
