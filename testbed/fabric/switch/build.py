"""Compile egress.bpf.c on demand: ``clang -O2 -g -target bpf`` into ``build/switch/``.

The object is rebuilt when it is missing or older than the source, under an
exclusive ``flock`` on ``build/switch/.lock`` so concurrent callers (tests,
the kernel probe, a fabric) compile once; it is written to a temporary name
and renamed into place, so no reader sees half an object. ``build/`` is not
committed (.gitignore); ``make setup`` installs clang and libbpf-dev.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from testbed.model.errors import TestbedFailure

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("egress.bpf.c")
BUILD_DIR = Path(__file__).resolve().parents[3] / "build" / "switch"
OBJECT = BUILD_DIR / "egress.bpf.o"
COMPILE_TIMEOUT_S = 60.0


class SwitchBuildError(TestbedFailure):
    """The BPF object cannot be built (no clang, no headers, or a compile error)."""


def clang_argv(source: Path, output: Path) -> list[str]:
    """The compiler command line. Raises SwitchBuildError when clang is not installed."""
    clang = shutil.which("clang")
    if clang is None:
        raise SwitchBuildError("clang not found (Debian packages clang, llvm, libbpf-dev: make setup)")
    argv = [clang, "-O2", "-g", "-Wall", "-Werror", "-target", "bpf"]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:  # asm/types.h lives under the multiarch include directory on Debian
        argv += ["-I", f"/usr/include/{multiarch}"]
    return argv + ["-c", str(source), "-o", str(output)]


def _fresh(obj: Path, source: Path) -> bool:
    try:
        return obj.stat().st_mtime_ns >= source.stat().st_mtime_ns
    except FileNotFoundError:
        return False


def object_path(source: Path = SOURCE, output: Path = OBJECT) -> Path:
    """Path of the compiled object, compiling first if missing or older than ``source``."""
    if _fresh(output, source):
        return output
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _fresh(output, source):  # another process built it while we waited
            return output
        tmp = output.with_name(f".{output.name}.{os.getpid()}")
        try:
            proc = subprocess.run(clang_argv(source, tmp), capture_output=True, text=True,
                                  timeout=COMPILE_TIMEOUT_S)
            if proc.returncode != 0:
                raise SwitchBuildError(f"clang failed on {source.name} (exit {proc.returncode}):\n"
                                       f"{proc.stderr.strip()}")
            os.replace(tmp, output)
        except subprocess.TimeoutExpired:
            raise SwitchBuildError(f"clang took longer than {COMPILE_TIMEOUT_S}s") from None
        finally:
            tmp.unlink(missing_ok=True)
    log.info("built %s", output)
    return output
