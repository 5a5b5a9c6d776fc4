"""Packaging: the distribution's name and version, the sdist's files, and the wheel's files.

The sdist is built here for real (fast: it runs no Cython and compiles nothing); the wheel's
files are checked through ``build_py`` on the unpacked sdist, which copies exactly what a wheel
holds besides the compiled extensions. .ci/run does the whole round trip (sdist, wheel from the
sdist in a fresh venv, install, smoke test outside the checkout) with the same rules
(.ci/package_check.py).
"""

import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata

import pytest

import nnc

# The sdist built for real and the wheel's files listed: the packaging round trip (docs/dev.md,
# "The quick loop").
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOME = "https://github.com/nnc-graph/nnc-graph"


def _package_check():
    path = ROOT / ".ci" / "package_check.py"
    if not path.exists():
        pytest.skip("no .ci/package_check.py (not a checkout)")
    spec = importlib.util.spec_from_file_location("package_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pyproject():
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_is_the_distributions():
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]\d+|rc\d+)?(\.post\d+)?(\.dev\d+)?",
                        nnc.__version__), nnc.__version__
    assert metadata.version("nnc-graph") == nnc.__version__
    project = _pyproject()["project"]
    # One source: pyproject.toml reads nnc.__version__ rather than stating a second number.
    assert "version" not in project and "version" in project["dynamic"]
    assert _pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "nnc.__version__"}


def test_installed_metadata():
    meta = metadata.metadata("nnc-graph")
    assert meta["Name"] == "nnc-graph"
    assert meta["License-Expression"] == "BSD-3-Clause"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues"}
    assert all(u.startswith(HOME) for u in urls.values())
    classifiers = meta.get_all("Classifier")
    for c in ("Programming Language :: Cython", "Programming Language :: C",
              "Operating System :: POSIX :: Linux", "Topic :: Scientific/Engineering"):
        assert c in classifiers
    for minor in range(10, 14):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    # PEP 639: the licence is an expression; a License :: classifier beside it is an error.
    assert not [c for c in classifiers if c.startswith("License ::")]


def test_extras_name_what_nnc_imports():
    extras = _pyproject()["project"]["optional-dependencies"]
    for extra in ("cuda", "test"):
        names = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0] for r in extras[extra]}
        assert {"cuda-bindings", "nvidia-cuda-nvrtc"} <= names, extra
        assert "cuda-python" not in names, "the meta-package also pulls cuda-core"
    # nnc.cuda and the families' GPU backends (nnc/cmd/<family>/gpu/) import cuda.bindings only
    # (cuda.pathfinder comes with cuda-bindings).
    files = [*(ROOT / "nnc" / "cuda").glob("*.py"), *(ROOT / "nnc" / "cmd").glob("*/gpu/*.py")]
    sources = "".join(p.read_text() for p in files)
    imported = set(re.findall(r"^\s*(?:from|import) (cuda\.\w+)", sources, re.M))
    assert imported == {"cuda.bindings"}, imported
    # GPU_OPT imports nvmath (cuBLAS) and cudnn (the frontend); the extra brings them and the
    # CUDA 13 libraries they load.
    names = {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0] for r in extras["gpu-opt"]}
    assert {"nvmath-python", "nvidia-cublas", "nvidia-cudnn-frontend", "nvidia-cudnn-cu13",
            "nnc-graph"} <= names, names
    libraries = set(re.findall(r"^\s*from (nvmath\.bindings) import|^\s*import (cudnn)\b",
                               sources, re.M))
    assert {x for pair in libraries for x in pair if x} == {"nvmath.bindings", "cudnn"}


def test_install_hints_name_the_distribution():
    # `pip install nnc` installs an unrelated project: no hint may say so.
    bad = re.compile(r"pip install(?:\s+-[-\w]+)*\s+['\"]?nnc(?:\[[\w,]+\])?['\"]?(?=[\s)`]|$)",
                     re.M)
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "nnc").rglob("*.py")), *sorted((ROOT / "nnc").rglob("*.pyx"))]
    found = [f"{p.relative_to(ROOT)}: {m.group(0).strip()}" for p in files
             for m in bad.finditer(p.read_text())]
    assert not found, found
    assert "pip install 'nnc-graph[cuda]'" in nnc.cuda.__doc__


def test_readme_links_work_on_a_package_index():
    # PyPI renders README.md without the repository beside it: relative links would break.
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links
    relative = [u for u in links if not re.match(r"https?://|#", u)]
    assert not relative, f"README.md links relatively (use {HOME}/blob/main/...): {relative}"
    for u in links:
        if u.startswith(f"{HOME}/blob/main/"):
            assert (ROOT / u.removeprefix(f"{HOME}/blob/main/")).exists(), u


def test_license_files():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "2026, the nnc authors" in text
    notice = (ROOT / "NOTICE").read_text()
    assert "Copyright (c) 2010, Liu Liu" in notice and "BSD 3-Clause" in notice
    assert _pyproject()["project"]["license-files"] == ["LICENSE", "NOTICE"]


def _git_checkout():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (the sdist is compared with `git ls-files`)")


def _build_tools():
    if importlib.util.find_spec("build") is None:
        pytest.skip("`build` is not installed (pip install -e '.[test]' installs it)")
    import setuptools
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} < 77 cannot read the SPDX licence "
                    "(pip install -e '.[test]' installs a newer one)")


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    _git_checkout()
    _build_tools()
    out = tmp_path_factory.mktemp("sdist")
    # Without isolation (this venv has the build requirements): seconds, no download.
    # The sdist step runs no Cython: only setuptools and numpy (setup.py) are needed.
    r = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation",
                        "--skip-dependency-check", "--outdir", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (path,) = out.glob("nnc_graph-*.tar.gz")
    return path


def test_sdist_holds_the_committed_sources_only(sdist):
    check = _package_check()
    assert sdist.name == f"nnc_graph-{nnc.__version__}.tar.gz"
    names = check.sdist_names(sdist)
    problems = check.sdist_problems(names, check.tracked_files(ROOT),
                                    check.untracked_files(ROOT))
    assert not problems, problems
    # Every .pyx of setup.py's table ships; no generated C does, under any name.
    for dotted in check.extension_modules(ROOT):
        assert dotted.replace(".", "/") + ".pyx" in names
    assert not [n for n in names if n.startswith("nnc/") and n.endswith((".c", ".so", "_api.h"))]


def test_wheel_files_from_the_sdist(sdist, tmp_path):
    # build_py on the unpacked sdist copies what a wheel holds besides the extensions: the
    # package-data and exclude-package-data rules, applied to the sdist's own files.
    check = _package_check()
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):     # Python >= 3.10.12 / 3.11.4
            tar.extractall(tmp_path, filter="data")
        else:
            tar.extractall(tmp_path)
    (src,) = tmp_path.glob("nnc_graph-*")
    lib = tmp_path / "lib"
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)],
                       cwd=src, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    names = {str(p.relative_to(lib)) for p in lib.rglob("*") if p.is_file()}
    problems = check.wheel_problems(names, check.tracked_files(ROOT),
                                    check.extension_modules(ROOT))
    assert not problems, problems
    assert "nnc/py.typed" in names and "nnc/nnc.h" in names and "nnc/base/core.pxd" in names
    assert not [n for n in names if n.endswith((".pyx", ".c"))]
