"""Kernel feature detection: which qdiscs, SRv6 flavours and nftables exist here.

Detected at run time, never assumed (DESIGN.md: "Probe at start"). All probes
run in one forked child that moves itself into a throwaway network namespace
(``unshare(CLONE_NEWNET)`` through libc), so nothing in the caller's
namespaces is touched, and the namespace disappears when the child exits.

* qdiscs: ``tc qdisc add dev lo root <kind>`` through pyroute2 (netlink);
  ENOENT ("Specified qdisc kind is unknown") means absent, success or any
  other errno (bad options) means the kind is known to the kernel.
* seg6local next-csid: ``ip -6 route add ... encap seg6local action End
  flavors next-csid lblen 32 nflen 16`` (pyroute2 cannot encode flavours).
* nftables: add a table, a chain and a ``numgen random`` drop rule (what the
  loss fault uses).

Without root the probe cannot run: :func:`features` returns a
``KernelFeatures`` with ``probed=False`` and every feature False, and
:meth:`KernelFeatures.lacks` says why, so a spec that needs a feature fails
with a clear message instead of a half-built fabric.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import select
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache

log = logging.getLogger(__name__)

QDISCS = ("htb", "tbf", "pfifo", "netem", "fq", "fq_codel", "red")
CLONE_NEWNET = 0x40000000
PROBE_TIMEOUT_S = 10.0

# Minimal valid options per qdisc kind for pyroute2 (kinds not listed take none).
_QDISC_ARGS = {"tbf": {"rate": "1mbit", "burst": 10240, "latency": "10ms"}}


class KernelProbeError(RuntimeError):
    """The probe child failed in an unexpected way (not a missing feature)."""


@dataclass(frozen=True)
class KernelFeatures:
    """What this kernel supports.

    ``qdiscs``: the names from :data:`QDISCS` the kernel knows.
    ``seg6_next_csid``: seg6local End with the next-csid flavour (SRv6 uSID).
    ``nftables``: nf_tables with ``numgen``. ``probed`` False means the probe
    could not run (``reason`` says why) and every feature is reported absent.
    """

    qdiscs: frozenset[str] = field(default_factory=frozenset)
    seg6_next_csid: bool = False
    nftables: bool = False
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
                "nftables": self.nftables, "probed": self.probed, "reason": self.reason}


@lru_cache(maxsize=1)
def features() -> KernelFeatures:
    """Probe once per process (cached). Never raises for a missing feature.

    Returns ``probed=False`` when not root or when the probe child fails.
    """
    if os.geteuid() != 0:
        return KernelFeatures(probed=False, reason="not root")
    try:
        result = _run_probe_child()
    except KernelProbeError as exc:
        log.warning("kernel probe failed: %s", exc)
        return KernelFeatures(probed=False, reason=f"probe failed: {exc}")
    return KernelFeatures(qdiscs=frozenset(result["qdiscs"]), seg6_next_csid=result["seg6_next_csid"],
                          nftables=result["nftables"])


def _run_probe_child() -> dict:
    """Fork, probe in a new network namespace in the child, read JSON back over a pipe."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(read_fd)
        status = 1
        try:
            _unshare_net()
            payload = json.dumps(_probe_all()).encode()
            status = 0
        except BaseException as exc:  # report anything to the parent, then exit
            payload = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
        try:
            os.write(write_fd, payload)
        finally:
            os._exit(status)
    os.close(write_fd)
    try:
        data = _read_all(read_fd, pid)
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    try:
        result = json.loads(data or b"{}")
    except json.JSONDecodeError as exc:
        raise KernelProbeError(f"unreadable probe output: {exc}") from None
    if "error" in result or status != 0:
        raise KernelProbeError(result.get("error", f"child exit status {status}"))
    return result


def _read_all(fd: int, pid: int) -> bytes:
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], PROBE_TIMEOUT_S)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            raise KernelProbeError(f"probe child took longer than {PROBE_TIMEOUT_S}s")
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _unshare_net() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")


def _probe_all() -> dict:
    """Runs inside the throwaway namespace."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        lo = ipr.link_lookup(ifname="lo")[0]
        ipr.link("set", index=lo, state="up")
        qdiscs = [kind for kind in QDISCS if _probe_qdisc(ipr, lo, kind)]
    return {"qdiscs": qdiscs, "seg6_next_csid": _probe_seg6(), "nftables": _probe_nft()}


def _probe_qdisc(ipr, index: int, kind: str) -> bool:
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        ipr.tc("add", kind, index=index, handle="1:", **_QDISC_ARGS.get(kind, {}))
    except NetlinkError as exc:
        return exc.code != 2  # ENOENT: unknown qdisc kind
    ipr.tc("del", index=index, handle="1:", root=True)
    return True


def _probe_seg6() -> bool:
    ip = shutil.which("ip")
    if ip is None:
        return False
    argv = [ip, "-6", "route", "add", "fcbb:bb00:1::/48", "encap", "seg6local", "action", "End",
            "flavors", "next-csid", "lblen", "32", "nflen", "16", "dev", "lo"]
    return subprocess.run(argv, capture_output=True, timeout=5).returncode == 0


def _probe_nft() -> bool:
    nft = shutil.which("nft")
    if nft is None:
        return False
    ruleset = ("table inet mrc_probe {\n chain c {\n  type filter hook forward priority 0;\n"
               "  numgen random mod 100 < 1 drop\n }\n}\n")
    return subprocess.run([nft, "-f", "-"], input=ruleset.encode(), capture_output=True,
                          timeout=5).returncode == 0


if __name__ == "__main__":  # pragma: no cover - manual check: python -m testbed.kernel
    print(json.dumps(features().to_dict(), indent=2))
