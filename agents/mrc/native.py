"""Loads the native MRC engine (:mod:`agents.mrc._core`) or says why it is missing.

The extension is built by ``pip install -e .`` (``make setup``) from ``agents/mrc/core/``
and ``agents/mrc/_core.pyx``. A missing or broken build is not silent where it matters:
with ``MRC_NATIVE_REQUIRE=1`` in the environment (CI sets it) :func:`load` raises instead
of returning None, so tests that compare the engines cannot skip themselves into a pass.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys

REQUIRE_ENV = "MRC_NATIVE_REQUIRE"
LIB_ENV = "MRC_NATIVE_LIB"
"""Path of another build of the extension to load instead (``make sanitize``'s ASan/UBSan
build in ``build/sanitize/``), so that the same tests run against it."""


class NativeEngineMissing(ImportError):
    """The native engine is required (``MRC_NATIVE_REQUIRE=1``) but cannot be imported."""


def required() -> bool:
    """True when ``MRC_NATIVE_REQUIRE`` is set to 1/true/yes."""
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes")


def load(require: bool | None = None):
    """The ``agents.mrc._core`` module, or None if it cannot be imported.

    ``require`` (default: :func:`required`) turns a missing build into
    :class:`NativeEngineMissing`, whose message gives the import error and the fix.
    """
    try:
        path = os.environ.get(LIB_ENV)
        return _load_file(path) if path else importlib.import_module("agents.mrc._core")
    except ImportError as exc:
        if require if require is not None else required():
            raise NativeEngineMissing(
                f"the native MRC engine is required ({REQUIRE_ENV}=1) but agents.mrc._core "
                f"does not import: {exc}. Build it with `make setup` (gcc, python3-dev and "
                f"libisal-dev, then pip install -e .).") from exc
        return None


def _load_file(path: str):
    """Import the extension from ``path`` as ``agents.mrc._core`` (once per process)."""
    name = "agents.mrc._core"
    loaded = sys.modules.get(name)
    if loaded is not None:
        if os.path.realpath(getattr(loaded, "__file__", "")) != os.path.realpath(path):
            raise ImportError(f"{name} is already loaded from {loaded.__file__}, not {path}")
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or not os.path.exists(path):
        raise ImportError(f"{LIB_ENV}={path}: no such extension file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
