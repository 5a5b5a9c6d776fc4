"""docs/design.md's walks (one CPU convolution, one while iteration) name real code: every step's
function is defined in the file it names, and each heading's counts of files and returns are
those of its steps. Reads source text only: nothing is imported or run."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

# "### One CPU convolution, ... (7 files, 3 returns, 2 callbacks)" (", N callbacks" only where
# there are some), then numbered steps until the next heading; a callback's step says so after its
# function: "12. `path:name` (callback) — ...".
HEADING = re.compile(r"^### (?P<title>.+?) \((?P<files>\d+) files, (?P<returns>\d+) returns"
                     r"(?:, (?P<callbacks>\d+) callbacks)?\)$", re.M)
STEP = re.compile(r"^(?P<n>\d+)\. `(?P<path>[\w/.]+):(?P<name>[\w.]+)`(?P<cb> \(callback\))? — ",
                  re.M)
WALKS = ("One CPU convolution", "One while iteration")


def walk_sections(text):
    """{title: ((files, returns, callbacks), [(n, path, name, callback)])} of every counted
    heading in ``text``."""
    out = {}
    heads = list(HEADING.finditer(text))
    for h in heads:
        rest = text[h.end():]
        following = re.search(r"^#{2,3} ", rest, re.M)
        body = rest[:following.start()] if following else rest
        steps = [(int(m["n"]), m["path"], m["name"], m["cb"] is not None)
                 for m in STEP.finditer(body)]
        counts = (int(h["files"]), int(h["returns"]), int(h["callbacks"] or 0))
        out[h["title"]] = (counts, steps)
    return out


def count_walk(steps):
    """(files, returns, callbacks): distinct files; steps into a file the walk has been in
    before, callbacks apart (steps through one file in a row are one stay)."""
    seen, returns, callbacks, prev = set(), 0, 0, None
    for _, path, _, callback in steps:
        if path != prev and path in seen:
            if callback:
                callbacks += 1
            else:
                returns += 1
        seen.add(path)
        prev = path
    return len(seen), returns, callbacks


def defines(path, name):
    """Does ``path`` (relative to the repository) define ``name`` ("f" or "Class.method")?
    .pyx/.pxd: a def, cdef or cpdef of that name (a class for the part before the dot); .py: a
    def (a class likewise); .h: a C function definition."""
    src = (ROOT / path).read_text()
    *owner, fn = name.split(".")
    if path.endswith(".h"):
        # A C function definition: its name and "(" after a return type, at a line's start.
        return re.search(rf"^[a-z][\w \t*]*\b{re.escape(fn)}\s*\(", src, re.M) is not None
    if path.endswith((".pyx", ".pxd")):
        func = rf"^\s*(?:def|cdef|cpdef)\b[^\n(=]*?\b{re.escape(fn)}\s*\("
        cls = r"^\s*(?:cdef\s+)?class\s+{}\b"
    else:
        func = rf"^\s*(?:async\s+)?def\s+{re.escape(fn)}\s*\("
        cls = r"^\s*class\s+{}\b"
    if owner and not re.search(cls.format(re.escape(owner[0])), src, re.M):
        return False
    return re.search(func, src, re.M) is not None


def problems(text):
    """What is wrong with the walks in ``text`` (design.md's, or a test's)."""
    found = []
    sections = walk_sections(text)
    for want in WALKS:
        titles = [t for t in sections if t.startswith(want)]
        if len(titles) != 1:
            found.append(f"expected one counted heading starting {want!r}, found {titles}")
            continue
        counts, steps = sections[titles[0]]
        if [n for n, *_ in steps] != list(range(1, len(steps) + 1)) or len(steps) < 2:
            found.append(f"{titles[0]}: steps are not numbered 1..N")
        for n, path, name, _ in steps:
            if not (ROOT / path).is_file():
                found.append(f"{titles[0]}, step {n}: no file {path}")
            elif not defines(path, name):
                found.append(f"{titles[0]}, step {n}: {path} defines no {name}")
        if count_walk(steps) != counts:
            found.append(f"{titles[0]}: the heading says (files, returns, callbacks) {counts}; "
                         f"its steps make {count_walk(steps)}")
    return found


def test_design_walks_name_real_functions_and_count_right():
    assert problems(DESIGN.read_text()) == []


TWO_STEPS = """### One CPU convolution, from here (2 files, 0 returns)

1. `nnc/graph/graph.pyx:Graph.run` — in.
2. `nnc/run/run.pyx:{name}` — on.

### One while iteration on a stream (1 files, 0 returns)

1. `nnc/run/flow.pyx:_while` — a.
2. `nnc/run/flow.pyx:_part` — b.
"""


@pytest.mark.parametrize("name, why", [
    ("graph_run_on_stream", None),
    ("_no_such_function", "defines no _no_such_function"),
    ("Graph.graph_run_on_stream", "defines no Graph.graph_run_on_stream"),   # no such class
])
def test_walk_check_catches_a_missing_function(name, why):
    found = problems(TWO_STEPS.format(name=name))
    if why is None:
        assert found == []
    else:
        assert len(found) == 1 and why in found[0], found


def test_walk_check_catches_wrong_counts():
    text = TWO_STEPS.format(name="graph_run_on_stream").replace("(2 files, 0 returns)",
                                                                "(2 files, 1 returns)")
    assert any("its steps make (2, 0, 0)" in p for p in problems(text))
    assert count_walk([(1, "a", "f", False), (2, "b", "g", False), (3, "b", "h", False),
                       (4, "a", "f", False)]) == (2, 1, 0)
    # A callback into a file already visited is counted apart from the returns.
    assert count_walk([(1, "a", "f", False), (2, "b", "g", False), (3, "a", "h", True),
                       (4, "b", "g", False)]) == (2, 1, 1)


def test_walk_check_reads_callback_marks():
    text = TWO_STEPS.format(name="graph_run_on_stream").replace(
        "2. `nnc/run/run.pyx:graph_run_on_stream` —",
        "2. `nnc/run/run.pyx:graph_run_on_stream` (callback) —")
    (_, steps), = [v for k, v in walk_sections(text).items() if k.startswith("One CPU")]
    assert [s[3] for s in steps] == [False, True]
    # The convolution walk of design.md names its callbacks, and the target holds for it.
    (counts, _), = [v for k, v in walk_sections(DESIGN.read_text()).items()
                    if k.startswith("One CPU convolution")]
    assert counts[0] <= 7 and counts[1] <= 3, counts


def test_walk_check_reads_py_files_as_defs_only():
    assert defines("nnc/coro/scheduler.py", "Scheduler._step")
    assert not defines("nnc/coro/scheduler.py", "Scheduler.WaitFor")
