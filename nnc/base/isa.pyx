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
