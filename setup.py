"""Builds the native MRC engine (agents.mrc._core) beside the pure-Python package.

Project metadata lives in pyproject.toml; this file only declares the extension,
because setuptools takes ext_modules and C libraries from setup.py alone. The C
core is compiled as a static library with its own strict flags (-Werror applies to
our C, not to Cython's generated code) and linked with ISA-L (libisal-dev) for CRC-32
and with libm (pow, fmod: the same versioned symbols as CPython's float operations).
"""
import os
from glob import glob

from Cython.Build import cythonize
from setuptools import Extension, setup

CORE = "agents/mrc/core"
CORE_CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
               "-fno-strict-aliasing"]
core_sources = sorted(glob(f"{CORE}/mrcn*.c"))
core_headers = sorted(glob(f"{CORE}/mrcn*.h"))   # a changed core relinks the extension
# MRCN_SANITIZE=1 (make sanitize): AddressSanitizer and UBSan in the core and the binding
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
            "-fno-omit-frame-pointer", "-g"] if os.environ.get("MRCN_SANITIZE") == "1" else []

setup(
    # obj_deps: a changed header recompiles the core (build_clib tracks only the .c files)
    libraries=[("mrcn", {"sources": core_sources, "include_dirs": [CORE], "obj_deps": {"": core_headers},
                         "cflags": CORE_CFLAGS + SANITIZE})],
    ext_modules=cythonize(
        [Extension("agents.mrc._core", ["agents/mrc/_core.pyx"], include_dirs=[CORE],
                   # mrcn before isal and m: the static core's ISA-L and libm calls resolve after it
                   libraries=["mrcn", "isal", "m"], depends=core_sources + core_headers,
                   extra_compile_args=["-ffp-contract=off"] + SANITIZE, extra_link_args=SANITIZE)],
        compiler_directives={"language_level": "3"},
    ),
)
