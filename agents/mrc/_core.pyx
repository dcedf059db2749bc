# cython: language_level=3, boundscheck=False, wraparound=False
"""The native MRC engine's binding: the only module that knows both Python and C.

The C core lives in ``agents/mrc/core/`` (C11, no Python.h); each part of it is
bound in its own include file below, so that the parts are reviewed beside their C.
Load it through :mod:`agents.mrc.native`, which says why it is missing.
"""

include "_core_rng.pxi"
include "_core_codec.pxi"
include "_core_cc.pxi"
include "_core_ev.pxi"
include "_core_responder.pxi"
include "_core_qp.pxi"
include "_core_endpoint.pxi"
include "_core_poller.pxi"
