"""tests/engine/c/engine_ops.c as a ctypes library, compiled once per test session (shared by
tests/engine/test_engine.py and tests/engine/test_engine_record.py); None without a C compiler."""

import ctypes
import pathlib
import subprocess
import tempfile

from nnc import embed
from nnc.engine.engine import CFUNC

ROOT = pathlib.Path(__file__).resolve().parents[2]
_lib = []


class EngineLib:
    """The library's functions as nnc.engine.engine.CFUNC objects."""

    def __init__(self, path):
        self.dll = ctypes.CDLL(str(path))
        for name in ("eng_noop", "eng_status", "eng_stamp", "eng_rs"):
            setattr(self, name[4:], CFUNC((name, self.dll)))
        self.rs_vals = self.dll.eng_rs_vals
        self.rs_vals.argtypes = [ctypes.c_void_p]
        self.rs_vals.restype = None


def engine_lib():
    if not _lib:
        cc = embed.compiler()
        if cc is None:
            _lib.append(None)
        else:
            out = pathlib.Path(tempfile.mkdtemp(prefix="nnc-engine-")) / "engine_ops.so"
            cmd = [*cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-shared", "-fPIC",
                   str(ROOT / "tests/engine/c/engine_ops.c"), "-o", str(out)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, " ".join(cmd) + "\n" + done.stderr
            _lib.append(EngineLib(out))
    return _lib[0]
