"""The machine's limits, measured in the calling process, and a graph's work against them.

A time alone says little across machines; a time as a multiple of what the machine can do says
how far a runtime is from the hardware. ``python -m nnc demo --streams`` and the benchmarks
(``benchmarks/_limits.py`` re-exports this module) print their times that way.
``measure_limits`` measures, in the calling process:

- the FMA peak at each thread count (``nnc.base.isa.fma_gflops``): T threads each running
  independent float32 FMA chains at the kernel level nnc dispatches, no memory traffic: what no
  kernel exceeds, and the yardstick of ``x limit``;
- the single-precision GEMM peak at each thread count: a square float32 GEMM (``n`` x ``n`` by
  ``n`` x ``n``, 2*n^3 operations) through ``nnc.base.openblas.gemm``, the OpenBLAS nnc's C
  backends multiply with, kept at one OpenBLAS thread as nnc keeps it. At T threads, T Python
  threads each run their own GEMM at once (the call releases the GIL), as nnc's pool runs the
  parts of a split convolution; a round's GFLOP/s is T*2*n^3 over the round's wall time. One
  untimed round warms up, then rounds run for ``seconds`` (at least ``rounds``); the best counts;
- the memory bandwidth, one thread: a NumPy copy of ``nbytes`` (far larger than any L3 cache),
  counted as the bytes read plus the bytes written, and a read-only reduction (``max``) over the
  same bytes; the best of ``rounds`` after a warm-up that also faults the pages in
  (``read_bandwidth_gbs(T)``, outside ``measure_limits``: T threads reducing their own share of
  the bytes at once, the memory's rate for T cores, which a benchmark of T threads compares
  with);
- the CPU model, the ISA features it reports (``/proc/cpuinfo``), nnc's OpenBLAS build string
  and the core its run-time dispatch chose, and ``OPENBLAS_CORETYPE`` when the environment sets
  it (a pin to an older core, ``Haswell`` on an AVX-512 machine, slows OpenBLAS; the reports
  name it and never change it).

``graph_gflop`` counts a graph's work: 2*M*N*K per CONVOLUTION and GEMM node, the operations a
``x limit`` figure divides by the peak. ``x_limit(ms, gflop, gflops)`` is a time as a multiple of
that ideal time (1.0: the whole graph at the measured FMA peak; other nodes count as zero).
``peak_gflops`` is that FMA peak (the SGEMM peak for limits measured before it was).
"""

from __future__ import annotations

import gc
import math
import os
import platform
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from nnc.base import isa
from nnc.base import openblas as cpu_blas

#: ISA features worth naming, in order (x86-64 from ``flags``, aarch64 from ``Features``).
ISA_FEATURES = ("sse2", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq",
                "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "amx_tile", "amx_bf16", "asimd", "asimdhp", "asimddp", "sve", "sve2")

# Words of OpenBLAS's config string that are build options, not the core's name.
_BUILD_WORDS = {"DYNAMIC_ARCH", "NO_AFFINITY", "USE64BITINT", "NO_LAPACK", "NO_LAPACKE",
                "NO_CBLAS", "SMP", "USE_OPENMP", "NO_AVX512", "NO_AVX2", "NO_AVX"}


def cpu_model():
    """The CPU's model name from /proc/cpuinfo (or what platform knows elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_features():
    """The ISA features of ``ISA_FEATURES`` the CPU reports in /proc/cpuinfo, in that order
    (empty where the file does not exist)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    have = set(value.split())
                    return [x for x in ISA_FEATURES if x in have]
    except OSError:
        pass
    return []


def openblas_core(config=None):
    """The core OpenBLAS's run-time dispatch chose, read from its config string (a
    DYNAMIC_ARCH build names it after the build options: "... DYNAMIC_ARCH NO_AFFINITY
    SkylakeX MAX_THREADS=64"), or None when the string names none."""
    config = cpu_blas.config if config is None else config
    words = config.split()[2:]              # "OpenBLAS", the version, then options and core
    if "DYNAMIC_ARCH" not in words:
        return None
    names = [w for w in words if "=" not in w and w not in _BUILD_WORDS]
    return names[-1] if names else None


def sgemm_gflops(threads, n=1024, seconds=0.5, rounds=3):
    """The best GFLOP/s of ``threads`` concurrent single-threaded n x n float32 GEMMs."""
    rng = np.random.default_rng(0)
    mats = [(rng.standard_normal((n, n), dtype=np.float32),
             rng.standard_normal((n, n), dtype=np.float32),
             np.empty((n, n), np.float32)) for _ in range(threads)]
    flop = threads * 2.0 * n ** 3
    with ThreadPoolExecutor(max_workers=threads) as pool:
        def one_round():
            if threads == 1:
                cpu_blas.gemm(*mats[0])
            else:
                # list() waits for every GEMM and re-raises the first failure
                list(pool.map(lambda abc: cpu_blas.gemm(*abc), mats))

        one_round()
        best = math.inf
        done = 0
        end = time.perf_counter() + seconds
        while done < rounds or time.perf_counter() < end:
            t0 = time.perf_counter()
            one_round()
            best = min(best, time.perf_counter() - t0)
            done += 1
    return flop / best / 1e9


def _best_seconds(fn, rounds):
    """The shortest of ``rounds`` timed calls of ``fn`` after one untimed call, with the garbage
    collector off while timing (as ``timeit`` does)."""
    fn()
    enabled = gc.isenabled()
    gc.disable()
    try:
        best = math.inf
        for _ in range(rounds):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
    finally:
        if enabled:
            gc.enable()
    return best


def bandwidth_gbs(nbytes=256 << 20, rounds=5):
    """One thread's memory bandwidth in GB/s: {"copy": bytes read + written per second of a
    NumPy copy, "read": bytes read per second of a max-reduction}."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    copy_s = _best_seconds(lambda: np.copyto(dst, src), rounds)
    read_s = _best_seconds(src.max, rounds)
    return {"copy": 2.0 * src.nbytes / copy_s / 1e9, "read": src.nbytes / read_s / 1e9}


def read_bandwidth_gbs(threads, nbytes=256 << 20, rounds=5):
    """Bytes read per second, in GB/s, by ``threads`` threads at once, each max-reducing its
    own ``nbytes / threads`` (NumPy lets go of the GIL in the reduction): what several cores
    together draw from memory, which one thread alone does not reach."""
    threads = int(threads)
    if threads < 1 or nbytes < 4 * threads or rounds < 1:
        raise ValueError("read_bandwidth_gbs: threads, rounds and nbytes / threads must be "
                         "positive")
    if threads == 1:
        return bandwidth_gbs(nbytes, rounds)["read"]
    parts = [np.ones(nbytes // 4 // threads, np.float32) for _ in range(threads)]

    def once():
        start = threading.Barrier(threads + 1)
        done = []

        def reduce(a):
            start.wait()
            a.max()
            done.append(time.perf_counter())

        pool = [threading.Thread(target=reduce, args=(a,)) for a in parts]
        for t in pool:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in pool:
            t.join()
        return max(done) - t0

    once()
    seconds = min(once() for _ in range(rounds))
    return sum(a.nbytes for a in parts) / seconds / 1e9


def measure_limits(threads=(1, 2), seconds=0.5, n=1024, nbytes=256 << 20):
    """The machine's limits (module docstring), measured now, in this process.

    ``threads``: the thread counts to measure the GEMM peak at; ``seconds``: the time spent on
    each; ``n``: the GEMM's size; ``nbytes``: the bytes each bandwidth pass reads. Returns a
    dict of plain JSON values: ``sgemm_gflops`` maps str(thread count) -> GFLOP/s."""
    threads = sorted({int(t) for t in threads})
    if not threads or threads[0] < 1:
        raise ValueError(f"measure_limits: thread counts must be positive, not {threads!r}")
    if n < 1 or nbytes < 4 or seconds < 0:
        raise ValueError("measure_limits: n and nbytes must be positive, seconds at least 0")
    t0 = time.perf_counter()
    fma = {str(t): isa.fma_gflops(t, min(seconds, 0.3)) for t in threads}
    peaks = {str(t): sgemm_gflops(t, n, seconds) for t in threads}
    bandwidth = bandwidth_gbs(nbytes)
    return {
        "fma_gflops": fma,
        "kernel_isa": isa.get_cpu_isa(),
        "sgemm_gflops": peaks,
        "sgemm_n": n,
        "bandwidth_gbs": bandwidth,
        "bandwidth_bytes": nbytes // 4 * 4,
        "cpu": cpu_model(),
        "isa": cpu_features(),
        "openblas": cpu_blas.config,
        "openblas_core": openblas_core(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "seconds": time.perf_counter() - t0,
    }


def peak_gflops(limits, threads, kind=None):
    """The measured peak at ``threads`` (the nearest measured count below it when that one was
    not measured), or None without limits: ``kind`` "fma" (the default when measured: the
    machine's limit) or "sgemm" (OpenBLAS's square GEMM)."""
    if not limits:
        return None
    key = f"{kind}_gflops" if kind else ("fma_gflops" if "fma_gflops" in limits
                                         else "sgemm_gflops")
    have = sorted(int(t) for t in limits[key])
    below = [t for t in have if t <= threads] or have[:1]
    return limits[key][str(below[-1])]


def x_limit(ms, gflop, gflops):
    """``ms`` as a multiple of the time ``gflop`` GFLOP take at ``gflops`` GFLOP/s (None when
    either is unknown or zero)."""
    if ms is None or not gflop or not gflops:
        return None
    return ms / (gflop / gflops * 1e3)


def _fmt(value):
    """Three significant digits, whole numbers from 1000 up (as the benchmarks' tables)."""
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def describe(limits):
    """One line for a report's head: the peaks, the bandwidth, the ISA and OpenBLAS's core."""
    def per_thread(key):
        return ", ".join(f"{_fmt(v)}{' GFLOP/s' if i == 0 else ''} on {t} "
                         f"thread{'s' if t != '1' else ''}"
                         for i, (t, v) in enumerate(limits[key].items()))

    peaks = per_thread("sgemm_gflops")
    fma = (f"FMA peak {per_thread('fma_gflops')} ({limits.get('kernel_isa')}); "
           if "fma_gflops" in limits else "")
    bw = limits["bandwidth_gbs"]
    pin = limits["OPENBLAS_CORETYPE"]
    return (f"limits (measured now): {fma}OpenBLAS SGEMM peak {peaks}; memory {_fmt(bw['copy'])}"
            f" GB/s copy (read + write), {_fmt(bw['read'])} GB/s read, 1 thread; "
            f"ISA {' '.join(limits['isa']) or 'unknown'}; OpenBLAS core "
            f"{limits['openblas_core'] or 'unknown'}"
            + (f" (OPENBLAS_CORETYPE={pin} pins it: unset it for the machine's best)" if pin
               else " (OPENBLAS_CORETYPE unset)"))


def graph_gflop(g):
    """The GFLOP of one run of graph ``g``: 2 * output elements * K over its CONVOLUTION nodes
    (K = kh*kw*C/groups, the product of the weight's shape after its first axis) and GEMM
    nodes (K = a's inner dimension); every other node counts as zero."""
    flop = 0
    for e in g.execs:
        name = e.cmd.name
        if name not in ("CONVOLUTION", "GEMM"):
            continue
        out = math.prod(e.outputs[0].shape)
        if name == "CONVOLUTION":
            k = math.prod(e.inputs[1].shape[1:])
        else:
            a = e.inputs[0].shape
            k = a[0] if len(a) == 1 else (a[-2] if e.cmd.params["transpose_a"] else a[-1])
        flop += 2 * out * k
    return flop / 1e9
