"""Build the Cython core of nnc: one extension module per concept (see docs/dev.md).

The extensions list their ``.pyx`` sources and are cythonized only when ``build_ext`` runs, so
``sdist`` ships the ``.pyx`` files (never generated ``.c``) without running Cython, and a wheel
built from that sdist cythonizes them afresh. Metadata lives in pyproject.toml; the files each
distribution holds are chosen by MANIFEST.in and pyproject.toml's package-data tables.
"""

import os
from pathlib import Path

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# One extension module per .pyx under nnc/, named by its path (nnc/run/run.pyx is
# nnc.run.run): a new module is built by being there. Each .pyx has a .pxd beside it that
# states its C contract. Sorted, so builds list modules in the same order everywhere.
MODULES = [(".".join(p.with_suffix("").parts), p.as_posix())
           for p in sorted(Path("nnc").rglob("*.pyx"))]

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
EXTRA_COMPILE_ARGS = {
    "nnc.cmd.elementwise.cpu_opt_unary": ["-fno-math-errno", "-fno-trapping-math"],
    "nnc.cmd.elementwise.cpu_opt_act": ["-fno-math-errno", "-fno-trapping-math"],
    "nnc.cmd.elementwise.cpu_opt_elementary": ["-fno-math-errno", "-fno-trapping-math"],
    # EWPOW's sqrt form and MIN's / MAX's selects: vectorised as in cpu_opt_unary.
    "nnc.cmd.elementwise.cpu_opt_binary": ["-fno-math-errno", "-fno-trapping-math"],
    # softmax_kernel.h's max and exp loops: vectorised as in cpu_opt_unary.
    "nnc.cmd.softmax.cpu_opt": ["-fno-math-errno", "-fno-trapping-math"],
    # Its kernels' epilogues run act_kernel.h's HARD_SWISH and SWISH: vectorised as there.
    "nnc.cmd.convolution.cpu_opt": ["-fno-math-errno", "-fno-trapping-math"],
    # Its epilogue pass runs the same loops: as cpu_opt.
    "nnc.cmd.convolution.conv_unpacked": ["-fno-math-errno", "-fno-trapping-math"],
}

# NNC_ANNOTATE=1 writes cython -a HTML next to each .pyx (read it for hot loops).
annotate = os.environ.get("NNC_ANNOTATE", "0") == "1"

# Hand-written kernel headers (nnc/**/*_kernel.h), named from nnc/ in `cdef extern from`: a
# module that names one is rebuilt when it changes (Cython's own dependency scan does not look
# them up on the include path, so an edited kernel would otherwise leave a stale extension).
KERNEL_HEADERS = sorted(p.relative_to("nnc").as_posix() for p in Path("nnc").rglob("*_kernel.h"))


# A .pxd that declares a header's functions passes the dependency on to its cimporters.
KERNEL_PXDS = {h: [".".join(p.with_suffix("").parts) for p in Path("nnc").rglob("*.pxd")
                   if f'"{h}"' in p.read_text(encoding="utf-8")] for h in KERNEL_HEADERS}


# The headers each header #includes, followed to the end (act_kernel.h includes exp_kernel.h):
# a module that names one header depends on all of them.
def _header_closure():
    direct = {h: {i for i in KERNEL_HEADERS
                  if i != h and f'"{i}"' in Path("nnc", h).read_text(encoding="utf-8")}
              for h in KERNEL_HEADERS}
    closure = {}
    for h in KERNEL_HEADERS:
        seen, todo = {h}, [h]
        while todo:
            for i in direct[todo.pop()] - seen:
                seen.add(i)
                todo.append(i)
        closure[h] = seen
    return closure


KERNEL_CLOSURE = _header_closure()


def kernel_depends(src):
    text = Path(src).read_text(encoding="utf-8")
    named = [h for h in KERNEL_HEADERS
             if f'"{h}"' in text or any(m in text for m in KERNEL_PXDS[h])]
    return sorted({f"nnc/{i}" for h in named for i in KERNEL_CLOSURE[h]})


extensions = [
    Extension(
        name,
        [src],
        # nnc/ holds the C API headers (nnc_types.h) that the capi modules' .pxd files name.
        include_dirs=[np.get_include(), "nnc"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3", *EXTRA_COMPILE_ARGS.get(name, [])],
        depends=kernel_depends(src),
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
