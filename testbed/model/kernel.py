"""What a kernel can do (pure): the features the fabric needs, as detected by
:func:`testbed.fabric.kernel.features`."""

from __future__ import annotations

from dataclasses import dataclass, field


QDISCS = ("htb", "tbf", "pfifo", "netem", "fq", "fq_codel", "red")


@dataclass(frozen=True)
class KernelFeatures:
    """What this kernel supports.

    ``qdiscs``: the names from :data:`QDISCS` the kernel knows.
    ``seg6_next_csid``: seg6local End with the next-csid flavour (SRv6 uSID).
    ``nftables``: nf_tables with ``numgen``. ``bpf_egress``: the switch program
    (:mod:`testbed.fabric.switch`) builds, loads and attaches to a clsact egress;
    ``bpf_egress_error`` says why not. ``probed`` False means the probe
    could not run (``reason`` says why) and every feature is reported absent.
    """

    qdiscs: frozenset[str] = field(default_factory=frozenset)
    seg6_next_csid: bool = False
    nftables: bool = False
    bpf_egress: bool = False
    bpf_egress_error: str = ""
    probed: bool = True
    reason: str = ""

    @property
    def netem(self) -> bool:
        return "netem" in self.qdiscs

    def has_qdisc(self, kind: str) -> bool:
        return kind in self.qdiscs

    def lacks(self, what: str, needs: str) -> str:
        """Message for a spec item ``what`` that needs the missing feature ``needs``.

        ``lacks("delay", "sch_netem")`` -> ``delay needs sch_netem, which this kernel lacks``.
        """
        if self.probed:
            return f"{what} needs {needs}, which this kernel lacks"
        return (f"{what} needs {needs}, which could not be detected ({self.reason}); "
                f"assumed absent")

    def to_dict(self) -> dict:
        return {"qdiscs": sorted(self.qdiscs), "seg6_next_csid": self.seg6_next_csid,
                "nftables": self.nftables, "bpf_egress": self.bpf_egress,
                "bpf_egress_error": self.bpf_egress_error, "probed": self.probed, "reason": self.reason}
