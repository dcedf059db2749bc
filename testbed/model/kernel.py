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
#: NEXT-C-SID flavour for End (2022-09-20: 6.1); ``epoll_pwait2``, the agents' nanosecond wait
#: (Linux 5.11, syscall 441).
FIRST_KERNEL = {"multipath_hash_fields": "5.14", "multipath_hash_seed": "6.11", "seg6_next_csid": "6.1",
                "bpf_egress": "5.3", "epoll_pwait2": "5.11"}
#: What the switch program (testbed/fabric/switch/egress.bpf.c, a tc ``sched_cls`` program on a
#: ``clsact`` egress hook) needs of the kernel, with the first mainline release that has each:
#: every BPF helper it calls (tests/unit/test_kernel_requirements.py checks the list against the
#: source), the qdisc it hangs on, and the verifier's bounded loops (its CRC-32 loop). The
#: latest of them is :data:`FIRST_KERNEL` ``["bpf_egress"]``.
SWITCH_PROGRAM_NEEDS = {
    "bpf_map_lookup_elem": "3.19", "bpf_ktime_get_ns": "4.1", "bpf_skb_store_bytes": "4.1",
    "bpf_redirect": "4.4", "bpf_skb_load_bytes": "4.5", "clsact qdisc": "4.5", "bpf_skb_change_tail": "4.9",
    "bpf_spin_lock": "5.1", "bpf_spin_unlock": "5.1", "bounded loops": "5.3",
}


def release_version(release: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a kernel release string (``os.uname().release``, e.g.
    ``6.1.0-18-amd64`` -> ``(6, 1)``); None when it does not start with one."""
    parts = release.split("-", 1)[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def older_than(release: str, first: str) -> bool:
    """Whether ``release`` is known to predate the mainline release ``first`` (``"6.1"``)."""
    have = release_version(release)
    return have is not None and have < release_version(first)


def switch_program_lacks(release: str) -> list[str]:
    """What :data:`SWITCH_PROGRAM_NEEDS` a kernel ``release`` predates, as ``name (Linux x.y)``."""
    return [f"{name} (Linux {first})" for name, first in SWITCH_PROGRAM_NEEDS.items() if older_than(release, first)]


@dataclass(frozen=True)
class KernelFeatures:
    """What this kernel supports.

    ``qdiscs``: the names from :data:`QDISCS` the kernel knows.
    ``seg6_next_csid``: seg6local End with the next-csid flavour (SRv6 uSID), which every
    switch's locator route uses (testbed.fabric.routing; no fallback): without it, when probed,
    validation refuses every topology (:meth:`refusals`).
    ``nftables``: nf_tables with ``numgen``. ``bpf_egress``: the switch program
    (:mod:`testbed.fabric.switch`) builds, loads and attaches to a clsact egress;
    ``bpf_egress_error`` says why not. ``probed`` False means the probe
    could not run (``reason`` says why) and every feature above is reported absent.
    ``release``: ``os.uname().release`` ("" if unknown); unprobed, a release older than
    :data:`FIRST_KERNEL` ``["seg6_next_csid"]`` still refuses.

    ``multipath_hash_fields`` (:data:`HASH_FIELDS_SYSCTL`, Linux 5.14) and
    ``multipath_hash_seed`` (:data:`HASH_SEED_SYSCTL`, Linux 6.11) are sysctls the switches
    write: read from ``/proc/sys``, which needs no root, so they are known even when
    ``probed`` is False; they default to present (a ``KernelFeatures`` built by hand), and so
    does ``seg6_next_csid`` (:func:`testbed.fabric.kernel.features` sets every field).
    Without the hash fields the testbed refuses (:meth:`refusals`); without the seed the
    fabric falls back (:meth:`fallbacks`). ``epoll_pwait2``: the syscall the native engine's
    poller waits with (nanosecond timeouts); without it (an older kernel, or a seccomp profile
    that predates it) the agents fall back to ``epoll_wait``'s milliseconds (:meth:`fallbacks`).
    """

    qdiscs: frozenset[str] = field(default_factory=frozenset)
    seg6_next_csid: bool = True
    nftables: bool = False
    bpf_egress: bool = False
    bpf_egress_error: str = ""
    probed: bool = True
    reason: str = ""
    multipath_hash_fields: bool = True
    multipath_hash_seed: bool = True
    release: str = ""
    epoll_pwait2: bool = True

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
        out = []
        if not self.multipath_hash_fields:
            out.append(f"the switches' ECMP hash (policy 3, the 5-tuple) needs {HASH_FIELDS_SYSCTL}, "
                       f"which this kernel lacks (Linux {FIRST_KERNEL['multipath_hash_fields']} or later has it)")
        first = FIRST_KERNEL["seg6_next_csid"]
        if self.probed and not self.seg6_next_csid:
            out.append(f"the switches' SRv6 uSID locators need seg6local End with flavors next-csid, which "
                       f"this kernel lacks (Linux {first} or later has it)")
        elif not self.probed and older_than(self.release, first):
            out.append(f"the switches' SRv6 uSID locators need seg6local End with flavors next-csid, which "
                       f"this kernel (Linux {self.release}) lacks (Linux {first} or later has it)")
        return tuple(out)

    def lacks_switch_program(self, what: str) -> str:
        """One line for a spec item ``what`` (ECN marking, trimming) that needs the switch program
        where ``bpf_egress`` is False: the program, why it did not load here (the probe's first
        line) and the first kernel with every helper it calls."""
        needs = "a tc BPF egress program (clang, clsact, bpf_skb_change_tail)"
        if not self.probed:
            return self.lacks(what, needs)
        why = (self.bpf_egress_error.strip().splitlines() or ["it did not load"])[0]
        if why.startswith(("clang not found", "SwitchBuildError")):
            return f"{what} needs {needs}, which cannot be built here: {why}"
        return (f"{what} needs {needs}, which this kernel lacks (Linux {FIRST_KERNEL['bpf_egress']} or later "
                f"has every helper it calls): {why}")

    def fallbacks(self) -> tuple[str, ...]:
        """One line per feature the fabric does without here, saying what that changes; the
        run records them (manifest ``kernel_fallbacks``) and the report prints them."""
        out = []
        if not self.multipath_hash_seed:
            out.append(f"no per-router ECMP hash seed ({HASH_SEED_SYSCTL}, from Linux "
                       f"{FIRST_KERNEL['multipath_hash_seed']}): every router hashes the 5-tuple alike (one key "
                       f"per boot), so ECMP choices correlate across tiers (polarisation): the rc and tcp "
                       f"baselines' paths collide more, and differ from boot to boot; mrc's SRv6 paths are not hashed")
        if not self.epoll_pwait2:
            out.append(f"no epoll_pwait2 (Linux {FIRST_KERNEL['epoll_pwait2']}, or a seccomp profile that blocks "
                       f"it): the agents' native engine waits with epoll_wait, whose timeout is whole "
                       f"milliseconds (rounded up), so its timers (RTO, probes, pacing gaps, loss inference's "
                       f"reordering timer) fire up to 1 ms late; the fidelity check's timer lateness shows it")
        return tuple(out)

    def to_dict(self) -> dict:
        return {"qdiscs": sorted(self.qdiscs), "seg6_next_csid": self.seg6_next_csid,
                "nftables": self.nftables, "bpf_egress": self.bpf_egress,
                "bpf_egress_error": self.bpf_egress_error, "probed": self.probed, "reason": self.reason,
                "multipath_hash_fields": self.multipath_hash_fields,
                "multipath_hash_seed": self.multipath_hash_seed, "release": self.release,
                "epoll_pwait2": self.epoll_pwait2}
