"""pytest plugin of ``make sanitize`` (``-p tests.lsan_plugin``): imports orjson and numpy with
LeakSanitizer off, before anything else imports them.

orjson's module init (the third-party extension the testbed's JSON goes through, imported by
``agents.protocol``) keeps a str that only its own static data points to, where LSan finds no
reference: one "direct leak" of 55 bytes at exit. No suppression can name it: CPython allocates
it in a static function of ``/usr/bin/python3.11``, the one frame ASan's fast unwinder records
(no frame pointers there). Likewise numpy's init (``testbed.spec.jobs`` and the agents import
it) leaves two floats (48 bytes, one frame: ``PyFloat_FromDouble``). Nothing of the native
engine is imported with LSan off.
"""
from __future__ import annotations

import ctypes

_libs = ctypes.CDLL(None)
_off = getattr(_libs, "__lsan_disable", None)
_on = getattr(_libs, "__lsan_enable", None)
if _off is not None and _on is not None:   # only under ASan/LSan (LD_PRELOAD)
    _off()
    try:
        import numpy  # noqa: F401
        import orjson  # noqa: F401
    finally:
        _on()
