"""The built-in registry: every command and its backends, in order, as ``import nnc`` leaves them.

The command families (nnc/cmd/<family>/) register themselves from nnc.cmd.builtins and the GPU
backends from nnc.cuda; moving a backend between modules must not change which commands exist,
their order in ``nnc.commands()``, or any command's backends (name, priority, device, datatypes,
C or Python, layout rule) in default-selection order. Each row: "NAME PRIORITY DEVICE DATATYPES"
then " C" for a C backend and " contiguous" for one that takes contiguous tensors only.
"""

import nnc

_ABBR = {"uint8": "u8", "int32": "i32", "int64": "i64", "float16": "f16", "float32": "f32",
         "float64": "f64"}

BUILTINS = [
    ('ENGINE_CALL', [
        'CPU_REF 10 cpu i64 C contiguous',
    ]),
    ('NOOP', [
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('CUSTOM', [
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('WHILE', [
        'GPU_REF 15 gpu u8,i32,i64,f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('CASE_OF', [
        'GPU_REF 15 gpu u8,i32,i64,f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('SET', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('DATA_TRANSFER', [
        'CPU_OPT 20 cpu u8,i32,i64,f16,f32,f64 C',
        'GPU_REF 15 any u8,i32,i64,f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWSUM', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWPROD', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWEXP', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWLOG', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWSQRT', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('SIGMOID', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('TANH', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('RELU', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWDIV', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('SCALAR_MUL', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('SOFTMAX', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('GEMM', [
        'CPU_OPT 20 cpu f32,f64 C',
        'GPU_OPT 20 gpu f16,f32,f64',
        'CPU_NUMPY 15 cpu f32,f64',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('CONVOLUTION', [
        'CPU_OPT 20 cpu f32,f64 C',
        'GPU_OPT 20 gpu f16,f32',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_OPT_WINOGRAD 12 cpu f32,f64 C',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('MAX_POOL', [
        'CPU_OPT 20 cpu f32,f64 C',
        'CPU_NUMPY 15 cpu f32,f64',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('AVG_POOL', [
        'CPU_OPT 20 cpu f32,f64 C',
        'CPU_NUMPY 15 cpu f32,f64',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('REDUCE_SUM', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('REDUCE_MEAN', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('REDUCE_MAX', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('REDUCE_MIN', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('REDUCE_PROD', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('REDUCE_NORM2', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('REDUCE_LOGSUMEXP', [
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('ADD', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('MUL', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWPOW', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('MIN', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('MAX', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('PRELU', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('CLAMP', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('TRANSPOSE', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('FORMAT_TRANSFORM', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64 C',
    ]),
    ('SWISH', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('GELU', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('HARD_SWISH', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('HARD_SIGMOID', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('ERF', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWABS', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('LEAKY_RELU', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('ELU', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('SELU', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('CELU', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('SOFTPLUS', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('SOFTSIGN', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('MISH', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('THRESHOLDED_RELU', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWFLOOR', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWCEIL', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWROUND', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWSIGN', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWSIN', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWCOS', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWTAN', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWASIN', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWACOS', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWATAN', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWSINH', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWCOSH', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWASINH', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWACOSH', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('EWATANH', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('LRN', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('LAYER_NORM', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('GROUP_NORM', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('RMSNORM', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('SCALED_DOT_PRODUCT_ATTENTION', [
        'CPU_OPT 20 cpu f32,f64 C',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('UPSAMPLE', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('PAD', [
        'CPU_OPT 20 cpu f32,f64 C contiguous',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('INDEX_SELECT', [
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('ARGMAX', [
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('ARGMIN', [
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('DATATYPE_CONVERSION', [
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
    ('CONVOLUTION_TRANSPOSE', [
        'CPU_OPT 20 cpu f32,f64 C',
        'GPU_REF 15 gpu f16,f32,f64',
        'CPU_REF 10 cpu u8,i32,i64,f16,f32,f64',
    ]),
]


def _row(b):
    dt = ",".join(_ABBR[x] for x in sorted(b.datatype_names, key=list(_ABBR).index))
    return (f"{b.name} {b.priority} {b.device} {dt}{' C' if b.is_c else ''}"
            f"{' contiguous' if b.contiguous_only else ''}")


def test_builtin_commands_keep_their_order():
    builtin = [c for c in nnc.commands() if nnc.command_info(c).builtin]
    assert builtin == [name for name, _rows in BUILTINS]


def test_builtin_backends_keep_name_priority_device_and_datatypes():
    for name, rows in BUILTINS:
        assert [_row(b) for b in nnc.command_info(name).backends] == rows, name


def test_the_documented_blas_path_still_imports():
    """``nnc.ops.cpu_blas`` (docs/commands.md's former name of the OpenBLAS binding) is
    nnc.base.openblas, by ``import`` and by attribute."""
    import nnc.ops.cpu_blas
    from nnc.base import openblas

    assert nnc.ops.cpu_blas is openblas and isinstance(openblas.config, str)
