"""Build the Cython core of nnc: one extension module per concept (see docs/dev.md)."""

import os

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

# Module table: (dotted name, source). Each .pyx has a .pxd beside it that states its C contract.
MODULES = [
    ("nnc._core", "nnc/_core.pyx"),
    ("nnc.debug", "nnc/debug.pyx"),
    ("nnc.tracing", "nnc/tracing.pyx"),
    ("nnc.tensor", "nnc/tensor.pyx"),
    ("nnc.cmd", "nnc/cmd.pyx"),
    ("nnc.ops.cpu_opt", "nnc/ops/cpu_opt.pyx"),
    ("nnc.multiview", "nnc/multiview.pyx"),
    ("nnc.inbox", "nnc/inbox.pyx"),
    ("nnc.stream", "nnc/stream.pyx"),
    ("nnc.worker", "nnc/worker.pyx"),
    ("nnc.waiting", "nnc/waiting.pyx"),
    ("nnc.graph.graph", "nnc/graph/graph.pyx"),
    ("nnc.graph.tools", "nnc/graph/tools.pyx"),
    ("nnc.graph.schedule", "nnc/graph/schedule.pyx"),
    ("nnc.graph.rank", "nnc/graph/rank.pyx"),
    ("nnc.graph.verify", "nnc/graph/verify.pyx"),
    ("nnc.graph.hazard", "nnc/graph/hazard.pyx"),
    ("nnc.graph.run", "nnc/graph/run.pyx"),
    ("nnc.graph.control", "nnc/graph/control.pyx"),
    ("nnc.graph.flow", "nnc/graph/flow.pyx"),
    ("nnc.invariants", "nnc/invariants.pyx"),
    ("nnc.capi_handle", "nnc/capi_handle.pyx"),
    ("nnc.capi", "nnc/capi.pyx"),
    # Needs no CUDA header (only pthread and semaphore.h), so it is always built.
    ("nnc.cuda._hostfn", "nnc/cuda/_hostfn.pyx"),
]

DIRECTIVES = {
    "language_level": 3,
    "embedsignature": True,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
    "cdivision": True,
}

# NNC_ANNOTATE=1 writes cython -a HTML next to each .pyx (read it for hot loops).
annotate = os.environ.get("NNC_ANNOTATE", "0") == "1"

extensions = [
    Extension(
        name,
        [src],
        include_dirs=[np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    )
    for name, src in MODULES
]

setup(ext_modules=cythonize(extensions, compiler_directives=DIRECTIVES, annotate=annotate))
