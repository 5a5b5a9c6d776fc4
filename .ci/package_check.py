"""Checks of the distributions CI builds (.ci/run), and of the installed wheel.

``python .ci/package_check.py contents SDIST WHEEL`` (run in the checkout, a git clone):
  the sdist holds every committed file and nothing else (no generated C, headers or
  extensions); the wheel holds every committed file under nnc/ except the .pyx sources, plus
  one extension per module of setup.py's table, the licence and nothing else.
``python package_check.py smoke CHECKOUT`` (run by the python the wheel was installed into,
  from a folder outside the checkout): nnc is imported from site-packages, its version is the
  distribution's, a small graph runs sequentially and statically scheduled on streams, the
  demo runs, the stubs, headers and kernels are where type checkers, C programs and NVRTC
  look, and the C example embeds the installed nnc.

tests/project/test_packaging.py imports the contents rules from here (sdist_problems,
wheel_problems).
"""

from __future__ import annotations

import fnmatch
import json
import os
import pathlib
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

DIST = "nnc-graph"
# Files the sdist may hold besides committed ones: what setuptools writes into every sdist.
SDIST_EXTRA = ("PKG-INFO", "setup.cfg", "nnc_graph.egg-info/*")
# Committed files that stay out of the sdist.
SDIST_SKIP = (".gitignore",)


def tracked_files(checkout: pathlib.Path) -> set[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=checkout, capture_output=True,
                         check=True)
    return {name for name in out.stdout.decode().split("\0") if name}


def untracked_files(checkout: pathlib.Path) -> set[str]:
    """Files git neither tracks nor ignores (work in progress, which an sdist of this working
    tree may hold); ignored files are build outputs and must never be shipped."""
    out = subprocess.run(["git", "ls-files", "-z", "--others", "--exclude-standard"],
                         cwd=checkout, capture_output=True, check=True)
    return {name for name in out.stdout.decode().split("\0") if name}


def sdist_names(path: pathlib.Path) -> set[str]:
    """The sdist's files, relative to its top folder (nnc_graph-X.Y.Z/)."""
    with tarfile.open(path) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    return {n.split("/", 1)[1] for n in names if "/" in n}


def wheel_names(path: pathlib.Path) -> set[str]:
    with zipfile.ZipFile(path) as z:
        return {n for n in z.namelist() if not n.endswith("/")}


def extension_modules(checkout: pathlib.Path) -> list[str]:
    """The dotted names of the extension modules setup.py builds: one per committed .pyx under
    nnc/, named by its path (setup.py's rule)."""
    return sorted(n[:-len(".pyx")].replace("/", ".") for n in tracked_files(checkout)
                  if n.startswith("nnc/") and n.endswith(".pyx"))


def sdist_problems(names: set[str], tracked: set[str], untracked: set[str] = frozenset()) -> list:
    """What is wrong with an sdist holding ``names``, for a checkout with ``tracked`` files."""
    problems = [f"sdist lacks committed file {n}"
                for n in sorted(tracked - names) if n not in SDIST_SKIP]
    for n in sorted(names - tracked - untracked):
        if not any(fnmatch.fnmatch(n, p) for p in SDIST_EXTRA):
            problems.append(f"sdist holds {n}, which is not a committed file (a build output?)")
    generated = [n for n in names if n.startswith("nnc/") and n.endswith((".c", ".so"))]
    problems += [f"sdist holds generated {n}" for n in sorted(generated)]
    for required in ("LICENSE", "NOTICE", "README.md", "pyproject.toml", "setup.py",
                     "MANIFEST.in", "nnc/base/core.pyx", "nnc/base/core.pxd", "nnc/base/core.pyi",
                     "nnc/py.typed", "nnc/nnc.h", "nnc/nnc_types.h", "tests/capi/c/safety.c",
                     "examples/embed/graph.c", "docs/gpu.md", "benchmarks/capi_bench.c"):
        if required not in names:
            problems.append(f"sdist lacks {required}")
    if not any(n.startswith("nnc/cuda/kernels/") and n.endswith(".cu") for n in names):
        problems.append("sdist lacks the CUDA kernels (nnc/cuda/kernels/*.cu)")
    return problems


def wheel_problems(names: set[str], tracked: set[str], modules: list[str]) -> list:
    """What is wrong with a wheel holding ``names`` (from the checkout's ``tracked`` files and
    setup.py's extension ``modules``). ``names`` without any .so checks the pure part only
    (what build_py copies), for tests that do not compile."""
    problems = []
    package = {n for n in names if n.startswith("nnc/")}
    expected = {n for n in tracked if n.startswith("nnc/") and not n.endswith(".pyx")}
    problems += [f"wheel lacks {n}" for n in sorted(expected - package)]
    compiled = any(n.endswith(".so") for n in package)
    for n in sorted(package - expected):
        if n.endswith(".so") and compiled:
            continue
        problems.append(f"wheel holds {n}, which it should not (a source or build output?)")
    if compiled:
        for dotted in modules:
            stem = dotted.replace(".", "/")
            if not any(n.startswith(stem + ".") and n.endswith(".so") for n in package):
                problems.append(f"wheel lacks the extension {dotted}")
    problems += [f"wheel holds {n}" for n in sorted(names) if n.endswith((".pyx", ".c"))]
    meta = [n for n in names if ".dist-info/" in n]
    if meta or compiled:
        for lic in ("LICENSE", "NOTICE"):
            if not any(n.endswith(f".dist-info/licenses/{lic}") for n in meta):
                problems.append(f"wheel lacks {lic} in its .dist-info/licenses")
        others = {n for n in names - package if ".dist-info/" not in n}
        problems += [f"wheel holds {n} outside the nnc package" for n in sorted(others)]
    return problems


def contents(sdist: str, wheel: str) -> int:
    checkout = pathlib.Path(__file__).resolve().parent.parent
    tracked = tracked_files(checkout)
    problems = sdist_problems(sdist_names(pathlib.Path(sdist)), tracked)
    problems += wheel_problems(wheel_names(pathlib.Path(wheel)), tracked,
                               extension_modules(checkout))
    for p in problems:
        print("package_check:", p, file=sys.stderr)
    if not problems:
        print(f"package_check: contents of {os.path.basename(sdist)} and "
              f"{os.path.basename(wheel)} are right")
    return 1 if problems else 0


def _run(cmd, **kw):
    print("package_check: $", " ".join(str(c) for c in cmd), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    if out.returncode != 0:
        raise SystemExit(f"failed ({out.returncode}): {cmd}\n{out.stdout}\n{out.stderr}")
    return out.stdout


def smoke(checkout: str) -> int:
    """Use the installed wheel as a user would, from outside the checkout."""
    from importlib import metadata

    import numpy as np

    import nnc

    here = pathlib.Path(nnc.__file__).resolve().parent
    site = {pathlib.Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    assert here.parent in site, f"nnc imported from {here}, not from site-packages {site}"
    assert not here.is_relative_to(pathlib.Path(checkout).resolve()), here
    assert nnc.__version__ == metadata.version(DIST), (nnc.__version__, metadata.version(DIST))
    meta = metadata.metadata(DIST)
    assert meta["License-Expression"] == "BSD-3-Clause", meta["License-Expression"]
    assert meta["Name"] == DIST and "nnc-graph/nnc-graph" in str(meta.get_all("Project-URL"))

    # What type checkers, C programs and NVRTC read from the installed package.
    for rel in ("py.typed", "base/core.pyi", "tensor/tensor.pyi", "graph/graph.pyi", "nnc.h",
                "nnc_types.h", "base/core.pxd", "tensor/__init__.pyi", "cuda/kernels/common.cuh"):
        assert (here / rel).is_file(), f"installed nnc lacks {rel}"
    assert not list(here.rglob("*.pyx")) and not list(here.rglob("*.c")), "sources installed"
    assert pathlib.Path(nnc.get_include()) == here
    from nnc.cuda import nvrtc
    assert "nnc_ewsum_" in nvrtc.kernel_source("ew.cu")  # read from the installed package
    print("package_check: cuda:", nnc.cuda_unavailable_reason() or "available")

    # A tiny graph: a -> (b, c) -> d, sequentially and statically scheduled on streams.
    x = np.arange(4, dtype=np.float32)
    t = [nnc.Tensor.zeros(4) for _ in range(3)]
    g = nnc.Graph()
    a = g.exec(nnc.Cmd("SCALAR_MUL", a=2.0), [x], [t[0]])
    b = g.exec(nnc.Cmd("EWEXP"), [t[0]], [t[1]])
    c = g.exec(nnc.Cmd("RELU"), [t[0]], [t[2]])
    d = g.exec(nnc.Cmd("EWSUM"), [t[1], t[2]], [nnc.Tensor.zeros(4)])
    g.concat(a, b)
    g.concat(a, c)
    g.concat(b, d)
    g.concat(c, d)
    g.run()
    want = np.exp(2 * x) + 2 * x
    np.testing.assert_allclose(d.outputs[0].numpy(), want, rtol=1e-6)
    sched = nnc.static_schedule(g, max_streams=2)   # becomes g's default schedule
    sched.verify(hazards=True)
    d.outputs[0].numpy()[:] = 0
    s = nnc.Stream("cpu")
    g.run(stream=s)
    s.wait()
    np.testing.assert_allclose(d.outputs[0].numpy(), want, rtol=1e-6)
    print("package_check: graph ran sequentially and on", sched.stream_count, "streams")

    with tempfile.TemporaryDirectory() as tmp:
        out = _run([sys.executable, "-m", "nnc", "demo", "--streams", "--size", "75",
                    "--repeat", "1", "--max-streams", "2", "--json",
                    "--trace", f"{tmp}/run.json"], cwd=tmp)
        report = json.loads(out.strip().splitlines()[-1])
        assert report["streams"]["identical"], report["streams"]
        assert json.loads(pathlib.Path(tmp, "run.json").read_text())["traceEvents"]
        print(f"package_check: demo ran {report['nodes']} nodes, identical on streams")

        cflags = _run([sys.executable, "-m", "nnc.embed", "--cflags"])
        assert f"-I{here}" in cflags, cflags
        # The embedding example, compiled against the installed headers and run on the
        # installed nnc (NNC_PYTHON): the C API works from a wheel.
        _run(["sh", f"{checkout}/examples/embed/build.sh", sys.executable], cwd=tmp)
        env = {**os.environ, "NNC_PYTHON": sys.executable}
        out = _run([f"{tmp}/build/embed/graph"], cwd=tmp, env=env)
        print("package_check: examples/embed/graph:", out.strip().splitlines()[-1])
    print(f"package_check: smoke test of {DIST} {nnc.__version__} from {here} passed")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "contents":
        return contents(argv[1], argv[2])
    if len(argv) == 2 and argv[0] == "smoke":
        return smoke(argv[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
