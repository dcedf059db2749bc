"""The addressing plan of a fabric (docs/topologies.md, "Fabric addressing"): uSIDs, locators, prefixes, names.

* uSID block ``fcbb:bb00::/32`` with 16-bit uSIDs. Every switch owns the
  locator ``fcbb:bb00:<usid>::/48``; every host NIC owns one too (a local route
  on the host). uSIDs are allocated by role: host NICs ``0x1000+n``,
  edge/leaf ``0xE000+i``, aggregation ``0xA000+i``, core/spine ``0xC000+i``,
  so an address reads as its path: ``fcbb:bb00:e000:a000:c000:a002:e004:1008``.
* Point-to-point link ``i``: ``fd01:0:0:<i>::/64``, endpoint ``a`` is ``::1``,
  endpoint ``b`` is ``::2``.
* ECMP (baseline) address of a host NIC on plane ``p`` behind switch with uSID
  ``s``: ``fd00:0:<p>:<s>::<nic usid>/128``; the switch's host prefix is
  ``fd00:0:<p>:<s>::/64``.
* An EV is one path between two host NICs on the same plane: its destination
  address is the block followed by the uSIDs of every switch crossed and of
  the destination NIC (at most 6 uSIDs = 128 bits).
"""

from __future__ import annotations

import ipaddress
from typing import Sequence

from testbed.model.units import show

USID_BLOCK = ipaddress.IPv6Network("fcbb:bb00::/32")
#: Maximum uSIDs after the 32-bit block in one 128-bit destination address.
MAX_USIDS = 6
#: Linux IFNAMSIZ - 1 (include/uapi/linux/if.h): bytes, not characters.
IFNAME_MAX = 15
#: Planes are 16 bits of the ECMP address ``fd00:0:<plane>:...``.
MAX_PLANE = 0xFFFF
#: Switches on the longest EV: MAX_USIDS less the destination NIC's uSID.
MAX_EV_SWITCHES = MAX_USIDS - 1

#: First uSID of each role (host NICs, then switches by tier) and how many each role may take.
USID_BASE = {"host": 0x1000, "edge": 0xE000, "leaf": 0xE000, "aggregation": 0xA000,
             "core": 0xC000, "spine": 0xC000}
USID_SPAN = {"host": 0x8000, "edge": 0x1000, "leaf": 0x1000, "aggregation": 0x1000,
             "core": 0x1000, "spine": 0x1000}


def locator(usid: int) -> ipaddress.IPv6Network:
    """Locator ``fcbb:bb00:<usid>::/48`` of a 16-bit uSID."""
    if not 0 < usid <= 0xFFFF:
        raise ValueError(f"uSID {usid:#x} is not a non-zero 16-bit value")
    return ipaddress.IPv6Network(f"fcbb:bb00:{usid:x}::/48")


def usid_address(usids: Sequence[int]) -> ipaddress.IPv6Address:
    """Destination address carrying ``usids`` (at most 6) after the uSID block."""
    if not 0 < len(usids) <= MAX_USIDS:
        raise ValueError(f"{len(usids)} uSIDs do not fit a uSID container (1..{MAX_USIDS})")
    value = int(USID_BLOCK.network_address)
    for i, usid in enumerate(usids):
        value |= (usid & 0xFFFF) << (16 * (5 - i))
    return ipaddress.IPv6Address(value)


def link_subnet(index: int) -> ipaddress.IPv6Network:
    """Point-to-point subnet of link ``index``: ``fd01:0:0:<index>::/64``."""
    return ipaddress.IPv6Network(f"fd01:0:0:{index:x}::/64")


def host_prefix(plane: int, switch_usid: int) -> ipaddress.IPv6Network:
    """ECMP prefix of the hosts behind one switch: ``fd00:0:<plane>:<usid>::/64``."""
    return ipaddress.IPv6Network(f"fd00:0:{plane:x}:{switch_usid:x}::/64")


def plane_prefix(plane: int) -> ipaddress.IPv6Network:
    """ECMP prefix of every host NIC on ``plane``: ``fd00:0:<plane>::/48``."""
    return ipaddress.IPv6Network(f"fd00:0:{plane:x}::/48")


def ifname_problem(ifname: str) -> str | None:
    """Why ``ifname`` cannot name a Linux interface (``dev_valid_name``), or None.

    The limit is IFNAME_MAX bytes of UTF-8, and '/', ':', whitespace, '.' and '..'
    are refused by the kernel.
    """
    size = len(ifname.encode("utf-8", "surrogatepass"))
    if size > IFNAME_MAX:
        return (f"interface name {show(ifname)} is {size} bytes, longer than {IFNAME_MAX} "
                "(Linux IFNAMSIZ counts bytes)")
    if ifname in (".", "..") or any(c in "/:" or c.isspace() or not c.isprintable() for c in ifname):
        return f"interface name {show(ifname)} is not valid on Linux (no '/', ':', spaces, '.' or '..')"
    return None
