"""Attach the egress program to a router interface: clsact qdisc + direct-action bpf filter.

How: the object is loaded in this process through libbpf (:mod:`testbed.fabric.switch.bpf`:
pyroute2 cannot load an ELF, and ``tc ... bpf obj`` would leave the maps
reachable only by pinning or bpftool), then pyroute2 adds, inside the node's
namespace, a ``clsact`` qdisc (unless one exists) and a ``bpf`` filter on its
egress hook (parent ``ffff:fff3``) with the program fd, ``direct-action``,
preference :data:`FILTER_PREF` and handle :data:`FILTER_HANDLE`. Nothing is
pinned: the filter holds the program, the program its maps, and the handle
the map fds for :meth:`EgressHandle.counters`.

Namespaces are entered like :mod:`testbed.fabric.local` does (:func:`testbed.fabric.netlink.netns`
on a namespace fd), from a PID (``/proc/<pid>/ns/net``) or a name under
``/var/run/netns``; the fd is held only while a call runs, so a handle never
keeps a torn-down namespace alive. Deleting the namespace removes the qdisc
and filter with it; :meth:`EgressHandle.detach` is then a no-op that only
closes the map fds.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass, field

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.fabric.netlink import netns
from testbed.fabric.switch.bpf import PROGRAM, EgressProgram
from testbed.fabric.switch.config import EgressConfig
from testbed.model.errors import TestbedFailure

log = logging.getLogger(__name__)

TC_H_CLSACT_EGRESS = 0xFFFF_FFF3
FILTER_PREF = 0xC0DE
FILTER_HANDLE = 1
ETH_P_ALL = 0x0003
NETNS_RUN_DIR = "/var/run/netns"


class SwitchAttachError(TestbedFailure):
    """The program could not be attached (no such namespace or interface, already attached,
    or the kernel refused the qdisc or filter: the netlink errno is in the message)."""


def _open_netns(ns: str | int) -> int:
    """fd of a network namespace given as a PID (int or digits) or a name under /var/run/netns."""
    path = f"/proc/{int(ns)}/ns/net" if str(ns).isdigit() else os.path.join(NETNS_RUN_DIR, str(ns))
    if not str(ns).isdigit() and (os.sep in str(ns) or str(ns) in ("", ".", "..")):
        raise SwitchAttachError(f"bad namespace name {ns!r}")
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


@dataclass
class EgressHandle:
    """The program attached to one interface. ``created_qdisc``: the clsact qdisc is ours
    (detach removes it). ``detach()`` twice is a no-op; ``counters()`` after detach raises."""

    netns: str | int
    ifname: str
    ifindex: int
    config: EgressConfig
    program: EgressProgram
    created_qdisc: bool
    attached: bool = field(default=True)

    def counters(self) -> dict[str, int]:
        """{"passed", "marked", "trimmed", "dropped"} in packets since attach (marked within
        passed; GSO super-packets count their segments). Raises SwitchAttachError after detach."""
        if not self.program.fds:
            raise SwitchAttachError(f"{self.netns}/{self.ifname}: counters of a detached program")
        return self.program.counters()

    def detach(self) -> None:
        """Remove the filter (and the clsact qdisc if attach created it), close the fds.

        A namespace or interface already gone counts as removed. Idempotent. Raises
        SwitchAttachError if the kernel refuses the deletion for another reason.
        """
        if not self.attached:
            return
        self.attached = False
        try:
            fd = _open_netns(self.netns)
        except FileNotFoundError:
            self.program.close()
            return
        try:
            with netns(fd), IPRoute() as ipr:
                if _ifindex(ipr, self.ifname) == self.ifindex:
                    _remove(ipr, self.ifindex, self.created_qdisc)
        finally:
            os.close(fd)
            self.program.close()

    def __enter__(self) -> EgressHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.detach()


def _ifindex(ipr: IPRoute, ifname: str) -> int | None:
    found = ipr.link_lookup(ifname=ifname)
    return found[0] if found else None


def _remove(ipr: IPRoute, ifindex: int, qdisc: bool) -> None:
    gone = {errno.ENOENT, errno.ENODEV, errno.EINVAL}
    try:
        ipr.tc("del-filter", "bpf", index=ifindex, handle=FILTER_HANDLE, parent=TC_H_CLSACT_EGRESS,
               prio=FILTER_PREF, protocol=ETH_P_ALL)
        if qdisc:
            ipr.tc("del", "clsact", index=ifindex)
    except NetlinkError as exc:
        if exc.code not in gone:
            raise SwitchAttachError(f"ifindex {ifindex}: removing the egress program: {exc}") from None


def attach(netns_: str | int, ifname: str, config: EgressConfig) -> EgressHandle:
    """Load a fresh program instance (its own queues and counters) and attach it to
    ``ifname``'s egress in namespace ``netns_`` (PID or /var/run/netns name).

    Raises SwitchAttachError (no namespace/interface; a filter already at preference
    :data:`FILTER_PREF`, i.e. attached twice; netlink refusal), SwitchLoadError,
    SwitchBuildError. On failure nothing stays behind.
    """
    try:
        fd = _open_netns(netns_)
    except OSError as exc:
        raise SwitchAttachError(f"network namespace {netns_!r}: {exc.strerror}") from None
    program = EgressProgram(config)
    try:
        with netns(fd), IPRoute() as ipr:
            ifindex = _ifindex(ipr, ifname)
            if ifindex is None:
                raise SwitchAttachError(f"{netns_}: no interface {ifname!r}")
            created = _add(ipr, ifindex, program.prog_fd, f"{netns_}/{ifname}")
    except BaseException:
        program.close()
        raise
    finally:
        os.close(fd)
    log.debug("attached %s to %s/%s (%s)", PROGRAM, netns_, ifname, config)
    return EgressHandle(netns_, ifname, ifindex, config, program, created)


def _add(ipr: IPRoute, ifindex: int, prog_fd: int, where: str) -> bool:
    """Add clsact (if absent) and the filter; returns whether the qdisc was created here."""
    created = True
    try:
        ipr.tc("add", "clsact", index=ifindex)
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise SwitchAttachError(f"{where}: clsact qdisc: {exc}") from None
        created = False
    try:
        ipr.tc("add-filter", "bpf", index=ifindex, handle=FILTER_HANDLE, parent=TC_H_CLSACT_EGRESS,
               prio=FILTER_PREF, protocol=ETH_P_ALL, fd=prog_fd, name=PROGRAM, direct_action=True)
    except NetlinkError as exc:
        if created:
            _remove(ipr, ifindex, True)
        already = " (already attached?)" if exc.code == errno.EEXIST else ""
        raise SwitchAttachError(f"{where}: bpf egress filter: {exc}{already}") from None
    return created
