"""Layer 2 command. Built-in commands. Each module registers its commands, their CPU_REF
backends and any Python backends; the C backends (nnc/ops/cpu_*.pyx) are registered after them.
Registration is explicit and happens once, when nnc is imported."""

from nnc.ops import basic, blas, clamp, conv, ew, gemm, pool, reduce, softmax, transpose

_done = False


def register_builtins():
    global _done
    if _done:
        return
    _done = True
    for module in (basic, ew, softmax, gemm, conv, pool, reduce, blas, clamp, transpose):
        module.register()
    from nnc.ops import (
        cpu_conv,
        cpu_gemm,
        cpu_opt,
        cpu_opt_blas,
        cpu_opt_reduce,
        cpu_opt_unary,
        cpu_pool,
        cpu_winograd,
    )

    for module in (cpu_conv, cpu_winograd, cpu_gemm, cpu_pool, cpu_opt_blas, cpu_opt,
                   cpu_opt_unary, cpu_opt_reduce):
        module.register()
