"""The ``env`` fixtures of the GPU tests: each test runs on the fakes, then on the real GPU where
one (and the libraries it needs) exists."""

import gc

import pytest

from fakes.cuda_driver import install
from nnc import cuda


def two_gpu_fake(monkeypatch):
    """The body of a ``fake`` fixture: the fake driver with two GPUs installed for the test
    (GPU_REF only: no real library may run on fake pointers), and fake buffers freed while
    it is still installed."""
    yield install(monkeypatch, count=2)
    gc.collect()


def second_gpu():
    """gpu:1 where there are two GPUs (the fake has two), else gpu:0."""
    return "gpu:1" if cuda.device_count() > 1 else "gpu:0"


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
