"""EV profiles (OCP MRC 1.0 ``mrc_ctl.h``), sans-I/O: the controller's view of a device's EV sets.

A :class:`ProfileTable` per device (host) holds :class:`EVProfile` objects by ``profile_id``.
A profile follows ``mrc_ctl_modify_ev_profile``'s state machine, INIT -> OFFLINE -> ONLINE
-> OFFLINE -> INIT (:data:`TRANSITIONS`, one table, h11 style), with the header's rules:

* to OFFLINE needs ``ev_mode`` and ``ev_count``; an EXPLICIT array starts with every EV
  unpopulated (:data:`EV_INVALID`), a GENERATED one is filled by the "NIC";
* to ONLINE needs ``ev_min_active`` and ``ev_event_mask`` and, for EXPLICIT, every EV
  populated by REPLACE_EV;
* ``ev_min_active <= ev_count``; the event mask holds only GOOD and ASSUMED_BAD;
* what each state allows is :data:`ATTRS_ALLOWED` and :data:`OPS_ALLOWED` (ONLINE: the
  three EV ops but REPLACE_EV, plus EVENT_MASK and REPLACE_EV because this emulation
  advertises ``MRC_CTL_OPT_CAP_EV_PROFILE_MODIFY_ONLINE``);
* a profile with active QPs (attached, in INIT..RTS) refuses state changes and attribute
  changes with EBUSY; the EV ops still reach them.

Every refusal raises :class:`ProfileError` with the errno the header names (EINVAL, ENOENT,
EBUSY) and a message naming the profile, its state and the op.

What is per profile and what per QP: the EV array (which EV values exist, in which slot) and
DENIED are the controller's, so they live on the profile and every attached QP follows them
(MODIFY_EV_STATE -> :meth:`QP.set_ev_state`, REPLACE_EV -> :meth:`QP.replace_ev`). SKIP and
ASSUMED_BAD are each QP's own findings from its own packets (a path can be congested or
broken for one flow's 5-tuple and not for another's, and one QP's losses say nothing about
another's window), so they stay on the QP; QUERY_EV_STATE reports DENIED from the profile,
otherwise ASSUMED_BAD if any active QP holds the EV ASSUMED_BAD, else GOOD (ENOENT for an
unpopulated slot).

REPLACE_EV on a QP keeps the slot (spray order) and starts the new EV with fresh counters in
the op entry's ``state`` (mrc_ctl.h marks it required; here it defaults to GOOD when not
given): GOOD, or DENIED (then held DENIED by the profile, as MODIFY_EV_STATE would); another
state is EINVAL. A QP attaching to the profile starts with its DENIED EVs DENIED. Packets in flight on the old EV are left alone: their SACKs still find the old
EV's record, and any that are lost are retransmitted on the current EVs as usual
(:meth:`agents.mrc.ev.EVSet.replace`).
"""
from __future__ import annotations

import enum
import errno
from dataclasses import dataclass

from .ev import EVENT_MASK_ALLOWED, EVState, visible


class ProfileState(enum.IntEnum):
    """``enum mrc_ctl_profile_state``."""

    INIT = 0
    OFFLINE = 1
    ONLINE = 2


class EVMode(enum.IntEnum):
    """``enum mrc_ctl_ev_mode``."""

    AUTO = 0
    EXPLICIT = 1
    GENERATED = 2


class EVOp(enum.IntEnum):
    """``enum mrc_ctl_ev_op``."""

    REPLACE_EV = 0
    MODIFY_EV_STATE = 1
    QUERY_EV_STATE = 2
    QUERY_EV_ARRAY = 3


class Attr(enum.IntFlag):
    """``enum mrc_ctl_ev_profile_attr_mask`` (the attributes a modify call sets)."""

    STATE = 1 << 0
    CUR_STATE = 1 << 1
    MODE = 1 << 2
    COUNT = 1 << 3
    MIN_ACTIVE = 1 << 4
    EVENT_MASK = 1 << 5
    EV_OP = 1 << 6


@dataclass(frozen=True, slots=True)
class EV:
    """``struct mrc_ctl_ev``: a 32-bit EV value and a 1-based port (0 with val 0: invalid)."""

    val: int
    port: int = 1

    def __post_init__(self):
        if not 0 <= self.val <= 0xFFFFFFFF or not 0 <= self.port <= 255:
            raise ProfileError(errno.EINVAL, f"EV {self.val}/{self.port} is not a u32 value and u8 port")


EV_INVALID = EV(0, 0)
"""``MRC_CTL_EV_INVALID``: an unpopulated slot of an EXPLICIT array."""


class ProfileError(Exception):
    """A refused profile call: ``errno`` (EINVAL, ENOENT, EBUSY) as mrc_ctl.h returns."""

    def __init__(self, code: int, message: str):
        super().__init__(f"{errno.errorcode.get(code, code)}: {message}")
        self.errno = code


S = ProfileState
TRANSITIONS: dict[tuple[ProfileState, ProfileState], frozenset[Attr]] = {
    (S.INIT, S.OFFLINE): frozenset({Attr.MODE, Attr.COUNT}),
    (S.OFFLINE, S.ONLINE): frozenset({Attr.MIN_ACTIVE, Attr.EVENT_MASK}),
    (S.ONLINE, S.OFFLINE): frozenset(),
    (S.OFFLINE, S.INIT): frozenset(),
}
"""(from, to) -> attributes that must be set (now or earlier) for the move."""
ATTRS_ALLOWED: dict[ProfileState, Attr] = {
    S.INIT: Attr.MODE | Attr.COUNT,
    S.OFFLINE: Attr.COUNT | Attr.MIN_ACTIVE | Attr.EVENT_MASK,
    S.ONLINE: Attr.EVENT_MASK,
}
"""Attributes a state lets a modify call change (ONLINE: with MODIFY_ONLINE)."""
OPS_ALLOWED: dict[ProfileState, frozenset[EVOp]] = {
    S.INIT: frozenset(),
    S.OFFLINE: frozenset(EVOp),
    S.ONLINE: frozenset(EVOp),
}
"""EV ops each state accepts (ONLINE REPLACE_EV: with MODIFY_ONLINE)."""
GENERATED_EV_BASE = 0x1000
"""GENERATED mode fills slot i with EV val GENERATED_EV_BASE + i on port 1."""


class EVProfile:
    """One EV profile (``profile_id`` u64) of a device; see the module docstring."""

    def __init__(self, profile_id: int):
        self.profile_id = profile_id
        self.state = ProfileState.INIT
        self.ev_mode: EVMode | None = None
        self.ev_count: int | None = None
        self.ev_min_active: int | None = None
        self.ev_event_mask: int | None = None
        self.evs: list[EV] = []
        self.denied: set[EV] = set()
        self._qps: list = []

    # ---- QPs -------------------------------------------------------------
    def active_qps(self) -> list:
        """Attached QPs not in RST or ERR (the ones that make the profile busy)."""
        from .types import QPState
        self._qps = [q for q in self._qps if q.state not in (QPState.RST, QPState.ERR)]
        return list(self._qps)

    def attach(self, qp) -> None:
        """A QP moving to INIT names this profile; EINVAL unless ONLINE."""
        if self.state is not ProfileState.ONLINE:
            raise self._error(errno.EINVAL, "attach a QP", "needs ONLINE")
        if qp not in self._qps:
            self._qps.append(qp)

    def ev_vals(self) -> list[int]:
        """The EV values a QP sprays over (the QP's EV ids), in slot order."""
        return [e.val for e in self.evs]

    def denied_vals(self) -> list[int]:
        """The values of the EVs the controller holds DENIED, in slot order (a QP attaching
        starts with them DENIED)."""
        return [e.val for e in self.evs if e in self.denied]

    # ---- mrc_ctl_modify_ev_profile ----------------------------------------
    def modify(self, *, profile_state: ProfileState | None = None, ev_mode: EVMode | None = None,
               ev_count: int | None = None, ev_min_active: int | None = None,
               ev_event_mask: int | None = None, ev_op: EVOp | None = None, now: float = 0.0, **op_args):
        """Set attributes, run one EV op, then move state (mrc_ctl_modify_ev_profile).

        ``op_args`` per op: REPLACE_EV ``cur_ev``, ``new_ev`` (:class:`EV`), ``all_copies``,
        ``state`` (GOOD, the default, or DENIED: the new EV's state);
        MODIFY_EV_STATE ``ev``, ``state`` (DENIED or GOOD); QUERY_EV_STATE ``ev``. Returns
        the query's answer (an :class:`EVState`, or the EV array as a list) or None.
        Raises ProfileError (EINVAL, ENOENT, EBUSY).
        """
        mask = Attr(0)
        for flag, value in ((Attr.MODE, ev_mode), (Attr.COUNT, ev_count),
                            (Attr.MIN_ACTIVE, ev_min_active), (Attr.EVENT_MASK, ev_event_mask)):
            if value is not None:
                mask |= flag
        if mask:
            self._set_attrs(mask, ev_mode, ev_count, ev_min_active, ev_event_mask)
        result = self._run_op(EVOp(ev_op), now, **op_args) if ev_op is not None else None
        if profile_state is not None:
            self._move(ProfileState(profile_state))
        return result

    def _error(self, code: int, op: str, why: str) -> ProfileError:
        return ProfileError(code, f"EV profile {self.profile_id} in {self.state.name}: {op}: {why}")

    def _set_attrs(self, mask: Attr, mode, count, min_active, event_mask) -> None:
        if self.active_qps():
            raise self._error(errno.EBUSY, f"set {mask!r}", "QPs are attached")
        bad = mask & ~ATTRS_ALLOWED[self.state]
        if bad:
            raise self._error(errno.EINVAL, f"set {bad!r}", "not allowed in this state")
        if mode is not None:
            mode = EVMode(mode)
            if mode is EVMode.AUTO:
                raise self._error(errno.EINVAL, "set MODE AUTO", "vendor mode is not emulated")
            self.ev_mode = mode
        if count is not None:
            if not isinstance(count, int) or count < 1:
                raise self._error(errno.EINVAL, f"set COUNT {count!r}", "needs an int >= 1")
            self.ev_count = count
            if self.state is ProfileState.OFFLINE:
                self._fill_array()
        limit = self.ev_count or 0
        if min_active is not None:
            if not isinstance(min_active, int) or not 0 <= min_active <= limit:
                raise self._error(errno.EINVAL, f"set MIN_ACTIVE {min_active!r}", f"needs 0..ev_count {limit}")
            self.ev_min_active = min_active
        if event_mask is not None:
            if not isinstance(event_mask, int) or event_mask & ~EVENT_MASK_ALLOWED:
                raise self._error(errno.EINVAL, f"set EVENT_MASK {event_mask!r}",
                                  "only GOOD and ASSUMED_BAD are supported")
            self.ev_event_mask = event_mask
            for qp in self.active_qps():
                qp.evs.event_mask = event_mask

    def _fill_array(self) -> None:
        if self.ev_mode is EVMode.GENERATED:
            self.evs = [EV(GENERATED_EV_BASE + i, 1) for i in range(self.ev_count)]
        else:
            self.evs = [EV_INVALID] * self.ev_count
        self.denied.clear()
        if self.ev_min_active is not None and self.ev_min_active > self.ev_count:
            self.ev_min_active = None

    def _move(self, to: ProfileState) -> None:
        op = f"move to {to.name}"
        needs = TRANSITIONS.get((self.state, to))
        if needs is None:
            raise self._error(errno.EINVAL, op, "no such transition")
        if self.active_qps():
            raise self._error(errno.EBUSY, op, "QPs are attached")
        values = {Attr.MODE: self.ev_mode, Attr.COUNT: self.ev_count,
                  Attr.MIN_ACTIVE: self.ev_min_active, Attr.EVENT_MASK: self.ev_event_mask}
        missing = [a.name for a in needs if values[a] is None]
        if missing:
            raise self._error(errno.EINVAL, op, f"needs {', '.join(sorted(missing))}")
        if to is ProfileState.ONLINE and EV_INVALID in self.evs:
            raise self._error(errno.EINVAL, op, "every EV must be populated by REPLACE_EV first")
        if to is ProfileState.OFFLINE and self.state is ProfileState.INIT:
            self.state = to
            self._fill_array()
            return
        if to is ProfileState.INIT:
            self.ev_mode = self.ev_count = self.ev_min_active = self.ev_event_mask = None
            self.evs, self.denied = [], set()
        self.state = to

    # ---- EV ops ----------------------------------------------------------
    def _run_op(self, op: EVOp, now: float, **args):
        if op not in OPS_ALLOWED[self.state]:
            raise self._error(errno.EINVAL, op.name, "not allowed in this state")
        if op is EVOp.QUERY_EV_ARRAY:
            return list(self.evs)
        if op is EVOp.QUERY_EV_STATE:
            return self._query_state(self._find(args["ev"], op))
        if op is EVOp.MODIFY_EV_STATE:
            return self._modify_state(self._find(args["ev"], op), EVState(args["state"]), now)
        return self._replace(args["cur_ev"], args["new_ev"], bool(args.get("all_copies", 0)),
                             args.get("state", EVState.GOOD), now)

    def _find(self, ev: EV, op: EVOp) -> EV:
        if ev == EV_INVALID or ev not in self.evs:
            raise self._error(errno.ENOENT, op.name, f"EV {ev.val}/{ev.port} is not in the array")
        return ev

    def _query_state(self, ev: EV) -> EVState:
        if ev in self.denied:
            return EVState.DENIED
        for qp in self.active_qps():
            info = qp.evs.info.get(ev.val)
            if info is not None and visible(info.state) is EVState.ASSUMED_BAD:
                return EVState.ASSUMED_BAD
        return EVState.GOOD

    def _modify_state(self, ev: EV, state: EVState, now: float) -> None:
        if state not in (EVState.DENIED, EVState.GOOD):
            raise self._error(errno.EINVAL, "MODIFY_EV_STATE", f"to {state.name}: only DENIED or GOOD")
        if state is EVState.DENIED:
            self.denied.add(ev)
        else:
            self.denied.discard(ev)
        for qp in self.active_qps():
            qp.set_ev_state(ev.val, state, now)

    def _replace(self, cur: EV, new: EV, all_copies: bool, state, now: float) -> None:
        if new == EV_INVALID:
            raise self._error(errno.EINVAL, "REPLACE_EV", "the new EV is MRC_CTL_EV_INVALID")
        if state not in (EVState.DENIED, EVState.GOOD) or isinstance(state, bool):
            raise self._error(errno.EINVAL, "REPLACE_EV", f"state {state!r}: only DENIED or GOOD")
        state = EVState(state)
        slots = [i for i, e in enumerate(self.evs) if e == cur]
        if not slots:
            raise self._error(errno.ENOENT, "REPLACE_EV", f"EV {cur.val}/{cur.port} is not in the array")
        if new in self.evs:             # a QP's EV set is a set: values stay distinct
            raise self._error(errno.EINVAL, "REPLACE_EV", f"EV {new.val}/{new.port} is already in the array")
        if all_copies and len(slots) > 1:   # only unpopulated slots repeat: one EV would fill them all
            raise self._error(errno.EINVAL, "REPLACE_EV",
                              f"all_copies would put EV {new.val}/{new.port} in {len(slots)} unpopulated "
                              "slots; populate them one at a time (all_copies=0)")
        for i in (slots if all_copies else slots[:1]):
            self.evs[i] = new
        self.denied.discard(cur)
        if state is EVState.DENIED:
            self.denied.add(new)
        if cur != EV_INVALID:
            for qp in self.active_qps():
                qp.replace_ev(cur.val, new.val, now, state)


class ProfileTable:
    """A device's EV profiles by id (``mrc_ctl_modify_ev_profile``'s ``ev_profile_id``)."""

    def __init__(self):
        self._profiles: dict[int, EVProfile] = {}

    def get(self, profile_id: int) -> EVProfile:
        """The profile, created in INIT on first use (as a controller allocates ids)."""
        if not 0 <= profile_id < 2**64:
            raise ProfileError(errno.EINVAL, f"profile id {profile_id} is not a u64")
        prof = self._profiles.get(profile_id)
        if prof is None:
            prof = self._profiles[profile_id] = EVProfile(profile_id)
        return prof

    def __contains__(self, profile_id: int) -> bool:
        return profile_id in self._profiles

    def modify(self, profile_id: int, **kw):
        """``mrc_ctl_modify_ev_profile`` on profile ``profile_id`` (:meth:`EVProfile.modify`)."""
        return self.get(profile_id).modify(**kw)
