"""Shared test fixtures: privilege tiers and the leak check of the netns/e2e tiers."""

from __future__ import annotations

import ctypes
import os
import socket
import textwrap

import pytest

from testbed.cluster.servers import load_servers
from testbed.cluster.sharded import standin_underlay

ROOT_TIERS = ("netns", "e2e")


PR_SET_CHILD_SUBREAPER = 36   # linux/prctl.h


def pytest_configure(config):
    if os.geteuid() == 0:
        adopt_orphans()


def adopt_orphans() -> None:
    """Make the test process a child subreaper (prctl(2)): an orphan of anything a test
    started (a host shell's background job whose shell was killed) is re-parented to it, so
    what a test leaves behind stays among :func:`own_processes`. OSError if refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(err)}")


def own_processes() -> set[int]:
    """PIDs of this process's descendants (what its tests started, orphans included once it
    adopts them): the leak checks count only these, so a neighbour's namespaces on a busy
    machine are not charged to a test."""
    children: dict[int, list[int]] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(pid))
    out, todo = set(), [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(f"tests/{tier}/" in str(item.fspath) for tier in ROOT_TIERS):
            item.add_marker(pytest.mark.root)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="needs root (network namespaces)"))


def ipv6_loopback_ok() -> bool:
    """True if a UDP socket can bind ::1 (a container run with --network none has no IPv6 loopback)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def tier_timeout(items, tier: str, seconds: int) -> None:
    """Give every item under tests/<tier>/ a ``timeout(seconds)`` mark unless it sets its own.
    (A conftest's collection hook sees the whole session's items: filter by path.)"""
    for item in items:
        if f"tests/{tier}/" in str(item.fspath) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(seconds))


def net_namespaces() -> set[int]:
    """Inodes of the network namespaces this process's descendants are in (:func:`own_processes`;
    the test process's own namespace too)."""
    out = {os.stat("/proc/self/ns/net").st_ino}
    for pid in own_processes():
        try:
            out.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            pass
    return out


def root_interfaces() -> set[str]:
    """Interfaces of this namespace named as the testbed names them (``<node>-eth<i>`` ports,
    ``mrc``-prefixed devices): a neighbour's devices on a busy machine are not a test's leak."""
    return {name for _, name in socket.if_nameindex() if "-eth" in name or name.startswith("mrc")}


def servers_yaml(tmp_path, key: str) -> str:
    """A servers file of two stand-in servers (underlay fd00:96::1, ::2, MTU 9100) using ``key``."""
    path = tmp_path / "servers.yaml"
    path.write_text(textwrap.dedent(f"""\
        servers:
          - {{name: s1, address: stand-in-1, underlay: "fd00:96::1", key: {key}}}
          - {{name: s2, address: stand-in-2, underlay: "fd00:96::2", key: {key}}}
        underlay: {{mtu: 9100}}
        """))
    return str(path)


@pytest.fixture
def standins(tmp_path):
    """(underlay, servers.yaml path): two stand-in servers with sshd; removed by ledger."""
    if not os.path.exists("/usr/sbin/sshd"):
        pytest.skip("/usr/sbin/sshd missing (make setup installs openssh-server)")
    (tmp_path / "no-key-yet").write_text("")
    bootstrap = load_servers(servers_yaml(tmp_path, str(tmp_path / "no-key-yet")))   # addresses; key next
    under = standin_underlay(bootstrap)
    try:
        key = under.start_sshd(bootstrap, tmp_path / "keys")
        yield under, servers_yaml(tmp_path, str(key))
    finally:
        under.close()
