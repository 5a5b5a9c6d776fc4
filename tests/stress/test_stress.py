"""Stress: random DAGs of real commands x schedules x injected errors x graphs and
streams dropped with work queued x concurrent waiters x while / case..of. Every run must equal a
sequential run of the same graph, bit for bit, or raise a clear nnc.NNCError naming the failing
node; nothing may crash or hang.

The cases run in child processes (tests/stress/_stress_mix.py), so a segfault or a hang fails the
test with the cases that caused it (replay them with ``python tests/stress/_stress_mix.py --spec
'...'``) instead of taking pytest down. Part of the mix runs with NNC_DEBUG=1: the child then checks
the invariants of the C state with work queued, and that the live-object counters balance at its
end.
"""

import json
import os
import pathlib
import random
import subprocess
import sys

from _stress_mix import random_case
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

MIX = pathlib.Path(__file__).with_name("_stress_mix.py")
CHILD_TIMEOUT = 120                     # seconds for one child; its own hang timer fires first


def run_mix(args, debug):
    env = dict(os.environ)
    env["NNC_DEBUG"] = "1" if debug else "0"
    try:
        out = subprocess.run([sys.executable, str(MIX), *args], capture_output=True, text=True,
                             timeout=CHILD_TIMEOUT, env=env)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the stress child hung (NNC_DEBUG={env['NNC_DEBUG']}): "
                             f"{args[:2]}\n{e.stdout}\n{e.stderr}") from None
    lines = out.stdout.splitlines()
    failed = [line for line in lines if '"outcome": "failed"' in line]
    assert out.returncode == 0 and not failed, (
        f"stress child exited with {out.returncode} (negative: killed by that signal) with "
        f"NNC_DEBUG={env['NNC_DEBUG']}; failed cases:\n" + "\n".join(failed)
        + "\nlast lines:\n" + "\n".join(lines[-3:]) + f"\nstderr:\n{out.stderr[-4000:]}")
    summary = json.loads(lines[-1])
    if debug:
        assert summary["leaks"] == {} and summary["problems"] == [], summary
    return summary


def test_every_mode_drop_and_control_once_in_debug_mode():
    """6 modes x 4 drops x 3 controls, each once, with random DAGs and injected failures."""
    summary = run_mix(["--all-combinations", "--seed", "11"], debug=True)
    assert summary["runs"] == 72
    assert summary["errors"] > 0  # some injected failures surfaced as clear errors


@st.composite
def batches(draw):
    rnd = draw(st.randoms(use_true_random=False))
    return [random_case(rnd) for _ in range(draw(st.integers(6, 16)))]


# No shrinking: each example is a child process, and a failure already prints its exact cases.
@settings(max_examples=20, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches(), debug=st.booleans())
def test_random_mix(batch, debug):
    summary = run_mix(["--spec", json.dumps(batch)], debug)
    assert summary["runs"] == len(batch)


def test_seeded_mix_is_reproducible():
    """The soak tool's input: cases drawn from a seed are the same in every process."""
    ra, rb = random.Random(5), random.Random(5)
    a = [random_case(ra) for _ in range(3)]
    b = [random_case(rb) for _ in range(3)]
    assert a == b
    run_mix(["--seed", "5", "--cases", "20"], debug=False)
