"""``python -m benchmarks.policies --quick`` runs end to end: every registered policy has its
rows, each schedule passed verify(), and the report has its fields. No timing is asserted."""

import json
import os
import subprocess
import sys
from pathlib import Path

from nnc.schedule.schedule import POLICIES

ROOT = Path(__file__).resolve().parents[2]


def _run(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "benchmarks.policies", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_policies_benchmark_quick():
    r = _run("--quick", "--json", "--pause", "0")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["benchmark"] == "policies" and rep["quick"] and rep["repeat"] == 1
    assert rep["date"] and rep["machine"]["cpu"]
    assert rep["policies"] == list(POLICIES)
    t = rep["threads"]
    intra = [str(n) for n in rep["intra_op"]]
    assert intra[0] == "1"
    (net,) = rep["nets"]
    assert net["net"] == "inception_v3_75" and net["nodes"] > 100
    seq, *rows = net["rows"]
    assert seq["policy"] == "seq" and seq["simulated_ms"] > 0
    assert {(row["policy"], row["max_streams"]) for row in rows} == \
        {(p, cap) for p in POLICIES for cap in (t, 0)}
    for row in rows:
        assert row["verified"] is True
        assert row["streams"] >= 1 and row["signals"] >= 0 and row["waits"] >= 0
        if row["max_streams"]:
            assert row["streams"] <= row["max_streams"]
        assert row["build_ms"] > 0 and row["simulated_ms"] > 0
        assert 0 < row["simulated_build_costs_ms"] <= seq["simulated_build_costs_ms"] * (1 + 1e-9)
        # a schedule's makespan is at least its longest path of measured costs
        assert row["simulated_ms"] >= row["critical_path_ms"] * (1 - 1e-9)
        assert set(row["measured_ms"]) == set(intra) == set(row["sim_over_measured"])
        assert all(v > 0 for v in row["measured_ms"].values())
        assert isinstance(row["within_target"], bool)
    (dag,) = rep["dags"]
    assert dag["nodes"] == 10_000 and dag["edges"] > 10_000
    assert {(row["policy"], row["max_streams"]) for row in dag["rows"]} == \
        {(p, cap) for p in POLICIES for cap in (t, 0)}
    for row in dag["rows"]:
        assert row["verified"] is True and row["build_s"] > 0
        assert row["critical_path_ms"] <= row["simulated_ms"] * (1 + 1e-9)
        assert row["simulated_ms"] <= dag["work_ms"] * (1 + 1e-9)   # never worse than serial
        if row["max_streams"]:
            assert row["streams"] <= row["max_streams"]
    assert rep["gpu"] is None and rep["gpu_reason"]
    assert rep["gpu_reason"].splitlines()[0] in r.stdout


def test_policies_benchmark_rejects_bad_arguments():
    r = _run("--nets", "vgg", timeout=60)
    assert r.returncode == 2 and "unknown nets" in r.stderr
    r = _run("--dags", "ten", timeout=60)
    assert r.returncode == 2 and "comma-separated integers" in r.stderr
    r = _run("--repeat", "0", timeout=60)
    assert r.returncode == 2 and "--repeat" in r.stderr
