"""Scenario + topology -> one agent job spec per rank (pure; the format is in :mod:`agents.__main__`).

Ring order is ``workload.hosts`` (rank r sends to rank r+1, as an NCCL ring does).
Per transport:

* ``mrc``: ``next.evs`` are the SRv6 uSID paths to the next rank
  (:meth:`testbed.topology.Topology.evs`, at most ``workload.evs`` of them,
  interleaved over planes); ``prev.evs`` are the mirror images of the paths the
  previous rank uses towards us, under the same EV ids, so a SACK for a packet that
  came over EV k goes back over the same switches and links.
* ``rc``: one EV, ECMP-routed: the peer's plain address with a per-QP UDP source
  port as entropy (RoCEv2 practice: the source port is the flow label the switches
  hash), so routing reconvergence (``reconverge_after``) can move it.
* ``tcp``: kernel TCP between the ECMP addresses, connecting from the same seeded port
  (``next.src_port``), so one seed gives one set of ECMP paths; EVs are ignored.

QP parameters (:data:`QP_DEFAULTS`) map the mrc.h attributes to emulation time:
the fabric RTT at 20 Mbit/s is milliseconds, so ``timeout`` 16 (1.024 us * 2**16 =
67 ms) and the retry ladder of 7 linear + 7 exponential retries give an RC QP about
17 s before ERR (agents/mrc/types.py documents the mapping).
"""

from __future__ import annotations

import random
from pathlib import Path

from agents.protocol import TCP_PORT, TRANSPORTS, UDP_PORT  # noqa: F401 (re-exported)

from .spec import Scenario
from .topology import EV, Topology

QP_DEFAULTS = {"timeout": 16, "retry_linear": 7, "retry_exp": 7, "cc": "uet-1.0-nscc"}
"""QP attributes every job gets (mrc.h names; see the module docstring)."""

SOFTWARE_RTT_S = 0.002
"""Agent and kernel time in an unloaded round trip on this emulator, s (event-loop wake-ups
on both ends; measured RTT minus serialisation on an idle k4 path was ~1-2 ms)."""
SACK_BYTES = 120     # a SACK frame on the wire (Ethernet + IPv6 + UDP + SACK header), bytes


def base_rtt_s(topo: Topology, links: list[str] | tuple[str, ...], mtu: int) -> float:
    """Unloaded RTT of a path, s: store-and-forward serialisation of one ``mtu`` frame on every
    link (the data packet) and of a SACK back, plus :data:`SOFTWARE_RTT_S`. NSCC's base RTT is a
    fabric parameter (UET 1.0 congestion management: the unloaded RTT of the longest path)."""
    per_link = [topo.link_by_name[name].params.rate_bps for name in links]
    return sum(((mtu + 14) * 8 + SACK_BYTES * 8) / rate for rate in per_link) + SOFTWARE_RTT_S

ROCE_PMTU_BYTES = 4096   # largest RoCEv2 path MTU (IBTA: 256..4096 bytes of payload)
SAMPLE_INTERVAL_S = 0.02
ECMP_SRC_PORTS = (49152, 65535)   # IANA dynamic range, where RoCEv2 source-port entropy lives


def bind_address(topo: Topology, host: str) -> str:
    """``::``: a host receives on its plain (ECMP) address of every NIC *and* on its NICs'
    uSID locators, where SRv6 EVs end (the destination after the last End shift), so the
    agent binds the wildcard address."""
    del topo, host
    return "::"


def _ev_dict(ev: EV, ev_id: int | None = None) -> dict:
    return {"ev_id": ev.ev_id if ev_id is None else ev_id, "address": str(ev.address),
            "links": list(ev.links)}


def mirrored_evs(topo: Topology, src: str, dst: str, limit: int | None) -> list[dict]:
    """Paths from ``dst`` back to ``src`` mirroring ``src``'s EVs towards ``dst``, same ids.

    Raises ValueError if a path has no mirror (cannot happen on a symmetric fabric)."""
    back = {(ev.src.ifname, ev.dst.ifname, ev.switches): ev for ev in topo.evs(dst, src)}
    out = []
    for ev in topo.evs(src, dst, limit=limit):
        mirror = back.get((ev.dst.ifname, ev.src.ifname, tuple(reversed(ev.switches))))
        if mirror is None:
            raise ValueError(f"EV {ev.ev_id} {src}->{dst} via {'/'.join(ev.switches)} has no reverse path")
        out.append(_ev_dict(mirror, ev.ev_id))
    return out


def host_link_rate_bps(scenario: Scenario) -> int:
    """Slowest host link of the ring's hosts, bits/s: one NIC's rate."""
    topo = scenario.topology
    return min(topo.link_by_name[nic.link].params.rate_bps for h in scenario.workload.hosts for nic in topo.nics[h])


def host_bandwidth_bps(scenario: Scenario) -> int:
    """A host's NIC bandwidth, bits/s: the sum of its host links over planes (one NIC per plane),
    for the slowest of the ring's hosts. busbw is compared with it, and MRC, which sprays over
    every plane, sizes NSCC with it; equal to :func:`host_link_rate_bps` on one plane."""
    topo = scenario.topology
    return min(sum(topo.link_by_name[nic.link].params.rate_bps for nic in topo.nics[h])
               for h in scenario.workload.hosts)


def job_mtu(scenario: Scenario) -> int:
    """The agents' IPv6 MTU: ``workload.mtu``, else the fabric's smallest link MTU capped where
    an MRC data packet carries :data:`ROCE_PMTU_BYTES` of payload (RoCEv2 on a jumbo fabric)."""
    if scenario.workload.mtu:
        return scenario.workload.mtu
    from agents.mrc.packet import DATA_OVERHEAD_BYTES, IPV6_UDP_BYTES
    link_mtu = min(link.params.mtu for link in scenario.topology.links)
    return min(link_mtu, ROCE_PMTU_BYTES + IPV6_UDP_BYTES + DATA_OVERHEAD_BYTES)


def _ecmp_ev(topo: Topology, host: str, src_port: int) -> list[dict]:
    return [{"ev_id": 0, "address": str(topo.nics[host][0].address), "links": [], "src_port": src_port}]


def build_jobs(scenario: Scenario, transport: str, *, run_id: str, control_socket: str,
               qp_overrides: dict | None = None) -> list[dict]:
    """Job spec dicts, one per rank in ring order. ``qp_overrides`` replace :data:`QP_DEFAULTS`
    keys. Raises ValueError for an unknown transport."""
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport {transport!r}")
    topo, wl = scenario.topology, scenario.workload
    hosts = list(wl.hosts)
    n = len(hosts)
    # MRC's QP sprays over every plane's NIC; rc and tcp use the first NIC only.
    rate = host_bandwidth_bps(scenario) if transport == "mrc" else host_link_rate_bps(scenario)
    mtu = job_mtu(scenario)
    longest = max((ev.links for a, b in zip(hosts, hosts[1:] + hosts[:1]) for ev in topo.evs(a, b, limit=wl.evs)),
                  key=len)
    qp = {**QP_DEFAULTS, "cc_params": {"rate_bps": rate, "base_rtt_s": round(base_rtt_s(topo, longest, mtu), 6)},
          **(qp_overrides or {})}
    ports = random.Random(f"{scenario.seed}:ecmp").sample(range(*ECMP_SRC_PORTS), n)

    def peer(r_from: int, r_to: int, towards: bool) -> dict:
        a, b = hosts[r_from], hosts[r_to]
        if transport == "mrc":
            evs = ([_ev_dict(ev) for ev in topo.evs(a, b, limit=wl.evs)] if towards
                   else mirrored_evs(topo, b, a, wl.evs))
        else:  # towards next: our QP's port; back to prev: prev's QP's port
            evs = _ecmp_ev(topo, b, ports[r_from] if towards else ports[r_to])
        out = {"host": b, "ecmp_addr": str(topo.nics[b][0].address), "evs": evs}
        if transport == "tcp" and towards:
            out["src_port"] = ports[r_from]
        return out

    jobs = []
    for r, host in enumerate(hosts):
        jobs.append({
            "run_id": run_id, "rank": r, "world": hosts, "host": host, "transport": transport,
            "control_socket": control_socket, "seed": scenario.seed,
            "sizes": list(wl.sizes_bytes), "iterations": wl.iterations, "warmup": wl.warmup,
            "sample_interval_s": SAMPLE_INTERVAL_S, "port": UDP_PORT, "tcp_port": TCP_PORT,
            "mtu": mtu, "bind_addr": bind_address(topo, host),
            "next": peer(r, (r + 1) % n, True), "prev": peer(r, (r - 1) % n, False),
            "qp": qp, "connect_timeout_s": 10.0, "linger_s": 2.0,
        })
    return jobs


def write_jobs(jobs: list[dict], directory: Path) -> list[Path]:
    """Write ``rank<r>.json`` files into ``directory``; returns their paths in rank order."""
    import json
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for job in jobs:
        path = directory / f"rank{job['rank']}.json"
        path.write_text(json.dumps(job, indent=1))
        paths.append(path)
    return paths
