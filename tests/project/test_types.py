"""The stubs are true and complete: mypy.stubtest compares every module of nnc with its stub.

stubtest imports each module of the package (it walks ``nnc`` and every submodule, so a module
added later is checked too) and compares what it finds at run time (names, signatures,
defaults, keyword-only markers, classes that cannot be subclassed) with the ``.pyi`` stubs.
Only the entries of tests/project/stubtest_allowlist.txt are tolerated, each with its reason there.
A second test runs ``mypy --strict`` over the stubs themselves, so they stay precise (no bare
generics, no untyped definitions) as well as true.

Both run in a subprocess with a timeout, from a temporary directory with a temporary mypy
cache, so nothing is written into the checkout.
"""

import os
import pathlib
import subprocess
import sys

import pytest

import nnc

ROOT = pathlib.Path(__file__).resolve().parents[2]
ALLOWLIST = ROOT / "tests" / "project" / "stubtest_allowlist.txt"
TIMEOUT = 300           # seconds; both checks take about 20 s on a 2-vCPU VM (docs/dev.md)

mypy = pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")


def mypy_env():
    """Environment for a mypy subprocess: MYPYPATH names the checkout when nnc is imported from
    it (an editable install's import hook is invisible to mypy); an nnc installed into
    site-packages is found there (it ships py.typed)."""
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    package_parent = pathlib.Path(nnc.__file__).resolve().parent.parent
    if package_parent == ROOT:
        env["MYPYPATH"] = str(ROOT)
    return env


def run_mypy(args, cwd):
    try:
        return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=mypy_env(),
                              capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{args[0]} did not finish within {TIMEOUT} s:\n{e.stdout}\n{e.stderr}")


@pytest.mark.slow
def test_stubtest(tmp_path):
    out = run_mypy(["mypy.stubtest", "nnc", "--allowlist", str(ALLOWLIST)], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success" in out.stdout, out.stdout + out.stderr


@pytest.mark.slow
def test_stubs_pass_mypy_strict(tmp_path):
    stubs = sorted(str(p) for p in (ROOT / "nnc").rglob("*.pyi"))
    assert len(stubs) > 20, stubs
    out = run_mypy(["mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
                    "--no-color-output", *stubs], tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_compiled_module_has_a_stub():
    """A .pyx module without a .pyi would be an untyped hole (stubtest reports it too, but this
    names the file to write)."""
    missing = [str(p.relative_to(ROOT)) for p in (ROOT / "nnc").rglob("*.pyx")
               if not p.with_suffix(".pyi").exists()]
    assert not missing, f"write a stub for: {missing}"


def test_allowlist_stays_short():
    entries = [line for line in ALLOWLIST.read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    assert len(entries) <= 8, entries
