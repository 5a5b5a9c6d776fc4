"""nnc.base.isa: the CPU level nnc's kernels dispatch on, and lowering it."""

import pytest

import nnc
from nnc.base import isa
from nnc.models.limits import cpu_features


def test_detected_level_is_named_and_supported():
    assert isa.detected_isa() in isa.ISA_NAMES
    assert isa.supported_isas() == isa.ISA_NAMES[:isa.ISA_NAMES.index(isa.detected_isa()) + 1]
    assert isa.get_cpu_isa() == isa.detected_isa()


def test_detection_agrees_with_proc_cpuinfo():
    flags = set(cpu_features())
    if not flags:
        pytest.skip("no /proc/cpuinfo flags on this machine")
    # cpuinfo lists what the CPU has; the OS may still hide a level (XCR0), never add one.
    if isa.detected_isa() == "avx512":
        assert {"avx512f", "avx512bw", "avx512dq", "avx512vl", "fma"} <= flags
    if isa.detected_isa() in ("avx2", "avx512"):
        assert {"avx2", "fma"} <= flags


def test_set_cpu_isa_lowers_and_restores():
    old = isa.set_cpu_isa("baseline")
    try:
        assert old == isa.detected_isa()
        assert isa.get_cpu_isa() == "baseline"
    finally:
        assert isa.set_cpu_isa(None) == "baseline"
    assert isa.get_cpu_isa() == isa.detected_isa()


def test_set_cpu_isa_refuses_unknown_and_unsupported_levels():
    with pytest.raises(nnc.NNCError, match="unknown CPU ISA"):
        isa.set_cpu_isa("sse9")
    if isa.detected_isa() != "avx512":
        with pytest.raises(nnc.NNCError, match="does not support"):
            isa.set_cpu_isa("avx512")
    assert isa.get_cpu_isa() == isa.detected_isa()


def test_fma_peak_is_measured_at_each_level():
    """fma_gflops runs at the chosen level: positive, finite, and a wider level is not slower
    by more than noise (two threads, when the machine has two cores, do more than one)."""
    old = isa.get_cpu_isa()
    try:
        got = {}
        for level in isa.supported_isas():
            isa.set_cpu_isa(level)
            got[level] = isa.fma_gflops(1, seconds=0.05)
            assert 0 < got[level] < 1e5
        assert got[isa.detected_isa()] > 0.5 * got["baseline"]
    finally:
        isa.set_cpu_isa(old)
    with pytest.raises(nnc.NNCError, match="threads must be a positive int"):
        isa.fma_gflops(0)
