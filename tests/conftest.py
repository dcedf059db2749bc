"""Shared test fixtures: privilege tiers and the leak check of the netns/e2e tiers."""

from __future__ import annotations

import os
import socket
import textwrap

import pytest

from testbed.cluster.servers import load_servers
from testbed.cluster.sharded import standin_underlay

ROOT_TIERS = ("netns", "e2e")


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
    """Inodes of every network namespace some process is in."""
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                out.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
            except (FileNotFoundError, PermissionError, ProcessLookupError):
                pass
    return out


def root_interfaces() -> set[str]:
    return {name for _, name in socket.if_nameindex()}


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
