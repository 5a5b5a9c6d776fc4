"""``python -m benchmarks.engine --quick --json`` runs end to end: every part has its rows,
every executor ran every op after its dependencies and gave the serial loop's bits, and the
report has its fields. No timing is asserted; the helpers the benchmark builds its dependency
lists with are checked against hand-worked cases."""

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import _engine_peers as peers
from benchmarks import _engine_work as work

ROOT = Path(__file__).resolve().parents[2]


def _run(*args, timeout=300, **env_extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **env_extra)
    return subprocess.run([sys.executable, "-m", "benchmarks.engine", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_dependencies_follow_the_engine_rules():
    # 0 writes a; 1 and 2 read a; 3 writes a (after both readers); 4 reads b, written by none
    shape = [((), (0,)), ((0,), (1,)), ((0,), (2,)), ((), (0,)), ((3,), (1,))]
    assert work.dependencies(shape) == [(), (0,), (0,), (0, 1, 2), (1,)]
    assert work.dependencies(work.shape_chain(3)) == [(), (0,), (1,)]
    assert work.dependencies(work.shape_none(3)) == [(), (), ()]
    assert work.order_respects([0, 2, 1, 3, 4], work.dependencies(shape))
    assert not work.order_respects([0, 3, 1, 2, 4], work.dependencies(shape))
    assert not work.order_respects([0, 1, 2, 3], work.dependencies(shape))   # 4 never ran


def test_randsum_workloads_and_shape():
    w = work.randsum_workloads(200, seed=3)
    assert w == work.randsum_workloads(200, seed=3) != work.randsum_workloads(200, seed=4)
    for (target, reads, spin_ns), (r, m) in zip(w, work.randsum_shape(w)):
        assert 0 <= target < work.RANDSUM_VARS and 2 <= len(reads) <= work.MAX_READS
        assert 1000 <= spin_ns <= 9000 and spin_ns % 1000 == 0
        assert m == (target,) and target not in r and len(set(r)) == len(r)
        assert set(r) == set(reads) - {target}


def test_futures_tracker_runs_in_dependency_order():
    shape = work.randsum_shape(work.randsum_workloads(300, seed=1, spin_us=(0, 0)))
    deps = work.dependencies(shape)
    order = []
    run = peers.FuturesRun([order.append] * len(deps), list(range(len(deps))), deps, 2,
                           timeout=60)
    try:
        run.run()
        assert work.order_respects(order, deps)
        order.clear()
        run.run()   # a second run on the same pool
        assert work.order_respects(order, deps)

        def boom(i):
            if i == 5:
                raise ValueError("op 5")
        run.bodies = [boom] * len(deps)
        try:
            run.run()
        except ValueError as exc:
            assert str(exc) == "op 5"
        else:
            raise AssertionError("the body's exception was not raised")
    finally:
        run.close()


def test_engine_benchmark_quick():
    r = _run("--quick", "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["benchmark"] == "engine" and rep["quick"] and rep["repeat"] == 1
    assert rep["date"] and rep["machine"]["cpu"] and rep["threads"] == 2
    assert rep["ok"] is True
    has_c = rep["c_missing"] is None
    try:
        import dask  # noqa: F401
    except ImportError:
        has_dask = False
    else:
        has_dask = True
    names = {"nnc py", "naive py", "futures"} | ({"dask"} if has_dask else set())
    assert [row["shape"] for row in rep["floor"]] == ["none", "chain", "randsum"]
    for row in rep["floor"]:
        assert row["ops"] == 500
        assert set(row["order_ok"]) == names and all(row["order_ok"].values())
        assert set(row["us_per_op"]) == names | ({"nnc C", "naive C"} if has_c else set())
        assert all(v > 0 for v in row["us_per_op"].values())
    assert rep["floor"][0]["edges"] == 0 and rep["floor"][1]["edges"] == 499
    if has_c:
        for key, sleep in (("randsum", False), ("randsum_sleep", True)):
            rs = rep[key]
            assert rs["ops"] == 500 and rs["seeds"] == [0, 1] and rs["serial_equals_python"]
            assert rs["sleep"] is sleep
            expected = {"serial C", "serial py→C", "nnc", "naive", "futures"}
            assert set(rs["bit_identical"]) == expected | ({"dask"} if has_dask else set())
            assert all(rs["bit_identical"].values())
            assert rs["x_serial"]["serial C"] == 1.0
        for key, spin in (("replay", [1, 9]), ("replay_empty", [0, 0])):
            rp = rep[key]
            assert rp["equal"] is True and rp["streams"] >= 1 and rp["x"] > 0
            assert set(rp["ms"]) == {"push again", "replay"} and rp["spin_us"] == spin
    else:
        assert rep["randsum"] is None and rep["randsum_sleep"] is None and rep["replay"] is None
        assert rep["replay_empty"] is None
        assert rep["c_missing"] in r.stdout and rep["c_missing"] in r.stderr
    assert len(rep["targets"]) == 3 * 3 + 4
    assert all(t["met"] in (True, False, None) for t in rep["targets"])
    assert "targets:" in r.stdout


def test_engine_benchmark_rejects_bad_arguments():
    r = _run("--ops", "0", timeout=60)
    assert r.returncode == 2 and "--ops must be at least 1" in r.stderr
    r = _run("--threads", "0", timeout=60)
    assert r.returncode == 2 and "--threads" in r.stderr


def test_engine_benchmark_without_a_compiler():
    # no C compiler on PATH: the C rows and parts are skipped, with the reason printed
    r = _run("--quick", "--json", "--ops", "50", "--seeds", "1", PATH=str(ROOT / "no-such-dir"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["ok"] is True and rep["c_missing"].startswith("no C compiler found")
    assert "no C compiler found" in r.stderr and "randsum: skipped (no C compiler" in r.stdout
    assert rep["randsum"] is None and rep["randsum_sleep"] is None and rep["replay"] is None
    assert rep["replay_empty"] is None
    for row in rep["floor"]:
        assert "nnc C" not in row["us_per_op"] and all(row["order_ok"].values())
    missing = [t for t in rep["targets"] if t["met"] is None and "dask" not in t["name"]]
    assert len(missing) == 3 + 4   # the C floor in each shape, two randsums, two replays
