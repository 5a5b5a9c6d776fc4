"""The CPU's vector ISA: which of nnc's hand-written kernel variants runs.

MLAS and XNNPACK fill a kernel table once from CPUID; here the level is an int that each kernel
switches on, read without the GIL by every C backend (``cpu_isa``). Detection goes through
libgcc's ``__builtin_cpu_supports``, which reports AVX and AVX-512 only when XGETBV shows the OS
saves their registers, so a kernel never faults on a CPU (or a VM) that hides them.

``set_cpu_isa("avx2")`` runs a lower variant on a higher CPU: tests run every variant a machine
can run, benchmarks compare them (on CPUs whose 512-bit units are double-pumped, AVX2 can match
AVX-512). Asking for a level the CPU lacks raises, so a test never silently runs the wrong one.
"""

from nnc.base.core import NNCError

cdef extern from *:
    """
    #if defined(__x86_64__) || defined(__i386__)
    static int nnc_isa_detect(void) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
                && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")
                && __builtin_cpu_supports("fma"))
            return 2;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            return 1;
        return 0;
    }
    #else
    static int nnc_isa_detect(void) { return 0; }
    #endif
    """
    int nnc_isa_detect() noexcept nogil

cdef extern from *:
    """
    /* The FMA peak: 12 independent chains of fused multiply-adds (enough to cover an FMA's
     * latency on two pipes), no loads or stores; returns the flops done. */
    #if defined(__x86_64__) || defined(__i386__)
    #include <immintrin.h>
    __attribute__((target("avx512f,fma"))) static double nnc_fma_avx512(long n) {
        __m512 a[12], b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
        float sink[16];
        long k;
        int i;
        _Pragma("GCC unroll 12")
        for (i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
        for (k = 0; k < n; k++) {
            _Pragma("GCC unroll 12")
            for (i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
        }
        _Pragma("GCC unroll 12")
        for (i = 1; i < 12; i++) a[0] = _mm512_add_ps(a[0], a[i]);
        _mm512_storeu_ps(sink, a[0]);
        __asm__ volatile("" : : "r"(sink) : "memory");
        return (double)n * 12 * 32;
    }
    __attribute__((target("avx2,fma"))) static double nnc_fma_avx2(long n) {
        __m256 a[12], b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
        float sink[8];
        long k;
        int i;
        _Pragma("GCC unroll 12")
        for (i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
        for (k = 0; k < n; k++) {
            _Pragma("GCC unroll 12")
            for (i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
        }
        _Pragma("GCC unroll 12")
        for (i = 1; i < 12; i++) a[0] = _mm256_add_ps(a[0], a[i]);
        _mm256_storeu_ps(sink, a[0]);
        __asm__ volatile("" : : "r"(sink) : "memory");
        return (double)n * 12 * 16;
    }
    #endif
    typedef float nnc_fma_v4 __attribute__((vector_size(16)));
    static double nnc_fma_base(long n) {
        nnc_fma_v4 a[12], b = {0.999999f, 0.999999f, 0.999999f, 0.999999f};
        nnc_fma_v4 c = {1e-7f, 1e-7f, 1e-7f, 1e-7f};
        float sink[4];
        long k;
        int i;
        _Pragma("GCC unroll 12")
        for (i = 0; i < 12; i++) a[i] = (nnc_fma_v4){(float)i, (float)i, (float)i, (float)i};
        for (k = 0; k < n; k++) {
            _Pragma("GCC unroll 12")
            for (i = 0; i < 12; i++) a[i] = a[i] * b + c;
        }
        _Pragma("GCC unroll 12")
        for (i = 1; i < 12; i++) a[0] += a[i];
        __builtin_memcpy(sink, &a[0], sizeof sink);
        __asm__ volatile("" : : "r"(sink) : "memory");
        return (double)n * 12 * 8;
    }
    static double nnc_fma_flops(int isa, long n) {
    #if defined(__x86_64__) || defined(__i386__)
        if (isa >= 2) return nnc_fma_avx512(n);
        if (isa == 1) return nnc_fma_avx2(n);
    #endif
        return nnc_fma_base(n);
    }
    """
    double nnc_fma_flops(int isa, long n) noexcept nogil

#: Level names, lowest first; the index is the level.
ISA_NAMES = ("baseline", "avx2", "avx512")

# What the CPU supports (fixed) and what kernels use (<= _detected). Written only with the GIL
# by set_cpu_isa; kernels read _chosen once per call, so a change applies to calls made after.
cdef int _detected = nnc_isa_detect()
cdef int _chosen = _detected


cdef int cpu_isa() noexcept nogil:
    return _chosen


def detected_isa():
    """The highest level this CPU (and OS) supports: ``"avx512"``, ``"avx2"`` or
    ``"baseline"``."""
    return ISA_NAMES[_detected]


def supported_isas():
    """Every level this machine can run, lowest first."""
    return ISA_NAMES[:_detected + 1]


def get_cpu_isa():
    """The level nnc's kernels run now."""
    return ISA_NAMES[_chosen]


def set_cpu_isa(isa=None):
    """Run kernels at ``isa`` (a name of ``supported_isas()``), or at the detected level when
    None; returns the previous level's name. Applies to calls that start afterwards: set it
    between runs, not during one. Raises NNCError for an unknown name or a level the CPU lacks."""
    global _chosen
    if isa is None:
        level = _detected
    else:
        if isa not in ISA_NAMES:
            raise NNCError(f"unknown CPU ISA {isa!r}: expected one of {ISA_NAMES}")
        level = ISA_NAMES.index(isa)
        if level > _detected:
            raise NNCError(f"this CPU does not support {isa!r} (it runs up to "
                           f"{ISA_NAMES[_detected]!r})")
    old = ISA_NAMES[_chosen]
    _chosen = level
    return old


def fma_gflops(threads=1, seconds=0.2):
    """The CPU's floating-point peak as nnc's kernels can use it: GFLOP/s of ``threads``
    threads each running independent float32 FMA chains (no memory traffic) at the level
    ``get_cpu_isa()`` names, best of rounds for about ``seconds``. What no kernel exceeds: the
    yardstick of the benchmarks' "x limit"."""
    import threading
    import time

    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise NNCError(f"fma_gflops: threads must be a positive int, not {threads!r}")
    cdef int level = _chosen
    cdef long n = 1000000             # about 10 ms of FMAs per thread: thread start-up is noise
    results = [0.0] * threads

    def one(i):
        cdef double flops
        with nogil:
            flops = nnc_fma_flops(level, n)
        results[i] = flops

    best = 0.0
    end = time.perf_counter() + max(0.0, float(seconds))
    rounds = 0
    while rounds < 3 or time.perf_counter() < end:
        workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        dt = time.perf_counter() - t0
        best = max(best, sum(results) / dt / 1e9)
        rounds += 1
    return best
