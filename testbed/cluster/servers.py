"""``servers.yaml`` -> :class:`Cluster`: the servers a fabric is sharded across.

Shape (every key checked; problems name file, line and key path)::

    servers:
      - name: s1              # letters, digits, '_'
        address: 192.0.2.10   # where SSH reaches it (host name or IP)
        user: root            # optional, default root
        port: 22              # optional, default 22
        key: ~/.ssh/mrc_ed25519   # optional private key file (must exist and be a file)
        underlay: fd00:1::10  # this server's address for VXLAN (IPv4 or IPv6)
        repo: /opt/mrc-testbed    # optional: the checkout there (default: the runner's path)
        python: /opt/mrc-testbed/.venv/bin/python   # optional (default: the runner's interpreter)
      - ...
    underlay:                 # optional
      mtu: 1500               # underlay MTU, bytes (default 1500)
      port: 4789              # VXLAN UDP port (default 4789, IANA)
      vni_base: 1000          # VNI of link index 0 (default 1000); VNI = base + link index

Underlay addresses must all be of one family; the VXLAN inner MTU is the underlay MTU
minus the encapsulation (:func:`testbed.cluster.vxlan.inner_mtu`).
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

from yaml.nodes import Node

from testbed.spec.common import _not_a_mapping, _sorted
from testbed.spec.yamlread import Reader, SpecError, join
from testbed.model.cluster import VNI_MAX, VXLAN_PORT, Cluster, Server

MAX_SERVERS = 64
USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
"""A portable POSIX user name (useradd's default NAME_REGEX)."""






def load_servers(path: str | os.PathLike, *, check_keys: bool = True) -> Cluster:
    """Load and validate a servers file. Raises SpecError listing every problem.
    ``check_keys`` False: key files are not looked for (a worker reads the runner's copy;
    the keys are the runner's)."""
    reader = Reader(str(path))
    root = reader.compose(Path(path))
    cluster = _cluster(reader, root, Path(path).parent, check_keys) if root is not None else None
    if reader.problems or cluster is None:
        raise SpecError(_sorted(reader))
    return cluster


def _cluster(r: Reader, root: Node, base: Path, check_keys: bool = True) -> Cluster | None:
    if _not_a_mapping(r, root, "a servers"):
        return None
    m = r.mapping(root, "", ["servers"], ["underlay"])
    if m is None or "servers" not in m:
        return None
    items = r.seq(m["servers"], "servers")
    if items is None:
        return None
    if not 1 <= len(items) <= MAX_SERVERS:
        r.error(m["servers"], "servers", f"expected 1..{MAX_SERVERS} servers, got {len(items)}")
    servers, names, underlays = [], {}, {}
    for i, item in enumerate(items):
        s = _server(r, item, f"servers[{i}]", base, check_keys)
        if s is None:
            continue
        path = join("servers", i)
        if s.name in names:
            r.error(item, join(path, "name"), f"duplicate server name {s.name!r} (first at line {names[s.name]})")
        if s.underlay in underlays:
            r.error(item, join(path, "underlay"),
                    f"underlay {s.underlay} is also {underlays[s.underlay]}'s: each server needs its own")
        names.setdefault(s.name, r.line_for(path))
        underlays.setdefault(s.underlay, s.name)
        servers.append(s)
    if len({s.underlay.version for s in servers}) > 1:
        r.error(m["servers"], "servers", "underlay addresses mix IPv4 and IPv6: use one family")
    mtu, port, vni_base = 1500, VXLAN_PORT, 1000
    if "underlay" in m:
        u = r.mapping(m["underlay"], "underlay", [], ["mtu", "port", "vni_base"])
        if u is not None:
            mtu = r.integer(u.get("mtu"), "underlay.mtu", minimum=1280, maximum=65535) if "mtu" in u else mtu
            port = r.integer(u.get("port"), "underlay.port", minimum=1, maximum=65535) if "port" in u else port
            vni_base = (r.integer(u.get("vni_base"), "underlay.vni_base", minimum=1, maximum=VNI_MAX)
                        if "vni_base" in u else vni_base)
    if r.problems:
        return None
    return Cluster(tuple(servers), mtu, port, vni_base, r.file, dict(r.lines))


def _server(r: Reader, node: Node, path: str, base: Path, check_keys: bool = True) -> Server | None:
    m = r.mapping(node, path, ["name", "address", "underlay"], ["user", "port", "key", "repo", "python"])
    if m is None:
        return None
    name = r.name(m.get("name"), join(path, "name"), "server name")
    address = r.text(m.get("address"), join(path, "address"))
    if address is not None and (not address or any(c.isspace() for c in address) or address.startswith("-")):
        r.error(m["address"], join(path, "address"), f"{address!r} is not a host name or address")
        address = None
    underlay = None
    text = r.text(m.get("underlay"), join(path, "underlay"))
    if text is not None:
        try:
            underlay = ipaddress.ip_address(text)
        except ValueError:
            r.error(m["underlay"], join(path, "underlay"), f"{text!r} is not an IPv4 or IPv6 address")
        else:
            if underlay.is_multicast or underlay.is_unspecified or underlay.is_loopback:
                r.error(m["underlay"], join(path, "underlay"),
                        f"{underlay} cannot be a VXLAN endpoint (multicast, unspecified or loopback)")
                underlay = None
    user = r.text(m.get("user"), join(path, "user")) if "user" in m else "root"
    if user is not None and not USER_RE.fullmatch(user):
        r.error(m["user"], join(path, "user"), f"{user!r} is not a user name")
        user = None
    port = r.integer(m.get("port"), join(path, "port"), minimum=1, maximum=65535) if "port" in m else 22
    key = None
    if "key" in m:
        text = r.text(m["key"], join(path, "key"))
        if text is not None:
            key_path = Path(os.path.expanduser(text))
            key_path = key_path if key_path.is_absolute() else base / key_path
            if check_keys and not key_path.is_file():
                r.error(m["key"], join(path, "key"), f"key file {str(key_path)!r} does not exist or is not a file")
            else:
                key = str(key_path)
    paths = {}
    for k in ("repo", "python"):
        if k in m:
            text = r.text(m[k], join(path, k))
            if text is not None and (not text.startswith("/") or any(c.isspace() or c in "'\"$`;&|" for c in text)):
                r.error(m[k], join(path, k), f"{text!r} must be an absolute path without spaces or shell characters")
                text = None
            paths[k] = text
            if text is None:
                return None
    if None in (name, address, underlay, user, port):
        return None
    return Server(name, address, underlay, user, port, key, paths.get("repo"), paths.get("python"))
