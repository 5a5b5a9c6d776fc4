"""Every ```python example in README.md and docs/*.md type-checks under ``mypy --strict`` and runs.

Each fenced block is one complete program. The fence's info string may carry flags after
``python`` (docs/dev.md, "Examples in the docs"):

- ``gpu``: needs a CUDA GPU; type-checked everywhere, run only where ``nnc.cuda_available()``.
- ``fragment``: deliberately not a program (a REPL session, an error shown on purpose); neither
  checked nor run. The text next to it says why.

All blocks go through one mypy invocation; each then runs in its own subprocess, in a fresh
temporary directory (an example may write files into its working directory), with a timeout.
"""

import dataclasses
import os
import pathlib
import re
import subprocess
import sys

import pytest

import nnc

# mypy over every block, and every block run in a child: tens of seconds (docs/dev.md, "The
# quick loop").
pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAGS = {"gpu", "fragment"}
FENCE = re.compile(r"^```python(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
MYPY_TIMEOUT = 300      # seconds, for all blocks at once
RUN_TIMEOUT = 120       # seconds, per block


@dataclasses.dataclass(frozen=True)
class Example:
    doc: str            # path relative to the checkout, e.g. "docs/schedule.md"
    line: int           # line of the first code line in the Markdown file (1-based)
    flags: frozenset
    code: str

    @property
    def module(self):
        stem = re.sub(r"\W", "_", self.doc.removesuffix(".md").lower())
        return f"{stem}_l{self.line}"

    def __str__(self):
        return f"{self.doc}:{self.line}"


def examples():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = []
    for path in docs:
        text = path.read_text()
        for m in FENCE.finditer(text):
            flags = frozenset(m.group("info").split())
            unknown = flags - FLAGS
            line = text.count("\n", 0, m.start("body")) + 1
            rel = str(path.relative_to(ROOT))
            if unknown:
                raise ValueError(f"{rel}:{line}: unknown example flags {sorted(unknown)}; "
                                 f"known: {sorted(FLAGS)}")
            found.append(Example(rel, line, flags, m.group("body")))
    return found


# Correct but for its last line (a stream given as an int): mypy must report exactly that.
CANARY = """import numpy as np
import nnc
t = nnc.Tensor(np.zeros(3, np.float32))
nnc.cmd_exec(nnc.Cmd("SET", value=1.0), [], [t], stream=None)
nnc.cmd_exec(nnc.Cmd("SET", value=1.0), [], [t], stream=1)
"""

EXAMPLES = examples()
CHECKED = [e for e in EXAMPLES if "fragment" not in e.flags]


def test_examples_are_found():
    assert any(e.doc == "README.md" for e in CHECKED)
    # Fragments are the exception: an example people copy should be a program.
    assert len([e for e in EXAMPLES if "fragment" in e.flags]) <= max(2, len(EXAMPLES) // 5)


def test_fence_parser():
    text = "x\n```python gpu\nimport nnc\n```\n```python\n```\n```bash\nls\n```\n"
    blocks = [(m.group("info").split(), m.group("body")) for m in FENCE.finditer(text)]
    assert blocks == [(["gpu"], "import nnc\n"), ([], "")]


def _env(extra):
    env = dict(os.environ)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory):
    """{module name: [error lines]} from one ``mypy --strict`` run over every checked block."""
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[test]')")
    folder = tmp_path_factory.mktemp("doc_examples")
    for e in CHECKED:
        (folder / f"{e.module}.py").write_text(e.code)
    # A canary checked in the same run: nnc's types must reach mypy, or this would pass.
    (folder / "canary.py").write_text(CANARY)
    extra = {}
    # An editable install's import hook is invisible to mypy: point it at the checkout. An nnc
    # installed into site-packages is found there (it ships py.typed).
    if pathlib.Path(nnc.__file__).resolve().parent.parent == ROOT:
        extra["MYPYPATH"] = str(ROOT)
    cmd = [sys.executable, "-m", "mypy", "--strict", "--no-color-output", "--no-error-summary",
           "--cache-dir", str(folder / ".mypy_cache"), "canary.py",
           *(f"{e.module}.py" for e in CHECKED)]
    try:
        out = subprocess.run(cmd, cwd=folder, env=_env(extra), capture_output=True, text=True,
                             timeout=MYPY_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mypy did not finish within {MYPY_TIMEOUT} s:\n{e.stdout}\n{e.stderr}")
    errors = {}
    for line in out.stdout.splitlines():
        name = line.split(".py:", 1)[0]
        errors.setdefault(name, []).append(line)
    canary = errors.pop("canary", [])
    known = {e.module for e in CHECKED}
    stray = {k: v for k, v in errors.items() if k not in known}
    # Errors outside the examples (in nnc's stubs, say) or a crash fail every example.
    assert not stray and out.returncode in (0, 1), out.stdout + out.stderr
    assert [line.split(": error: ")[0] for line in canary] == ["canary.py:5"], canary
    return errors


@pytest.mark.parametrize("example", CHECKED, ids=str)
def test_example_type_checks(example, mypy_errors):
    errors = mypy_errors.get(example.module, [])
    # Report Markdown line numbers: "README.md:31: error: ...".
    shown = []
    for line in errors:
        m = re.match(r"[^:]+\.py:(\d+):(.*)", line)
        shown.append(f"{example.doc}:{example.line + int(m[1]) - 1}:{m[2]}" if m else line)
    if shown:
        pytest.fail("\n".join(shown), pytrace=False)


@pytest.mark.parametrize("example", CHECKED, ids=str)
def test_example_runs(example, tmp_path):
    if "gpu" in example.flags and not nnc.cuda_available():
        pytest.skip(f"needs a GPU: {nnc.cuda_unavailable_reason()}")
    script = tmp_path / f"{example.module}.py"
    script.write_text(example.code)
    try:
        out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                             text=True, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{example} did not finish within {RUN_TIMEOUT} s:\n{e.stdout}\n{e.stderr}")
    if out.returncode != 0:
        pytest.fail(f"{example} failed:\n{out.stdout}\n{out.stderr}", pytrace=False)
