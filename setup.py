"""Build the Cython core of nnc: one extension module per concept (see docs/dev.md).

The extensions list their ``.pyx`` sources and are cythonized only when ``build_ext`` runs, so
``sdist`` ships the ``.pyx`` files (never generated ``.c``) without running Cython, and a wheel
built from that sdist cythonizes them afresh. Metadata lives in pyproject.toml; the files each
distribution holds are chosen by MANIFEST.in and pyproject.toml's package-data tables.
"""

import os

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# Module table: (dotted name, source). Each .pyx has a .pxd beside it that states its C contract.
MODULES = [
    ("nnc._core", "nnc/_core.pyx"),
    ("nnc.debug", "nnc/debug.pyx"),
    ("nnc.tracing", "nnc/tracing.pyx"),
    ("nnc.tensor", "nnc/tensor.pyx"),
    ("nnc.cmd", "nnc/cmd.pyx"),
    ("nnc.ops.cpu_opt", "nnc/ops/cpu_opt.pyx"),
    ("nnc.ops.cpu_opt_unary", "nnc/ops/cpu_opt_unary.pyx"),
    ("nnc.ops.cpu_opt_reduce", "nnc/ops/cpu_opt_reduce.pyx"),
    ("nnc.ops.cpu_opt_blas", "nnc/ops/cpu_opt_blas.pyx"),
    ("nnc.ops.cpu_opt_transpose", "nnc/ops/cpu_opt_transpose.pyx"),
    ("nnc.multiview", "nnc/multiview.pyx"),
    ("nnc.dlpack", "nnc/dlpack.pyx"),
    ("nnc.inbox", "nnc/inbox.pyx"),
    ("nnc.workspace", "nnc/workspace.pyx"),
    ("nnc.parallel", "nnc/parallel.pyx"),
    ("nnc.ops.cpu_blas", "nnc/ops/cpu_blas.pyx"),
    ("nnc.ops.cpu_conv", "nnc/ops/cpu_conv.pyx"),
    ("nnc.ops.cpu_gemm", "nnc/ops/cpu_gemm.pyx"),
    ("nnc.ops.cpu_pool", "nnc/ops/cpu_pool.pyx"),
    ("nnc.ops.cpu_winograd", "nnc/ops/cpu_winograd.pyx"),
    ("nnc.stream", "nnc/stream.pyx"),
    ("nnc.drain", "nnc/drain.pyx"),
    ("nnc.record", "nnc/record.pyx"),
    ("nnc.pool", "nnc/pool.pyx"),
    ("nnc.worker", "nnc/worker.pyx"),
    ("nnc.waiting", "nnc/waiting.pyx"),
    ("nnc.graph.graph", "nnc/graph/graph.pyx"),
    ("nnc.graph.tools", "nnc/graph/tools.pyx"),
    ("nnc.graph.schedule", "nnc/graph/schedule.pyx"),
    ("nnc.graph.rank", "nnc/graph/rank.pyx"),
    ("nnc.graph.costs", "nnc/graph/costs.pyx"),
    ("nnc.graph.policy_list", "nnc/graph/policy_list.pyx"),
    ("nnc.graph.policy_nimble", "nnc/graph/policy_nimble.pyx"),
    ("nnc.graph.dag", "nnc/graph/dag.pyx"),
    ("nnc.graph.policy_ios", "nnc/graph/policy_ios.pyx"),
    ("nnc.graph.verify", "nnc/graph/verify.pyx"),
    ("nnc.graph.hazard", "nnc/graph/hazard.pyx"),
    ("nnc.graph.simulate", "nnc/graph/simulate.pyx"),
    ("nnc.graph.run", "nnc/graph/run.pyx"),
    ("nnc.graph.control", "nnc/graph/control.pyx"),
    ("nnc.graph.flow", "nnc/graph/flow.pyx"),
    ("nnc.graph.policy_raf", "nnc/graph/policy_raf.pyx"),
    ("nnc.invariants", "nnc/invariants.pyx"),
    ("nnc.capi_handle", "nnc/capi_handle.pyx"),
    ("nnc.capi", "nnc/capi.pyx"),
    ("nnc.engine_op", "nnc/engine_op.pyx"),
    ("nnc.engine", "nnc/engine.pyx"),
    ("nnc.engine_call", "nnc/engine_call.pyx"),
    # Needs no CUDA header (only pthread and semaphore.h), so it is always built.
    ("nnc.cuda._hostfn", "nnc/cuda/_hostfn.pyx"),
    ("nnc.cuda._ccall", "nnc/cuda/_ccall.pyx"),
    ("nnc.cuda.gpu_stream", "nnc/cuda/gpu_stream.pyx"),
]

DIRECTIVES = {
    "language_level": 3,
    "embedsignature": True,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
    "cdivision": True,
}

# Extra compiler flags of one module. cpu_opt_unary reads neither errno nor the FP exception
# flags: without them a sqrt call is one instruction, and gcc may turn its selects (x < 0 ? ...)
# into vector blends, so every loop there vectorises (CFLAGS=-fopt-info-vec shows it).
EXTRA_COMPILE_ARGS = {"nnc.ops.cpu_opt_unary": ["-fno-math-errno", "-fno-trapping-math"]}

# NNC_ANNOTATE=1 writes cython -a HTML next to each .pyx (read it for hot loops).
annotate = os.environ.get("NNC_ANNOTATE", "0") == "1"

extensions = [
    Extension(
        name,
        [src],
        include_dirs=[np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3", *EXTRA_COMPILE_ARGS.get(name, [])],
    )
    for name, src in MODULES
]


class CythonizeThenBuild(build_ext):
    """build_ext that turns each extension's .pyx into C first (in place: setuptools has already
    annotated these Extension objects, so only their sources change)."""

    def run(self):
        from Cython.Build import cythonize

        done = cythonize(self.extensions, compiler_directives=DIRECTIVES, annotate=annotate)
        for ext, c in zip(self.extensions, done, strict=True):
            ext.sources = c.sources
        super().run()


setup(ext_modules=extensions, cmdclass={"build_ext": CythonizeThenBuild})
