"""``python -m benchmarks.pipeline --quick --json`` runs end to end: the report has its fields
and every configuration's outputs equal ``g.run()``'s. No timing is asserted."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pipeline_benchmark_quick():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "benchmarks.pipeline", "--quick", "--json",
                        "--pause", "0"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["benchmark"] == "pipeline" and rep["quick"] and rep["repeat"] == 1
    assert rep["date"] and rep["machine"]["cpu"]
    (net,) = rep["nets"]
    assert net["net"] == "inception_v3_75" and net["nodes"] > 100 and net["stages"] == 2
    assert len(net["stage_costs_s"]) == 2 and all(c > 0 for c in net["stage_costs_s"])
    assert 1 <= net["bound"] <= 2 + 1e-9
    rows = net["throughput"]
    for key in ("seq intra-op 1", "seq intra-op 2", "sched rank intra-op 1",
                "sched list intra-op 2", "local"):
        assert rows[key] > 0
    assert net["checks"]["local_equal"] is True
    assert isinstance(net["above_single"], bool) and net["pct_of_bound"] > 0
    assert net["pct_of_bound_whole"] > 0 and set(net["steady"]) <= {"local", "ray"}
    hops = rep["hops"]
    assert hops["checks"]["local"] is True and hops["per_hop_s"]["local depth 1"] > 0
    if net["ray_reason"] is None:           # Ray installed: its rows and checks too
        assert rows["ray"] > 0 and net["checks"]["ray_equal"] is True
        assert net["ray_vs_local"] > 0 and hops["checks"]["ray"] is True
    else:
        assert "ray" not in rows and net["ray_reason"] in r.stdout
