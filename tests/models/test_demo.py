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
from nnc.base import isa as cpu_isa
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
    # the NOOPs simplify leaves are counted and explained where the nodes are
    assert result["noops"] == 94 and result["nodes_run"] == EXPECTED_NODES - 94
    assert result["folded"] == {"RELU": 94}
    assert (f"graph: {EXPECTED_NODES} nodes: 110 run, 94 NOOPs left where Graph.simplify "
            f"folded a RELU into the convolution before it") in r.stdout
    # the kernel ISA nnc dispatched, and that the weights are random
    isa = result["isa"]
    # a fresh process dispatches at the level the CPU supports best
    assert isa["dispatched"] == isa["detected"] == cpu_isa.detected_isa()
    assert isa["dispatched"] in isa["supported"]
    assert f"dispatched at ISA {isa['dispatched']}" in r.stdout
    assert "random weights and input (seed 0)" in r.stdout
    # without --streams no limits are measured
    assert result["limits"] is None and result["x_limit"] is None and result["gflop"] > 0


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
    from nnc.models.limits import measure_limits

    path = tmp_path / "run.json"
    out = io.StringIO()
    threads = nnc.get_num_threads()
    limits = measure_limits(threads=(1, threads), seconds=0, n=64, nbytes=1 << 16)
    report = run_demo(size=75, repeat=1, streams=True, max_streams=2, trace=str(path), out=out,
                      limits=limits)
    st = report["streams"]
    assert st["identical"] and st["stream_count"] == 2
    # the best sequential configuration is one of the two measured, and the report says which
    assert st["best_sequential"] in ("seq1", f"seq{threads}")
    assert st["best_sequential_ms"] == min(st["seq1_ms"], st["seq_all_ms"])
    assert st["fastest"] in ("scheduled", st["best_sequential"])
    assert st["median_ms"] > 0 and st["speedup"] > 0
    text = out.getvalue()
    assert "<- best sequential" in text and "threadpoolctl" not in text
    # every time also as a multiple of the limit at its thread count
    assert report["limits"] is limits and st["limits"] is limits
    assert "limits (measured now): FMA peak" in text and "OpenBLAS SGEMM peak" in text
    for c in st["configs"].values():
        peak = limits["fma_gflops"][str(c["threads"])]
        assert c["x_limit"] == pytest.approx(c["ms"] / (st["gflop"] / peak * 1e3))
    assert st["configs"]["seq1"]["threads"] == 1
    assert report["x_limit"] == pytest.approx(
        report["median_ms"] / (report["gflop"] / limits["fma_gflops"][str(threads)] * 1e3))
    assert "median of per-round ratios" in text and "the weights are random (seed 0)" in text
    # each peer installed runs at 1 and T threads on the same weights; one missing is named with
    # the way to install it
    for peer, prefix, label in (("onnxruntime", "ort_", "ONNX Runtime"),
                                ("openvino", "ov_", "OpenVINO")):
        if peer in st["missing"]:
            assert st["missing"][peer] == "not installed (pip install 'nnc-graph[bench]')"
            assert f"{label}: not installed (pip install 'nnc-graph[bench]')" in text
            assert not any(k.startswith(prefix) for k in st["configs"])
            continue
        p = st["peers"][peer]
        assert set(p["configs"]) == {f"{prefix}seq1", f"{prefix}seq{threads}"}
        assert p["rel_err"] <= 1e-4 and p["best_ms"] == st["configs"][p["best"]]["ms"]
        assert f"<- {label} best" in text and f"the time of {label}'s best ({p['best']}" in text
        assert p["fastest_vs"] > 0
    # the saved model, loaded back through nnc's own ONNX session, gives the graph's logits
    if st["peers"]:
        assert st["session_rel_err"] <= 1e-5
        assert "the saved model through nnc.onnx.InferenceSession" in text
    if st["peers"]:
        assert st["best_peer"] == min((k for k, c in st["configs"].items() if not c["nnc"]),
                                      key=lambda k: st["configs"][k]["ms"])
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
        out = io.StringIO()
        report = run_demo(size=75, repeat=1, streams=True, max_streams=2,
                          trace=str(tmp_path / "run.json"), out=out, ort=False, ov=False,
                          limits=False)
        assert nnc.get_intra_op_threads() == 1
    finally:
        nnc.set_intra_op_threads(None)
    st = report["streams"]
    assert st["peers"] == {} and st["best_peer"] is None and st["fastest_vs_best_peer"] is None
    assert st["missing"] == {"onnxruntime": "left out (--no-ort)",
                             "openvino": "left out (--no-openvino)"}
    assert set(st["configs"]) == {"seq1", f"seq{nnc.get_num_threads()}", "scheduled"}
    # --no-limits: no limits, no multiples of them
    assert st["limits"] is None and report["x_limit"] is None
    assert all(c["x_limit"] is None for c in st["configs"].values())
    assert "limits (measured now)" not in out.getvalue()
    assert report["blas"]["blas_threads"] == 1 and report["blas"]["library"]


def test_demo_names_how_to_install_a_missing_peer(monkeypatch):
    # onnxruntime and OpenVINO come with the bench extra; where one cannot be imported the demo
    # leaves it out and says how to install it (CI has no OpenVINO: this is its path there).
    pytest.importorskip("onnx")
    import nnc.models.peers as peers
    from nnc.demo import _peer_runs

    g = nnc.Graph()
    x = nnc.Tensor(np.linspace(-1, 1, 2 * 5 * 5 * 3, dtype=np.float32).reshape(2, 5, 5, 3))
    w = nnc.Tensor(np.linspace(-0.5, 0.5, 4 * 27, dtype=np.float32).reshape(4, 3, 3, 3))
    y = nnc.Tensor(np.zeros((2, 5, 5, 4), np.float32))
    g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y])
    g.run()
    monkeypatch.setattr(peers, "ov_version", lambda: None)
    runs, missing, model = _peer_runs(g, x, [y], 2, ort=True, ov=True)
    assert missing["openvino"] == "not installed (pip install 'nnc-graph[bench]')"
    if peers.ort_version() is None:
        assert missing["onnxruntime"] == missing["openvino"] and runs == {}
    else:
        assert set(runs) == {"ort_seq1", "ort_seq2"} and "onnxruntime" not in missing
        runs["ort_seq2"]()
        np.testing.assert_allclose(runs["ort_seq2"].outputs[0], y.numpy(), rtol=1e-5,
                                   atol=1e-6)
        # the saved model through nnc's own session gives the graph's output
        from nnc.demo import _session_rel_err

        assert _session_rel_err(model, x.numpy(), y.numpy()) <= 1e-6
    monkeypatch.setattr(peers, "ort_version", lambda: None)
    runs, missing, model = _peer_runs(g, x, [y], 1, ort=True, ov=False)
    assert runs == {} and model is None and missing == {
        "onnxruntime": "not installed (pip install 'nnc-graph[bench]')",
        "openvino": "left out (--no-openvino)"}
