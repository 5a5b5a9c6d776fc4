"""The ONNX fuzz (benchmarks/onnx_fuzz.py) in CI: small valid models mutated (byte flips,
truncation, dims, attributes, dtypes, inputs, op types, opsets, external data) and loaded from
bytes; every case must end in a correct result or an nnc.NNCError. The soak runs thousands of
cases (``python -m benchmarks.soak --onnx``); here a few seeds of a few hundred, in a child
process so that a crash or a hang fails the test with its cases instead of taking pytest down.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Hundreds of mutated models in child processes (docs/dev.md, "The quick loop").
pytestmark = pytest.mark.slow

pytest.importorskip("onnx", reason="nnc.onnx tests need onnx (pip install -e '.[test]')")

ROOT = Path(__file__).resolve().parents[2]
CASES = 600
CHILD_TIMEOUT = 300


@pytest.mark.parametrize("seed", [0, 1])
def test_mutated_models_load_correctly_or_raise_nnc_errors(seed):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-W", "ignore", "-m", "benchmarks.onnx_fuzz", "--cases", str(CASES),
           "--seed", str(seed), "--json"]
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the fuzz child hung (seed {seed}):\n{e.stdout}\n{e.stderr}") \
            from None
    assert r.stdout.strip(), (f"the fuzz child died with {r.returncode} (negative: killed by "
                              f"that signal):\n{r.stderr[-4000:]}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    failed = "\n".join(f"  python -m benchmarks.onnx_fuzz --seed {f['seed']} --case {f['case']}: "
                       f"{f['error']}" for f in result["failures"])
    assert not result["failures"], f"{len(result['failures'])} failing cases:\n{failed}"
    assert r.returncode == 0, r.stderr[-4000:]
    assert result["cases"] == CASES
    # The mix reaches both outcomes: models that load and run, and refusals.
    assert result["loaded"] > CASES // 20 and result["nnc_errors"] > CASES // 4, result


def test_fuzz_cases_replay_from_seed_and_index():
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks import onnx_fuzz
    finally:
        sys.path.remove(str(ROOT))
    assert onnx_fuzz.make_case(3, 17) == onnx_fuzz.make_case(3, 17)
    assert onnx_fuzz.make_case(3, 17)[1] != onnx_fuzz.make_case(3, 18)[1]
