"""Lint as a test (uvloop's test_sourcecode idea): ruff on Python, cython-lint on Cython."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _tool(name):
    path = shutil.which(name) or str(pathlib.Path(sys.executable).parent / name)
    if not pathlib.Path(path).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[test]' installs it)")
    return path


def test_ruff():
    out = subprocess.run([_tool("ruff"), "check", "nnc", "tests", "benchmarks"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_cython_lint():
    files = sorted(str(p) for ext in ("pyx", "pxd") for p in ROOT.glob(f"nnc/**/*.{ext}"))
    # cython-lint runs pycodestyle by name: put this interpreter's bin folder on PATH.
    env = dict(os.environ)
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    out = subprocess.run([_tool("cython-lint"), *files], cwd=ROOT, capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
