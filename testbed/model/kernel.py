"""What a kernel can do (pure): the features the fabric needs, as detected by
:func:`testbed.fabric.kernel.features`, and what the testbed does without them."""

from __future__ import annotations

from dataclasses import dataclass, field


QDISCS = ("htb", "tbf", "pfifo", "netem", "fq", "fq_codel", "red")
#: The switches' ECMP hash fields (policy 3: the 5-tuple), testbed.fabric.routing.switch_sysctls.
HASH_FIELDS_SYSCTL = "net.ipv6.fib_multipath_hash_fields"
#: The per-router ECMP hash seed (also used for IPv6), testbed.fabric.routing.hash_seed.
HASH_SEED_SYSCTL = "net.ipv4.fib_multipath_hash_seed"
#: The first mainline release with each feature: the net-next merges of the custom multipath
#: hash (2021-05-18: 5.14), the multipath hash seed (2024-06-12: 6.11) and seg6local's
#: NEXT-C-SID flavour for End (2022-09-20: 6.1).
FIRST_KERNEL = {"multipath_hash_fields": "5.14", "multipath_hash_seed": "6.11", "seg6_next_csid": "6.1"}


@dataclass(frozen=True)
class KernelFeatures:
    """What this kernel supports.

    ``qdiscs``: the names from :data:`QDISCS` the kernel knows.
    ``seg6_next_csid``: seg6local End with the next-csid flavour (SRv6 uSID).
    ``nftables``: nf_tables with ``numgen``. ``bpf_egress``: the switch program
    (:mod:`testbed.fabric.switch`) builds, loads and attaches to a clsact egress;
    ``bpf_egress_error`` says why not. ``probed`` False means the probe
    could not run (``reason`` says why) and every feature above is reported absent.

    ``multipath_hash_fields`` (:data:`HASH_FIELDS_SYSCTL`, Linux 5.14) and
    ``multipath_hash_seed`` (:data:`HASH_SEED_SYSCTL`, Linux 6.11) are sysctls the switches
    write: read from ``/proc/sys``, which needs no root, so they are known even when
    ``probed`` is False; they default to present (a ``KernelFeatures`` built by hand).
    Without the hash fields the testbed refuses (:meth:`refusals`); without the seed the
    fabric falls back (:meth:`fallbacks`).
    """

    qdiscs: frozenset[str] = field(default_factory=frozenset)
    seg6_next_csid: bool = False
    nftables: bool = False
    bpf_egress: bool = False
    bpf_egress_error: str = ""
    probed: bool = True
    reason: str = ""
    multipath_hash_fields: bool = True
    multipath_hash_seed: bool = True

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

    def refusals(self) -> tuple[str, ...]:
        """One line per missing feature that no fabric can do without (validation refuses
        every topology with it): the feature and the first kernel that has it."""
        if self.multipath_hash_fields:
            return ()
        return (f"the switches' ECMP hash (policy 3, the 5-tuple) needs {HASH_FIELDS_SYSCTL}, "
                f"which this kernel lacks (Linux {FIRST_KERNEL['multipath_hash_fields']} or later has it)",)

    def fallbacks(self) -> tuple[str, ...]:
        """One line per feature the fabric does without here, saying what that changes; the
        run records them (manifest ``kernel_fallbacks``) and the report prints them."""
        if self.multipath_hash_seed:
            return ()
        return (f"no per-router ECMP hash seed ({HASH_SEED_SYSCTL}, from Linux "
                f"{FIRST_KERNEL['multipath_hash_seed']}): every router hashes the 5-tuple alike (one key "
                f"per boot), so ECMP choices correlate across tiers (polarisation): the rc and tcp "
                f"baselines' paths collide more, and differ from boot to boot; mrc's SRv6 paths are not hashed",)

    def to_dict(self) -> dict:
        return {"qdiscs": sorted(self.qdiscs), "seg6_next_csid": self.seg6_next_csid,
                "nftables": self.nftables, "bpf_egress": self.bpf_egress,
                "bpf_egress_error": self.bpf_egress_error, "probed": self.probed, "reason": self.reason,
                "multipath_hash_fields": self.multipath_hash_fields,
                "multipath_hash_seed": self.multipath_hash_seed}
