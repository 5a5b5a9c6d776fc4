"""The C API (nnc/capi/capi.pyx through nnc/nnc.h), exercised from C programs compiled here.

- examples/embed/graph.c: NNC's parallel graph (parallel.tests.c, d2 = -1.473017), the
  count-based while (while.tests.c, 0.5729198), a while over multiviews whose node's tensors
  nnc_graph_exec_set_io replaced (2365.4366), a while with a carry-over whose C expression
  reads a tensor (2.1090609) and the piece-wise case..of (case_of.tests.c), each scheduled and
  run on a CPU stream.
- examples/embed/backend.c: C backends for a new and an existing command; two streams run the
  new one on two threads at overlapping times (from timestamps the backend records); a backend
  that splits its work over nnc's pool with nnc_parallel_for.
- tests/capi/c/safety.c: bad calls return error codes and messages; several C threads at once.
- tests/capi/c/concrete.c: nnc_graph_exec_set_io, multiviews, backends with a user context,
  the engine from C and GPU stream kinds, with their misuse.
- tests/capi/c/schedule.c: partial static schedules (schedule.tests.c) and their bad calls.
- tests/capi/c/tools.c: the graph tools (topsort, profile, autotune, simplify, freeze, memory,
  dot), node backends, tensor formats and helpers, signals from the host, stream callbacks and
  the thread settings, with their misuse.
- tests/capi/c/part_api.c: nnc_parallel_for parts that call the C API while the backend's caller
  holds the GIL (synchronous calls from C and from Python) and on a stream.

The programs embed Python (nnc.embed gives the flags) and are told this interpreter through
NNC_PYTHON, so the embedded Python sees this environment's packages. Skipped, with the reason,
only when no C compiler exists.
"""

import pathlib
import re
import shutil
import subprocess

import pytest

import nnc
from nnc import embed

ROOT = pathlib.Path(__file__).resolve().parents[2]
CC = embed.compiler()
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (sysconfig CC or cc) found")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("capi")

    def compile_(source):
        exe = out / pathlib.Path(source).stem
        cmd = [*CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", str(ROOT / source),
               "-o", str(exe), *embed.cflags(), *embed.ldflags()]
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, " ".join(cmd) + "\n" + done.stderr
        return exe

    return compile_


def run(exe, timeout=120, **env):
    done = subprocess.run([str(exe)], capture_output=True, text=True,
                          env={**embed.environment(), **env}, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


@needs_cc
def test_embed_example_parallel_while_carry_over_case_of(build):
    rc, out = run(build("examples/embed/graph.c"))
    assert rc == 0, out
    assert re.search(r"parallel d2 \(scheduled\)\s+= -1\.47301", out), out
    assert "parallel schedule: 2 streams" in out
    assert out.count("while z (scheduled)          = 0.5729198") == 2, out
    assert out.count("carry-over z2") == 2 and out.count("= 2.10906") == 2, out
    # nnc_graph_exec_set_io twice, onto multiviews, then the loop: sequential and scheduled.
    assert out.count("set_io while x") == 3 and out.count("= 2365.436") == 3, out
    assert out.rstrip().endswith("OK")


@needs_cc
def test_c_backend_runs_on_two_streams_at_once(build):
    rc, out = run(build("examples/embed/backend.c"))
    assert rc == 0, out
    assert "two streams, nnc_cmd_exec: 2 calls, threads different" in out, out
    assert "scheduled graph: 2 calls, threads different" in out, out
    assert "EWSUM through C_SUM: 6 8 10 12, 1 call(s)" in out, out
    assert "signal: s[1] computed 3 6 9 12" in out, out
    # A C backend split with nnc_parallel_for: right results synchronously and on a stream,
    # NULL and negative arguments refused (how many threads took parts depends on the pool).
    assert "parallel_for: results ok," in out and "NULL fn -102, -1 parts -105" in out, out


@needs_cc
def test_bad_calls_return_error_codes(build):
    rc, out = run(build("tests/capi/c/safety.c"))
    assert rc == 0, out
    assert not re.search(r"^FAIL ", out, re.M), out
    assert re.search(r"^(\d+) checks, 0 failed$", out, re.M), out


@needs_cc
def test_partial_schedules_from_c(build):
    """schedule.tests.c's partial case from C: a schedule per chain runs that chain only; bad
    calls (NULL, freed and mistyped handles, another graph's schedule or node, no path, a
    stale schedule) return their codes."""
    rc, out = run(build("tests/capi/c/schedule.c"))
    assert rc == 0, out
    assert not re.search(r"^FAIL ", out, re.M), out
    assert re.search(r"^(\d+) checks, 0 failed$", out, re.M), out


@needs_cc
def test_parallel_for_parts_call_the_api_while_the_caller_holds_the_gil(build):
    """A part on a pool thread takes the GIL in every C API call; a synchronous caller holds
    it around the backend, so nnc_parallel_for must not keep it while it waits for that part
    (a deadlock: the program never ends). Four pool threads, so helpers exist on any machine."""
    exe = build("tests/capi/c/part_api.c")
    try:
        rc, out = run(exe, timeout=30, NNC_NUM_THREADS="4")
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"deadlock: parts calling the C API never finished\n{e.stdout}")
    assert rc == 0, out
    for how in ("nnc_cmd_exec, no stream", "nnc_graph_run, no stream",
                "nnc_graph_run on a stream", "nnc_cmd_exec on a stream"):
        assert f"{how}: rc 0, results ok" in out, out
    assert "Backend.exec from Python: results ok" in out, out
    assert "g.run() from Python: results ok" in out, out
    assert out.rstrip().endswith("OK"), out


@needs_cc
def test_set_io_multiviews_backend_context_engine_gpu_streams(build):
    """tests/capi/c/concrete.c: each call does what Python's does and every bad call gets its
    code (the program prints one line per check); ops still queued on an engine are run
    before nnc_finalize returns; a GPU stream is made where CUDA works, else NNC_ERROR_CUDA."""
    exe = build("tests/capi/c/concrete.c")
    try:
        rc, out = run(exe, timeout=60)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hang\n{e.stdout}")
    assert rc == 0, out
    assert not re.search(r"^FAIL ", out, re.M), out
    assert re.search(r"^(\d+) checks, 0 failed$", out, re.M), out
    assert "ok   late == 200" in out, out
    want = 0 if nnc.cuda_available() else -115
    assert f"gpu stream: {want}" in out, out


@needs_cc
def test_graph_tools_tensor_helpers_callbacks_threads(build):
    """tests/capi/c/tools.c: each function does what its Python counterpart does (topsort's
    order is not the creation order, a frozen weight leaves the caller's memory, a resize that
    grows copies, a failing callback fails the stream), and every bad call gets its code
    (buffers too small, counts out of range, a signal wait on a pool thread); a GPU tensor is
    made where CUDA works, else NNC_ERROR_CUDA."""
    exe = build("tests/capi/c/tools.c")
    try:
        rc, out = run(exe, timeout=60)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hang\n{e.stdout}")
    assert rc == 0, out
    assert not re.search(r"^FAIL ", out, re.M), out
    assert re.search(r"^(\d+) checks, 0 failed$", out, re.M), out
    want = 0 if nnc.cuda_available() else -115
    assert f"gpu zeros: {want}" in out, out


def test_header_signatures_match_the_exported_functions():
    """nnc.h declares each function twice (C parameters and the capsule signature nnc_init
    checks); both must agree with what nnc.capi.capi exports, so no C caller can mis-call one."""
    import nnc.capi.capi as capi

    text = (ROOT / "nnc" / "nnc.h").read_text()
    exported = {name: re.search(r'"(.*)"', repr(cap)).group(1)
                for name, cap in capi.__pyx_capi__.items()}
    body = text[text.index("#define NNC__FUNCTIONS(X)"):text.index("/* The function pointers")]
    body = re.sub(r'"\s*\\?\s*\n\s*"', "", body.replace("\\\n", "\n"))
    entries = re.findall(r'X\((\w+),\s*\(([^)]*)\),\s*\([^)]*\),\s*"([^"]*)"\)', body)
    declared = {name: sig for name, _params, sig in entries}
    assert set(declared) | {"nnc_error_message"} == set(exported)
    for name, params, sig in entries:
        assert exported[name] == sig, name
        assert _c_signature(params) == sig, name


def _c_signature(params):
    """'const char* name, int n' -> 'int (char const *, int)': Cython's capsule spelling."""
    out = []
    for p in params.split(","):
        words = p.replace("*", " * ").split()
        if words != ["void"]:
            words = words[:-1]  # drop the parameter's name
        const = "const" in words
        base = [w for w in words if w not in ("const", "*")]
        stars = words.count("*")
        out.append(" ".join(base) + (" const" if const else "") + (" " + "*" * stars
                                                                    if stars else ""))
    return f"int ({', '.join(out)})"


def test_handles_and_parameters_from_python():
    """The parameter parser accepts literals only; the handle table starts empty here."""
    import nnc.capi.capi as capi

    assert capi.parse_params("a=0.5, size=(2, 2)") == {"a": 0.5, "size": (2, 2)}
    assert capi.parse_params("  ") == {}
    for bad in ("a=len('x')", "0.5", "**{'a': 1}", "a=1), (b"):
        with pytest.raises(ValueError):
            capi.parse_params(bad)
    assert capi.live_handles() == 0


def test_embed_flags():
    assert any(f.endswith(nnc.get_include()) for f in embed.cflags())
    assert (pathlib.Path(nnc.get_include()) / "nnc.h").exists()
    assert (pathlib.Path(nnc.get_include()) / "nnc_types.h").exists()
    assert any(f.startswith("-lpython") for f in embed.ldflags())


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler (c++) found")
def test_header_compiles_as_cxx(tmp_path):
    """nnc.h is usable from C++ too (extern "C", no C-only constructs)."""
    src = tmp_path / "use.cc"
    src.write_text('#include "nnc.h"\n'
                   "int f() { nnc_graph_h g; int rc = nnc_graph_new(&g);\n"
                   "  return rc ? rc : nnc_graph_free(g); }\n")
    done = subprocess.run(["c++", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", str(src),
                           *embed.cflags()], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@needs_cc
def test_tensor_write_read_from_c_in_nncs_schema(build, tmp_path):
    """nnc_tensor_write / nnc_tensor_read round trip and refusals (tests/capi/c/tensor_io.c);
    the row C wrote decodes by hand as NNC's: 12 little-endian int32 dims, raw float32 data."""
    import sqlite3
    import struct

    import numpy as np

    db = tmp_path / "c.sqlite3"
    exe = build("tests/capi/c/tensor_io.c")
    done = subprocess.run([str(exe), str(db)], capture_output=True, text=True,
                          env=embed.environment(), timeout=120)
    rc, out = done.returncode, done.stdout + done.stderr
    assert rc == 0, out
    assert not re.search(r"^FAIL ", out, re.M), out
    assert re.search(r"^(\d+) checks, 0 failed$", out, re.M), out
    con = sqlite3.connect(db)
    rows = con.execute("SELECT name, type, format, datatype, dim, data FROM tensors").fetchall()
    con.close()
    assert len(rows) == 1
    name, kind, fmt, datatype, dim, data = rows[0]
    assert (name, kind, fmt, datatype) == ("x", 0x1, 0x02, 0x04000)
    assert struct.unpack("<12i", dim) == (2, 3, 4) + (0,) * 9
    want = np.arange(24, dtype="<f4") * 0.5 - 3.0
    assert np.array_equal(np.frombuffer(data, "<f4"), want)
