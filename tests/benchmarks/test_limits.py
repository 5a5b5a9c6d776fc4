"""benchmarks._limits: the machine's limits measured in-process (quickly, on tiny sizes: sane
values, never timings asserted), OpenBLAS's core read from its config string, and the GFLOP a
graph's convolutions and GEMMs count, against a hand count."""

import math

import numpy as np
import pytest

import nnc
from benchmarks import _limits


def test_measure_limits_returns_positive_numbers_quickly():
    r = _limits.measure_limits(threads=(2, 1), seconds=0, n=64, nbytes=1 << 16)
    assert list(r["sgemm_gflops"]) == list(r["fma_gflops"]) == ["1", "2"]
    assert all(v > 0 and math.isfinite(v) for v in r["sgemm_gflops"].values())
    assert all(v > 0 and math.isfinite(v) for v in r["fma_gflops"].values())
    assert r["kernel_isa"] in ("baseline", "avx2", "avx512")
    assert set(r["bandwidth_gbs"]) == {"copy", "read"}
    assert all(v > 0 and math.isfinite(v) for v in r["bandwidth_gbs"].values())
    assert r["sgemm_n"] == 64 and r["bandwidth_bytes"] == 1 << 16
    assert r["openblas"].startswith("OpenBLAS")
    assert r["cpu"] and isinstance(r["isa"], list)
    assert set(r["isa"]) <= set(_limits.ISA_FEATURES)
    assert r["seconds"] < 30
    line = _limits.describe(r)
    assert "GFLOP/s on 1 thread" in line and "on 2 threads" in line


def test_measure_limits_reports_the_coretype_pin(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    r = _limits.measure_limits(threads=(1,), seconds=0, n=32, nbytes=1 << 12)
    assert r["OPENBLAS_CORETYPE"] == "Haswell"
    assert "OPENBLAS_CORETYPE=Haswell pins it" in _limits.describe(r)
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    r = _limits.measure_limits(threads=(1,), seconds=0, n=32, nbytes=1 << 12)
    assert r["OPENBLAS_CORETYPE"] is None and "OPENBLAS_CORETYPE unset" in _limits.describe(r)


@pytest.mark.parametrize("bad", [dict(threads=()), dict(threads=(0, 1)), dict(n=0),
                                 dict(nbytes=0), dict(seconds=-1)])
def test_measure_limits_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="measure_limits"):
        _limits.measure_limits(**bad)


def test_openblas_core_reads_the_dynamic_arch_core():
    cfg = "OpenBLAS 0.3.27 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
    assert _limits.openblas_core(cfg) == "Haswell"
    assert _limits.openblas_core("OpenBLAS 0.3.34.481.3 DYNAMIC_ARCH NO_AFFINITY SkylakeX "
                                 "MAX_THREADS=64") == "SkylakeX"
    # a build for one core names no run-time choice
    assert _limits.openblas_core("OpenBLAS 0.3.20 NO_AFFINITY HASWELL MAX_THREADS=64") is None


def test_peak_and_x_limit():
    limits = {"sgemm_gflops": {"1": 100.0, "2": 190.0}}
    assert _limits.peak_gflops(limits, 1) == 100.0
    assert _limits.peak_gflops(limits, 2) == 190.0
    assert _limits.peak_gflops(limits, 4) == 190.0   # the nearest measured count below
    assert _limits.peak_gflops(None, 1) is None
    # with the FMA peak measured, it is the yardstick; the SGEMM one on request
    limits["fma_gflops"] = {"1": 117.0, "2": 230.0}
    assert _limits.peak_gflops(limits, 2) == 230.0
    assert _limits.peak_gflops(limits, 2, "sgemm") == 190.0
    # 2 GFLOP at 100 GFLOP/s take 20 ms: 30 ms is 1.5x that
    assert _limits.x_limit(30.0, 2.0, 100.0) == pytest.approx(1.5)
    assert _limits.x_limit(30.0, 0.0, 100.0) is None
    assert _limits.x_limit(30.0, 2.0, None) is None


def test_graph_gflop_counts_convolutions_and_gemms_by_hand():
    def t(*shape):
        return nnc.Tensor(np.zeros(shape, np.float32))

    g = nnc.Graph()
    x, y = t(1, 8, 8, 3), t(1, 8, 8, 4)
    g.exec(nnc.Cmd("CONVOLUTION", padding=1), [x, t(4, 3, 3, 3), t(4)], [y])
    z = t(1, 4, 4, 4)
    g.exec(nnc.Cmd("CONVOLUTION", padding=1, stride=2, groups=4), [y, t(4, 3, 3, 1)], [z])
    g.exec(nnc.Cmd("RELU"), [z], [z])
    g.exec(nnc.Cmd("GEMM", transpose_b=True), [t(2, 6), t(5, 6)], [t(2, 5)])
    g.exec(nnc.Cmd("GEMM", transpose_a=True), [t(6, 2), t(6, 5), t(5)], [t(2, 5)])
    g.exec(nnc.Cmd("GEMM"), [t(3, 2, 7), t(7, 4)], [t(3, 2, 4)])
    # 2 * output elements * K: conv K = 3*3*3, depthwise K = 3*3*1, GEMMs K = 6, 6, 7
    want = 2 * (64 * 4 * 27 + 16 * 4 * 9 + 10 * 6 + 10 * 6 + 24 * 7)
    assert _limits.graph_gflop(g) == pytest.approx(want / 1e9)
    assert _limits.graph_gflop(nnc.Graph()) == 0


def test_one_implementation_shared_with_the_demo():
    # nnc's demo measures the same limits (nnc must not import benchmarks/): the benchmarks
    # re-export nnc.models.limits rather than keep a copy that could drift.
    from nnc.models import limits

    for name in _limits.__all__:
        assert getattr(_limits, name) is getattr(limits, name)
