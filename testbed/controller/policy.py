"""The MRC controller's decisions, sans-I/O: EV events, operator actions and time in, commands out.

The controller sees what ``mrc_ctl.h`` lets a fabric controller see: every agent's EV events
(GOOD and ASSUMED_BAD, with their drop counts), the agents' per-EV packet counts (``ev_stats``)
and the paths of its connections (the job specs' EVs and backup EVs, each with the links it
crosses). It acts only through the profile ops (``MODIFY_EV_STATE`` to DENIED and back,
``REPLACE_EV``), as :class:`agents.protocol.Command`. Inputs: :meth:`Controller.on_event`,
:meth:`Controller.on_operator`, :meth:`Controller.on_timer` (at
:meth:`Controller.next_deadline`); ``now`` is the caller's clock in seconds.

Policies (scenario ``controller: {policy: ...}``):

* ``none``: no decision of its own; timeline actions (``ev_deny``, ``ev_allow``, ``ev_replace``)
  are still carried out.
* ``replace``: an EV that *looks bad* and still does :data:`CONFIRM_S` later is replaced by a
  backup EV on the same plane (leaving by the same NIC port) that avoids the suspect links (the
  links the bad EV shares with no good EV of the connection: a link every good EV also crosses
  cannot be the fault). An EV looks bad while its QP holds it ASSUMED_BAD, or while its drop
  rate (:meth:`Connection.drop_rate`) over its last :data:`DROP_WINDOW` first transmissions
  reaches :data:`DROP_RATE` (a gray failure: each loss is excused by a later delivery, so the QP
  never retires the EV). Rules an operator can trust:

  - congestion is not failure: the rate counts losses per *first* transmission (retransmissions
    are left out of the denominator), and only the losses the QP itself may charge to an EV
    (``charged`` in ``ev_stats``: its retransmission timer, or inferred from later packets
    acknowledged, per EV or across EVs): a trim (the header crossed the path), a PSN_OOR NACK
    (the receiver's window) is no evidence against the path. Agents that report no ``charged``
    count leave ``lost`` (every loss) as the numerator. An EV whose window is congested is
    excused, as the QP excuses it: congestion signals (a CE-marked SACK or a trim before the
    last hop: the QP's SKIP, ``skips`` in ``ev_stats``) on at least :data:`CONGESTED_SHARE` of
    its first transmissions; a stray CE mark on a gray-failing EV excuses nothing;
  - hysteresis: ASSUMED_BAD that the QP undoes (DELIVERED, probes) within :data:`CONFIRM_S`,
    or a drop rate that falls back, replaces nothing;
  - the backup is the least used: fewest active EVs (every connection's, commands in flight
    included) on its links, ties split by a hash of the connection and EV, so that the
    connections of a plane do not all land on one backup path;
  - a backup just swapped in vouches for no link until it has carried :data:`DROP_WINDOW`
    first transmissions (a fresh EV has no history: it would exonerate the links it crosses);
  - the model changes only on the agent's acknowledgement (``ev_command`` "ok"). A refusal is
    journaled ``failed`` with the agent's reason, the refused backup is not offered again to
    that connection, and the EV stays watched (a retry with another backup follows if it still
    looks bad); no acknowledgement within :data:`ACK_TIMEOUT_S` is journaled ``failed`` too.

  With no backup the decision is journaled as ``no_backup`` once and nothing changes. A
  replaced EV is retired for good: it is never chosen again as a backup.

A restarted controller (``controller: {restart: true}``: :meth:`Controller.resync`) knows only
the job specs, while the agents' profiles may have changed under its predecessor (EVs replaced,
denied, held ASSUMED_BAD). So before it decides anything it asks every connection's agent for
its profile (:class:`agents.protocol.Query`: QUERY_EV_ARRAY, then QUERY_EV_STATE of each EV) and
rebuilds its model from the answers: the array's EVs are the active ones (a backup found there
is active, and fresh: no history), the job spec's EVs missing from it were replaced (retired),
states as queried (ASSUMED_BAD starts a suspicion: the same hysteresis as ever). Events on a
connection before its answer are left out (the agent's stream is ordered: its answer already
reflects them), timeline actions wait, and no suspicion starts until every connection has
answered or :data:`RESYNC_TIMEOUT_S` has passed; a connection that refuses or does not answer
stays unmanaged (no decision on it: the controller does not know its EVs). The end is
announced once as :class:`agents.protocol.Synced`.

Every decision is a dict appended to :attr:`Controller.decisions`: ``{"t", "decision", "rank",
"peer", "ev_id", "new_ev_id", "reason", "suspects"}``; ``decision`` is the command's op when
it is sent, ``acked`` or ``failed`` when the agent answers (or does not), ``no_backup``, or
``resynced`` / ``unmanaged`` per connection at a resync.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from agents.protocol import Command, Event, Operator, Query, Synced

POLICIES = ("none", "replace")
BAD_STATES = ("ASSUMED_BAD", "DENIED")
DROP_RATE = 0.05
"""Losses per first transmission at which ``replace`` swaps an EV out: 5% is far above what a
healthy EV loses to drop-tail bursts here and far below the paper's 20% gray failure."""
DROP_WINDOW = 100
"""First transmissions an EV's drop rate is measured over (its most recent reports covering at
least this many)."""
CONGESTED_SHARE = 0.1
"""SKIPs (congestion signals) per first transmission at which an EV's window is congested and its
losses excused. incast-controller (seed 1, 2 EVs per QP) recorded about one SKIP per first
transmission on the EVs into the incast and a quarter to a third on the victim pair beside it;
one stray CE mark in a window of 100 is 1%."""
CONFIRM_S = 0.5
"""An EV must look bad this long before it is replaced (s): two ``ev_stats`` reports, and many
RTTs for the QP to undo a spurious ASSUMED_BAD (it does within milliseconds on a DELIVERED)."""
ACK_TIMEOUT_S = 2.0
"""A command the agent has not answered within this long has failed (s)."""
RESYNC_TIMEOUT_S = ACK_TIMEOUT_S
"""A restarted controller decides nothing until every connection has answered its query or this
long has passed since it asked (s); the connections still silent then stay unmanaged."""


@dataclass(frozen=True)
class Path:
    """One EV of a connection: ``ev_id``, the ``links`` it crosses in order (host links
    included); ``port`` is its first link (the NIC port, so the plane, it leaves by)."""

    ev_id: int
    links: tuple[str, ...]

    @property
    def port(self) -> str:
        return self.links[0] if self.links else ""


@dataclass(frozen=True)
class Counts:
    """One ``ev_stats`` report of an EV: cumulative transmissions ``sent`` (retransmissions
    included), ``lost`` (every loss: timeouts, inferred, trims, NACKs), retransmissions ``rtx``
    sent on it, SKIPs ``skips`` (congestion) and ``charged``: the losses of a cause the QP may
    charge to the EV (timeout, per-EV or cross-EV inference; None: the agent does not report it)."""

    sent: int
    lost: int
    rtx: int = 0
    skips: int = 0
    charged: int | None = None

    @property
    def first(self) -> int:
        return self.sent - self.rtx


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
    #: ev_id -> its counts at each ev_stats report, oldest first
    counts: dict[int, list[Counts]] = field(default_factory=dict)
    #: ev_id -> when it began to look bad (cleared when it looks good again)
    suspect_since: dict[int, float] = field(default_factory=dict)
    #: ev_id -> why its QP holds it ASSUMED_BAD (from the event)
    bad_why: dict[int, str] = field(default_factory=dict)
    #: ev_id -> (the command in flight on it, when it was sent)
    pending: dict[int, tuple[Command, float]] = field(default_factory=dict)
    #: backup EVs the agent refused: never offered to this connection again
    refused: set[int] = field(default_factory=set)
    #: EVs swapped in and not yet seen over DROP_WINDOW first transmissions: not evidence yet
    fresh: set[int] = field(default_factory=set)
    #: False after a resync that this connection's agent refused or never answered: no decision
    managed: bool = True

    def drop_rate(self, ev_id: int) -> tuple[float, int, bool]:
        """(losses / first transmissions, first transmissions, congested) over the EV's last
        :data:`DROP_WINDOW` first transmissions or more. Losses: those the QP may charge to the
        EV (``charged``) where both reports carry them, else every loss (``lost``); congested:
        SKIPs on at least :data:`CONGESTED_SHARE` of the span's first transmissions.
        (0, 0, False) before two reports."""
        hist = self.counts.get(ev_id, [])
        if len(hist) < 2:
            return 0.0, 0, False
        new = hist[-1]
        old = next((c for c in reversed(hist[:-1]) if new.first - c.first >= DROP_WINDOW), hist[0])
        first = new.first - old.first
        lost = new.charged - old.charged if new.charged is not None and old.charged is not None \
            else new.lost - old.lost
        skips = new.skips - old.skips
        congested = skips > 0 and skips >= CONGESTED_SHARE * first
        return (lost / first if first > 0 else 0.0), first, congested

    def bad_reason(self, ev_id: int) -> str | None:
        """Why the EV looks bad now, or None (see the module docstring)."""
        if self.states.get(ev_id) == "ASSUMED_BAD":
            return self.bad_why.get(ev_id, "ASSUMED_BAD")
        rate, first, congested = self.drop_rate(ev_id)
        if first >= DROP_WINDOW and rate >= DROP_RATE and not congested:
            return f"drop rate {rate:.1%} over {first} first transmissions"
        return None

    def good(self) -> list[Path]:
        """The EVs that exonerate their links: not bad, dropping under half the threshold (or
        congested), and not fresh (a backup just swapped in has no history to vouch for it)."""
        return [p for e, p in self.active.items() if self.states.get(e, "GOOD") not in BAD_STATES
                and e not in self.fresh and (self.drop_rate(e)[0] < DROP_RATE / 2 or self.drop_rate(e)[2])]


class Controller:
    """Decisions for ``connections`` under ``policy`` (one of :data:`POLICIES`); ValueError
    for another policy."""

    def __init__(self, connections: list[Connection], policy: str = "none"):
        if policy not in POLICIES:
            raise ValueError(f"controller policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.policy = policy
        self.conns = {(c.rank, c.peer): c for c in connections}
        self.decisions: list[dict] = []
        #: False from :meth:`resync` until every answer is in (or its timeout): no decision before
        self.synced = True
        self._awaiting: set[tuple[int, str]] = set()   # connections whose answer is still due
        self._resync_s: float | None = None
        self._deferred: list[Operator] = []            # timeline actions that came during a resync
        self._tally = {"replaced": 0, "denied": 0, "assumed_bad": 0}

    # -- a restarted controller's resync ---------------------------------------------------
    def resync(self, now: float) -> list[Query]:
        """Start a resync (module docstring): one query per connection, in (rank, peer) order."""
        self.synced, self._resync_s = False, now
        self._awaiting = set(self.conns)
        return [Query(rank, peer) for rank, peer in sorted(self.conns)]

    def _on_query(self, conn: Connection, ev: Event, now: float) -> None:
        """An agent's answer: rebuild ``conn`` from its profile's EVs and their states."""
        key = (conn.rank, conn.peer)
        if key not in self._awaiting:
            return
        self._awaiting.discard(key)
        known = {**conn.backups, **conn.active}
        array = _ev_array(ev.evs or [])
        strangers = sorted(set(array or ()) - set(known))
        if ev.reason != "ok" or not array or strangers:
            conn.managed = False
            why = ev.reason if ev.reason != "ok" else f"EVs {strangers} are not the job spec's" if strangers else \
                "an empty EV array" if array == {} else f"a malformed EV array {str(ev.evs)[:80]}"
            self._journal(now, "unmanaged", conn, None, None, f"resync: {why}", None)
            return
        replaced = sorted(e for e in array if e not in conn.active)
        conn.retired |= set(conn.active) - set(array)
        conn.active = {e: known[e] for e in array}
        conn.backups = {e: p for e, p in conn.backups.items() if e not in array}
        conn.fresh = set(replaced)
        conn.states = {e: st for e, st in array.items() if st != "GOOD"}
        conn.bad_why = {e: "ASSUMED_BAD (found at resync)" for e, st in array.items() if st == "ASSUMED_BAD"}
        for d in (conn.counts, conn.suspect_since, conn.pending):
            d.clear()
        self._tally["replaced"] += len(replaced)
        self._tally["denied"] += sum(st == "DENIED" for st in array.values())
        self._tally["assumed_bad"] += sum(st == "ASSUMED_BAD" for st in array.values())
        self._journal(now, "resynced", conn, None, None, f"{len(array)} EVs; replaced in: {replaced}; states: "
                      f"{dict(sorted(conn.states.items()))}", None)

    def _end_resync(self, now: float) -> list:
        """Every answer in, or the timeout passed: the connections still silent stay unmanaged;
        suspicions start now; the deferred timeline actions run. [Synced, commands...]"""
        for key in sorted(self._awaiting):
            self.conns[key].managed = False
            self._journal(now, "unmanaged", self.conns[key], None, None,
                          f"resync: no answer within {RESYNC_TIMEOUT_S:g} s", None)
        self._awaiting.clear()
        self.synced = True
        answered = sum(c.managed for c in self.conns.values())
        out: list = [Synced(len(self.conns), answered, **self._tally)]
        for conn in self.conns.values():
            self._watch(conn, now)
        for op in self._deferred:
            out += self.on_operator(op, now)
        self._deferred.clear()
        return out

    # -- inputs --------------------------------------------------------------------------
    def on_event(self, ev: Event, now: float) -> list[Command | Synced]:
        """An agent's event: EV states, drop telemetry, command results and (at a resync) query
        answers update the view; then what is due (:meth:`on_timer`)."""
        conn = self.conns.get((ev.rank, ev.peer)) if ev.peer is not None else None
        if conn is not None and ev.kind == "ev_query":
            self._on_query(conn, ev, now)
        elif conn is not None and (conn.rank, conn.peer) not in self._awaiting and conn.managed:
            if ev.kind == "ev_stats":
                self._on_stats(conn, ev)
            elif ev.kind == "ev_command":
                self._on_ack(conn, ev, now)
            elif ev.kind == "ev_state" and ev.dir == "tx" and ev.ev_id in conn.active:
                conn.states[ev.ev_id] = ev.new
                if ev.new == "ASSUMED_BAD":
                    conn.bad_why[ev.ev_id] = f"ASSUMED_BAD (drop_count {ev.drop_count})"
            self._watch(conn, now)
        return self.on_timer(now)

    def _on_stats(self, conn: Connection, ev: Event) -> None:
        for e in ev.evs or ():
            if e.get("ev_id") in conn.active:
                hist = conn.counts.setdefault(e["ev_id"], [])
                hist.append(Counts(int(e.get("sent", 0)), int(e.get("lost", 0)), int(e.get("rtx", 0)),
                                   int(e.get("skips", 0)),
                                   int(e["charged"]) if e.get("charged") is not None else None))
                del hist[:-64]
        conn.fresh -= {e for e in conn.fresh if conn.drop_rate(e)[1] >= DROP_WINDOW}

    def _watch(self, conn: Connection, now: float) -> None:
        """Start or clear each active EV's suspicion (replace policy; not during a resync)."""
        if self.policy != "replace" or not self.synced or not conn.managed:
            return
        for ev_id in conn.active:
            if conn.bad_reason(ev_id) is None:
                conn.suspect_since.pop(ev_id, None)
            else:
                conn.suspect_since.setdefault(ev_id, now)

    def on_timer(self, now: float) -> list[Command | Synced]:
        """Replace the EVs that have looked bad for :data:`CONFIRM_S`; fail unanswered commands;
        end a resync whose answers are in or whose time is up (:class:`Synced` first)."""
        out: list = []
        if not self.synced:
            if self._awaiting and now - self._resync_s < RESYNC_TIMEOUT_S:
                return out
            out = self._end_resync(now)
        for conn in self.conns.values():
            for ev_id, (cmd, sent_s) in sorted(conn.pending.items()):
                if now - sent_s >= ACK_TIMEOUT_S:
                    del conn.pending[ev_id]
                    self._journal(now, "failed", conn, ev_id, cmd.new_ev_id,
                                  f"{cmd.op}: no acknowledgement within {ACK_TIMEOUT_S:g} s", None)
            for ev_id, since in sorted(conn.suspect_since.items()):
                why = conn.bad_reason(ev_id)
                if now - since < CONFIRM_S or ev_id in conn.pending or why is None:
                    continue
                cmd = self._replace(conn, ev_id, now, f"{why}, for {now - since:.2f} s", None)
                if cmd:
                    out.append(cmd)
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`on_timer` has something to do (None: nothing pending)."""
        times = [since + CONFIRM_S for c in self.conns.values() for e, since in c.suspect_since.items()
                 if e not in c.pending and e not in c.stranded]
        times += [sent_s + ACK_TIMEOUT_S for c in self.conns.values() for _, sent_s in c.pending.values()]
        if not self.synced:
            times.append(self._resync_s + (RESYNC_TIMEOUT_S if self._awaiting else 0.0))
        return min(times, default=None)

    def _on_ack(self, conn: Connection, ev: Event, now: float) -> None:
        """An agent's result of a command: the model follows an "ok"; a refusal is journaled."""
        pend = conn.pending.get(ev.ev_id)
        cmd = pend[0] if pend is not None and pend[0].op == ev.cause else None
        if cmd is not None:
            del conn.pending[ev.ev_id]
        if ev.reason != "ok":
            if cmd is not None:
                if cmd.new_ev_id is not None:
                    conn.refused.add(cmd.new_ev_id)
                conn.suspect_since.pop(ev.ev_id, None)   # confirm again before another try
                self._journal(now, "failed", conn, ev.ev_id, cmd.new_ev_id, f"{cmd.op} refused: {ev.reason}", None)
            return
        if ev.cause == "replace" and ev.ev_id in conn.active and ev.new_ev_id in conn.backups:
            for d in (conn.states, conn.counts, conn.suspect_since, conn.bad_why):
                d.pop(ev.ev_id, None)
            del conn.active[ev.ev_id]
            conn.retired.add(ev.ev_id)
            conn.active[ev.new_ev_id] = conn.backups.pop(ev.new_ev_id)
            conn.states[ev.new_ev_id] = "GOOD"
            conn.fresh.add(ev.new_ev_id)
        elif ev.cause in ("deny", "allow") and ev.ev_id in conn.active:
            conn.states[ev.ev_id] = "DENIED" if ev.cause == "deny" else "GOOD"
        else:
            return
        self._journal(now, "acked", conn, ev.ev_id, ev.new_ev_id, ev.cause, None)

    def on_operator(self, op: Operator, now: float) -> list[Command]:
        """A timeline action: ``op`` every active EV (allow: every denied one) crossing ``op.link``
        (during a resync: when it ends; unmanaged connections are left alone)."""
        if not self.synced:
            self._deferred.append(op)
            return []
        out = []
        why = f"timeline[{op.index}] ev_{op.op} {op.link}"
        for conn in self.conns.values():
            if not conn.managed:
                continue
            for ev_id, path in sorted(conn.active.items()):
                if op.link not in path.links or ev_id in conn.pending:
                    continue
                state = conn.states.get(ev_id, "GOOD")
                if op.op == "deny" and state != "DENIED":
                    out.append(self._command(conn, "deny", ev_id, None, why, now))
                elif op.op == "allow" and state == "DENIED":
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

    def link_use(self, exclude: tuple[int, str, int]) -> dict[str, int]:
        """Per link, the active EVs crossing it over every connection, the backups that commands
        in flight will bring in included, ``exclude`` (rank, peer, ev_id) left out."""
        use: dict[str, int] = {}
        for c in self.conns.values():
            paths = [p for e, p in c.active.items() if (c.rank, c.peer, e) != exclude]
            paths += [c.backups[cmd.new_ev_id] for cmd, _ in c.pending.values()
                      if cmd.new_ev_id is not None and cmd.new_ev_id in c.backups]
            for p in paths:
                for link in p.links:
                    use[link] = use.get(link, 0) + 1
        return use

    def _replace(self, conn: Connection, ev_id: int, now: float, why: str,
                 avoid: set[str] | None) -> Command | None:
        bad = conn.active[ev_id]
        suspects = avoid if avoid is not None else self.suspects(conn, ev_id)
        reserved = {cmd.new_ev_id for cmd, _ in conn.pending.values()}
        candidates = [p for e, p in sorted(conn.backups.items())
                      if p.port == bad.port and e not in conn.retired | conn.refused | reserved
                      and not suspects & set(p.links)]
        if not candidates:
            if ev_id not in conn.stranded:
                conn.stranded.add(ev_id)
                self._journal(now, "no_backup", conn, ev_id, None, why, suspects)
            return None
        use = self.link_use((conn.rank, conn.peer, ev_id))
        score = {p.ev_id: sum(use.get(link, 0) for link in p.links) for p in candidates}
        least = [p for p in candidates if score[p.ev_id] == min(score.values())]
        new = least[zlib.crc32(f"{conn.rank}/{conn.peer}/{ev_id}".encode()) % len(least)]
        return self._command(conn, "replace", ev_id, new.ev_id, why, now, suspects)

    def _command(self, conn: Connection, op: str, ev_id: int, new_ev_id: int | None, why: str, now: float,
                 suspects: set[str] | None = None) -> Command:
        cmd = Command(conn.rank, conn.peer, op, ev_id, why, new_ev_id)
        conn.pending[ev_id] = (cmd, now)
        self._journal(now, op, conn, ev_id, new_ev_id, why, suspects)
        return cmd

    def _journal(self, now: float, decision: str, conn: Connection, ev_id: int | None, new_ev_id: int | None,
                 why: str, suspects: set[str] | None) -> None:
        self.decisions.append({"t": now, "decision": decision, "rank": conn.rank, "peer": conn.peer,
                               "ev_id": ev_id, "new_ev_id": new_ev_id, "reason": why,
                               "suspects": sorted(suspects) if suspects is not None else None})


def _ev_array(items: list) -> dict[int, str] | None:
    """An ``ev_query`` answer's ``evs`` as ev_id -> state name, in slot order; None unless every
    item is ``{"ev_id": int, "state": one of GOOD, ASSUMED_BAD, DENIED, ...}`` with distinct ids."""
    out: dict[int, str] = {}
    for e in items:
        ev_id, state = (e.get("ev_id"), e.get("state")) if isinstance(e, dict) else (None, None)
        if type(ev_id) is not int or state not in ("GOOD", *BAD_STATES) or ev_id in out:
            return None
        out[ev_id] = state
    return out


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
