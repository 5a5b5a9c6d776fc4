"""Compiler and linker flags for C programs that embed nnc through nnc/nnc.h (docs/capi.md).

``python -m nnc.embed --cflags --ldflags`` prints them, like ``python3-config --embed`` but for
the Python running it (a virtual environment's python reports its base interpreter's headers and
library, which is what an embedding program links against) plus nnc's own header folder.
``python -m nnc.embed --python`` prints the interpreter to give the program as ``NNC_PYTHON``,
so the embedded Python finds this environment's packages (nnc among them).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import sysconfig

from nnc.base.core import get_include


def cflags() -> list[str]:
    """-I flags for Python.h and nnc.h."""
    return [f"-I{sysconfig.get_paths()['include']}", f"-I{get_include()}"]


def ldflags() -> list[str]:
    """Flags linking libpython (shared: with an rpath; static: exporting its symbols to
    extension modules, as python3-config --embed does)."""
    var = sysconfig.get_config_var
    flags = [f"-L{var('LIBDIR')}"]
    if var("Py_ENABLE_SHARED"):
        flags.append(f"-Wl,-rpath,{var('LIBDIR')}")
    else:
        flags += [f"-L{var('LIBPL')}", *shlex.split(var("LINKFORSHARED") or "")]
    flags.append(f"-lpython{var('LDVERSION')}")
    flags += shlex.split(var("LIBS") or "") + shlex.split(var("SYSLIBS") or "")
    return flags + ["-lpthread", "-lm"]


def compiler() -> list[str] | None:
    """The C compiler: Python's own (sysconfig CC) if present, else cc; None if neither."""
    cc = shlex.split(sysconfig.get_config_var("CC") or "")
    if cc and shutil.which(cc[0]):
        return cc
    found = shutil.which("cc")
    return [found] if found else None


def environment() -> dict[str, str]:
    """Environment for running an embedding program: NNC_PYTHON names this interpreter."""
    return {**os.environ, "NNC_PYTHON": sys.executable}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nnc.embed", description=__doc__.split("\n")[0])
    parser.add_argument("--cflags", action="store_true", help="print the compiler flags")
    parser.add_argument("--ldflags", action="store_true", help="print the linker flags")
    parser.add_argument("--python", action="store_true", help="print the value for NNC_PYTHON")
    args = parser.parse_args(argv)
    out = []
    if args.cflags:
        out += cflags()
    if args.ldflags:
        out += ldflags()
    if args.python:
        out.append(sys.executable)
    if not out:
        parser.print_usage()
        return 0
    print(" ".join(shlex.quote(x) for x in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
