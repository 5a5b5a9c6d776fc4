"""Lint as a test (uvloop's test_sourcecode idea): ruff on Python, cython-lint on Cython."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _tool(name):
    path = shutil.which(name) or str(pathlib.Path(sys.executable).parent / name)
    if not pathlib.Path(path).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[test]' installs it)")
    return path


def test_ruff():
    out = subprocess.run([_tool("ruff"), "check", "nnc", "tests", "benchmarks"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_cython_lint():
    files = sorted(str(p) for ext in ("pyx", "pxd") for p in ROOT.glob(f"nnc/**/*.{ext}"))
    # cython-lint runs pycodestyle by name: put this interpreter's bin folder on PATH.
    env = dict(os.environ)
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    out = subprocess.run([_tool("cython-lint"), *files], cwd=ROOT, capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr


# -- the layer map (docs/design.md, "Layers"): a module imports only its own layer or lower ones.
# A module's layer is its folder's: the package tree is the map, so a new module is placed by
# where it lives. Bottom to top; the longest name that prefixes a module wins. A "*" stands for any
# one name: "nnc.cmd.*.gpu" is every command family's gpu/ folder.
LAYERS = {
    "nnc.base": 0, "nnc.coro": 0,       # core types, sync, debug, contexts; coroutines
    "nnc.tensor": 1,
    "nnc.cmd": 2, "nnc.ops": 2,         # the command registry; the built-in commands' backends
    "nnc.stream": 3,
    "nnc.cuda": 3,                      # beside layer 3: it registers itself into its tables
    "nnc.cmd.*.gpu": 3,                 # a family's GPU backends: they launch through nnc.cuda
    "nnc.graph": 4,
    "nnc.schedule": 5,
    "nnc.run": 6,
    "nnc.cuda.capture": 6,              # CUDA-graph capture of graph runs: a runner
    "nnc.cuda.graph": 6,                # capture's earlier path (the same module)
    "nnc": 7,                           # capi, engine, check, onnx, models, pipeline, tools
}
LAYER_NAMES = ["base", "tensor", "command", "stream", "graph", "schedule", "run", "top"]
# nnc.cuda and the families' gpu/ folders (the CUDA side) sit beside layer 3: the rest of layers
# 0-3 reaches them only through registries they fill.
CUDA_BLIND = 3
CUDA_SIDE = ("nnc.cuda", "nnc.cmd.*.gpu")

# Upward edges in files another change is rewriting now: (importing file, imported module).
# Each entry is a known violation to remove; the list must only shrink.
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _module_name(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _matches(module, key):
    """Whether dotted name ``module`` is ``key``, where a "*" part of key matches any one part."""
    parts, want = module.split("."), key.split(".")
    return len(parts) == len(want) and all(w in ("*", p) for p, w in zip(parts, want))


def _prefix_key(module, keys):
    """The key of ``keys`` naming the longest prefix of module (itself included), or None."""
    while module:
        for key in keys:
            if _matches(module, key):
                return key
        module = module.rpartition(".")[0]
    return None


def _layer(module):
    key = _prefix_key(module, LAYERS)
    return None if key is None else LAYERS[key]


def _cuda_side(module):
    """Whether module is nnc.cuda or a family's gpu/ folder, whichever layer it has."""
    return _prefix_key(module, CUDA_SIDE) is not None


def _is_module(name):
    rel = ROOT.joinpath(*name.split("."))
    return rel.is_dir() or any(rel.with_suffix(s).exists() for s in (".py", ".pyx", ".pxd"))


def _targets(base, names):
    """``from base import names``: each name that is a submodule, and base itself if any name
    is not (a name defined in base's own module or package ``__init__``)."""
    subs = [f"{base}.{n}" for n in names if _is_module(f"{base}.{n}")]
    return subs + ([base] if len(subs) < len(names) or not names else [])


def _py_imports(path, module=None):
    """(line, module) of every nnc import in a .py file, outside ``if TYPE_CHECKING:``;
    ``module``: the file's dotted name (default: from its path under the checkout)."""
    import ast

    out = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                out.extend((child.lineno, a.name) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    pkg = (module or _module_name(path)).split(".")
                    if path.name != "__init__.py":
                        pkg.pop()
                    base = ".".join(pkg[:len(pkg) - child.level + 1] + ([child.module]
                                                                        if child.module else []))
                else:
                    base = child.module
                out.extend((child.lineno, m)
                           for m in _targets(base, [a.name for a in child.names]))
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return [(line, m) for line, m in out if m == "nnc" or m.startswith("nnc.")]


def _cython_imports(path):
    """(line, module) of every nnc import or cimport in a .pyx/.pxd file: a small tokenizer
    that blanks strings and comments, then reads import statements (parenthesised ones too)."""
    import re

    text = path.read_text()
    # Blank string literals and comments, keeping the line breaks (so line numbers hold).
    token = re.compile(r'("""|\'\'\'|"|\')|(#)')
    out_chars, i = [], 0
    while i < len(text):
        m = token.search(text, i)
        if m is None:
            out_chars.append(text[i:])
            break
        out_chars.append(text[i:m.start()])
        if m.group(2):
            end = text.find("\n", m.start())
            end = len(text) if end < 0 else end
        else:
            quote = m.group(1)
            j = m.end()
            while True:
                k = text.find(quote, j)
                if k < 0:
                    k = len(text) - len(quote)
                    break
                if text[k - 1] != "\\" or text[k - 2] == "\\":
                    break
                j = k + 1
            end = k + len(quote)
        out_chars.append("".join(c if c == "\n" else " " for c in text[m.start():end]))
        i = end
    clean = "".join(out_chars)
    stmt = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+c?import[ \t]+(\([^)]*\)|[^\n]*)"
                      r"|c?import[ \t]+([^\n]*))", re.M)
    out = []
    for m in stmt.finditer(clean):
        line = clean.count("\n", 0, m.start()) + 1
        if m.group(1):
            names = [n.split()[0] for n in m.group(2).strip("()").replace("\n", " ").split(",")
                     if n.strip()]
            out.extend((line, t) for t in _targets(m.group(1), names))
        else:
            for part in m.group(3).split(","):
                if part.strip():
                    out.append((line, part.split()[0]))
    return [(line, m) for line, m in out if m == "nnc" or m.startswith("nnc.")]


def _layer_violations():
    found = []
    for path in sorted(ROOT.glob("nnc/**/*")):
        if path.suffix not in (".py", ".pyx", ".pxd"):
            continue
        me = _module_name(path)
        mine = _layer(me)
        rel = str(path.relative_to(ROOT))
        if mine is None:
            found.append(f"{rel}: module {me} has no layer in LAYERS")
            continue
        imports = _py_imports(path) if path.suffix == ".py" else _cython_imports(path)
        for line, target in imports:
            theirs = _layer(target)
            if theirs is None:
                found.append(f"{rel}:{line}: imports {target}, which has no layer in LAYERS")
                continue
            up = theirs > mine
            # Up to the CUDA side's layer nothing else may import it, though it sits at layer 3.
            if _cuda_side(target) and not _cuda_side(me):
                up = up or mine <= CUDA_BLIND
            if up and (rel, target) not in ALLOWED_UPWARD:
                found.append(f"{rel}:{line}: {me} (layer {mine} {LAYER_NAMES[mine]}) imports "
                             f"{target} (layer {theirs} {LAYER_NAMES[theirs]})")
    return found


def test_layers_import_only_downward():
    """No module imports a higher layer, at module or function level (docs/design.md)."""
    found = _layer_violations()
    assert not found, "upward imports:\n" + "\n".join(found)


def _docstring(path):
    import ast

    return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_the_package_tree_is_the_layer_map():
    """nnc/ holds folders (and the package's own files: __init__, __main__, the C headers and
    the top layer's tools), no compiled module; each folder's __init__ docstring begins with
    the layer LAYERS gives it ("Layer 3 stream. ...")."""
    pkg = ROOT / "nnc"
    top_modules = sorted(p.name for p in pkg.glob("*.pyx"))
    assert top_modules == [], f"compiled modules at the top of nnc/: {top_modules}"
    for folder in sorted(p for p in pkg.iterdir() if p.is_dir() and p.name != "__pycache__"):
        if folder.name == "cuda" or not any(folder.glob("*.py*")):
            continue                    # kernels only, or nnc.cuda (checked below)
        init = folder / "__init__.py"
        assert init.exists(), f"{folder.relative_to(ROOT)} has no __init__.py saying its layer"
        n = _layer(f"nnc.{folder.name}")
        assert _docstring(init).startswith(f"Layer {n} "), \
            f"{init.relative_to(ROOT)}'s docstring must begin 'Layer {n} {LAYER_NAMES[n]}.'"
    assert "Layer 3" in _docstring(pkg / "cuda" / "__init__.py"), \
        "nnc/cuda/__init__.py's docstring must state its layer"


def test_long_files_say_why_they_are_one_file():
    """A source file under nnc/ over 750 lines states at its top why it is one file ("One file of
    ~N lines because ..."), so a split is decided, not drifted into."""
    long = []
    for p in sorted((ROOT / "nnc").rglob("*")):
        if p.suffix not in (".py", ".pyx", ".pxd") or p.name.endswith(("_api.h",)):
            continue
        lines = p.read_text().splitlines()
        if len(lines) > 750 and not any("One file of" in ln for ln in lines[:25]):
            long.append(f"{p.relative_to(ROOT)} ({len(lines)} lines)")
    assert not long, f"over 750 lines with no reason at the top: {long}"


def test_design_table_is_the_layer_map():
    """docs/design.md's layer table names every folder of LAYERS at its layer, and nothing else."""
    import re

    text = (ROOT / "docs" / "design.md").read_text()
    table = text[text.index("| layer | folder |"):]
    table = table[:table.index("\n\n")]
    found = set()
    for row in table.splitlines()[2:]:
        layer_cell, folder_cell = row.split("|")[1:3]
        n = int(layer_cell.split()[0])
        for path in re.findall(r"`(nnc/[\w/.*]*)`", folder_cell):
            dotted = path.rstrip("/").removesuffix(".py").replace("/", ".")
            found.add((dotted, n))
    want = set(LAYERS.items())
    assert want <= found, f"missing from docs/design.md's table: {sorted(want - found)}"
    extra = {(m, n) for m, n in found - want if _layer(m) != n}
    assert not extra, f"docs/design.md's table puts these at the wrong layer: {sorted(extra)}"


def test_layer_allowlist_is_current():
    """Each allowed upward edge still exists: a removed one must leave the list."""
    seen = set()
    for path in ROOT.glob("nnc/**/*"):
        if path.suffix in (".py", ".pyx", ".pxd"):
            rel = str(path.relative_to(ROOT))
            imports = _py_imports(path) if path.suffix == ".py" else _cython_imports(path)
            seen.update((rel, t) for _line, t in imports)
    stale = sorted(ALLOWED_UPWARD - seen)
    assert not stale, f"remove these from ALLOWED_UPWARD, they are gone: {stale}"


def test_the_import_reader_sees_every_form(tmp_path):
    """The layer test can fail: the reader finds imports at any depth, parenthesised cimports,
    ``from package import submodule``, and skips strings, comments and TYPE_CHECKING blocks."""
    pyx = tmp_path / "x.pyx"
    pyx.write_text('"""from nnc.run.run import x"""\n# import nnc.capi.capi\n'
                   "from nnc.cmd.command cimport (\n    Cmd,\n)\ns = 'import nnc.onnx'\n"
                   "def f():\n    from nnc import cuda, Tensor\n    import nnc.run.tools as t\n"
                   "    cimport nnc.stream.stream\n")
    assert _cython_imports(pyx) == [(3, "nnc.cmd.command"), (8, "nnc.cuda"), (8, "nnc"),
                                    (9, "nnc.run.tools"), (10, "nnc.stream.stream")]
    py = tmp_path / "probe.py"
    py.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import nnc.capi.capi\n"
                  "def f():\n    from . import case_of\n    from nnc.graph.graph import Graph\n")
    assert _py_imports(py, "nnc.graph.probe") == [(5, "nnc.graph.case_of"),
                                                  (6, "nnc.graph.graph")]
    assert _layer("nnc.run.flow") == 6 and _layer("nnc.cuda.memory") == 3
    assert _layer("nnc.cmd.gemm.gpu.cublas") == 3 and _layer("nnc.cmd.gemm.cpu_opt") == 2
    assert _layer("nnc.cmd.gpu") == 2 and _layer("nnc.cuda.capture.x") == 6


def test_the_cuda_side_is_fenced(monkeypatch, tmp_path):
    """The layer test can fail on the CUDA side's rule: a layer-2 family module importing its
    gpu/ folder, and a stream module (layer 3, the gpu/ folders' own layer) importing one, are
    both reported; the gpu/ folder itself may import nnc.cuda."""
    family = tmp_path / "nnc" / "cmd" / "fam"
    (family / "gpu").mkdir(parents=True)
    (tmp_path / "nnc" / "stream").mkdir()
    (family / "__init__.py").write_text("from nnc.cmd.fam.gpu import ref\n")
    (family / "gpu" / "__init__.py").write_text("")
    (family / "gpu" / "ref.py").write_text("from nnc.cuda import runner\n")
    (tmp_path / "nnc" / "stream" / "probe.py").write_text("import nnc.cmd.fam.gpu.ref\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = _layer_violations()
    assert len(found) == 2, found
    assert found[0].startswith("nnc/cmd/fam/__init__.py:1: nnc.cmd.fam (layer 2 command) imports "
                               "nnc.cmd.fam.gpu.ref (layer 3 stream)"), found
    assert found[1].startswith("nnc/stream/probe.py:1: nnc.stream.probe (layer 3 stream) imports "
                               "nnc.cmd.fam.gpu.ref"), found
