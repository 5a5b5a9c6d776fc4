"""Workloads of benchmarks/engine.py: dependency shapes, RandSumExpr, and its C functions.

A *shape* is a list of ops, each a pair ``(reads, writes)`` of tuples of variable indices, as
they would be pushed to ``nnc.Engine.push(fn, read=..., mutate=...)``: no index twice in one
op and none in both. ``dependencies`` turns a shape into the per-op lists of earlier ops that
an executor without read/mutate sets (dask, a thread pool) must wait for.
"""

import atexit
import ctypes
import pathlib
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from nnc import embed

HERE = pathlib.Path(__file__).resolve().parent

RANDSUM_VARS = 100
MAX_READS = 19


def shape_none(n):
    """``n`` ops touching no variable: nothing orders them."""
    return [((), ())] * n


def shape_chain(n):
    """``n`` ops all mutating variable 0: each waits for the one before."""
    return [((), (0,))] * n


def randsum_workloads(n, seed, spin_us=(1, 9), sleep=False):
    """MXNet's RandSumExpr (its tests/cpp/engine/threaded_engine_test.cc): ``n`` workloads over 100
    variables, each a uniformly drawn target, 2-19 uniformly drawn reads (which may repeat and may
    include the target) and ``spin_us`` microseconds of work, drawn uniformly between the two bounds
    (``(0, 0)``: none): busy-waiting, or with ``sleep`` a sleep, as MXNet's test does (the value is
    then negative: engine_ops.c sleeps -spin_ns). Returns
    ``[(target, reads, spin_ns)]``."""
    rng = random.Random(seed)
    lo, hi = spin_us
    out = []
    for _ in range(n):
        target = rng.randrange(RANDSUM_VARS)
        reads = tuple(rng.randrange(RANDSUM_VARS) for _ in range(rng.randint(2, MAX_READS)))
        out.append((target, reads, rng.randint(lo, hi) * (-1000 if sleep else 1000)))
    return out


def randsum_shape(workloads):
    """The read/mutate sets MXNet pushes a workload with: its distinct reads except the
    target (the target is read too, but a variable may not be in both sets), and the
    target."""
    shape = []
    for target, reads, _ in workloads:
        distinct = tuple(dict.fromkeys(r for r in reads if r != target))
        shape.append((distinct, (target,)))
    return shape


def randsum_serial(workloads):
    """The final 100 values of a serial run, in Python floats (the same IEEE operations in
    the same order as the C function, so bit-identical to it)."""
    v = [1.0] * RANDSUM_VARS
    for target, reads, _ in workloads:
        s = 0.0
        for r in reads:
            s += v[r]
        v[target] = s / (len(reads) + 1)
    return v


def dependencies(shape):
    """For each op, the earlier ops it must wait for under the engine's rules: the last
    writer of every variable it reads (read after write); for every variable it writes, the
    last writer (write after write) and every reader since (write after read). Sorted, no
    duplicates."""
    last_writer = {}
    readers = {}
    deps = []
    for i, (reads, writes) in enumerate(shape):
        d = set()
        for r in reads:
            if r in last_writer:
                d.add(last_writer[r])
            readers.setdefault(r, []).append(i)
        for w in writes:
            if w in last_writer:
                d.add(last_writer[w])
            d.update(readers.pop(w, ()))
            last_writer[w] = i
        d.discard(i)
        deps.append(tuple(sorted(d)))
    return deps


def order_respects(order, deps):
    """Whether ``order`` (op indices in the order their bodies ran) runs every op exactly
    once and each after all of its dependencies."""
    if sorted(order) != list(range(len(deps))):
        return False
    pos = {op: k for k, op in enumerate(order)}
    return all(pos[d] < pos[i] for i, ds in enumerate(deps) for d in ds)


class RandSumOp(ctypes.Structure):
    """benchmarks/engine_ops.c's randsum_op_t."""

    _fields_ = [
        ("vars", ctypes.POINTER(ctypes.c_double)),
        ("target", ctypes.c_int),
        ("n", ctypes.c_int),
        ("reads", ctypes.c_int * MAX_READS),
        ("spin_ns", ctypes.c_int),
    ]


class RandSumBuffers:
    """One executor's own copy of a RandSumExpr run: the 100 doubles and the array of C op
    structs pointing at them (so executors timed in turn never share memory)."""

    def __init__(self, workloads):
        self.vars = (ctypes.c_double * RANDSUM_VARS)()
        self.ops = (RandSumOp * len(workloads))()
        base = ctypes.cast(self.vars, ctypes.POINTER(ctypes.c_double))
        for op, (target, reads, spin_ns) in zip(self.ops, workloads):
            op.vars = base
            op.target = target
            op.n = len(reads)
            op.reads[:len(reads)] = reads
            op.spin_ns = spin_ns
        size = ctypes.sizeof(RandSumOp)
        start = ctypes.addressof(self.ops)
        # the ``arg`` of each op's C call: the address of its struct
        self.args = [start + k * size for k in range(len(workloads))]
        self.reset()

    def reset(self):
        ctypes.memmove(self.vars, _ONES, ctypes.sizeof(self.vars))

    def values(self):
        return list(self.vars)


_ONES = (ctypes.c_double * RANDSUM_VARS)(*([1.0] * RANDSUM_VARS))


class COps:
    """The functions of benchmarks/engine_ops.c, compiled into a shared library in a
    temporary folder. ``COps.load()`` returns ``(ops, None)`` or ``(None, reason)``."""

    def __init__(self, lib, path):
        self.lib = lib
        self.path = path
        lib.nnc_bench_randsum.argtypes = [ctypes.c_void_p]
        lib.nnc_bench_randsum.restype = ctypes.c_int
        lib.nnc_bench_randsum_serial.argtypes = [ctypes.POINTER(RandSumOp), ctypes.c_int]
        lib.nnc_bench_randsum_serial.restype = ctypes.c_int
        lib.nnc_bench_spin_check.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.nnc_bench_spin_check.restype = ctypes.c_double
        # ctypes calls of these release the GIL while C runs
        self.randsum = lib.nnc_bench_randsum
        self.serial = lib.nnc_bench_randsum_serial

    def engine_fns(self, cfunc):
        """The two functions as the engine's C function type ``cfunc``."""
        noop = ctypes.cast(self.lib.nnc_bench_noop, cfunc)
        randsum = ctypes.cast(self.lib.nnc_bench_randsum, cfunc)
        return noop, randsum

    def spin_check_ns(self, ns, count=2000):
        return self.lib.nnc_bench_spin_check(ns, count)

    @classmethod
    def load(cls):
        cc = embed.compiler()
        if cc is None:
            return None, "no C compiler found (sysconfig CC or cc): C function rows skipped"
        tmp = tempfile.mkdtemp(prefix="nnc_engine_bench_")
        # removing a loaded library's file is harmless on POSIX; the mapping stays
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        suffix = sysconfig.get_config_var("SHLIB_SUFFIX") or ".so"
        path = pathlib.Path(tmp) / f"engine_ops{suffix}"
        cmd = [*cc, "-std=c11", "-O2", "-fPIC", "-shared", str(HERE / "engine_ops.c"),
               "-o", str(path)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"compiling benchmarks/engine_ops.c failed: {exc}"
        if out.returncode != 0:
            return None, ("compiling benchmarks/engine_ops.c failed: "
                          + (out.stderr.strip().splitlines() or ["?"])[-1])
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            return None, f"loading {path} failed: {exc}"
        return cls(lib, path), None


def warn(msg):
    print(f"benchmarks.engine: {msg}", file=sys.stderr)
