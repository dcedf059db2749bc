"""Background EV probes (mrc_ctl.h EV probes, driven by the QP): ASSUMED_BAD and UNKNOWN EVs
are probed every ``probe_interval_s``; ``probe_successes`` consecutive answers restore one.

An :class:`EVProber` is owned by its :class:`agents.mrc.requester.Requester`: ``send`` appends
probe requests to the QP's output, ``on_response`` takes a probe response, ``on_timer`` and
``deadline`` time the outstanding ones. Probe ids are 16 bits; the request carries the send
stamp, echoed by the responder; the probe's RTT feeds the EV's statistics, not the RTO.
"""
from __future__ import annotations

from . import packet as pk


class EVProber:
    """Probe bookkeeping of one QP. ``config``: its QPConfig; ``rtt``: its RTT estimator;
    ``stamp(now)``: the requester's unique send stamp in ns; ``rtt_sample(info, rtt_s)``: the
    per-EV RTT statistics. ``evs`` and ``dest_qpn`` are set by the requester."""

    def __init__(self, *, config, rtt, stamp, rtt_sample):
        self.config, self._rtt, self._stamp, self._rtt_sample = config, rtt, stamp, rtt_sample
        self.evs = None
        self.dest_qpn = 0
        self._probe_id = 0

    def send(self, now: float, out: list) -> None:
        cfg = self.config
        for info in self.evs.probe_targets():
            if info.probe_outstanding is None and info.probe_due <= now:
                self._probe_id = (self._probe_id + 1) & 0xFFFF
                ts = self._stamp(now)
                out.append((pk.encode(pk.ProbePacket(self.dest_qpn, self._probe_id, info.ev,
                                                     info.ev, ts)), info.ev))
                info.probe_outstanding = (self._probe_id, now + self.probe_timeout_s)
                info.probe_due = now + cfg.probe_interval_s
                info.probes_sent += 1

    @property
    def probe_timeout_s(self) -> float:
        """Seconds a probe may take: ``max(config.probe_timeout_s, current RTO)``.

        mrc_ctl's example timeout (2 ms) is many RTTs of a real fabric; on an
        emulated one a probe's RTT is the data path's (tens of ms with shaped
        links and queues), so a fixed 2 ms would fail every probe, keep an
        EV ASSUMED_BAD for ever and send a probe every ``probe_interval_s``.
        The RTO (SRTT + 4 RTTVAR, floored by the QP ``timeout``) is the
        bound the data path already trusts.
        """
        return max(self.config.probe_timeout_s, self._rtt.rto_s)

    def on_timer(self, now: float) -> None:
        for info in self.evs.probe_targets():
            po = info.probe_outstanding
            if po is not None and po[1] <= now:
                self.evs.probe_result(info.ev, False, now, self.config.probe_successes)

    def deadline(self) -> float | None:
        best = None
        for info in self.evs.probe_targets():
            po = info.probe_outstanding
            t = po[1] if po is not None else info.probe_due
            if best is None or t < best:
                best = t
        return best

    def on_response(self, pkt: pk.ProbePacket, now: float) -> None:
        info = self.evs.info.get(pkt.req_ev)
        if info is None or info.probe_outstanding is None or \
                info.probe_outstanding[0] != pkt.probe_id:
            return
        self._rtt_sample(info, now - pkt.timestamp_ns * 1e-9)   # per-EV stats, not the RTO
        self.evs.probe_result(pkt.req_ev, True, now, self.config.probe_successes)
