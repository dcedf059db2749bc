"""Switch egress configuration (pure): validation, byte sizes, the program's config map value.

Sizes are L2 frames (Ethernet 14 + IPv6 40 + UDP 8 + MRC), what HTB charges and
what the program sees as ``skb->len`` on a veth's egress. Thresholds are given
in MTU-sized packets of real backlog and compared in virtual-queue bytes:
``threshold_pkts * (mtu + 14) + burst_bytes`` (:class:`EgressConfig`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from agents.mrc.packet import CRC_BYTES, DATA_HDR, IMM, OPCODES_WITH_IMM, Opcode
from testbed.model.errors import InputError

ETH_BYTES = 14
IPV6_UDP_BYTES = 40 + 8
MAX_HEADER_BYTES = DATA_HDR.size + IMM.size + CRC_BYTES
"""Largest trimmed MRC datagram (header + immediate + CRC), bytes."""
MAX_TRIMMED_FRAME_BYTES = ETH_BYTES + IPV6_UDP_BYTES + MAX_HEADER_BYTES
"""Largest trimmed frame on the wire (106 bytes): one slot of the header queue."""
HTB_HEADER_CLASSID = 0x0001_0020
"""HTB class 1:20, the strict-priority class for trimmed headers (:mod:`testbed.fabric.shaping`)."""
MAX_RATE_BPS = 10**12
U64_MAX = 2**64 - 1
NS_X8 = 8_000_000_000
"""Bits per byte times nanoseconds per second: the drain's fixed-point unit."""

# struct config in egress.bpf.c: six u64 then priority u32 and last_hop u32.
CONFIG_STRUCT = struct.Struct("=QQQQQQII")


class SwitchConfigError(InputError):
    """An :class:`EgressConfig` field is out of range."""


def header_bytes(opcode: int) -> int:
    """Bytes of an MRC DATA datagram once trimmed: header (36), immediate (4) if the
    opcode carries one, CRC (4). Raises SwitchConfigError for a non-WRITE opcode."""
    try:
        op = Opcode(opcode)
    except ValueError:
        raise SwitchConfigError(f"opcode {opcode} is not an MRC WRITE opcode") from None
    return DATA_HDR.size + (IMM.size if op in OPCODES_WITH_IMM else 0) + CRC_BYTES


def trimmed_frame_bytes(opcode: int) -> int:
    """L2 frame bytes of a trimmed DATA packet: Ethernet + IPv6 + UDP + :func:`header_bytes`."""
    return ETH_BYTES + IPV6_UDP_BYTES + header_bytes(opcode)


def _check_pkts(name: str, value: int | None, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise SwitchConfigError(f"{name} must be an integer 1..1000000 packets, got {value!r}")


@dataclass(frozen=True)
class EgressConfig:
    """One router egress's switch features.

    ``rate_bps``: the link's HTB rate, bits/s; the virtual queues drain at it.
    ``mtu``: the link's IPv6 MTU, bytes (1280..65535); one threshold packet is ``mtu + 14`` bytes.
    ``ecn_threshold_pkts``: CE on ECT(0)/ECT(1) IPv6 packets once the virtual queue holds
    more than this many MTU-sized packets; None: no marking.
    ``trim_threshold_pkts``: MRC DATA packets that would take the queue past this are
    trimmed to their header; None: no trimming.
    ``header_queue_pkts``: the trimmed-header queue, in slots of the largest trimmed frame
    (:data:`MAX_TRIMMED_FRAME_BYTES`); a header that does not fit is the only drop.
    ``header_priority``: ``skb->priority`` of trimmed headers (default HTB class 1:20).
    ``queue_pkts``: the leaf queue limit; the virtual queue does not grow past what the
    leaf would hold (None: unbounded). At least one of ECN and trimming must be on.
    ``last_hop``: this egress port faces a host (the last hop); a trim here also sets
    ``FLAG_TRIMMED_LASTHOP``, so the receiver NACKs TRIMMED_LASTHOP and the sender does
    not skip the EV (UET penalises an EV only for trims before the last hop).
    ``burst_bytes``: the HTB bucket of this link end (:func:`testbed.fabric.shaping.burst_bytes`),
    bytes. The thresholds and the leaf limit are in packets of real backlog; a token-bucket
    shaper of rate R and bucket B holds ``max(0, V - B)`` of what a rate-R queue would hold
    (V, the virtual queue: network calculus's (R, B) regulator, Le Boudec & Thiran,
    "Network Calculus", §1.7), so each byte threshold is the packets' bytes plus B. Without
    it, at 5 Mbit/s and MTU 9000 (B = 2 frames) an "ECN threshold 2" marked any backlog at
    all: in incast-trim, a victim flow whose data shares no queue with the incast's data saw ECN on
    93% of its ACKs.
    Raises SwitchConfigError.
    """

    rate_bps: int
    mtu: int
    ecn_threshold_pkts: int | None
    trim_threshold_pkts: int | None
    header_queue_pkts: int = 64
    header_priority: int = HTB_HEADER_CLASSID
    queue_pkts: int | None = None
    burst_bytes: int = 0
    last_hop: bool = False

    def __post_init__(self):
        if isinstance(self.rate_bps, bool) or not isinstance(self.rate_bps, int) \
                or not 1 <= self.rate_bps <= MAX_RATE_BPS:
            raise SwitchConfigError(f"rate_bps must be an integer 1..{MAX_RATE_BPS}, got {self.rate_bps!r}")
        if isinstance(self.mtu, bool) or not isinstance(self.mtu, int) or not 1280 <= self.mtu <= 65535:
            raise SwitchConfigError(f"mtu must be an integer 1280..65535 bytes, got {self.mtu!r}")
        _check_pkts("ecn_threshold_pkts", self.ecn_threshold_pkts, optional=True)
        _check_pkts("trim_threshold_pkts", self.trim_threshold_pkts, optional=True)
        _check_pkts("header_queue_pkts", self.header_queue_pkts, optional=False)
        _check_pkts("queue_pkts", self.queue_pkts, optional=True)
        if isinstance(self.burst_bytes, bool) or not isinstance(self.burst_bytes, int) \
                or not 0 <= self.burst_bytes < 2**32:
            raise SwitchConfigError(f"burst_bytes must be an integer 0..2**32-1, got {self.burst_bytes!r}")
        if self.ecn_threshold_pkts is None and self.trim_threshold_pkts is None:
            raise SwitchConfigError("neither ECN nor trimming is on (both thresholds are None)")
        if not isinstance(self.last_hop, bool):
            raise SwitchConfigError(f"last_hop must be a bool, got {self.last_hop!r}")
        if isinstance(self.header_priority, bool) or not isinstance(self.header_priority, int) \
                or not 0 <= self.header_priority < 2**32:
            raise SwitchConfigError(f"header_priority must be a u32, got {self.header_priority!r}")
        for name in ("ecn_threshold_pkts", "trim_threshold_pkts"):
            value = getattr(self, name)
            if value is not None and self.queue_pkts is not None and value >= self.queue_pkts:
                raise SwitchConfigError(f"{name} {value} is not below queue_pkts {self.queue_pkts}: "
                                        f"drop-tail would act first")

    @property
    def frame_bytes(self) -> int:
        return self.mtu + ETH_BYTES

    def _virtual(self, pkts: int | None) -> int:
        """Virtual-queue bytes of ``pkts`` packets of real backlog; 0 for None (off)."""
        return pkts * self.frame_bytes + self.burst_bytes if pkts else 0

    @property
    def ecn_bytes(self) -> int:
        """ECN threshold in virtual-queue bytes; 0 when marking is off."""
        return self._virtual(self.ecn_threshold_pkts)

    @property
    def trim_bytes(self) -> int:
        """Trim threshold in virtual-queue bytes; 0 when trimming is off."""
        return self._virtual(self.trim_threshold_pkts)

    @property
    def header_queue_bytes(self) -> int:
        return self.header_queue_pkts * MAX_TRIMMED_FRAME_BYTES

    @property
    def queue_bytes(self) -> int:
        return U64_MAX if self.queue_pkts is None else self._virtual(self.queue_pkts)

    @property
    def idle_ns(self) -> int:
        """Elapsed ns past which the queues are simply emptied: the largest elapsed time
        whose drain (``elapsed * rate_bps + carry``) fits in 64 bits; by then more than
        2 GB has drained, more than any queue holds."""
        return (U64_MAX - NS_X8) // self.rate_bps

    def pack(self) -> bytes:
        """The value of the program's ``cfg`` map (struct config in egress.bpf.c)."""
        return CONFIG_STRUCT.pack(self.rate_bps, self.ecn_bytes, self.trim_bytes, self.header_queue_bytes,
                                  self.queue_bytes, self.idle_ns, self.header_priority, int(self.last_hop))
