"""Kernel feature detection: which qdiscs, SRv6 flavours, nftables and sysctls exist here.

Detected at run time, never assumed (docs/troubleshooting.md, "The kernel-feature probe"). Every probe
but the sysctls' runs in one forked child that moves itself into a throwaway network namespace
(``unshare(CLONE_NEWNET)`` through libc), so nothing in the caller's
namespaces is touched, and the namespace disappears when the child exits.

* qdiscs: ``tc qdisc add dev lo root <kind>`` through pyroute2 (netlink);
  ENOENT ("Specified qdisc kind is unknown") means absent, success or any
  other errno (bad options) means the kind is known to the kernel.
* seg6local next-csid: the locator route every switch gets (``seg6local action End flavors
  next-csid lblen 32 nflen 16``), encoded and sent by the fabric's own code
  (:func:`testbed.fabric.routing.compile_routes` into a :class:`~testbed.fabric.netlink.Batch`),
  then, if that fails, by ``ip -6 route add`` (iproute2 6.1+ knows the flavour). Without it
  validation refuses every topology, naming Linux 6.1 (:meth:`KernelFeatures.refusals`).
* nftables: add a table, a chain and a ``numgen random`` drop rule (what the
  loss fault uses).
* bpf_egress (:mod:`testbed.fabric.switch`): clang builds the egress program, libbpf
  loads it (the verifier accepts ``bpf_skb_change_tail``, ``bpf_redirect``
  and the spin lock), and it attaches, with a ``clsact`` qdisc, to a veth
  created for the purpose in the throwaway namespace and deleted by name after. When it
  does not load, the reason names what this release predates of the program's needs
  (:data:`~testbed.model.kernel.SWITCH_PROGRAM_NEEDS`: its helpers, clsact, bounded loops;
  all there from Linux 5.3), and a topology asking for ECN marking or trimming is refused
  (:meth:`KernelFeatures.lacks_switch_program`).
* multipath hash sysctls (:data:`HASH_FIELDS_SYSCTL`, :data:`HASH_SEED_SYSCTL`): whether
  their ``/proc/sys`` files exist, read by the caller (no child, no root, never cached), so
  an unprivileged ``validate`` refuses a kernel without the hash fields too.

The probe is bounded as a whole (:data:`PROBE_TIMEOUT_S`, the wait for the
child included) and its result is cached per boot in :data:`CACHE_PATH`
(keyed by ``/proc/sys/kernel/random/boot_id`` and the kernel release), so
after the first probe of a boot a verdict never depends on the machine's
load. Only a root-owned cache that no one else can write is trusted.

Without root the probe cannot run: :func:`features` returns a
``KernelFeatures`` with ``probed=False`` and every feature but the sysctls False, and
:meth:`KernelFeatures.lacks` says why, so a spec that needs a feature fails
with a clear message instead of a half-built fabric.
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import time
from functools import lru_cache
from pathlib import Path
from testbed.model.kernel import HASH_FIELDS_SYSCTL, HASH_SEED_SYSCTL, QDISCS, KernelFeatures, switch_program_lacks
from testbed.model.errors import TestbedFailure

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
#: Bound on the whole probe: fork, every test, the child's exit and its reaping.
PROBE_TIMEOUT_S = 30.0
CACHE_PATH = Path("/run/mrc-testbed/kernel-features.json")
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
SYSCTL_ROOT = Path("/proc/sys")
#: Bump when the probe changes what it measures (invalidates every cache).
PROBE_VERSION = 3

# Minimal valid options per qdisc kind for pyroute2 (kinds not listed take none).
_QDISC_ARGS = {"tbf": {"rate": "1mbit", "burst": 10240, "latency": "10ms"}}


class KernelProbeError(TestbedFailure):
    """The probe child failed in an unexpected way (not a missing feature)."""




@lru_cache(maxsize=1)
def features() -> KernelFeatures:
    """Probe once per process (cached). Never raises for a missing feature.

    Returns ``probed=False`` when not root or when the probe child fails.
    """
    sysctls = {**probe_sysctls(), "release": os.uname().release, "epoll_pwait2": probe_epoll_pwait2()}
    if os.geteuid() != 0:
        return KernelFeatures(probed=False, reason="not root", seg6_next_csid=False, **sysctls)
    key = cache_key()
    result = read_cache(CACHE_PATH, key) if key else None
    if result is None:
        try:
            result = _run_probe_child()
        except KernelProbeError as exc:
            log.warning("kernel probe failed: %s", exc)
            return KernelFeatures(probed=False, reason=f"probe failed: {exc}", seg6_next_csid=False, **sysctls)
        if key:
            write_cache(CACHE_PATH, key, result)
    return KernelFeatures(qdiscs=frozenset(result["qdiscs"]), seg6_next_csid=result["seg6_next_csid"],
                          nftables=result["nftables"], bpf_egress=result.get("bpf_egress", False),
                          bpf_egress_error=result.get("bpf_egress_error", ""), **sysctls)


def probe_sysctls(root: Path | None = None) -> dict[str, bool]:
    """``{"multipath_hash_fields", "multipath_hash_seed"}``: whether this kernel has each
    sysctl (its file under ``root``, default :data:`SYSCTL_ROOT`). Both are per network
    namespace: every namespace of the machine has them, or none has."""
    root = SYSCTL_ROOT if root is None else root

    def has(name: str) -> bool:
        return (root / name.replace(".", "/")).is_file()
    return {"multipath_hash_fields": has(HASH_FIELDS_SYSCTL), "multipath_hash_seed": has(HASH_SEED_SYSCTL)}


#: epoll_pwait2's number: one table for every architecture from 5.11 on (include/uapi/asm-generic/unistd.h).
NR_EPOLL_PWAIT2 = 441


def probe_epoll_pwait2() -> bool:
    """Whether this process may call epoll_pwait2 (no root needed): called on fd -1 it fails
    with EBADF where it exists, ENOSYS before Linux 5.11, EPERM under a seccomp profile that
    predates it (the native poller's own fallback tests, agents/mrc/core/mrcn_poller.c)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.syscall(NR_EPOLL_PWAIT2, -1, None, 0, None, None, 0)
    except (OSError, AttributeError):
        return False
    return rc == -1 and ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM)


def cache_key() -> str | None:
    """This boot, kernel and compiler: ``<boot_id> <release> v<PROBE_VERSION> clang|no-clang``; None
    if unknown."""
    try:
        boot_id = BOOT_ID_PATH.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    # clang's presence is part of the key: a probe run before `make setup` installed the
    # compiler must not keep bpf_egress false for the rest of the boot.
    clang = "clang" if shutil.which("clang") else "no-clang"
    return f"{boot_id} {os.uname().release} v{PROBE_VERSION} {clang}" if boot_id else None


def read_cache(path: Path, key: str) -> dict | None:
    """The cached probe result for ``key``, or None (absent, stale, foreign or damaged).

    Trusted only as a regular file owned by root that group and others cannot write.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022 or st.st_size > 65536:
            return None
        doc = json.loads(os.read(fd, 65536))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(doc, dict) or doc.get("key") != key or not isinstance(doc.get("result"), dict):
        return None
    result = doc["result"]
    if not (isinstance(result.get("qdiscs"), list) and all(isinstance(q, str) for q in result["qdiscs"])
            and isinstance(result.get("seg6_next_csid"), bool) and isinstance(result.get("nftables"), bool)
            and isinstance(result.get("bpf_egress", False), bool)
            and isinstance(result.get("bpf_egress_error", ""), str)):
        return None
    return result


def write_cache(path: Path, key: str, result: dict) -> None:
    """Write the cache atomically (temp file + rename); failure is logged, not raised."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            json.dump({"key": key, "result": result}, f)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot cache kernel features in %s: %s", path, exc)
        tmp.unlink(missing_ok=True)


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
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    try:
        data = _read_all(read_fd, deadline)
        status = _wait_child(pid, deadline)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(read_fd)
    try:
        result = json.loads(data or b"{}")
    except json.JSONDecodeError as exc:
        raise KernelProbeError(f"unreadable probe output: {exc}") from None
    if "error" in result or status != 0:
        raise KernelProbeError(result.get("error", f"child exit status {status}"))
    return result


def _read_all(fd: int, deadline: float) -> bytes:
    """Everything the child writes, until EOF; KernelProbeError past ``deadline`` (monotonic)."""
    chunks, size = [], 0
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise KernelProbeError(f"probe child took longer than {PROBE_TIMEOUT_S}s")
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > 1 << 20:
            raise KernelProbeError("probe child wrote more than 1 MiB")
        chunks.append(chunk)


def _wait_child(pid: int, deadline: float) -> int:
    """The child's wait status, waiting until ``deadline`` at most (a pidfd, not a sleep loop)."""
    pidfd = os.pidfd_open(pid)
    try:
        select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))
    finally:
        os.close(pidfd)
    done, status = os.waitpid(pid, os.WNOHANG)
    if done == 0:
        raise KernelProbeError(f"probe child did not exit within {PROBE_TIMEOUT_S}s")
    return os.waitstatus_to_exitcode(status)


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
    bpf_error = _probe_bpf_egress()
    return {"qdiscs": qdiscs, "seg6_next_csid": _probe_seg6(), "nftables": _probe_nft(),
            "bpf_egress": not bpf_error, "bpf_egress_error": bpf_error}


def _probe_qdisc(ipr, index: int, kind: str) -> bool:
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        ipr.tc("add", kind, index=index, handle="1:", **_QDISC_ARGS.get(kind, {}))
    except NetlinkError as exc:
        return exc.code != 2  # ENOENT: unknown qdisc kind
    ipr.tc("del", index=index, handle="1:", root=True)
    return True


def _probe_seg6() -> bool:
    """Whether this kernel takes a switch's locator route (End, flavour next-csid)."""
    from testbed.fabric import netlink, routing

    try:
        batch = netlink.Batch("kernel probe")
        routing.compile_routes(batch, [seg6_probe_route()])
        batch.send()
        return True
    except Exception as exc:   # NetlinkBatchError (EINVAL, EOPNOTSUPP) or anything else: try iproute2's
        log.debug("seg6local next-csid over netlink: %s", exc)
    ip = shutil.which("ip")
    if ip is None:
        return False
    argv = [ip, "-6", "route", "add", "fcbb:bb00:1::/48", "encap", "seg6local", "action", "End",
            "flavors", "next-csid", "lblen", "32", "nflen", "16", "dev", "lo"]
    return subprocess.run(argv, capture_output=True, timeout=5).returncode == 0


def seg6_probe_route():
    """The probe's locator route: a switch's (:func:`testbed.fabric.routing.node_routes`), on lo."""
    import ipaddress

    from testbed.fabric.routing import PlannedRoute
    return PlannedRoute(ipaddress.IPv6Network("fcbb:bb00:1::/48"), "end", oif=1)   # lo is ifindex 1


def _probe_nft() -> bool:
    nft = shutil.which("nft")
    if nft is None:
        return False
    ruleset = ("table inet mrc_probe {\n chain c {\n  type filter hook forward priority 0;\n"
               "  numgen random mod 100 < 1 drop\n }\n}\n")
    return subprocess.run([nft, "-f", "-"], input=ruleset.encode(), capture_output=True,
                          timeout=5).returncode == 0


PROBE_VETH = ("mrcprobe0", "mrcprobe1")


def _probe_bpf_egress() -> str:
    """"" if the switch program builds, loads and attaches here, else why not (never raises
    for a missing feature). Runs in the throwaway namespace; deletes its veth by name."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    from testbed.fabric import switch

    if shutil.which("clang") is None:
        return "clang not found (make setup installs clang, llvm, libbpf-dev)"
    config = switch.EgressConfig(rate_bps=1_000_000, mtu=1500, ecn_threshold_pkts=1, trim_threshold_pkts=2)
    with IPRoute() as ipr:
        try:
            ipr.link("add", ifname=PROBE_VETH[0], kind="veth", peer=PROBE_VETH[1])
        except NetlinkError as exc:
            return f"veth: {exc}"
        try:
            switch.attach(os.getpid(), PROBE_VETH[0], config).detach()
        except (switch.SwitchBuildError, switch.SwitchLoadError, switch.SwitchAttachError, OSError) as exc:
            return explain_bpf_error(f"{type(exc).__name__}: {exc}", os.uname().release)
        finally:
            ipr.link("del", index=ipr.link_lookup(ifname=PROBE_VETH[0])[0])
    return ""


def explain_bpf_error(error: str, release: str) -> str:
    """``error`` (the switch program's, one line or more) led by what this kernel ``release``
    predates of the program's needs, when it predates any (a build error is left alone)."""
    lacks = [] if error.startswith("SwitchBuildError") else switch_program_lacks(release)
    if not lacks:
        return error
    return f"Linux {release} predates {', '.join(lacks)}; {error}"


if __name__ == "__main__":  # pragma: no cover - manual check: python -m testbed.fabric.kernel
    print(json.dumps(features().to_dict(), indent=2))
