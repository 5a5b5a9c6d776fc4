"""benchmarks/gpu.py end to end without a GPU: on the fake driver (tests/fakes/cuda_driver.py) in
this process (no GPU_OPT backend: that set is skipped with its reason; no PyTorch on CUDA and no
onnxruntime CUDA provider: the peers are reported unavailable), and in a child process with a
stand-in GPU_OPT backend (tests/fakes/gpu_bench.py), so both backend sets are built, timed and
checked. Timings are not asserted; the report's schema and checks are."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.cuda_driver import install, real

import nnc

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(real is None, reason="cuda-bindings is not installed (the fake "
                                "driver borrows its enums and handle types)")


@pytest.fixture
def fake(monkeypatch):
    from nnc import cuda

    yield install(monkeypatch, count=1)
    cuda.set_precision("ieee")      # the benchmark sets nnc's precision for the process
    import gc

    gc.collect()        # free fake buffers while the fake driver is still installed


CONFIGS = {"independent_1_stream", "independent_n_streams", "inception_GPU_REF_1_stream",
           "inception_GPU_REF_streams", "inception_GPU_REF_replay"}
COMPILE_PEERS = {"torch_compile_max_autotune", "torch_compile_reduce_overhead"}
PEERS = {"torch_eager", "torch_cuda_graphs", "ort_cuda"} | COMPILE_PEERS


def _targets(precision):
    fp16 = {"fp16 within 0.01 and faster than fp32 (replayed)"} if precision == "fp16" else set()
    return fp16 | {"inception multi-stream >= 1.3x over one stream (GPU_OPT)",
            "eager dispatch <= 5.0 us/node", "replay dispatch <= 0.2 us/node",
            "replay latency <= 1.2x PyTorch CUDA graphs",
            "eager dispatch <= 10.0 us/launched op (GPU_OPT)",
            "eager dispatch <= 5.0 us/launched op (GPU_REF)",
            f"replay latency <= 1.0x torch.compile max-autotune ({precision})",
            f"replay latency <= 1.0x torch.compile reduce-overhead ({precision})"}


def _check_common(r, precision="fp32"):
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
    # 94 of the 204 nodes are the NOOPs simplify left where it fused a ReLU: not launched.
    assert ref["implementations"] == {"GPU_REF": 110, "NOOP": 94}
    assert ref["implementation_nodes"] == [] and ref["launched_ops"] == 110
    for name, per_node in r["dispatch_us_per_node"].items():
        per_op = r["dispatch_us_per_launched_op"][name]
        assert per_op["launched_ops"] == 110 and per_op["nodes"] == 204
        for what in ("eager", "replay"):
            assert per_op[what] == pytest.approx(per_node[what] * 204 / 110)
    prec = r["settings"]["precision"]
    assert prec["requested"] == precision and "note" not in prec
    assert prec["nnc"] == {"fp32": "ieee", "tf32": "tf32", "fp16": "ieee"}[precision]
    # the tensors nnc's sets ran, read from their GPU copies
    dtype = "float16" if precision == "fp16" else "float32"
    assert set(prec["nnc_dtype"].values()) == {dtype} and ref["dtype"] == dtype
    assert r["settings"]["compile_budget_s"] > 0
    assert CONFIGS <= set(r["ms"]) and all(v > 0 for v in r["ms"].values())
    assert all(len(v) == r["settings"]["rounds"] for v in r["samples_ms"].values())
    assert r["independent"]["streams"] == r["independent"]["kernels"]
    assert "inception_GPU_REF_1_stream / streams" in r["ratios"]
    assert set(r["dispatch_us_per_node"]["GPU_REF"]) == {"eager", "replay"}
    assert all(c["ok"] for c in r["checks"])
    assert all(c["max_abs_error"] < 1e-4 for c in r["checks"]
               if "(TF32 on)" not in c["check"] and "within 0.01" not in c["check"])
    assert set(r["targets"]) == _targets(precision)
    for t in r["targets"].values():
        assert set(t) >= {"value", "ok", "set"}
        assert (t["ok"] is None) == (t["value"] is None)
        assert t["ok"] is not None or t["why"]
    for mode in ("max-autotune", "reduce-overhead"):
        t = r["targets"][f"replay latency <= 1.0x torch.compile {mode} ({precision})"]
        assert t["nnc_precision"] == prec["nnc"] and t["torch_precision"] == precision
        assert t["nnc_dtype"] == dtype


def test_gpu_benchmark_quick_on_the_fake(fake, capsys, tmp_path, monkeypatch):
    from benchmarks import gpu as bench

    # --save through the environment. Where torch is installed the torch.compile peers are
    # left out: compiling Inception takes minutes (benchmarks.gpu's business, not a test's).
    monkeypatch.setenv("NNC_GPU_BENCH_SAVE", str(tmp_path / "results"))
    peers = PEERS if importlib.util.find_spec("torch") is None else PEERS - COMPILE_PEERS
    assert bench.main(["--quick", "--json", "--repeat", "1", "--kernels", "2", "--precision",
                       "tf32", "--compile-budget", "1", "--peers", ",".join(sorted(peers))]) == 0
    out = capsys.readouterr().out
    r = json.loads(out.strip().splitlines()[-1])
    _check_common(r, "tf32")
    assert r["settings"]["compile_budget_s"] == 1
    # The saved file is the report, named by the UTC date and time and the device.
    saved = list((tmp_path / "results").iterdir())
    assert len(saved) == 1 and r["saved"] == str(saved[0])
    assert re.fullmatch(r"gpu-\d{8}T\d{6}Z-fake-gpu-0\.json", saved[0].name)
    on_disk = json.loads(saved[0].read_text())
    assert on_disk == {k: v for k, v in r.items() if k != "saved"}
    assert {"device", "settings", "samples_ms", "machine", "date", "checks"} <= set(on_disk)
    assert "cudnn" in on_disk["device"] and on_disk["settings"]["precision"]["requested"] == "tf32"
    assert r["settings"]["rounds"] == 1 and r["settings"]["kernels"] == 2
    assert r["inception"]["sets"]["GPU_OPT"]["status"].startswith("skipped: no node's default "
                                                                  "backend is GPU_OPT")
    multi = r["targets"]["inception multi-stream >= 1.3x over one stream (GPU_OPT)"]
    assert multi["ok"] is None and multi["why"].startswith("skipped")
    assert r["targets"]["eager dispatch <= 5.0 us/node"]["set"] == "GPU_REF"
    # Each peer ran (PyTorch on a real GPU beside the fake) or is unavailable with the reason.
    assert set(r["peers"]) == peers
    for p in r["peers"].values():
        assert p["status"] == "ok" or (p["status"].startswith("unavailable: ")
                                       and len(p["status"]) > 20)
    for name in COMPILE_PEERS & peers:
        assert r["peers"][name]["status"].startswith("unavailable: torch is not installed")
    torch_settings = r["settings"]["torch"]
    if torch_settings is not None:      # read back from torch: TF32 on, as asked
        assert torch_settings["precision"] == "tf32"
        assert torch_settings["tf32"] == {"conv": True, "matmul": True}
        assert r["settings"]["precision"]["torch_tf32"] == torch_settings["tf32"]
    vs_graphs = r["targets"]["replay latency <= 1.2x PyTorch CUDA graphs"]
    assert (vs_graphs["ok"] is None) == (r["peers"]["torch_cuda_graphs"]["status"] != "ok")
    text = out.rsplit("\n", 2)[0]
    assert "host dispatch (GPU_REF)" in text and "target eager dispatch" in text
    assert "per launched op (110 of 204 nodes)" in text and "precision tf32: nnc tf32" in text
    assert "unavailable" in text and "FAIL" not in text


def test_gpu_benchmark_times_a_gpu_opt_set():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "fakes" / "gpu_bench.py"), "--gpu-opt",
                        "--quick", "--json", "--repeat", "1", "--kernels", "2", "--peers", ""],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    _check_common(r)
    opt = r["inception"]["sets"]["GPU_OPT"]
    assert opt["status"] == "ok"
    assert opt["backends"]["MAX_POOL/GPU_OPT"] == 4 and opt["backends"]["AVG_POOL/GPU_OPT"] == 10
    # Each GPU_OPT convolution as cudnn_conv.implementation names it (a stand-in here); the
    # other GPU_OPT nodes by backend, the GPU_REF ones as GPU_REF.
    assert opt["implementations"] == {"cudnn fused": 94, "NOOP": 94, "GPU_OPT": 14,
                                      "GPU_REF": 2}
    nodes = opt["implementation_nodes"]
    assert len(nodes) == 94 and len({n["node"] for n in nodes}) == 94
    assert all(n["impl"] == "cudnn fused" and n["plan"] == "stand-in" for n in nodes)
    assert {"inception_GPU_OPT_1_stream", "inception_GPU_OPT_streams",
            "inception_GPU_OPT_replay"} <= set(r["ms"])
    assert len(r["checks"]) == 8 and r["peers"] == {}
    multi = r["targets"]["inception multi-stream >= 1.3x over one stream (GPU_OPT)"]
    assert multi["set"] == "GPU_OPT" and multi["value"] > 0
    assert r["targets"]["replay dispatch <= 0.2 us/node"]["set"] == "GPU_OPT"


def test_gpu_benchmark_fp16_on_the_fake(tmp_path):
    """--precision fp16: both sets built from float16 copies and checked against the float16
    tolerance; nnc's float32 replay timed beside them (and checked against the float32 one)
    for the target; the peers ran in float16 or say why not; the saved file says fp16."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "fakes" / "gpu_bench.py"), "--gpu-opt",
                        "--quick", "--json", "--repeat", "1", "--kernels", "2", "--precision",
                        "fp16", "--peers", "torch_eager,ort_cuda", "--save", str(tmp_path)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    _check_common(r, "fp16")
    assert r["settings"]["tolerance_fp16"] == 0.01
    assert r["settings"]["precision"]["nnc_dtype"] == {"GPU_REF": "float16",
                                                      "GPU_OPT": "float16"}
    assert r["inception"]["sets"]["GPU_OPT"]["dtype"] == "float16"
    nnc_checks = [c for c in r["checks"] if c["check"].startswith("inception_")]
    assert len(nnc_checks) == 9
    for c in nnc_checks[:8]:        # every configuration of both sets: the float16 tolerance
        assert c["ok"] and c["check"].endswith("logits within 0.01 of the CPU's")
        assert 0 < c["rel_error"] <= 1e-2
    fp32 = nnc_checks[8]
    assert fp32["check"] == "inception_GPU_OPT_fp32_replay logits within 0.001 of the CPU's"
    assert fp32["ok"] and fp32["max_abs_error"] < 1e-4
    assert "inception_GPU_OPT_fp32_replay" in r["ms"]
    t = r["targets"]["fp16 within 0.01 and faster than fp32 (replayed)"]
    assert t["set"] == "GPU_OPT" and t["within_tolerance"] is True
    assert t["value"] == r["ratios"]["inception_GPU_OPT_fp32_replay / replay"] > 0
    assert t["ok"] == (t["value"] > 1)
    assert set(r["peers"]) == {"torch_eager", "ort_cuda"}
    for peer in r["peers"].values():
        if peer["status"] == "ok":      # PyTorch on a real GPU beside the fake: in float16
            assert peer["tolerance"] == 0.01 and "float16" in peer["describe"]
            assert r["settings"]["torch"]["dtype"] == "float16"
            assert r["settings"]["torch"]["tf32"] == {"conv": False, "matmul": False}
        else:
            assert peer["status"].startswith("unavailable: ") and len(peer["status"]) > 20
    saved = list(tmp_path.iterdir())
    assert len(saved) == 1 and r["saved"] == str(saved[0])
    assert json.loads(saved[0].read_text())["settings"]["precision"]["requested"] == "fp16"
    assert "precision fp16: nnc ieee on tensors {'GPU_REF': 'float16', 'GPU_OPT': " \
        "'float16'}" in p.stdout


def test_gpu_benchmark_fp16_fails_a_wrong_value(fake, capsys, monkeypatch):
    """A float16 copy whose classifier weights are 10% off fails its checks (FAIL, exit 1);
    the float32 replay beside it still passes, so the fp16 target says it is not within."""
    import numpy as np

    from benchmarks import gpu as bench

    copy = bench._gpu_copy

    def wrong_gemm_weight(cpu_graph, max_streams, pin_ref, dtype=None):
        g = copy(cpu_graph, max_streams, pin_ref, dtype)
        if dtype == "float16":
            w = next(e for e in g.execs if e.cmd.name == "GEMM").inputs[1]
            nnc.cmd_exec(nnc.Cmd("DATA_TRANSFER"), [(w.numpy() * 1.1).astype(np.float16)], [w])
        return g

    monkeypatch.setattr(bench, "_gpu_copy", wrong_gemm_weight)
    assert bench.main(["--quick", "--json", "--repeat", "1", "--kernels", "2", "--precision",
                       "fp16", "--peers", ""]) == 1
    out = capsys.readouterr().out
    r = json.loads(out.strip().splitlines()[-1])
    assert r["ok"] is False
    bad = [c for c in r["checks"] if not c["ok"]]
    assert [c["check"] for c in bad] == [f"inception_GPU_REF_{k} logits within 0.01 of the CPU's"
                                         for k in ("1_stream", "streams", "replay",
                                                   "1_stream_replay")]
    assert all(c["rel_error"] > 1e-2 for c in bad)
    assert "FAIL: inception_GPU_REF_replay logits within 0.01" in out
    assert "ok: inception_GPU_REF_fp32_replay logits within 0.001" in out
    t = r["targets"]["fp16 within 0.01 and faster than fp32 (replayed)"]
    assert t["within_tolerance"] is False and t["ok"] is False and t["value"] > 0


def test_float16_model_runs_in_onnxruntime():
    """The fp16 onnxruntime peer's model: Inception's ONNX export with float16 initializers,
    input and outputs, run here on onnxruntime's CPU provider, within the float16 tolerance;
    a node that sets a dtype of its own is refused with its name."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import numpy as np
    import onnx

    import nnc.onnx
    from benchmarks._gpu_peers import float16_model
    from nnc.models.inception import build_inception_v3_model
    from nnc.models.peers import OrtRun

    m = build_inception_v3_model(size=75)
    model = nnc.onnx.save(m.graph, None, inputs=[m.input], outputs=[m.logits, m.output])
    m.graph.run()
    want = m.logits.numpy().astype(np.float64)
    half = float16_model(model)
    assert {t.data_type for t in model.graph.initializer} == {onnx.TensorProto.FLOAT,
                                                             onnx.TensorProto.INT64}
    assert {t.data_type for t in half.graph.initializer} == {onnx.TensorProto.FLOAT16,
                                                            onnx.TensorProto.INT64}
    r = OrtRun(half, {half.graph.input[0].name: m.input.numpy().astype(np.float16)}, intra_op=1)
    r()
    got = r.fetch_outputs()[0]
    assert got.dtype == np.float16
    err = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
    assert 0 < err <= 1e-2, err
    cast = onnx.helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT, name="c")
    model.graph.node.append(cast)
    with pytest.raises(NotImplementedError, match="Cast node 'c' has attribute 'to'"):
        float16_model(model)


@pytest.mark.parametrize("args, message", [
    (["--peers", "tf"], "unknown peers ['tf']"),
    (["--precision", "bf16"], "argument --precision: invalid choice: 'bf16'"),
    (["--compile-budget", "0"], "--compile-budget a finite number above 0"),
    (["--compile-budget", "inf"], "--compile-budget a finite number above 0"),
])
def test_gpu_benchmark_refuses_bad_arguments(args, message):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "benchmarks.gpu", *args], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and message in p.stderr


def test_gpu_benchmark_save_names_and_never_overwrites(tmp_path):
    from benchmarks.gpu import save

    r = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-24T14:38:05+00:00", "ok": True}
    first = save(r, str(tmp_path / "new"))
    second = save(r, str(tmp_path / "new"))
    assert first.endswith("gpu-20261124T143805Z-nvidia-h100-80gb-hbm3.json")
    assert second.endswith("gpu-20261124T143805Z-nvidia-h100-80gb-hbm3-2.json")
    assert json.loads(open(first).read()) == json.loads(open(second).read()) == r


def test_compile_deadline_interrupts_and_disarms():
    import signal

    old = signal.getsignal(signal.SIGALRM)
    # pytest-timeout's timer, where it runs, is set aside for this test's few tenths of a second.
    outer = signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        _check_deadline(signal, old)
    finally:
        signal.signal(signal.SIGALRM, old)
        signal.setitimer(signal.ITIMER_REAL, *outer)


def _check_deadline(signal, old):
    import time

    from benchmarks._gpu_peers import CompileDeadline, _deadline, _deadline_of

    with pytest.raises(CompileDeadline, match="ran past 0.05 s"):
        with _deadline(0.05) as armed:
            assert armed
            time.sleep(5)
    assert signal.getsignal(signal.SIGALRM) is old
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with _deadline(5):
        pass                            # done in time: nothing raised, then or later
    time.sleep(0.01)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    # A timer armed already (pytest-timeout's) keeps SIGALRM: the deadline is not armed.
    fired = []
    signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        with _deadline(0.01) as armed:
            time.sleep(0.05)
        assert not armed and not fired and signal.getitimer(signal.ITIMER_REAL)[0] > 20
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    # What torch's compiler wraps (BackendCompilerFailed from the deadline) is found.
    try:
        try:
            raise CompileDeadline("late")
        except CompileDeadline as e:
            raise RuntimeError("backend failed") from e
    except RuntimeError as wrapped:
        assert str(_deadline_of(wrapped)) == "late"
    assert _deadline_of(RuntimeError("other")) is None


def test_torch_precision_reads_back_what_torch_has():
    """torch_precision reports torch's own values (a stand-in torch here), and a setting
    torch refuses to read is reported as such, never assumed."""
    import types

    from benchmarks._gpu_peers import _tf32_in_use, torch_precision

    def refuse():
        raise RuntimeError("mixed APIs")

    class Refusing:
        fp32_precision = property(lambda self: refuse())

    new = types.SimpleNamespace(
        backends=types.SimpleNamespace(
            cudnn=types.SimpleNamespace(conv=types.SimpleNamespace(fp32_precision="tf32")),
            cuda=types.SimpleNamespace(matmul=Refusing()), fp32_precision="none"),
        get_float32_matmul_precision=lambda: "highest")
    read = torch_precision(new)
    assert read["api"] == "fp32_precision" and read["cudnn.conv.fp32_precision"] == "tf32"
    assert read["cuda.matmul.fp32_precision"].startswith("unreadable: RuntimeError: mixed")
    assert read["backends.fp32_precision"] == "none"
    assert read["float32_matmul_precision"] == "highest"
    assert _tf32_in_use(read) == {"conv": True, "matmul": None}
    old = types.SimpleNamespace(
        backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(allow_tf32=False),
                                       cuda=types.SimpleNamespace(
                                           matmul=types.SimpleNamespace(allow_tf32=True))),
        get_float32_matmul_precision=lambda: "high")
    read = torch_precision(old)
    assert read == {"api": "allow_tf32", "cudnn.allow_tf32": False,
                    "cuda.matmul.allow_tf32": True, "float32_matmul_precision": "high"}
    assert _tf32_in_use(read) == {"conv": False, "matmul": True}


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
    # body() is step() without its grad mode (what torch.compile traces); static lists every
    # tensor it reads and does not compute, each once.
    np.testing.assert_allclose(t2.body()[0].detach().numpy(), want, rtol=1e-6)
    for t in [*t2.consts.values(), *t2.inputs.values()]:
        assert sum(t is s for s in t2.static) == 1
    assert len({id(s) for s in t2.static}) == len(t2.static)
    # dtype="float16" (the fp16 peers): floating-point weights and inputs converted once
    import torch

    h = TorchEager(model, feeds, 1, dtype="float16")
    assert {t.dtype for t in [*h.consts.values(), *h.inputs.values()]} == {torch.float16}
    assert "float16" in h.describe()
    with pytest.raises(ValueError, match="dtype must be None or 'float16'"):
        TorchEager(model, feeds, 1, dtype="bfloat16")


def test_gpu_loop_nnc_variants_on_the_fake(fake):
    """benchmarks.gpu_loop's nnc loop, host-driven and captured as a conditional WHILE node,
    matches NumPy on the fake driver; the driver-level variants need the real driver's kernels
    and are reported as failed there, never raised."""
    from benchmarks import gpu_loop

    r = gpu_loop.run(n=64, iters=10, repeat=2, say=lambda *a: None)
    assert {"nnc_host", "nnc_captured"} <= set(r["ms"])
    assert [c["ok"] for c in r["checks"]] == [True] * len(r["checks"]) and r["checks"]
    assert set(r["failed"]) <= {"host_sync", "host_unrolled", "graph_unrolled", "graph_while",
                                "capture_while"}
    t = r["target"]["nnc_captured >= 5.0x nnc_host"]
    assert t["value"] == pytest.approx(r["ms"]["nnc_host"] / r["ms"]["nnc_captured"])
