"""benchmarks/gpu.py end to end without a GPU: on the fake driver (tests/_fake_cuda.py) in this
process (no GPU_OPT backend: that set is skipped with its reason; no PyTorch on CUDA and no
onnxruntime CUDA provider: the peers are reported unavailable), and in a child process with a
stand-in GPU_OPT backend (tests/_fake_gpu_bench.py), so both backend sets are built, timed and
checked. Timings are not asserted; the report's schema and checks are."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _fake_cuda import install, real

import nnc

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")


@pytest.fixture
def fake(monkeypatch):
    yield install(monkeypatch, count=1)
    import gc

    gc.collect()        # free fake buffers while the fake driver is still installed


CONFIGS = {"independent_1_stream", "independent_n_streams", "inception_GPU_REF_1_stream",
           "inception_GPU_REF_streams", "inception_GPU_REF_replay"}
TARGETS = {"inception multi-stream >= 1.3x over one stream (GPU_OPT)",
           "eager dispatch <= 5.0 us/node", "replay dispatch <= 0.2 us/node",
           "replay latency <= 1.2x PyTorch CUDA graphs"}


def _check_common(r):
    assert r["benchmark"] == "gpu" and r["ok"] is True
    d = r["device"]
    assert d["name"] == r["gpu"] == "Fake GPU 0" and d["compute_capability"] == "9.0"
    assert d["cuda_driver"] == "13.0" and d["cuda_bindings"] and d["sm_count"] == 4
    assert "nvidia_driver" in d and d["nvrtc"]
    assert r["nnc"] == nnc.__version__ and r["date"] and r["command"] and r["machine"]["nnc"]
    assert r["settings"]["size"] == 75 and r["settings"]["rounds"] >= 1
    assert r["inception"]["nodes"] == 204 and r["inception"]["fused"] == 94
    ref = r["inception"]["sets"]["GPU_REF"]
    assert ref["status"] == "ok" and ref["streams"] > 1
    # pinned: every node that has a GPU_REF backend runs it (NOOP has none)
    assert set(ref["backends"]) == {"CONVOLUTION/GPU_REF", "NOOP/CPU_REF", "AVG_POOL/GPU_REF",
                                    "MAX_POOL/GPU_REF", "GEMM/GPU_REF", "SOFTMAX/GPU_REF"}
    assert set(ref["max_abs_error"]) == {"1_stream", "streams", "replay", "1_stream_replay"}
    assert CONFIGS <= set(r["ms"]) and all(v > 0 for v in r["ms"].values())
    assert all(len(v) == r["settings"]["rounds"] for v in r["samples_ms"].values())
    assert r["independent"]["streams"] == r["independent"]["kernels"]
    assert "inception_GPU_REF_1_stream / streams" in r["ratios"]
    assert set(r["dispatch_us_per_node"]["GPU_REF"]) == {"eager", "replay"}
    assert all(c["ok"] and c["max_abs_error"] < 1e-4 for c in r["checks"])
    assert set(r["targets"]) == TARGETS
    for t in r["targets"].values():
        assert set(t) >= {"value", "ok", "set"}
        assert (t["ok"] is None) == (t["value"] is None)
        assert t["ok"] is not None or t["why"]


def test_gpu_benchmark_quick_on_the_fake(fake, capsys):
    from benchmarks import gpu as bench

    assert bench.main(["--quick", "--json", "--repeat", "1", "--kernels", "2"]) == 0
    out = capsys.readouterr().out
    r = json.loads(out.strip().splitlines()[-1])
    _check_common(r)
    assert r["settings"]["rounds"] == 1 and r["settings"]["kernels"] == 2
    assert r["inception"]["sets"]["GPU_OPT"]["status"].startswith("skipped: no node's default "
                                                                  "backend is GPU_OPT")
    multi = r["targets"]["inception multi-stream >= 1.3x over one stream (GPU_OPT)"]
    assert multi["ok"] is None and multi["why"].startswith("skipped")
    assert r["targets"]["eager dispatch <= 5.0 us/node"]["set"] == "GPU_REF"
    # Each peer ran (PyTorch on a real GPU beside the fake) or is unavailable with the reason.
    assert set(r["peers"]) == {"torch_eager", "torch_cuda_graphs", "ort_cuda"}
    for p in r["peers"].values():
        assert p["status"] == "ok" or (p["status"].startswith("unavailable: ")
                                       and len(p["status"]) > 20)
    vs_graphs = r["targets"]["replay latency <= 1.2x PyTorch CUDA graphs"]
    assert (vs_graphs["ok"] is None) == (r["peers"]["torch_cuda_graphs"]["status"] != "ok")
    text = out.rsplit("\n", 2)[0]
    assert "host dispatch (GPU_REF)" in text and "target eager dispatch" in text
    assert "unavailable" in text and "FAIL" not in text


def test_gpu_benchmark_times_a_gpu_opt_set():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "_fake_gpu_bench.py"), "--gpu-opt",
                        "--quick", "--json", "--repeat", "1", "--kernels", "2", "--peers", ""],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    _check_common(r)
    opt = r["inception"]["sets"]["GPU_OPT"]
    assert opt["status"] == "ok"
    assert opt["backends"]["MAX_POOL/GPU_OPT"] == 4 and opt["backends"]["AVG_POOL/GPU_OPT"] == 10
    assert {"inception_GPU_OPT_1_stream", "inception_GPU_OPT_streams",
            "inception_GPU_OPT_replay"} <= set(r["ms"])
    assert len(r["checks"]) == 8 and r["peers"] == {}
    multi = r["targets"]["inception multi-stream >= 1.3x over one stream (GPU_OPT)"]
    assert multi["set"] == "GPU_OPT" and multi["value"] > 0
    assert r["targets"]["replay dispatch <= 0.2 us/node"]["set"] == "GPU_OPT"


def test_gpu_benchmark_refuses_unknown_peers():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--peers", "tf"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown peers ['tf']" in p.stderr


def _small_model():
    import numpy as np

    import nnc.onnx

    g = nnc.Graph()
    x = nnc.Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    w = nnc.Tensor(np.arange(8, dtype=np.float32).reshape(2, 4) / 8)
    y = nnc.Tensor(np.zeros((3, 2), np.float32))
    g.exec(nnc.Cmd("GEMM", transpose_b=True), [x, w], [y])
    model = nnc.onnx.save(g, None, inputs=[x], outputs=[y])
    g.run()
    return model, {model.graph.input[0].name: x.numpy()}, y.numpy()


def test_ort_run_devices():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    import numpy as np

    from nnc.models.peers import OrtRun, PeerUnavailableError

    model, feeds, want = _small_model()
    r = OrtRun(model, feeds, intra_op=1)
    r()
    assert r.device == "cpu" and r.device_outputs == [] and r.device_inputs == {}
    np.testing.assert_allclose(r.fetch_outputs()[0], want, rtol=1e-6)
    assert r.fetch_outputs() is r.outputs
    for bad in ("gpu", "cuda:x", "cuda:", "tpu:0"):
        with pytest.raises(ValueError, match="device must be 'cpu', 'cuda' or 'cuda:N'"):
            OrtRun(model, feeds, intra_op=1, device=bad)
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has a CUDA provider: the refusal below cannot happen")
    with pytest.raises(PeerUnavailableError, match="has no CUDAExecutionProvider") as e:
        OrtRun(model, feeds, intra_op=1, device="cuda:0")
    assert isinstance(e.value, nnc.NNCError)


def test_torch_eager_keeps_its_cpu_behaviour():
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import numpy as np

    from benchmarks._torch_eager import TorchEager

    model, feeds, want = _small_model()       # GEMM and the Identity that names the output
    t = TorchEager(model, feeds, 1)
    t()
    assert isinstance(t.outputs[0], np.ndarray) and t.device_outputs == []
    np.testing.assert_allclose(t.outputs[0], want, rtol=1e-6)
    assert t.fetch_outputs() is t.outputs and "1 thread(s)" in t.describe()
    t2 = TorchEager(model, feeds, None, device="cpu")
    t2()
    np.testing.assert_allclose(t2.fetch_outputs()[0], want, rtol=1e-6)
