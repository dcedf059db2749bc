"""Root tier: real namespaces. Every test checks that nothing it created survives it."""

from __future__ import annotations

import time

import pytest

from testbed.fabric.local import Fabric
from testbed.model.generators import fat_tree
from testbed.model.topology import LinkParams
from tests.conftest import net_namespaces, root_interfaces, tier_timeout

# The slowest netns tests wait up to 90 s for a CLI prompt then 30 s per command
# (test_interactive), or run a 60 s WRITE (test_mrc_fabric) after a k=4 bring-up:
# 300 s is well above any of them and still stops a hung test long before CI's limit.
NETNS_TIMEOUT_S = 300


def pytest_collection_modifyitems(config, items):
    tier_timeout(items, "netns", NETNS_TIMEOUT_S)


def wait_for(predicate, timeout_s: float = 30.0, interval_s: float = 0.02) -> bool:
    """True once ``predicate()`` is; ``timeout_s`` only bounds a hang (a busy machine may take long)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)   # the poll interval of this wait helper
    return predicate()


def listening(fabric, node: str, port: int) -> bool:
    """True once a TCP socket listens on ``port`` in ``node``'s namespace (an iperf3 server is up)."""
    return bool(fabric.nodes[node].cmd(f"ss -Hltn 'sport = :{port}'").strip())


@pytest.fixture(autouse=True)
def no_leaks(request):
    """Fail a test that leaves a network namespace or a root-namespace interface behind."""
    ns_before, if_before = net_namespaces(), root_interfaces()
    yield
    if request.node.get_closest_marker("allow_shared_fabric"):
        return
    assert wait_for(lambda: net_namespaces() <= ns_before), \
        f"namespaces left behind: {len(net_namespaces() - ns_before)}"
    assert root_interfaces() <= if_before, f"interfaces left behind: {root_interfaces() - if_before}"


@pytest.fixture(scope="module")
def k4():
    """A fat-tree k=4 at 20 Mbit/s (64-packet queues, MTU 1500), shared by a module's tests;
    torn down even if they fail. Pinned here, independent of the shipped topology's defaults."""
    lp = LinkParams(20_000_000, 64)
    topo = fat_tree(4, host_link=lp, fabric_link=lp, name="fat-tree-k4")
    fabric = Fabric(topo)
    fabric.start()
    try:
        yield fabric
    finally:
        fabric.stop()


def small_fat_tree(rate_bps: int = 100_000_000) -> Fabric:
    lp = LinkParams(rate_bps, 100)
    return Fabric(fat_tree(4, host_link=lp, fabric_link=lp))
