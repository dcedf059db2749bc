"""Collective channel over MRC (or the RC baseline): QPs to every peer on one :class:`agents.net.udp.Endpoint`.

Per rank ``r``: one *tx* connection per ``send_to`` peer and one *rx*
connection per ``recv_from`` peer, each of ``qps`` QPs (1 for mrc; rc takes
``qps: N``, NCCL_IB_QPS_PER_CONNECTION). A tx QP is a requester: it sprays
over its EVs (mrc: every EV of the peer, uSID addresses that end at it; rc
QP ``q``: EV ``q`` only, the peer's ECMP address with its own UDP source
port) and receives the SACKs for its writes. An rx QP is the responder for
one peer's QP: the payloads land in the one receive region, and its SACKs /
probe responses leave on the EV of the packet that triggered them, i.e. over
``recv_from[i].evs`` (the reverse paths, same EV ids).

QPNs are derived, never exchanged (:func:`qpn`): the connection from rank
``src`` to rank ``dst``, QP ``q`` of a world of ``n`` ranks, has its
requester at ``QPN_BASE + 2*((q*n + src)*n + dst)`` (on ``src``) and its
responder at that + 1 (on ``dst``); 24-bit (:data:`QPN_MAX`), which the job
spec checks (``2 * qps * n**2 + 0x100 <= 2**24``: n = 128 allows 511 QPs).
For a ring all-reduce with ``qps == 1`` the QPs and their packets are those
of the single-peer ring channel; only the QPN values differ.

Striping (rc, ``qps == N``): a :class:`agents.collectives.Send` of L bytes
becomes N WRITE_WITH_IMMs, part ``q`` = bytes ``[q*L//N, (q+1)*L//N)`` on QP
``q`` at ``remote_offset + q*L//N``, every part with the same immediate. Each
QP delivers in order, so the k-th arrival of every QP of a connection belongs
to the k-th message: the channel reports the arrival once all N parts have
landed, and the send completion once all N parts are acknowledged.

EV profiles (``mrc_ctl.h``): an MRC tx connection's QP takes its EVs from an EXPLICIT profile
of this agent's device, id ``peer rank + 1`` (one per destination: in SRv6 mode an EV value is a
path, so an EV set belongs to one destination), EV value = the job spec's ``ev_id``, port = its
plane + 1. The controller's commands (:meth:`QPChannel.command`) act on that profile, which
reaches the QP; the routes of the peer's ``backup_evs`` are set up front, on both sides, so a
REPLACE_EV needs nothing more from the I/O layer.

ECN (job spec ``qp.ecn``, default off): the endpoint sends ECT(0) and hands
CE marks to the QPs (:mod:`agents.net.udp`), and every QP's congestion controller
is built with ``ecn_capable=True`` (:func:`qp_config_kwargs`).
"""
from __future__ import annotations

import logging
import random
from collections import deque
from typing import Callable

import numpy as np

from ..collectives import Send
from ..mrc import (EVEvent, EVState, QP, QPAttr, QPConfig, QPError, Transport, WCOpcode, WCStatus,
                   WorkCompletion, bring_up, payload_bytes_for_mtu)
from ..mrc.packet import IPV6_UDP_BYTES
from ..mrc.profiles import EV, EV_INVALID, EVMode, EVOp, ProfileError, ProfileState, ProfileTable
from ..mrc import native
from ..net.udp import Endpoint, Route

log = logging.getLogger(__name__)

QPN_BASE = 0x100
QPN_MAX = 0xFFFFFF
"""QPNs are 24-bit (the InfiniBand BTH DestQP field, which MRC keeps)."""


def qpn(src: int, dst: int, q: int, world_size: int, *, responder: bool) -> int:
    """QPN of QP ``q`` of the connection ``src`` -> ``dst``: its requester (on ``src``,
    ``responder=False``) or its responder (on ``dst``). Distinct for every (src, dst, q, side)."""
    return QPN_BASE + 2 * ((q * world_size + src) * world_size + dst) + int(responder)


def max_qpn(world_size: int, qps: int) -> int:
    """The largest QPN :func:`qpn` can give for ``world_size`` ranks and ``qps`` QPs each."""
    return qpn(world_size - 1, world_size - 1, qps - 1, world_size, responder=True)


def engine_classes(engine: str) -> tuple[type, type]:
    """The QP class and the UDP endpoint class of an MRC engine (job spec ``engine``):
    ``python``, :class:`agents.mrc.QP` on :class:`agents.net.udp.Endpoint`; ``native``,
    ``agents.mrc._core.QP`` on :class:`agents.net.native_udp.NativeEndpoint`. A native engine
    that is not built raises :class:`agents.mrc.native.NativeEngineMissing`: a run never
    falls back to the other engine silently. ValueError for another name."""
    if engine == "python":
        return QP, Endpoint
    if engine != "native":
        raise ValueError(f"unknown MRC engine {engine!r} (python or native)")
    core = native.load(require=True)
    if not hasattr(core, "QP"):
        raise native.NativeEngineMissing(f"agents.mrc._core ({core.__file__}) has no QP: rebuild it "
                                         "(make setup)")
    from ..net.native_udp import NativeEndpoint
    return core.QP, NativeEndpoint


def qp_config_kwargs(spec) -> dict:
    """The QPConfig keyword arguments of a job spec: its ``qp`` emulation parameters, and with
    ``qp.ecn`` ``cc_params["ecn_capable"] = True`` (unless ``cc_params`` sets it), so that
    NSCC takes its ECN branch (:class:`agents.mrc.cc.NSCC`) instead of the delay-only
    fallback."""
    kwargs = spec.qp_config_kwargs()
    if spec.ecn:
        kwargs["cc_params"] = {"ecn_capable": True, **kwargs.get("cc_params", {})}
    return kwargs


class QPChannelError(RuntimeError):
    """A QP went to ERR (retries exhausted: the "job crash") or a write failed."""


class _Conn:
    """One direction of one connection: ``qps`` QPs to/from ``peer`` (a PeerSpec)."""

    __slots__ = ("peer", "side", "qps", "arrived")

    def __init__(self, peer, side: str, qps: list[QP]):
        self.peer, self.side, self.qps = peer, side, qps
        self.arrived = [deque() for _ in qps]   # rx: per QP, imms of landed parts


def _routes(peer, default_port: int, transport: str, q: int, backups: bool = False) -> dict[int, Route]:
    evs = peer.backup_evs if backups else [ev for ev in peer.evs if ev.ev_id == q] if transport == "rc" else peer.evs
    return {ev.ev_id: Route(ev.address, peer.port or default_port, ev.src_port, ev.delay_s) for ev in evs}


class QPChannel:
    """MRC/RC channel for one rank (see module docstring).

    ``loop``: :class:`agents.net.loop.EventLoop`. ``spec``: the
    :class:`agents.jobspec.JobSpec`. ``recv_region``: uint8 array registered
    as every rx QP's memory. Callbacks: ``on_arrival(src_rank, imm)`` per
    message from a peer (all its parts landed; in order per peer),
    ``on_send_complete(peer_rank, imm)`` per message acknowledged by the peer,
    ``on_ev_event(EVEvent, side, peer_host)`` per EV transition (side "tx"/"rx").
    Raises OSError if the UDP socket cannot be bound, ValueError for bad QP
    parameters; :meth:`service` raises QPChannelError when a QP enters ERR.
    """

    def __init__(self, loop, spec, recv_region: np.ndarray, *,
                 on_arrival: Callable[[int, int], None],
                 on_send_complete: Callable[[int, int], None],
                 on_ev_event: Callable[[EVEvent, str, str], None]):
        self.loop, self.spec = loop, spec
        self.on_arrival, self.on_send_complete = on_arrival, on_send_complete
        self.on_ev_event = on_ev_event
        rc = spec.transport == "rc"
        self.config = QPConfig(transport=Transport.RC if rc else Transport.MRC,
                               payload_bytes=payload_bytes_for_mtu(spec.mtu),
                               **qp_config_kwargs(spec))
        self.attr = QPAttr(**spec.qp_attr_kwargs())
        self.attr.validate()
        self._qp_class, endpoint_class = engine_classes(spec.engine)
        self.endpoint = endpoint_class(loop, bind_addr=spec.bind_addr, port=spec.port, ecn=spec.ecn,
                                       control_priority=spec.control_priority,
                                       max_datagram=spec.mtu - IPV6_UDP_BYTES)
        self.profiles = ProfileTable()
        try:
            self.tx = [self._connect(p, "tx", recv_region) for p in spec.send_to]
            self.rx = [self._connect(p, "rx", recv_region) for p in spec.recv_from]
        except Exception:
            self.endpoint.close()
            raise
        self._tx_by_rank = {c.peer.rank: c for c in self.tx}
        self._owner = {qp.qpn: c for c in self.tx + self.rx for qp in c.qps}
        self._all = [(c, q, qp) for c in self.tx + self.rx for q, qp in enumerate(c.qps)]
        self._wr_id = 0
        self._parts: dict[int, list] = {}   # wr_id -> [peer rank, imm, parts outstanding]
        self.posted = 0
        self.completed = 0
        self.connected = True      # UDP: nothing to set up
        self.wants_poll = False

    def _connect(self, peer, side: str, recv_region) -> _Conn:
        spec, attr, now = self.spec, self.attr, self.loop.time()
        n, r = spec.world_size, spec.rank
        src, dst = (r, peer.rank) if side == "tx" else (peer.rank, r)
        ev_min = spec.qp.get("ev_min_active")
        qps = []
        for q in range(spec.qps):
            mine = qpn(src, dst, q, n, responder=side == "rx")
            qp = self._qp_class(mine, rng=random.Random(f"{spec.seed}:{r}:{side}:{peer.rank}:{q}"),
                    memory=recv_region if side == "rx" else None, config=self.config)
            routes = _routes(peer, spec.port, spec.transport, q)
            dest = qpn(src, dst, q, n, responder=side == "tx")
            if side == "tx" and spec.transport == "mrc":
                bring_up(qp, now, ev_profile=self._profile(peer, ev_min), attr=attr, dest_qpn=dest)
            else:
                bring_up(qp, now, evs=list(routes), attr=attr, ev_min_active=ev_min, dest_qpn=dest)
            if spec.transport == "mrc":
                routes.update(_routes(peer, spec.port, spec.transport, q, backups=True))
            if side == "rx":             # MRC: receives for immediates are posted up front
                for wr_id in range(attr.max_wimm_dest):
                    qp.post_recv(wr_id)
            self.endpoint.attach(qp, routes)
            qps.append(qp)
        return _Conn(peer, side, qps)

    def _profile(self, peer, ev_min: int | None):
        """The ONLINE EXPLICIT profile of the connection to ``peer`` (module docstring)."""
        prof = self.profiles.get(peer.rank + 1)
        prof.modify(ev_mode=EVMode.EXPLICIT, ev_count=len(peer.evs), profile_state=ProfileState.OFFLINE)
        for e in peer.evs:
            prof.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV_INVALID, new_ev=EV(e.ev_id, e.plane + 1),
                        state=EVState.GOOD)
        prof.modify(ev_min_active=min(ev_min or self.config.ev_min_active, len(peer.evs)),
                    ev_event_mask=self.config.ev_event_mask, profile_state=ProfileState.ONLINE)
        return prof

    def command(self, peer_host: str, op: str, ev_id: int, new_ev_id: int | None, now: float) -> str:
        """A controller command on the profile of the connection to ``peer_host``: ``op`` "deny"
        or "allow" (MODIFY_EV_STATE to DENIED / GOOD) or "replace" (REPLACE_EV ``ev_id`` ->
        ``new_ev_id``, one of the peer's backup EVs). Returns "ok" or why it was refused."""
        conn = next((c for c in self.tx if c.peer.host == peer_host), None)
        if conn is None or self.spec.transport != "mrc":
            return f"no MRC connection to {peer_host}"
        port = {e.ev_id: e.plane + 1 for e in (*conn.peer.evs, *conn.peer.backup_evs)}
        try:
            prof = self.profiles.get(conn.peer.rank + 1)
            if op == "replace":
                if new_ev_id not in {e.ev_id for e in conn.peer.backup_evs}:
                    return f"EV {new_ev_id} is not a backup EV of the connection to {peer_host}"
                prof.modify(ev_op=EVOp.REPLACE_EV, cur_ev=EV(ev_id, port[ev_id]),
                            new_ev=EV(new_ev_id, port[new_ev_id]), state=EVState.GOOD,
                            all_copies=1, now=now)
            else:
                prof.modify(ev_op=EVOp.MODIFY_EV_STATE, ev=EV(ev_id, port.get(ev_id, 1)),
                            state=EVState.DENIED if op == "deny" else EVState.GOOD, now=now)
        except ProfileError as exc:
            return str(exc)
        for qp in conn.qps:
            self.endpoint.kick(qp)
        return "ok"

    def query(self, peer_host: str) -> tuple[list[dict], str]:
        """The EV profile of the connection to ``peer_host`` as a restarted controller reads it:
        QUERY_EV_ARRAY, then QUERY_EV_STATE of each EV (``mrc_ctl.h``), as ``([{"ev_id", "port",
        "state"}], "ok")`` in slot order (``state`` a ``mrc_ctl_ev_state`` name: GOOD,
        ASSUMED_BAD or DENIED); ``([], why)`` when there is no such profile or it refuses."""
        conn = next((c for c in self.tx if c.peer.host == peer_host), None)
        if conn is None or self.spec.transport != "mrc":
            return [], f"no MRC connection to {peer_host}"
        try:
            prof = self.profiles.get(conn.peer.rank + 1)
            evs = prof.modify(ev_op=EVOp.QUERY_EV_ARRAY)
            return [{"ev_id": e.val, "port": e.port, "state": prof.modify(ev_op=EVOp.QUERY_EV_STATE, ev=e).name}
                    for e in evs], "ok"
        except ProfileError as exc:
            return [], str(exc)

    def post(self, send: Send) -> None:
        """WRITE_WITH_IMM of ``send.data`` at ``send.remote_offset`` of rank ``send.peer``'s
        region, striped over the connection's QPs (module docstring). KeyError: not a send_to
        peer."""
        conn = self._tx_by_rank[send.peer]
        data = memoryview(send.data).cast("B")
        size, n = len(data), len(conn.qps)
        record = [send.peer, send.imm, n]
        self.posted += 1
        for q, qp in enumerate(conn.qps):
            a, b = q * size // n, (q + 1) * size // n
            self._wr_id += 1
            self._parts[self._wr_id] = record
            qp.post_write(wr_id=self._wr_id, local=data[a:b],
                          remote_offset=send.remote_offset + a, imm=send.imm)
            self.endpoint.kick(qp)

    def service(self, now: float) -> None:
        """Drain every QP's events into the callbacks; QPChannelError on a QP error."""
        for conn, q, qp in self._all:
            while (ev := qp.next_event()) is not None:
                if isinstance(ev, WorkCompletion):
                    self._on_completion(conn, q, qp, ev)
                elif isinstance(ev, EVEvent):
                    self.on_ev_event(ev, conn.side, conn.peer.host)
                elif isinstance(ev, QPError):
                    raise QPChannelError(f"{conn.side} QP {qp.qpn} ({q} of {len(conn.qps)}) "
                                         f"{'to' if conn.side == 'tx' else 'from'} "
                                         f"{conn.peer.host} entered ERR: {ev.reason}")

    def _on_completion(self, conn: _Conn, q: int, qp: QP, wc: WorkCompletion) -> None:
        if wc.status is not WCStatus.SUCCESS:
            raise QPChannelError(f"{conn.side} QP {qp.qpn} ({conn.peer.host}): write "
                                 f"{wc.wr_id} completed with {wc.status.value}")
        if wc.opcode is WCOpcode.RECV_RDMA_WITH_IMM:
            qp.post_recv(wc.wr_id)       # replace the receive it consumed
            if len(conn.qps) == 1:
                self.on_arrival(conn.peer.rank, wc.imm)
                return
            arrived = conn.arrived
            arrived[q].append(wc.imm)
            while all(arrived):
                imms = {d.popleft() for d in arrived}
                if len(imms) != 1:
                    raise QPChannelError(f"parts of one message from {conn.peer.host} carry "
                                         f"different immediates {sorted(imms)}")
                self.on_arrival(conn.peer.rank, imms.pop())
            return
        record = self._parts.pop(wc.wr_id)
        record[2] -= 1
        if record[2] == 0:
            self.completed += 1
            self.on_send_complete(record[0], record[1])

    @property
    def idle(self) -> bool:
        """Every posted write has completed (acknowledged by its peer)."""
        return all(qp.idle for c in self.tx for qp in c.qps)

    def flows(self) -> list[dict]:
        """Cumulative counters per connection for a sample message: one "tx" entry per
        send_to peer, one "rx" entry per recv_from peer (sums over the connection's QPs;
        "evs": mrc the QP's EVs, rc one item per QP with ev_id = q)."""
        # The counters directly, not the full QP.stats() snapshot: this runs every sample
        # interval (20 ms) in every agent.
        out = []
        for c in self.tx:
            qps = c.qps
            rtts = [qp.srtt_s for qp in qps if qp.srtt_s is not None]
            evs = [row for qp in qps if qp.evs is not None for row in qp.evs.sample_rows()]
            out.append({"peer": c.peer.host, "peer_rank": c.peer.rank, "dir": "tx",
                        "bytes": sum(qp.requester.acked_bytes for qp in qps),
                        "busy": not all(qp.idle for qp in qps),
                        "retransmits": sum(qp.requester.rtx_packets for qp in qps),
                        "retransmitted_bytes": sum(qp.requester.rtx_bytes for qp in qps),
                        "rtt_s": sum(rtts) / len(rtts) if rtts else None,
                        "cwnd_bytes": _window(qps), "evs": evs})
        for c in self.rx:
            out.append({"peer": c.peer.host, "peer_rank": c.peer.rank, "dir": "rx",
                        "bytes": sum(qp.responder.rx_bytes for qp in c.qps), "retransmits": 0,
                        "rtt_s": None, "cwnd_bytes": None, "evs": [],
                        "duplicates": sum(qp.responder.rx_duplicates for qp in c.qps)})
        return out

    def summary(self) -> dict:
        """The done summary's "channel": ``tx_qp``/``rx_qp`` (counters summed over every QP,
        as :meth:`agents.mrc.QP.stats` keys), ``peers`` (per connection: peer, rank, dir,
        and ``qps``: each QP's full stats), ``qps_per_connection`` and ``udp``."""
        ep = self.endpoint
        peers = [{"peer": c.peer.host, "rank": c.peer.rank, "dir": c.side,
                  "qps": [qp.stats() for qp in c.qps]} for c in self.tx + self.rx]
        return {"tx_qp": _aggregate([s for p in peers if p["dir"] == "tx" for s in p["qps"]]),
                "rx_qp": _aggregate([s for p in peers if p["dir"] == "rx" for s in p["qps"]]),
                "qps_per_connection": self.spec.qps, "peers": peers,
                "engine": self.spec.engine,
                "udp": {"rx_datagrams": ep.rx_datagrams, "tx_datagrams": ep.tx_datagrams,
                        "tx_errors": ep.tx_errors, "rx_unknown_qpn": ep.rx_unknown_qpn,
                        "ecn": ep.ecn, "rx_ce": ep.rx_ce, "control_priority": ep.control_priority}}

    def close(self) -> None:
        self.endpoint.close()


_SUMMED = ("tx_packets", "tx_bytes", "retransmissions", "retransmitted_bytes", "timeouts",
           "lost_packets", "acked_bytes", "inflight_bytes", "cwnd_bytes", "rx_packets",
           "rx_bytes", "rx_duplicates", "rx_ooo", "rx_out_of_window", "rx_access_errors",
           "bad_packets", "cnp_sent", "cnp_received")


def _window(qps: list[QP]) -> float | None:
    """The connection's congestion window in bytes, None without one (a rate-based controller
    such as DCQCN: its window is infinite, which JSON reports cannot carry)."""
    total = sum(qp.cc.cwnd_bytes for qp in qps)
    return total if total != float("inf") else None


def _aggregate(stats: list[dict]) -> dict:
    """Counters of several QP.stats() summed; ``qps``: how many; ``states``: their states."""
    out = {k: sum(s[k] for s in stats) for k in _SUMMED}
    out["qps"] = len(stats)
    out["states"] = sorted({s["state"] for s in stats})
    return out
