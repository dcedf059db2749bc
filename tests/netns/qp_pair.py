"""Helpers of the root-tier tests that run a QP pair over the fabric on either engine."""

from __future__ import annotations

import pytest

from agents.channels import qp as qp_channel
from agents.mrc import WCOpcode, WorkCompletion, native


def engine_classes(name: str):
    """(QP class, endpoint class, native loop) of ``name``: python, native, native-loop (the
    agents' :func:`agents.channels.qp.engine_classes`). Skips (fails, when the native engine is
    required) without a native build."""
    try:
        qp_cls, ep_cls = qp_channel.engine_classes("native" if name == "native-loop" else name)
    except native.NativeEngineMissing:
        if native.required():
            pytest.fail("the native engine is required but not built")
        pytest.skip("native engine not built")
    return qp_cls, ep_cls, name == "native-loop"


def write_and_wait(loop, a, b, ep_a, wr_id: int, local: bytes, timeout_s: float = 10.0) -> float:
    """Post a WRITE of ``local`` on ``a`` (to ``b``), run ``loop`` until it completes (draining
    ``b``'s events meanwhile); the loop time of the completion. AssertionError on timeout."""
    done = []

    def until() -> bool:
        while (event := a.next_event()) is not None:
            if isinstance(event, WorkCompletion) and event.opcode is WCOpcode.RDMA_WRITE:
                done.append(loop.time())
        while b.next_event() is not None:
            pass
        return bool(done)
    a.post_write(wr_id=wr_id, local=local, remote_offset=0)
    ep_a.kick(a)
    assert loop.run(until=until, timeout_s=timeout_s), f"write {wr_id} did not complete"
    return done[0]
