"""Ring channel over MRC (or the RC baseline): two QPs on one :class:`agents.io.Endpoint`.

Per rank ``r`` of ``n``: the *tx* QP (QPN ``tx_qpn(r)``) is the requester
towards ``next``; it sprays over ``next.evs`` (uSID addresses that end at
``next``) and receives the SACKs for its writes. The *rx* QP (QPN
``rx_qpn(r - 1)``) is the responder for ``prev``'s writes: the payloads
land in the receive region, and its SACKs / probe responses leave on the
EV of the packet that triggered them, i.e. towards ``prev`` over
``prev.evs`` (the reverse paths, which end at ``prev``). QPNs are derived
from ranks, so nothing is exchanged out of band.

RC baseline (``transport == "rc"``): ``QPConfig(transport=Transport.RC)``,
only the first EV of each list (a pinned uSID path, or the peer's ECMP
address with the EV's ``src_port`` as entropy).
"""
from __future__ import annotations

import logging
import random
from typing import Callable

import numpy as np

from .collectives import Send
from .io import Endpoint, Route
from .mrc import (EVEvent, QP, QPAttr, QPConfig, QPError, QPState, Transport, WCOpcode,
                  WCStatus, WorkCompletion, payload_bytes_for_mtu)

log = logging.getLogger(__name__)

QPN_BASE = 0x100


def tx_qpn(rank: int) -> int:
    """QPN of rank's requester QP towards its next rank."""
    return QPN_BASE + 2 * rank


def rx_qpn(sender_rank: int) -> int:
    """QPN of the responder QP that receives ``sender_rank``'s writes (on sender_rank + 1)."""
    return QPN_BASE + 2 * sender_rank + 1


class QPChannelError(RuntimeError):
    """A QP went to ERR (retries exhausted: the "job crash") or a write failed."""


def _routes(peer, default_port: int, rc: bool) -> dict[int, Route]:
    evs = peer.evs[:1] if rc else peer.evs
    return {ev.ev_id: Route(ev.address, peer.port or default_port, ev.src_port) for ev in evs}


class QPChannel:
    """MRC/RC ring channel for one rank (see module docstring).

    ``loop``: :class:`agents.io.EventLoop`. ``spec``: the
    :class:`agents.jobspec.JobSpec`. ``recv_region``: uint8 array registered
    as the rx QP's memory. Callbacks: ``on_arrival(imm)`` per WRITE_WITH_IMM
    completion (in order), ``on_ev_event(EVEvent, side)`` per EV transition.
    Raises OSError if the UDP socket cannot be bound, ValueError for bad QP
    parameters; :meth:`service` raises QPChannelError when a QP enters ERR.
    """

    def __init__(self, loop, spec, recv_region: np.ndarray, *,
                 on_arrival: Callable[[int], None],
                 on_ev_event: Callable[[EVEvent, str], None]):
        self.loop, self.spec = loop, spec
        self.on_arrival, self.on_ev_event = on_arrival, on_ev_event
        rc = spec.transport == "rc"
        config = QPConfig(transport=Transport.RC if rc else Transport.MRC,
                          payload_bytes=payload_bytes_for_mtu(spec.mtu),
                          **spec.qp_config_kwargs())
        attr = QPAttr(**spec.qp_attr_kwargs())
        attr.validate()
        n, r = spec.world_size, spec.rank
        prev_rank = (r - 1) % n
        self.tx = QP(tx_qpn(r), rng=random.Random(f"{spec.seed}:{r}:tx"), config=config)
        self.rx = QP(rx_qpn(prev_rank), rng=random.Random(f"{spec.seed}:{r}:rx"),
                     memory=recv_region, config=config)
        self.tx_routes = _routes(spec.next, spec.port, rc)
        self.rx_routes = _routes(spec.prev, spec.port, rc)
        now = loop.time()
        ev_min = spec.qp.get("ev_min_active")
        for qp, routes, dest in ((self.tx, self.tx_routes, rx_qpn(r)),
                                 (self.rx, self.rx_routes, tx_qpn(prev_rank))):
            init = {"evs": list(routes)}
            if ev_min is not None:
                init["ev_min_active"] = ev_min
            qp.modify_qp(QPState.INIT, now, **init)
            qp.modify_qp(QPState.RTR, now, dest_qpn=dest, mpr_dest=attr.mpr_dest,
                         max_wimm_dest=attr.max_wimm_dest)
            qp.modify_qp(QPState.RTS, now, mpr=min(attr.mpr, attr.mpr_dest),
                         max_wimm=attr.max_wimm, timeout=attr.timeout,
                         retry_linear_cnt=attr.retry_linear_cnt,
                         retry_exp_cnt=attr.retry_exp_cnt)
        self.endpoint = Endpoint(loop, bind_addr=spec.bind_addr, port=spec.port)
        self.endpoint.attach(self.tx, self.tx_routes)
        self.endpoint.attach(self.rx, self.rx_routes)
        self._wr_id = 0
        self._posted = 0
        self._completed = 0
        self.connected = True      # UDP: nothing to set up
        self.wants_poll = False

    def post(self, send: Send) -> None:
        """WRITE_WITH_IMM of ``send.data`` at ``send.remote_offset`` on next's rx QP."""
        self._wr_id += 1
        self._posted += 1
        self.tx.post_write(wr_id=self._wr_id, local=send.data,
                           remote_offset=send.remote_offset, imm=send.imm)
        self.endpoint.kick(self.tx)

    def service(self, now: float) -> None:
        """Drain both QPs' events into the callbacks; QPChannelError on a QP error."""
        for side, qp in (("tx", self.tx), ("rx", self.rx)):
            while (ev := qp.next_event()) is not None:
                if isinstance(ev, WorkCompletion):
                    if ev.status is not WCStatus.SUCCESS:
                        raise QPChannelError(f"{side} QP {qp.qpn}: write {ev.wr_id} completed "
                                             f"with {ev.status.value}")
                    if ev.opcode is WCOpcode.RECV_RDMA_WITH_IMM:
                        self.on_arrival(ev.imm)
                    else:
                        self._completed += 1
                elif isinstance(ev, EVEvent):
                    self.on_ev_event(ev, side)
                elif isinstance(ev, QPError):
                    peer = self.spec.next.host if side == "tx" else self.spec.prev.host
                    raise QPChannelError(f"{side} QP {qp.qpn} to {peer} entered ERR: {ev.reason}")

    @property
    def idle(self) -> bool:
        """Every posted write has completed (acknowledged by next)."""
        return self.tx.idle

    def flows(self) -> list[dict]:
        """Cumulative per-direction counters (QP.stats) for a sample message."""
        # The counters directly, not the full QP.stats() snapshot: this runs every sample
        # interval (20 ms) in every agent.
        tx, rx = self.tx, self.rx
        evs = [{"ev_id": ev, "state": i.state.name, "sent": i.packets_sent, "lost": i.packets_lost}
               for ev, i in tx.evs.info.items()] if tx.evs is not None else []
        return [
            {"peer": self.spec.next.host, "dir": "tx", "bytes": tx.acked_bytes,
             "retransmits": tx.rtx_packets, "retransmitted_bytes": tx.rtx_bytes,
             "rtt_s": tx.srtt_s, "cwnd_bytes": tx.cc.cwnd_bytes, "evs": evs},
            {"peer": self.spec.prev.host, "dir": "rx", "bytes": rx.rx_bytes,
             "retransmits": 0, "rtt_s": None, "cwnd_bytes": None, "evs": [],
             "duplicates": rx.rx_duplicates},
        ]

    def summary(self) -> dict:
        ep = self.endpoint
        return {"tx_qp": self.tx.stats(), "rx_qp": self.rx.stats(),
                "udp": {"rx_datagrams": ep.rx_datagrams, "tx_datagrams": ep.tx_datagrams,
                        "tx_errors": ep.tx_errors, "rx_unknown_qpn": ep.rx_unknown_qpn}}

    def close(self) -> None:
        self.endpoint.close()
