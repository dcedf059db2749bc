"""The MRC controller's decisions, sans-I/O: EV events and operator actions in, commands out.

The controller sees what ``mrc_ctl.h`` lets a fabric controller see: every agent's EV events
(GOOD and ASSUMED_BAD, with their drop counts) and the paths of its connections (the job specs'
EVs and backup EVs, each with the links it crosses). It acts only through the profile ops
(``MODIFY_EV_STATE`` to DENIED and back, ``REPLACE_EV``), as :class:`agents.protocol.Command`.

Policies (scenario ``controller: {policy: ...}``):

* ``none``: no decision of its own; timeline actions (``ev_deny``, ``ev_allow``, ``ev_replace``)
  are still carried out.
* ``replace``: on ASSUMED_BAD, or when an EV's drop rate over its last :data:`DROP_WINDOW`
  packets reaches :data:`DROP_RATE` (the agents' ``ev_stats`` telemetry: a gray failure that
  still delivers most packets never makes its QP retire the EV, since each loss is excused by a
  later delivery on it), replace the EV by a backup EV on the same plane (leaving by the same
  NIC port) that avoids the links the bad EV shares with no good EV of the connection (the
  suspects: a link every good EV also crosses cannot be the fault; an EV dropping at half the
  threshold or more is not good). The connection keeps its EV count. With no such backup the
  decision is journaled as ``no_backup`` and nothing changes. A replaced EV is retired for good:
  it is never chosen again as a backup.

Every decision is a dict appended to :attr:`Controller.decisions` (and returned with its
command): ``{"t", "decision", "rank", "peer", "ev_id", "new_ev_id", "reason", "suspects"}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.protocol import Command, Event, Operator

POLICIES = ("none", "replace")
BAD_STATES = ("ASSUMED_BAD", "DENIED")
DROP_RATE = 0.05
"""Drop rate (lost / sent packets) at which ``replace`` swaps an EV out: 5% is far above what a
healthy EV loses to congestion here (drop-tail bursts, excused by later deliveries) and far
below the paper's 20% gray failure."""
DROP_WINDOW = 100
"""Packets an EV's drop rate is measured over (its most recent reports covering at least this many)."""


@dataclass(frozen=True)
class Path:
    """One EV of a connection: ``ev_id``, the ``links`` it crosses in order (host links
    included); ``port`` is its first link (the NIC port, so the plane, it leaves by)."""

    ev_id: int
    links: tuple[str, ...]

    @property
    def port(self) -> str:
        return self.links[0] if self.links else ""


@dataclass
class Connection:
    """Agent ``rank``'s MRC connection to ``peer`` (host name): its ``active`` EVs (ev_id ->
    Path, in use by its QP) and ``backups`` (paths it may be given by REPLACE_EV)."""

    rank: int
    peer: str
    active: dict[int, Path]
    backups: dict[int, Path]
    states: dict[int, str] = field(default_factory=dict)
    retired: set[int] = field(default_factory=set)
    #: EVs found bad with no backup to take their place (journaled once)
    stranded: set[int] = field(default_factory=set)
    #: ev_id -> its (sent, lost) counts at each ev_stats report, oldest first
    counts: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    def drop_rate(self, ev_id: int) -> tuple[float, int]:
        """(lost / sent, sent) over the EV's last :data:`DROP_WINDOW` packets or more; (0, 0)
        before two reports."""
        hist = self.counts.get(ev_id, [])
        if len(hist) < 2:
            return 0.0, 0
        sent, lost = hist[-1]
        old = next(((s, l) for s, l in reversed(hist[:-1]) if sent - s >= DROP_WINDOW), hist[0])
        d_sent, d_lost = sent - old[0], lost - old[1]
        return (d_lost / d_sent if d_sent > 0 else 0.0), d_sent

    def good(self) -> list[Path]:
        return [p for e, p in self.active.items() if self.states.get(e, "GOOD") not in BAD_STATES
                and self.drop_rate(e)[0] < DROP_RATE / 2]


class Controller:
    """Decisions for ``connections`` under ``policy`` (one of :data:`POLICIES`); ValueError
    for another policy."""

    def __init__(self, connections: list[Connection], policy: str = "none"):
        if policy not in POLICIES:
            raise ValueError(f"controller policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.policy = policy
        self.conns = {(c.rank, c.peer): c for c in connections}
        self.decisions: list[dict] = []

    # -- inputs --------------------------------------------------------------------------
    def on_event(self, ev: Event, now: float) -> list[Command]:
        """An agent's event: EV state changes of its tx connections update the controller's view;
        an ASSUMED_BAD may be answered (policy ``replace``)."""
        if ev.kind == "ev_stats":
            return self._on_stats(ev, now)
        if ev.kind != "ev_state" or ev.dir != "tx":
            return []
        conn = self.conns.get((ev.rank, ev.peer))
        if conn is None or ev.ev_id not in conn.active:
            return []
        conn.states[ev.ev_id] = ev.new
        if self.policy == "replace" and ev.new == "ASSUMED_BAD":
            cmd = self._replace(conn, ev.ev_id, now, f"ASSUMED_BAD (drop_count {ev.drop_count})", None)
            return [cmd] if cmd else []
        return []

    def _on_stats(self, ev: Event, now: float) -> list[Command]:
        conn = self.conns.get((ev.rank, ev.peer))
        if conn is None:
            return []
        for e in ev.evs or ():
            if e.get("ev_id") in conn.active:
                hist = conn.counts.setdefault(e["ev_id"], [])
                hist.append((int(e.get("sent", 0)), int(e.get("lost", 0))))
                del hist[:-64]
        if self.policy != "replace":
            return []
        out = []
        for ev_id in sorted(conn.active):
            rate, sent = conn.drop_rate(ev_id)
            if sent >= DROP_WINDOW and rate >= DROP_RATE:
                cmd = self._replace(conn, ev_id, now, f"drop rate {rate:.1%} over {sent} packets", None)
                if cmd:
                    out.append(cmd)
        return out

    def on_operator(self, op: Operator, now: float) -> list[Command]:
        """A timeline action: ``op`` every active EV (allow: every denied one) crossing ``op.link``."""
        out = []
        why = f"timeline[{op.index}] ev_{op.op} {op.link}"
        for conn in self.conns.values():
            for ev_id, path in sorted(conn.active.items()):
                if op.link not in path.links:
                    continue
                state = conn.states.get(ev_id, "GOOD")
                if op.op == "deny" and state != "DENIED":
                    conn.states[ev_id] = "DENIED"
                    out.append(self._command(conn, "deny", ev_id, None, why, now))
                elif op.op == "allow" and state == "DENIED":
                    conn.states[ev_id] = "GOOD"
                    out.append(self._command(conn, "allow", ev_id, None, why, now))
                elif op.op == "replace":
                    cmd = self._replace(conn, ev_id, now, why, {op.link})
                    if cmd:
                        out.append(cmd)
        return out

    # -- decisions -----------------------------------------------------------------------
    def suspects(self, conn: Connection, ev_id: int) -> set[str]:
        """The links of EV ``ev_id`` that no good EV of ``conn`` crosses."""
        shared = {link for p in conn.good() if p.ev_id != ev_id for link in p.links}
        return set(conn.active[ev_id].links) - shared

    def _replace(self, conn: Connection, ev_id: int, now: float, why: str,
                 avoid: set[str] | None) -> Command | None:
        bad = conn.active[ev_id]
        suspects = avoid if avoid is not None else self.suspects(conn, ev_id)
        candidates = [p for e, p in sorted(conn.backups.items())
                      if p.port == bad.port and e not in conn.retired and not suspects & set(p.links)]
        if not candidates:
            if ev_id not in conn.stranded:
                conn.stranded.add(ev_id)
                self._journal(now, "no_backup", conn, ev_id, None, why, suspects)
            return None
        new = candidates[0]
        del conn.active[ev_id]
        conn.retired.add(ev_id)
        conn.states.pop(ev_id, None)
        conn.counts.pop(ev_id, None)
        conn.active[new.ev_id] = conn.backups.pop(new.ev_id)
        conn.states[new.ev_id] = "GOOD"
        return self._command(conn, "replace", ev_id, new.ev_id, why, now, suspects)

    def _command(self, conn: Connection, op: str, ev_id: int, new_ev_id: int | None, why: str, now: float,
                 suspects: set[str] | None = None) -> Command:
        self._journal(now, op, conn, ev_id, new_ev_id, why, suspects)
        return Command(conn.rank, conn.peer, op, ev_id, why, new_ev_id)

    def _journal(self, now: float, decision: str, conn: Connection, ev_id: int, new_ev_id: int | None,
                 why: str, suspects: set[str] | None) -> None:
        self.decisions.append({"t": now, "decision": decision, "rank": conn.rank, "peer": conn.peer,
                               "ev_id": ev_id, "new_ev_id": new_ev_id, "reason": why,
                               "suspects": sorted(suspects) if suspects is not None else None})


def connections_of(jobs: list) -> list[Connection]:
    """Every MRC tx connection of ``jobs`` (:class:`agents.jobspec.JobSpec`): one per
    ``send_to`` peer, its EVs active and its ``backup_evs`` as backups."""
    out = []
    for job in jobs:
        if job.transport != "mrc":
            continue
        for peer in job.send_to:
            out.append(Connection(job.agent, peer.host,
                                  {e.ev_id: Path(e.ev_id, tuple(e.links)) for e in peer.evs},
                                  {e.ev_id: Path(e.ev_id, tuple(e.links)) for e in peer.backup_evs}))
    return out
