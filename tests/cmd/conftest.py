"""What the command tests share: each kernel ISA level in turn."""

import pytest

from nnc.base import isa


@pytest.fixture(params=isa.ISA_NAMES)
def kernel_isa(request):
    """Each kernel level in turn (skipped where the CPU lacks it), restored afterwards."""
    if request.param not in isa.supported_isas():
        pytest.skip(f"this CPU does not run {request.param}")
    old = isa.set_cpu_isa(request.param)
    try:
        yield request.param
    finally:
        isa.set_cpu_isa(old)
