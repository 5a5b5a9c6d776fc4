"""The ``env`` fixtures of the GPU tests: each test runs on the fakes, then on the real GPU where
one (and the libraries it needs) exists."""

import pytest

from nnc import cuda


def fake_or_gpu(request, fake="fake", libraries=()):
    """The body of a fixture with ``params=["fake", "gpu"]``: for "fake", the value of the
    fixture named ``fake`` (the installed fakes); for "gpu", None, or a skip naming what is
    missing: the GPU, or a library of ``libraries`` ((module, name) pairs, each module with
    ``available()`` and ``unavailable_reason()``)."""
    if request.param != "gpu":
        return request.getfixturevalue(fake)
    if not cuda.available():
        pytest.skip(f"no GPU: {cuda.unavailable_reason()}")
    for lib, name in libraries:
        if not lib.available():
            pytest.skip(f"no {name}: {lib.unavailable_reason()}")
    return None
