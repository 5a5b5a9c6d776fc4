"""Built-in commands. Each module registers its commands, their CPU_REF backends and any Python
CPU_OPT backends; the C backends of nnc/ops/cpu_opt*.pyx are registered after them. Registration
is explicit and happens once, when nnc is imported."""

from nnc.ops import basic, blas, clamp, conv, ew, gemm, pool, reduce, softmax, transpose

_done = False


def register_builtins():
    global _done
    if _done:
        return
    _done = True
    for module in (basic, ew, softmax, gemm, conv, pool, reduce, blas, clamp, transpose):
        module.register()
    from nnc.ops import cpu_conv, cpu_opt, cpu_opt_reduce, cpu_opt_unary, cpu_winograd

    cpu_conv.register()
    cpu_winograd.register()
    cpu_opt.register()
    cpu_opt_unary.register()
    cpu_opt_reduce.register()
