"""Shared test fixtures: privilege tiers and the leak check of the netns/e2e tiers."""

from __future__ import annotations

import os
import socket

import pytest

ROOT_TIERS = ("netns", "e2e")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(f"tests/{tier}/" in str(item.fspath) for tier in ROOT_TIERS):
            item.add_marker(pytest.mark.root)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="needs root (network namespaces)"))


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
