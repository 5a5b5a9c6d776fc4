"""NNC's test/unit/nnc/winograd.tests.c, ported as upstream builds it: a 3x3 convolution on the
reference backend, then on CPU_OPT's Winograd algorithm (nnc's CPU_OPT_WINOGRAD backend), equal
as ``REQUIRE_TENSOR_EQ`` compares (128 ulps: ``nnc.tensor_eq``), at every kernel ISA level.
Upstream's dsfmt stream (seeded 0, values in (0, 1]) is a seeded NumPy stream here: the cases
compare two computations of the same data."""

import numpy as np
import pytest

import nnc
from nnc.base import isa


def _case(side, channels, bias):
    rng = np.random.default_rng(0)
    w = ((1 - rng.random((128, 3, 3, channels))) / (3 * 3 * channels)).astype(np.float32)
    a = (1 - rng.random((side, side, channels))).astype(np.float32)
    b = (np.arange(128) / 128).astype(np.float32) if bias else np.zeros(128, np.float32)
    return a, w, b


_CASES = [
    # (upstream name, side, input channels, bias i / 128 (else 0), Winograd given the bias)
    ("convolutional network of 3x3 on 56x56 with non-uniform weights", 56, 128, True, True),
    ("convolutional network of 3x3 on 55x55 with non-uniform weights", 55, 128, True, True),
    ("convolutional network of 3x3 on 224x224 with non-uniform weights and RGB channels",
     224, 3, True, True),
    ("convolutional network of 3x3 on 56x56 with no bias", 56, 128, False, False),
]


@pytest.mark.parametrize("case", _CASES, ids=[c[0] for c in _CASES])
def test_winograd_equals_the_reference(case):
    _, side, channels, bias_on, winograd_bias = case
    a, w, bias = _case(side, channels, bias_on)
    hint = nnc.hint_auto(nnc.Cmd("CONVOLUTION"), [a.shape, w.shape], (side, side, 128))
    assert hint == {"stride": (1, 1), "padding": (1, 1, 1, 1)}
    b = np.full((side, side, 128), np.nan, np.float32)
    nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_REF", **hint), [a, w, bias], [b])
    old = isa.get_cpu_isa()
    try:
        for level in isa.supported_isas():
            isa.set_cpu_isa(level)
            c = np.full((side, side, 128), np.nan, np.float32)
            inputs = [a, w, bias] if winograd_bias else [a, w]
            nnc.cmd_exec(nnc.Cmd("CONVOLUTION", backend="CPU_OPT_WINOGRAD", **hint), inputs, [c])
            assert nnc.tensor_eq(b, c), level
    finally:
        isa.set_cpu_isa(old)
