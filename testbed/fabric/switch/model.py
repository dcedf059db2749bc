"""The egress program's queue decisions in Python (pure), to predict what it counts.

Mirrors ``decide()`` in egress.bpf.c line for line (keep them in step): two
virtual queues in bytes drained at ``rate_bps`` with the remainder carried in
byte * 8e9 units, the header queue drained first (it has strict priority).
Tests feed it the send times of a flood to predict the program's counters.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from testbed.fabric.switch.config import NS_X8, EgressConfig


class Kind(enum.Enum):
    OTHER = "other"      # anything not trimmable (ECN still applies)
    DATA = "data"        # an MRC DATA packet with payload, zero UDP checksum
    HEADER = "header"    # an MRC DATA packet trimmed upstream
    CONTROL = "control"  # an MRC SACK, NACK, probe request or response (header class with trim)


class Verdict(enum.Enum):
    PASS = "passed"
    MARK = "marked"
    TRIM = "trimmed"
    HEADER = "header"
    DROP = "dropped"


@dataclass
class VirtualQueues:
    """State of one egress: ``q`` data bytes, ``h`` header bytes, at ``last_ns``."""

    config: EgressConfig
    last_ns: int = 0
    carry: int = 0
    q: int = 0
    h: int = 0

    def _drain(self, now_ns: int) -> None:
        elapsed = now_ns - self.last_ns if now_ns > self.last_ns else 0
        self.last_ns = max(self.last_ns, now_ns)
        if elapsed >= self.config.idle_ns:
            self.q = self.h = self.carry = 0
            return
        drained, self.carry = divmod(elapsed * self.config.rate_bps + self.carry, NS_X8)
        if drained >= self.h:
            self.q = max(0, self.q - (drained - self.h))
            self.h = 0
        else:
            self.h -= drained
        if not self.q and not self.h:
            self.carry = 0

    def packet(self, now_ns: int, frame_bytes: int, kind: Kind, *, ect: bool,
               trimmed_bytes: int = 0) -> Verdict:
        """Decide one packet of ``frame_bytes`` (L2) at ``now_ns`` (CLOCK_MONOTONIC ns);
        ``trimmed_bytes``: its frame size once trimmed (DATA only)."""
        c = self.config
        self._drain(now_ns)
        if kind is Kind.HEADER or (kind is Kind.CONTROL and c.trim_bytes):
            if self.h + frame_bytes > c.header_queue_bytes:
                return Verdict.DROP
            self.h += frame_bytes
            return Verdict.HEADER
        if kind is Kind.DATA and c.trim_bytes and self.q + frame_bytes > c.trim_bytes:
            if self.h + trimmed_bytes > c.header_queue_bytes:
                return Verdict.DROP
            self.h += trimmed_bytes
            return Verdict.TRIM
        if self.q + frame_bytes <= c.queue_bytes:
            self.q += frame_bytes
        return Verdict.MARK if ect and c.ecn_bytes and self.q > c.ecn_bytes else Verdict.PASS


def counters(verdicts) -> dict[str, int]:
    """The program's counters for a sequence of verdicts: every packet not trimmed or
    dropped is passed; marked ones are counted in both."""
    out = {"passed": 0, "marked": 0, "trimmed": 0, "dropped": 0}
    for v in verdicts:
        if v in (Verdict.PASS, Verdict.MARK, Verdict.HEADER):
            out["passed"] += 1
        if v is not Verdict.PASS and v is not Verdict.HEADER:
            out[v.value] += 1
    return out
