"""Builds the native MRC engine (agents.mrc._core) beside the pure-Python package.

Project metadata lives in pyproject.toml; this file only declares the extension,
because setuptools takes ext_modules and C libraries from setup.py alone. The C
core is compiled as a static library with its own strict flags (-Werror applies to
our C, not to Cython's generated code) and linked with ISA-L (libisal-dev) for CRC-32
and with libm (pow, fmod: the same versioned symbols as CPython's float operations).
"""
from glob import glob

from Cython.Build import cythonize
from setuptools import Extension, setup

CORE = "agents/mrc/core"
CORE_CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
               "-fno-strict-aliasing"]
core_sources = sorted(s for s in glob(f"{CORE}/mrcn*.c"))

setup(
    libraries=[("mrcn", {"sources": core_sources, "include_dirs": [CORE], "cflags": CORE_CFLAGS})],
    ext_modules=cythonize(
        [Extension("agents.mrc._core", ["agents/mrc/_core.pyx"], include_dirs=[CORE],
                   libraries=["isal"], extra_compile_args=["-ffp-contract=off"],
                   extra_link_args=["-lm"])],
        compiler_directives={"language_level": "3"},
    ),
)
