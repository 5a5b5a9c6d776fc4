"""NNC's test/unit/nnc/upsample.tests.c forward cases, ported as upstream builds them (the same
shapes, fills and expected values, compared as ``REQUIRE_ARRAY_EQ_WITH_TOLERANCE`` does: the
first ``n`` elements within 1e-5), on every CPU backend of UPSAMPLE at every kernel ISA level.
The NCHW case runs on NCHW tensors, which only CPU_REF reads (the C backend takes NHWC and is
refused, as the last test checks). The chessbox cases need ccv's PNG reader and upstream's
expected image file (docs/porting.md, "NNC's test cases")."""

import numpy as np
import pytest

import nnc
from nnc.cmd.command import cmd_backends_for


def _cpu_backends(name):
    return [b for b in nnc.backends(name) if b.startswith("CPU")]


def _require_array_eq(b, bt, n):
    """REQUIRE_ARRAY_EQ_WITH_TOLERANCE(float, b->data.f32, bt, n, 1e-5, ...)."""
    got = b.numpy().reshape(-1)[:n] if isinstance(b, nnc.Tensor) else b.reshape(-1)[:n]
    np.testing.assert_allclose(got, np.float32(bt)[:n], rtol=0, atol=1e-5)


def _upsample(kind, align, a, b, backend):
    nnc.cmd_exec(nnc.Cmd("UPSAMPLE", type=kind, align_corners=align, backend=backend), [a], [b])


# a 3x3x1 NHWC image of upstream's align-corners cases: rows (1, 2, 0), (3, 4, 0), (0, 0, 0).
_A3 = np.float32([1, 2, 0, 3, 4, 0, 0, 0, 0]).reshape(3, 3, 1)


@pytest.mark.parametrize("backend", _cpu_backends("UPSAMPLE"))
def test_upsample_nearest(kernel_isa, backend):
    a = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    b = np.full((4, 4, 2), np.nan, np.float32)
    _upsample("nearest", False, a, b, backend)
    bt = [0, 1, 0, 1, 2, 3, 2, 3,
          0, 1, 0, 1, 2, 3, 2, 3,
          4, 5, 4, 5, 6, 7, 6, 7,
          4, 5, 4, 5, 6, 7, 6, 7]
    _require_array_eq(b, bt, 32)


@pytest.mark.parametrize("backend", _cpu_backends("UPSAMPLE"))
def test_upsample_nearest_align_corners(kernel_isa, backend):
    b = np.full((6, 6, 1), np.nan, np.float32)
    _upsample("nearest", True, _A3, b, backend)
    bt = [1, 1, 2, 2, 0, 0,
          1, 1, 2, 2, 0, 0,
          3, 3, 4, 4, 0, 0,
          3, 3, 4, 4, 0, 0,
          0, 0, 0, 0, 0, 0,
          0, 0, 0, 0, 0, 0]
    # Upstream compares the first 32 of the 36 elements.
    _require_array_eq(b, bt, 32)


@pytest.mark.parametrize("backend", _cpu_backends("UPSAMPLE"))
def test_upsample_bilinear_align_corners(kernel_isa, backend):
    b = np.full((6, 6, 1), np.nan, np.float32)
    _upsample("bilinear", True, _A3, b, backend)
    bt = [1, 1.4, 1.8, 1.6, 0.8, 0.0,
          1.8, 2.2, 2.6, 2.24, 1.12, 0.0,
          2.6, 3.0, 3.4, 2.88, 1.44, 0.0,
          2.4, 2.72, 3.04, 2.56, 1.28, 0.0,
          1.2, 1.36, 1.52, 1.28, 0.64, 0.0,
          0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    # Upstream compares the first 32 of the 36 elements.
    _require_array_eq(b, bt, 32)


def test_upsample_nearest_in_nchw(kernel_isa):
    a = nnc.Tensor.empty((2, 2, 2), "float32", format="NCHW")
    a.numpy().reshape(-1)[:] = np.arange(8)
    b = nnc.Tensor(np.full((2, 4, 4), np.nan, np.float32), format="NCHW")
    # CPU_REF reads NCHW; the C backend takes NHWC only and is never chosen.
    assert [x.name for x in cmd_backends_for(nnc.Cmd("UPSAMPLE", type="nearest"), [a], [b])] \
        == ["CPU_REF"]
    _upsample("nearest", False, a, b, None)
    bt = [0, 0, 1, 1,
          0, 0, 1, 1,
          2, 2, 3, 3,
          2, 2, 3, 3,
          4, 4, 5, 5,
          4, 4, 5, 5,
          6, 6, 7, 7,
          6, 6, 7, 7]
    _require_array_eq(b, bt, 32)
