"""Inception-V3 as one nnc graph (nnc/models/inception.py) and ``python -m nnc demo``.

Built at 75x75, the smallest input the network takes, so the whole file runs in seconds.
"""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import nnc
from nnc.demo import critical_path
from nnc.models import build_inception_v3, build_inception_v3_model, reference_forward

ROOT = Path(__file__).resolve().parents[2]
SIZE = 75

# 94 convolutions, each followed by an in-place RELU; 4 max pools (2 stem, 6a, 7a); 9 branch
# average pools (5b-5d, 6b-6e, 7b-7c) and the global one; fc (GEMM) and SOFTMAX.
EXPECTED_COMMANDS = {
    "CONVOLUTION": 94, "RELU": 94, "MAX_POOL": 4, "AVG_POOL": 10, "GEMM": 1, "SOFTMAX": 1,
}
EXPECTED_NODES = sum(EXPECTED_COMMANDS.values())  # 204
EXPECTED_PARAMS = 23_817_352  # torchvision's Inception-V3: 23.82 M without the aux head


@pytest.fixture(scope="module")
def model():
    m = build_inception_v3_model(size=SIZE, seed=0)
    m.graph.run()
    return m


def _extent(t):
    """[first byte, one past the last byte) that tensor ``t`` touches."""
    item = t.dtype.itemsize
    last = sum((d - 1) * s for d, s in zip(t.shape, t.strides) if d > 0)
    return t.data_ptr, t.data_ptr + (last + 1) * item


def _overlap(a, b):
    """Exact: channel slices of one concat buffer interleave in memory but share no element."""
    (a0, a1), (b0, b1) = _extent(a), _extent(b)
    return a0 < b1 and b0 < a1 and np.shares_memory(a.numpy(), b.numpy())


def test_returns_graph_input_output():
    g, x, y = build_inception_v3(size=SIZE, seed=1)
    assert isinstance(g, nnc.Graph)
    assert x.shape == (1, SIZE, SIZE, 3) and y.shape == (1, 1000)
    g.run()
    assert np.isfinite(y.numpy()).all()


def test_output_is_a_probability_vector(model):
    p = model.output.numpy()
    assert p.shape == (1, 1000)
    assert np.isfinite(p).all() and (p >= 0).all()
    assert p.sum() == pytest.approx(1.0, abs=1e-5)
    # the softmax of the logits the graph also exposes
    z = model.logits.numpy().astype(np.float64)
    e = np.exp(z - z.max())
    np.testing.assert_allclose(p, e / e.sum(), rtol=1e-4, atol=1e-7)


def test_node_and_command_counts(model):
    g = model.graph
    assert len(g) == EXPECTED_NODES
    assert len(g.topsort()) == EXPECTED_NODES  # every node is on a source-to-sink path
    assert dict(Counter(e.cmd.name for e in g.execs)) == EXPECTED_COMMANDS
    assert model.params == EXPECTED_PARAMS
    assert len(model.concats) == 11
    assert [e.name for e in g.sources] == ["Conv2d_1a_3x3"]
    assert [e.name for e in g.destinations] == ["softmax"]


def test_full_size_cost_matches_the_table():
    # Shapes only (no run): 5.713 GMAC at 299x299, torchvision's Inception-V3.
    m = build_inception_v3_model(size=299)
    assert round(m.macs / 1e9, 3) == 5.713
    assert m.concats["Mixed_7c"][0].shape == (1, 8, 8, 2048)


def test_names_are_unique_and_readable(model):
    names = [e.name for e in model.graph.execs]
    assert None not in names and len(set(names)) == len(names)
    assert "Mixed_5b/branch3x3dbl_2" in names and "Mixed_5b/branch3x3dbl_2/relu" in names
    for e in model.graph.execs:
        if e.cmd.name == "RELU":
            assert e.name.endswith("/relu")
            # in place: its one input is its one output
            (x,), (y,) = e.inputs, e.outputs
            assert x is y


def test_concats_are_zero_copy(model):
    writers = {}
    for e in model.graph.execs:
        if e.cmd.name != "RELU":
            for t in e.outputs:
                writers[id(t)] = e
    for block, (buf, slots) in model.concats.items():
        n, h, w, ct = buf.shape
        lo, hi = buf.data_ptr, buf.data_ptr + buf.nbytes
        c0 = 0
        for branch, v in slots:
            c = v.shape[3]
            assert v.shape == (n, h, w, c)
            assert v.strides == (h * w * ct, w * ct, ct, 1)
            assert v.data_ptr == buf.data_ptr + c0 * buf.dtype.itemsize
            assert lo <= v.data_ptr < hi and _extent(v)[1] <= hi
            assert np.shares_memory(v.numpy(), buf.numpy())
            # the branch's last node writes the view itself, not a copy
            assert id(v) in writers, f"{branch}: no node writes its concat slice"
            assert writers[id(v)].name == branch or writers[id(v)].name.startswith(branch)
            np.testing.assert_array_equal(buf.numpy()[..., c0:c0 + c], v.numpy())
            c0 += c
        assert c0 == ct, f"{block}: branches fill {c0} of {ct} channels"


def test_every_read_depends_on_every_write_it_reads(model):
    """For each node input, every node writing overlapping memory is an ancestor (RAW edges)."""
    g = model.graph
    order = g.topsort()
    ancestors = {e: set() for e in order}
    for e in order:
        for s in e.outgoings:
            ancestors[s] |= ancestors[e] | {e}
    writes = [(e, t) for e in order for t in e.outputs if t is not None]
    for r in order:
        for x in r.inputs:
            if x is None:
                continue
            for w, t in writes:
                if w != r and _overlap(x, t):
                    assert w in ancestors[r], f"{r.name} reads what {w.name} writes, no edge"


def test_default_backends_match_cpu_ref(model):
    probs, logits = reference_forward(size=SIZE, seed=0)
    got = model.logits.numpy()
    scale = np.abs(logits).max()
    np.testing.assert_allclose(got, logits, rtol=1e-3, atol=1e-3 * scale)
    np.testing.assert_allclose(model.output.numpy(), probs, rtol=1e-3, atol=1e-6)


def test_reference_is_pinned_to_cpu_ref():
    m = build_inception_v3_model(size=SIZE, backend="CPU_REF")
    assert {e.backend for e in m.graph.execs} == {"CPU_REF"}


def test_too_small_input_is_rejected():
    with pytest.raises(ValueError, match="at least 75"):
        build_inception_v3(size=74)


def test_critical_path_of_a_diamond():
    g = nnc.Graph()
    a, b, c, d = (g.exec(nnc.Cmd("NOOP"), name=n) for n in "abcd")
    for x, y in ((a, b), (a, c), (b, d), (c, d)):
        g.concat(x, y)
    length, path = critical_path(g, {a: 1.0, b: 2.0, c: 5.0, d: 1.0})
    assert length == 7.0
    assert [e.name for e in path] == ["a", "c", "d"]


def _cli(*args, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "nnc", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_demo_json(tmp_path):
    dot = tmp_path / "g.dot"
    r = _cli("demo", "--size", str(SIZE), "--repeat", "1", "--json", "--dot", str(dot))
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["nodes"] == EXPECTED_NODES
    assert result["commands"]["CONVOLUTION"]["count"] == 94
    assert len(result["top5"]) == 5
    assert 0 < result["critical_path_ms"] <= result["sum_node_ms"] + 1e-9
    assert result["bound"] >= 1.0
    assert result["critical_path"][0] == "stem" and result["critical_path"][-1] == "head"
    assert dot.read_text().startswith("digraph")


def test_cli_usage_and_unknown_command():
    r = _cli()
    assert r.returncode == 0 and "demo" in r.stdout
    r = _cli("frobnicate")
    assert r.returncode == 2 and "frobnicate" in r.stderr


@pytest.mark.slow
def test_demo_streams_writes_a_timeline(tmp_path):
    import io
    import json

    from nnc.demo import run_demo

    path = tmp_path / "run.json"
    out = io.StringIO()
    report = run_demo(size=75, repeat=1, streams=True, max_streams=2, trace=str(path), out=out)
    st = report["streams"]
    assert st["identical"] and st["stream_count"] == 2
    # the best sequential configuration is one of the two measured, and the report says which
    threads = nnc.get_num_threads()
    assert st["best_sequential"] in ("seq1", f"seq{threads}")
    assert st["best_sequential_ms"] == min(st["seq1_ms"], st["seq_all_ms"])
    assert st["fastest"] in ("scheduled", st["best_sequential"])
    assert st["median_ms"] > 0 and st["speedup"] > 0
    text = out.getvalue()
    assert "<- best sequential" in text and "threadpoolctl" not in text
    if st["ort"] is None:  # onnxruntime is in the test extra, but may be missing elsewhere
        assert "not installed" in st["ort_missing"]
    else:
        assert st["ort"]["rel_err"] <= 1e-4 and st["ort"]["median_ms"] > 0
        assert "onnxruntime" in text
    # the demo puts the intra-op setting back
    assert nnc.get_intra_op_threads() is None
    events = json.loads(path.read_text())["traceEvents"]
    nodes = [e for e in events if e.get("cat") == "cmd" and e["name"].startswith("#")]
    # Every node but the NOOPs (the RELUs Graph.simplify fused into their convolutions) is a
    # slice of the timeline.
    noops = report["commands"].get("NOOP", {"count": 0})["count"]
    assert report["fused"] == noops == 94
    assert len(nodes) == report["nodes"] - noops


def test_demo_streams_without_ort(tmp_path):
    import io

    from nnc.demo import run_demo

    nnc.set_intra_op_threads(1)
    try:
        report = run_demo(size=75, repeat=1, streams=True, max_streams=2,
                          trace=str(tmp_path / "run.json"), out=io.StringIO(), ort=False)
        assert nnc.get_intra_op_threads() == 1
    finally:
        nnc.set_intra_op_threads(None)
    st = report["streams"]
    assert st["ort"] is None and "--no-ort" in st["ort_missing"]
    assert report["blas"]["blas_threads"] == 1 and report["blas"]["library"]
