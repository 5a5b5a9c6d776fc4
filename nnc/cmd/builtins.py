"""The built-in commands: one folder per command family under nnc/cmd/ (basic, elementwise,
softmax, gemm, convolution, pooling, reduce, transpose, lrn, norm, attention, upsample, pad,
index_select, argmax, datatype), each holding the family's definition, its CPU_REF and its CPU
backends. Registration is explicit and happens once, when nnc is imported: the definitions first
(commands, CPU_REF and Python backends, in this order, which is ``nnc.commands()``'s), then the C
backends; nnc.cuda.builtins registers the families' GPU backends (their gpu/ folders) after them.
"""

from nnc.cmd import (
    argmax,
    attention,
    basic,
    convolution,
    datatype,
    elementwise,
    gemm,
    index_select,
    lrn,
    norm,
    pad,
    pooling,
    reduce,
    softmax,
    transpose,
    upsample,
)
from nnc.cmd.convolution import conv_transpose
from nnc.cmd.elementwise import activation, binary, clamp, elementary

_done = False


def register_builtins():
    global _done
    if _done:
        return
    _done = True
    for module in (basic, elementwise, softmax, gemm, convolution, pooling, reduce, binary, clamp,
                   transpose, activation, elementary, lrn, norm, attention, upsample, pad,
                   index_select, argmax, datatype, conv_transpose):
        module.register()
    from nnc.cmd.attention import cpu_opt as attention_opt
    from nnc.cmd.basic import cpu_opt as basic_opt
    from nnc.cmd.convolution import conv_transpose_opt, winograd
    from nnc.cmd.convolution import cpu_opt as convolution_opt
    from nnc.cmd.elementwise import cpu_opt as elementwise_opt
    from nnc.cmd.elementwise import cpu_opt_act, cpu_opt_binary, cpu_opt_elementary, cpu_opt_unary
    from nnc.cmd.gemm import cpu_opt as gemm_opt
    from nnc.cmd.lrn import cpu_opt as lrn_opt
    from nnc.cmd.norm import cpu_opt as norm_opt
    from nnc.cmd.pad import cpu_opt as pad_opt
    from nnc.cmd.pooling import cpu_opt as pooling_opt
    from nnc.cmd.reduce import cpu_opt as reduce_opt
    from nnc.cmd.softmax import cpu_opt as softmax_opt
    from nnc.cmd.upsample import cpu_opt as upsample_opt

    for module in (convolution_opt, winograd, gemm_opt, pooling_opt, cpu_opt_binary,
                   elementwise_opt, basic_opt, softmax_opt, cpu_opt_unary, reduce_opt, cpu_opt_act,
                   cpu_opt_elementary, lrn_opt, norm_opt, attention_opt, upsample_opt, pad_opt,
                   conv_transpose_opt):
        module.register()
