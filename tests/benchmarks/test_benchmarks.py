"""The CPU benchmarks (benchmarks/streams.py, benchmarks/conv.py and its --depthwise mode,
benchmarks/pool.py) run end to end on the smallest inputs, and their helpers choose rounds as
documented; the OpenVINO peer (nnc.models.peers.OvRun) binds its arrays once. No timing is
asserted: only that every configuration ran, the outputs agreed and the report has its fields.
OpenVINO is in the ``bench`` extra, not the ``test`` one: its assertions skip where it is
absent, and one run hides it to check that its configurations are left out with a reason."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import _util

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", *args, "--json"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_quiet_rounds():
    # the rounds during which others used at most 0.1 core, when there are 3 of them
    assert _util.quiet_rounds([0.0, 0.5, 0.05, 0.1, 2.0]) == [0, 2, 3]
    # otherwise the quieter half, at least 3
    assert _util.quiet_rounds([0.9, 0.5, 0.3, 0.2, 0.8, 0.4]) == [2, 3, 5]
    assert _util.quiet_rounds([0.9, 0.5]) == [0, 1]
    # no load figures (no /proc/stat): every round
    assert _util.quiet_rounds([None, None, None, None]) == [0, 1, 2, 3]


def test_measure_rounds_rotates_and_times_every_callable():
    calls = []
    fns = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    samples, others = _util.measure_rounds(fns, 2, pause=0)
    assert {k: len(v) for k, v in samples.items()} == {"a": 2, "b": 2, "c": 2}
    assert len(others) == 2
    # warm-up a b c; round 0: a a b b c c; round 1 starts one place later: b b c c a a
    assert "".join(calls) == "abc" + "aabbcc" + "bbccaa"


def test_sched_bound_is_the_one_thread_run_spread_over_the_cores():
    from benchmarks.streams import _sched_bound

    summary = {"samples_ms": {"seq1": [100.0, 90.0, 120.0], "seq1_tuned": [95.0, 99.0, 110.0],
                              "seq2": [52.0, 50.0, 60.0], "sched": [51.0, 49.0, 70.0]},
               "quiet_rounds": [0, 1, 2], "best": {"sequential": "seq2"}}
    # per round: 52 / (95 / 2), 50 / (90 / 2), 60 / (110 / 2); the median
    assert _sched_bound(summary, 2) == pytest.approx(sorted([104 / 95, 100 / 90, 120 / 110])[1])
    summary["quiet_rounds"] = [1]
    assert _sched_bound(summary, 2) == pytest.approx(100 / 90)
    assert _sched_bound(summary, 1) is None
    del summary["samples_ms"]["seq1"], summary["samples_ms"]["seq1_tuned"]
    assert _sched_bound(summary, 2) is None


@pytest.fixture(scope="module")
def streams_report():
    return _bench("benchmarks.streams", "--size", "75", "--models", "inception_v3",
                  "--repeat", "1", "--pause", "0")


def test_streams_benchmark_smoke(streams_report):
    r = streams_report
    assert r["ok"] and r["benchmark"] == "streams"
    (row,) = r["rows"]
    assert row["net"] == "inception_v3_75" and row["nodes"] == 204
    t = r["threads"]
    names = {"seq1", "sched", "sched_nosplit"} | ({f"seq{t}"} if t > 1 else set())
    assert names <= set(row["ms"])
    assert all(c["ok"] for c in row["checks"])
    assert row["best"]["sequential"].startswith("seq")
    assert row["best"]["scheduled"].startswith("sched")
    assert row["x_best_seq"][row["best"]["sequential"]] == 1.0
    target = row["targets"]["scheduled >= 1.0x best sequential"]
    # the most a schedule could gain: the best one-thread run spread over the T cores
    if t > 1:
        one = [k for k in ("seq1", "seq1_tuned") if k in row["samples_ms"]]
        best = row["best"]["sequential"]
        want = [row["samples_ms"][best][i] / (min(row["samples_ms"][k][i] for k in one) / t)
                for i in row["quiet_rounds"]]
        assert target["bound"] == pytest.approx(sorted(want)[len(want) // 2]) and len(want) == 1
    # autotune's moves are reported with the intra-op setting they were timed at; each tuned
    # copy's output is checked against the untuned graph's
    tuned = {k for k in row["ms"] if k.endswith("_tuned")}
    assert all(" (intra-op " in k for k in row["autotune_changes"])
    assert bool(tuned) == bool(row["autotune_changes"])
    settings = {k.rsplit("(intra-op ", 1)[1].rstrip(")") for k in row["autotune_changes"]}
    for at in settings:
        assert any(c["check"].startswith(f"tuned (intra-op {at}) output within")
                   for c in row["checks"])
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        assert row["missing"]["onnxruntime"] == "not installed (pip install 'nnc-graph[bench]')"
    else:
        assert "ort_seq1" in row["ms"] and row["best"]["ort"].startswith("ort_")
        assert row["per_ort_best"][row["best"]["ort"]] == 1.0
        assert row["per_peer_best"][row["best"]["peer"]] == 1.0
    try:
        import torch  # noqa: F401
    except ImportError:
        assert row["missing"]["torch"] == "not installed"
    assert r["machine"]["nnc_blas"]
    assert r["isa"] in ("baseline", "avx2", "avx512")
    # the machine's limits, measured in the same process, and each time as a multiple of them
    lim = r["limits"]
    assert set(lim["sgemm_gflops"]) == set(lim["fma_gflops"]) == {"1", str(t)}
    assert all(v > 0 for v in lim["sgemm_gflops"].values())
    assert all(v > 0 for v in lim["fma_gflops"].values())
    assert lim["bandwidth_gbs"]["copy"] > 0 and lim["bandwidth_gbs"]["read"] > 0
    assert "OPENBLAS_CORETYPE" in lim and lim["openblas"] == r["machine"]["nnc_blas"]
    # Inception-V3 at 75: the convolutions' and the classifier's 2*M*N*K
    assert 0.40 < row["gflop"] < 0.42
    assert set(row["x_limit"]) == set(row["ms"])
    peak1 = lim["fma_gflops"]["1"]                # the yardstick: the FMA peak
    assert row["x_limit"]["seq1"] == pytest.approx(row["ms"]["seq1"] / (row["gflop"] / peak1 * 1e3))
    assert all(v > 0 for v in row["x_limit"].values())


def test_streams_benchmark_openvino_rows(streams_report):
    pytest.importorskip("openvino")
    r = streams_report
    (row,) = r["rows"]
    t = r["threads"]
    names = {"ov_seq1", f"ov_seq{t}"}
    assert names <= set(row["ms"]) and "openvino" not in row["missing"]
    assert r["machine"]["openvino"]
    # on nnc's weights, within the peers' tolerance of nnc's output, at f32 with T threads
    for n in names:
        (c,) = [c for c in row["checks"] if c["check"].startswith(f"{n} output within")]
        assert c["ok"] and c["rel_err"] <= r["tolerances"]["peer"]
    assert f"{t} thread(s), 1 stream(s), LATENCY hint, f32 precision" in row["peers"][f"ov_seq{t}"]
    assert "1 thread(s)" in row["peers"]["ov_seq1"]
    assert row["best"]["ov"] in names
    # the best peer is the fastest of ORT's and OpenVINO's configurations
    peers = [k for k in row["ms"] if k.startswith(("ort_", "ov_"))]
    assert row["best"]["peer"] == min(peers, key=row["ms"].get)
    assert row["per_peer_best"][row["best"]["peer"]] == 1.0
    # x limit: ov_seq1 at the 1-thread peak, ov_seqT at the T-thread one
    peak1 = r["limits"]["fma_gflops"]["1"]
    assert row["x_limit"]["ov_seq1"] == pytest.approx(
        row["ms"]["ov_seq1"] / (row["gflop"] / peak1 * 1e3))
    peak_t = r["limits"]["fma_gflops"][str(t)]
    assert row["x_limit"][f"ov_seq{t}"] == pytest.approx(
        row["ms"][f"ov_seq{t}"] / (row["gflop"] / peak_t * 1e3))


def test_streams_benchmark_without_limits_or_openvino(tmp_path):
    # openvino hidden (it is not in the test extra: CI runs this way): its configurations are
    # left out with the way to install it; --no-limits: no x limit column
    (tmp_path / "openvino.py").write_text("raise ImportError('hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    out = subprocess.run([sys.executable, "-m", "benchmarks.streams", "--size", "75",
                          "--models", "inception_v3", "--repeat", "1", "--pause", "0",
                          "--no-limits", "--threads", "1", "--json"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["ok"] and r["limits"] is None
    (row,) = r["rows"]
    assert row["x_limit"] is None and row["gflop"] > 0
    assert row["missing"]["openvino"] == "not installed (pip install 'nnc-graph[bench]')"
    assert not any(k.startswith("ov_") for k in row["ms"]) and row["best"]["ov"] is None
    assert "openvino: not installed (pip install 'nnc-graph[bench]')" in out.stdout
    if row["best"]["ort"] is None:
        assert row["per_peer_best"] is None
    else:   # ORT alone: the best peer is ORT's best
        assert row["best"]["peer"] == row["best"]["ort"]
        assert row["per_peer_best"] == row["per_ort_best"]


def _small_model():
    import numpy as np

    import nnc
    import nnc.onnx

    g = nnc.Graph()
    x = nnc.Tensor(np.linspace(-1, 1, 2 * 5 * 5 * 3, dtype=np.float32).reshape(2, 5, 5, 3))
    w = nnc.Tensor(np.linspace(-0.5, 0.5, 4 * 3 * 3 * 3, dtype=np.float32).reshape(4, 3, 3, 3))
    y = nnc.Tensor(np.zeros((2, 5, 5, 4), np.float32))
    g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, w], [y])
    model = nnc.onnx.save(g, None, inputs=[x], outputs=[y])
    g.run()
    return g, model, x, y


def test_openvino_run_binds_its_arrays_once():
    pytest.importorskip("openvino")
    pytest.importorskip("onnx")
    import numpy as np

    from nnc.models.peers import OvRun

    g, model, x, y = _small_model()
    feeds = {model.graph.input[0].name: x.numpy()}
    r = OvRun(model, feeds, threads=1)
    out = r.outputs[0]
    out.fill(np.nan)
    r()
    # the same array, written in place: the output tensor is bound over it
    assert r.outputs[0] is out and r.fetch_outputs() is r.outputs
    np.testing.assert_allclose(out, y.numpy(), rtol=1e-5, atol=1e-6)
    # new data written into the fed array is what the next call reads (no copy at binding)
    x.numpy()[...] *= -2
    g.run()
    r()
    np.testing.assert_allclose(out, y.numpy(), rtol=1e-5, atol=1e-6)
    assert r.precision == "f32" and r.threads == 1
    assert "1 thread(s), 1 stream(s), LATENCY hint, f32 precision" in r.describe()
    for bad in (0, -1, True, 1.5, None):
        with pytest.raises(ValueError, match="threads must be an int >= 1"):
            OvRun(model, feeds, threads=bad)
    with pytest.raises(ValueError, match="feeds give"):
        OvRun(model, {"nope": x.numpy()}, threads=1)


def test_streams_benchmark_rejects_unknown_models():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "benchmarks.streams", "--models", "vgg"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown models" in r.stderr


def test_conv_benchmark_smoke():
    limit = 3
    r = _bench("benchmarks.conv", "--size", "75", "--limit", str(limit), "--repeat", "1")
    assert r["shapes"] == limit and len(r["rows"]) == limit
    first = r["rows"][0]
    # Conv2d_1a_3x3 at 75x75: 37x37 output pixels, 32 channels, K = 3*3*3
    assert (first["M"], first["N"], first["K"]) == (37 * 37, 32, 27)
    for row in r["rows"]:
        assert row["gflops"]["conv"] > 0 and row["gflops"]["gemm"] > 0
        assert row["gflops"]["conv_unfrozen"] > 0
    assert r["winograd_errors_ok"]
    # each shape's and the network's GFLOP/s as fractions of the 1-thread peak measured first
    peak = r["peak_gflops"]
    assert peak > 0 and r["limits"]["fma_gflops"] == {"1": peak}
    for row in r["rows"]:
        assert row["of_peak"]["conv"] == pytest.approx(row["gflops"]["conv"] / peak)
    assert r["network_of_peak"]["conv"] == pytest.approx(r["network_gflops"]["conv"] / peak)


def test_conv_benchmark_without_limits():
    r = _bench("benchmarks.conv", "--size", "75", "--limit", "1", "--repeat", "1", "--no-limits")
    assert r["limits"] is None and r["peak_gflops"] is None and r["network_of_peak"] is None
    assert r["rows"][0]["of_peak"] is None


def test_conv_benchmark_few_pixel_smoke():
    r = _bench("benchmarks.conv", "--few-pixel", "--repeat", "1")
    assert r["mode"] == "few_pixel" and r["size"] == 75 and r["threads"] == [1, 2]
    # Inception-V3 at 75x75: Mixed_6a's 3x3/2 convolutions onwards, 3x3 and 1x1 maps
    assert len(r["layers"]) == 66
    by_name = {x["name"]: x for x in r["layers"]}
    # Mixed_7c/branch3x3dbl_2: a 3x3 (pad 1) over a 1x1 map reads only its centre tap
    x = by_name["Mixed_7c/branch3x3dbl_2"]
    assert (x["pixels"], x["window"], x["taps"]) == (1, 9, 1)
    assert x["read_bytes"] == 4 * (384 * 448 + 384) and x["weight_bytes"] == 4 * 384 * 9 * 448
    # a 1x7 over a 3x3 map: 5 of its 7 taps meet the image for some output pixel
    x = by_name["Mixed_6b/branch7x7_2"]
    assert (x["pixels"], x["window"], x["taps"]) == (9, 7, 5)
    assert r["read_bytes"] == sum(x["read_bytes"] for x in r["layers"])
    for t in ("1", "2"):
        v = r["total"][t]
        assert v["ms"] == pytest.approx(sum(x["us"][t] for x in r["layers"]) / 1e3)
        assert v["gbs"] == pytest.approx(r["read_bytes"] / v["ms"] / 1e6)
        assert v["of_bandwidth"] == pytest.approx(v["gbs"] / v["bandwidth_gbs"])
        assert r["network_ms"][t] > v["ms"]
    assert r["met"] == (r["total"]["2"]["of_bandwidth"] >= r["target"])


def test_read_bandwidth_with_threads_is_positive_and_refuses_nonsense():
    from nnc.models import limits

    assert limits.read_bandwidth_gbs(2, nbytes=16 << 20, rounds=1) > 0
    assert limits.read_bandwidth_gbs(1, nbytes=16 << 20, rounds=1) > 0
    for bad in (dict(threads=0), dict(threads=2, nbytes=4), dict(threads=1, rounds=0)):
        with pytest.raises(ValueError):
            limits.read_bandwidth_gbs(**bad)


def test_pool_benchmark_smoke():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    r = _bench("benchmarks.pool", "--size", "75", "--limit", "3", "--repeat", "1",
               "--isa", "baseline")
    assert r["benchmark"] == "pool" and r["isa"] == "baseline" and r["outputs_agree"]
    assert len(r["rows"]) == 3
    first = r["rows"][0]
    # MaxPool_3a_3x3 at 75x75: 35x35x64 in, 17x17x64 out, 4 bytes each
    assert first["shape"].startswith("max 35x35x64 3x3/2")
    assert first["bytes"] == 4 * (35 * 35 * 64 + 17 * 17 * 64)
    bw = r["bandwidth_gbs"]
    for row in r["rows"]:
        assert row["outputs_agree"] is True
        for name in ("nnc", "ort_nchwc", "ort_nchw"):
            assert row["us"][name] > 0
            assert row["gbs"][name] == pytest.approx(row["bytes"] / row["us"][name] / 1e3)
        assert row["of_memory"]["nnc"] == pytest.approx(row["gbs"]["nnc"] / bw)
    assert r["total_us"]["nnc"] == pytest.approx(
        sum(row["us"]["nnc"] * row["count"] for row in r["rows"]))


def test_pool_benchmark_without_onnxruntime_or_limits(tmp_path):
    # onnxruntime hidden: nnc's column alone; --no-limits: no bandwidth, no fractions
    (tmp_path / "onnxruntime.py").write_text("raise ImportError('hidden by the test')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    out = subprocess.run([sys.executable, "-m", "benchmarks.pool", "--size", "75", "--limit",
                          "1", "--repeat", "1", "--no-limits", "--json"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["onnxruntime"] is None and r["bandwidth_gbs"] is None
    (row,) = r["rows"]
    assert set(row["us"]) == {"nnc"} and row["of_memory"] is None
    assert row["outputs_agree"] is None and r["outputs_agree"]
    assert "onnxruntime not installed" in out.stdout


def test_conv_benchmark_depthwise_smoke():
    r = _bench("benchmarks.conv", "--depthwise", "--limit", "2", "--repeat", "1")
    assert r["mode"] == "depthwise" and r["shapes"] == 2 and len(r["rows"]) == 2
    assert r["isa"] in ("baseline", "avx2", "avx512")
    first = r["rows"][0]
    # MobileNet-V2's first depthwise layer: 112x112x32, 3x3 stride 1: 2*9 per output element
    assert first["shape"].startswith("112x112x32 3x3/1")
    assert first["gflop"] == pytest.approx(2 * 9 * 112 * 112 * 32 / 1e9)
    assert first["mbytes"] == pytest.approx(4 * (2 * 112 * 112 * 32 + 10 * 32) / 1e6)
    bandwidth = r["bandwidth_gbs"]
    assert bandwidth == r["limits"]["bandwidth_gbs"]["copy"] > 0
    for row in r["rows"]:
        assert set(row["ms"]) == ({"nnc", "ort"} if row["ort"] == "ok" else {"nnc"})
        for k, gbs in row["gbs"].items():
            assert gbs == pytest.approx(row["mbytes"] / row["ms"][k])
            assert row["of_bandwidth"][k] == pytest.approx(gbs / bandwidth)
    assert r["ort_errors_ok"]


def test_conv_benchmark_depthwise_efficientnet_5x5_smoke():
    r = _bench("benchmarks.conv", "--depthwise", "--net", "efficientnet", "--limit", "4",
               "--repeat", "1", "--no-limits")
    assert r["net"] == "efficientnet" and r["shapes"] == 4
    five = r["rows"][3]
    # EfficientNet-B0's first 5x5 layer: 56x56x144, stride 2, padding 2 -> 28x28: 2*25 a value
    assert five["shape"] == "56x56x144 5x5/2 p2 -> 28x28x144"
    assert five["gflop"] == pytest.approx(2 * 25 * 28 * 28 * 144 / 1e9)
    assert r["ort_errors_ok"]

def _unbuilt_checkout(tmp_path):
    """A clone's root whose nnc/ was never built (its Python files, no compiled module), and a
    site folder holding this checkout's built nnc, as a wheel install would: the project's
    tools run from the clone's root must use the installed nnc (``python -m`` puts the working
    directory first on sys.path, before it)."""
    clone, site = tmp_path / "clone", tmp_path / "site"
    shutil.copytree(ROOT / "benchmarks", clone / "benchmarks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (clone / "tests" / "stress").mkdir(parents=True)
    for mix in (ROOT / "tests" / "stress").glob("_stress*.py"):
        shutil.copy(mix, clone / "tests" / "stress")

    def not_python(folder, names):
        return [n for n in names if n == "__pycache__"
                or (not n.endswith(".py") and not os.path.isdir(os.path.join(folder, n)))]

    shutil.copytree(ROOT / "nnc", clone / "nnc", ignore=not_python)
    assert not list((clone / "nnc").glob("_core*"))
    site.mkdir()
    (site / "nnc").symlink_to(ROOT / "nnc", target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=str(site))
    return clone, env


def test_tools_use_the_installed_nnc_from_an_unbuilt_checkout(tmp_path):
    clone, env = _unbuilt_checkout(tmp_path)
    r = subprocess.run([sys.executable, "-c", "import nnc; print(nnc.__file__, nnc.Tensor)"],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert os.path.realpath(r.stdout.split()[0]) == str(ROOT / "nnc" / "__init__.py")
    r = subprocess.run([sys.executable, "-m", "nnc"], cwd=clone, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "demo" in r.stdout, r.stderr[-2000:]
    # The soak's parent reads nnc only for its report, after every child ran.
    r = subprocess.run([sys.executable, "-m", "benchmarks.soak", "--minutes", "0.001",
                        "--graph", "--cases", "1", "--json"], cwd=clone, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["totals"]["runs"] >= 1 and report["machine"]["nnc"]


def test_tools_refuse_an_unbuilt_checkout_at_start(tmp_path):
    # -S: no site-packages, so no installed nnc anywhere: the clone's unbuilt nnc is the only one.
    clone, env = _unbuilt_checkout(tmp_path)
    del env["PYTHONPATH"]
    # A child of the soak would leave this file behind.
    (clone / "tests" / "stress" / "_stress_mix.py").write_text("open('child_ran', 'w').close()\n")
    r = subprocess.run([sys.executable, "-S", "-c", "import nnc"], cwd=clone, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "not built" in r.stderr, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-S", "-m", "benchmarks.soak", "--minutes", "0.001"],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=60)
    # Before any child ran: no report, the reason on stderr.
    assert r.returncode == 1 and "not built" in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert not (clone / "child_ran").exists()


def _soak(clone, env, *args):
    r = subprocess.run([sys.executable, "-m", "benchmarks.soak", "--minutes", "0.001", *args,
                        "--json"], cwd=clone, env=env, capture_output=True, text=True,
                       timeout=240)
    return r.returncode, json.loads(r.stdout.strip().splitlines()[-1]), r.stdout + r.stderr


def test_soak_reports_each_mix_it_runs(tmp_path):
    clone, env = _unbuilt_checkout(tmp_path)
    # The onnx mix's child calls benchmarks.onnx_fuzz.fuzz(cases, seed): one that reports a
    # failed case, so that the soak must count it and show how to replay it.
    (clone / "benchmarks" / "onnx_fuzz.py").write_text(
        "def fuzz(cases, seed=0):\n"
        "    return {'cases': cases, 'loaded': cases, 'nnc_errors': 1,\n"
        "            'failures': [{'seed': seed, 'case': 1, 'error': 'ValueError(7)'}]}\n")
    rc, r, out = _soak(clone, env, "--engine", "--onnx", "--cases", "2", "--onnx-cases", "5")
    assert rc == 1, out[-3000:]
    assert r["mixes_run"] == ["engine", "onnx"] and not r["unavailable"]
    engine, onnx = r["mixes"]["engine"], r["mixes"]["onnx"]
    assert engine["children"] == 1 and engine["runs"] + engine["failed"] == 2
    assert onnx == {**onnx, "children": 1, "runs": 4, "errors": 1, "failed": 1, "crashes": 0,
                    "hangs": 0}
    assert r["totals"]["children"] == 2
    (bad,) = [c for c in r["bad"] if c["mix"] == "onnx"]
    assert bad["replay"] == "python -m benchmarks._soak_onnx --seed 0 --cases 5"
    assert "ValueError(7)" in bad["failures"][0]


def test_soak_skips_the_onnx_mix_without_its_fuzz(tmp_path):
    clone, env = _unbuilt_checkout(tmp_path)
    (clone / "benchmarks" / "onnx_fuzz.py").unlink(missing_ok=True)
    rc, r, out = _soak(clone, env, "--onnx")
    assert rc == 0, out[-3000:]
    assert r["unavailable"] == {"onnx": "onnx mix unavailable (benchmarks/onnx_fuzz.py missing)"}
    assert r["mixes_run"] == [] and r["totals"]["children"] == 0
    assert "onnx mix unavailable (benchmarks/onnx_fuzz.py missing)" in out


def test_openvino_run_leaves_the_threads_signal_stack_as_it_was():
    """Compiling with OpenVINO installs a signal stack of its own on the calling thread, which
    it frees with the compiled model (on whatever thread collects it): OvRun keeps the thread's
    own, so a later Ctrl-C is never delivered onto freed memory."""
    pytest.importorskip("openvino")
    pytest.importorskip("onnx")
    import ctypes
    import sys

    from nnc.models.peers import OvRun, _StackT

    if not sys.platform.startswith("linux"):
        pytest.skip("sigaltstack is read through glibc")
    libc = ctypes.CDLL(None)

    def stack():
        s = _StackT()
        assert libc.sigaltstack(None, ctypes.byref(s)) == 0
        return (s.sp, s.flags, s.size)

    g, model, x, y = _small_model()
    before = stack()
    r = OvRun(model, {model.graph.input[0].name: x.numpy()}, threads=1)
    r()
    assert stack() == before


def test_commands_benchmark_smoke():
    # one family, one round: the outputs agreed (else the case has an "error"), each row names
    # the backend of every node nnc ran, and the family's summary is there
    pytest.importorskip("onnxruntime", reason="benchmarks.commands compares with onnxruntime")
    pytest.importorskip("onnx", reason="benchmarks.commands builds ONNX models")
    r = _bench("benchmarks.commands", "--family", "softmax", "--repeat", "1")
    assert r["ok"] and r["benchmark"] == "commands" and r["repeat"] == 1
    (row,) = r["rows"]
    assert row["family"] == "softmax" and row["op"] == "Softmax"
    assert row["shape"] == [[1, 12, 197, 197]] and row["out_shape"] == [1, 12, 197, 197]
    assert row["nodes"] == ["SOFTMAX:CPU_OPT"] and row["backends"] == ["CPU_OPT"]
    assert row["max_rel_diff"] <= 1e-5 and "error" not in row
    assert row["nnc_s"] > 0 and row["ort_s"] > 0
    assert row["ratio"] == pytest.approx(row["nnc_s"] / row["ort_s"])
    assert len(row["samples"]["nnc"]) == len(row["samples"]["ort"]) == 1
    assert set(r["families"]) == {"softmax"}
    assert r["families"]["softmax"]["cases"] == 1
    assert r["families"]["softmax"]["backends"] == ["CPU_OPT"]
    assert r["machine"]["onnxruntime"]


def test_commands_benchmark_refuses_an_unknown_family():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "benchmarks.commands", "--family", "softmx"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown family softmx" in r.stderr
