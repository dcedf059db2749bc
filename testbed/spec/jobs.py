"""Scenario + topology -> one agent job spec per rank (pure): :class:`agents.jobspec.JobSpec` objects, written as their ``to_dict()``.

Rank order is ``workload.hosts`` (already ordered by ``workload.order``). Each rank's
peers come from its collective (:func:`agents.collectives.peers`): the ring collectives
send to rank r+1 and receive from r-1, all_to_all every other rank both ways, and a
permutation sends to ``targets[r]`` (a seeded derangement). Per transport:

* ``mrc``: ``send_to[i].evs`` are the SRv6 uSID paths to that peer
  (:meth:`testbed.model.topology.Topology.evs`, at most ``workload.evs`` of them,
  interleaved over planes, or exactly ``workload.evs_per_qp``, reusing paths);
  ``recv_from[i].evs`` are the mirror images of the paths that peer uses towards us,
  under the same EV ids, so a SACK for a packet that came over EV k goes back over
  the same switches and links.
* ``rc`` (``rc-x<N>``: N QPs per connection): one EV per QP, ECMP-routed: the peer's
  plain address with a per-QP UDP source port as entropy (RoCEv2 practice: the source
  port is the flow label the switches hash), so routing reconvergence
  (``reconverge_after``) can move it.
* ``rc-dcqcn`` (``rc-dcqcn-x<N>``): the same RC QPs with DCQCN (:mod:`agents.mrc.dcqcn`,
  :func:`dcqcn_qp`): paced at a rate cut by CNPs, which the receiving QPs send for CE-marked
  data, every timer scaled to the fabric's base RTT.
* ``tcp``: kernel TCP between the ECMP addresses, connecting from the same seeded port
  as rc's QP 0 (``send_to[i].src_port``), so one seed gives one set of ECMP paths.

QP parameters (:data:`QP_DEFAULTS`) map the mrc.h attributes to emulation time. The
fabric RTT here is milliseconds, so the ``timeout`` exponent (1.024 us * 2**timeout, the
RTO's least margin above SRTT: :mod:`agents.mrc.rto`) follows the fabric's base RTT
(:func:`qp_timeout`): 16 (67 ms) on fat-tree-k4 at 5 Mbit/s, 15 (33.5 ms) at 10 Mbit/s. With the retry ladder of 7 linear + 7 exponential retries
an RC QP has about 17 s (timeout 16) or 8.6 s (15) before ERR (agents/mrc/types.py
documents the mapping). Until a QP has its first RTT sample its RTO is RFC 6298's
initial 1 s (``initial_rto_s``): a start-up burst queues for longer than the floor, and a
timer that fires on queued packets is taken for a dead path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random

from agents.jobspec import EVSpec, JobSpec, PeerSpec
from agents.mrc.dcqcn import scaled_cnp_interval_s
from agents.mrc.packet import payload_bytes_for_mtu
from agents.mrc.rto import mrc_timeout_s
from agents.mrc.types import MAX_ACK_DELAY_RTO_FRACTION
from agents.protocol import TCP_PORT, TRANSPORTS, UDP_PORT  # noqa: F401 (re-exported)

from testbed.spec import Scenario
from testbed.model.topology import CONTROL_PRIORITY, EV, Role, Topology

QP_DEFAULTS = {"retry_linear": 7, "retry_exp": 7, "cc": "uet-1.0-nscc", "initial_rto_s": 1.0}
"""QP attributes every job gets (mrc.h names; see the module docstring); ``timeout`` comes
from the fabric (:func:`qp_timeout`)."""
RTO_MARGIN_BASE_RTTS = 33.0
"""The RTO's least margin above SRTT, in base RTTs, unless a scenario's ``qp.rto_base_rtts`` says
otherwise: the MRC paper's regime, mrc.h's example ``timeout`` 8 (1.024 us x 2^8 = 262 us) over a
base RTT of ~8 us (scenarios/paper/claims.yaml's ``regime``). At that ratio a dead path bypassed
within a few base RTTs was found by loss inference, not by the timer (docs/reproducing.md)."""
ACK_COALESCE_FRAMES = 1.5
"""The responder's coalescing hold (``ack_coalesce_s``), in data-frame times of the flow's
rate: at full rate the next packet arrives one frame time later and shares the SACK, so a
steady flow is acknowledged every 2 packets instead of every packet; a slower flow keeps
the 0.5 ms ``ack_delay_s`` (adaptive, :mod:`agents.mrc.responder`). Why: a SACK per data
packet costs the agents enough CPU that their timers run late at high link rates; half the
SACKs keeps those runs valid for a small rise in SRTT (``make bench``, fabric ceiling)."""
MIN_QP_TIMEOUT = 15
"""The least ``timeout`` exponent (33.5 ms): the emulator's own timing noise (the agents' timer
lateness, a few ms at worst) must stay far below the margin."""

SOFTWARE_RTT_S = 0.002
"""Agent and kernel time in an unloaded round trip on this emulator, s (event-loop wake-ups
on both ends: an idle path's RTT less its serialisation)."""
SACK_BYTES = 120     # a SACK frame on the wire (Ethernet + IPv6 + UDP + SACK header), bytes
ETHERNET_HEADER_BYTES = 14


def qp_timeout(base_rtt: float, base_rtts: float = RTO_MARGIN_BASE_RTTS) -> int:
    """The mrc.h ``timeout`` exponent for a fabric of base RTT ``base_rtt`` (s): the one whose
    1.024 us * 2**timeout is geometrically nearest ``base_rtts`` base RTTs (default
    :data:`RTO_MARGIN_BASE_RTTS`), at least :data:`MIN_QP_TIMEOUT`, at most 24 (mrc.h's range).
    fat-tree-k4 at 33 base RTTs: 20 (1.07 s) at 5 Mbit/s (43.5 ms base RTT), 19 (0.54 s) at
    10 Mbit/s (22.7 ms); at 1.5 base RTTs 16 and 15."""
    exact = math.log2(base_rtts * base_rtt / mrc_timeout_s(0))
    return max(MIN_QP_TIMEOUT, min(24, round(exact)))


def ack_coalesce_s(frame_bytes: int, rate_bps: float, rto_floor_s: float) -> float:
    """The responder's coalescing hold, s: :data:`ACK_COALESCE_FRAMES` frame times of
    ``frame_bytes`` (on the wire) at ``rate_bps``, at most ``MAX_ACK_DELAY_RTO_FRACTION`` of
    ``rto_floor_s`` (a held SACK must not race the retransmission timer:
    :data:`agents.mrc.types.MAX_ACK_DELAY_RTO_FRACTION`)."""
    hold = ACK_COALESCE_FRAMES * frame_bytes * 8 / rate_bps
    bound = MAX_ACK_DELAY_RTO_FRACTION * rto_floor_s
    held = round(min(hold, bound), 6)
    # to whole microseconds, but never above the bound (QPConfig.check_ack_delay refuses that)
    return held if held <= bound else math.floor(bound * 1e6) / 1e6


def path_delay_s(topo: Topology, links: list[str] | tuple[str, ...]) -> float:
    """One-way propagation delay of a path, s: the sum of its links' ``delay`` (topology key),
    which the agents' endpoints add by holding each datagram (:mod:`agents.net.udp`)."""
    return round(sum(topo.link_by_name[name].params.delay_s for name in links), 9)


def ecmp_delay_s(topo: Topology, src: str, dst: str) -> float:
    """One-way propagation delay, s, from ``src``'s first NIC to ``dst``'s over the ECMP paths
    of plane 0 (which an RC QP's source port picks among). Raises ValueError when those paths
    differ in delay: an endpoint that does not know the hashed path cannot hold a datagram for
    the right time (every generated fabric has equal delays on equal-cost paths)."""
    if not any(link.params.delay_s for link in topo.links):
        return 0.0
    delays = {path_delay_s(topo, ev.links) for ev in topo.evs(src, dst) if ev.plane == 0}
    if len(delays) > 1:
        raise ValueError(f"the equal-cost paths {src} -> {dst} differ in delay "
                         f"({', '.join(f'{d * 1e3:g} ms' for d in sorted(delays))}): ECMP transports "
                         f"need one delay per host pair")
    return delays.pop() if delays else 0.0


def base_rtt_s(topo: Topology, links: list[str] | tuple[str, ...], mtu: int, *,
               propagation: bool = True) -> float:
    """Unloaded RTT of a path, s: store-and-forward serialisation of one ``mtu`` frame on every
    link (the data packet) and of a SACK back, twice the path's propagation delay
    (:func:`path_delay_s`; not with ``propagation=False``: kernel tcp, whose packets no
    endpoint holds), plus :data:`SOFTWARE_RTT_S`. NSCC's base RTT is a fabric parameter
    (UET 1.0 congestion management: the unloaded RTT of the longest path)."""
    per_link = [topo.link_by_name[name].params.rate_bps for name in links]
    serialisation = sum(((mtu + ETHERNET_HEADER_BYTES) * 8 + SACK_BYTES * 8) / rate for rate in per_link)
    delay = 2 * path_delay_s(topo, links) if propagation else 0.0
    return serialisation + delay + SOFTWARE_RTT_S

def dcqcn_qp(rate_bps: float, base_rtt: float, mtu: int) -> dict:
    """The ``qp`` keys of a DCQCN job: cc ``"dcqcn"`` sized by the line rate ``rate_bps`` (bits/s)
    and the fabric's base RTT ``base_rtt`` (s), as NSCC is (the RP's timers, byte counter and
    rate steps scale from them: :func:`agents.mrc.dcqcn.scaled_params`), paced on the wire
    size (``overhead_bytes``: an ``mtu`` frame's headers and Ethernet header beyond its
    payload), and the CNP interval of the receiving QPs (the paper's 50 us, scaled alike)."""
    overhead = mtu + ETHERNET_HEADER_BYTES - payload_bytes_for_mtu(mtu)
    return {"cc": "dcqcn", "cnp_interval_s": round(scaled_cnp_interval_s(base_rtt), 6),
            "cc_params": {"rate_bps": rate_bps, "base_rtt_s": base_rtt, "overhead_bytes": overhead}}


RX_HOLD_BASE_RTTS = 0.05
"""Receive moderation of the agents' loops (job ``rx_hold_s``), in base RTTs: a datagram waits at
most this much longer for its agent (counted in the fidelity check beside the scheduling delay)."""

AGENT_RT_PRIORITY = 1
"""SCHED_RR priority of the agents with ``agent_realtime: true`` (the lowest real-time one: above
every normal task, below the kernel's own real-time threads)."""

ROCE_PMTU_BYTES = 4096   # largest RoCEv2 path MTU (IBTA: 256..4096 bytes of payload)
SAMPLE_INTERVAL_S = 0.02
"""The agents' longest sample interval, s: on slow fabrics (base RTT above it) the samples stay
this fine, as they always were."""
MIN_SAMPLE_INTERVAL_S = 0.005
"""The agents' shortest sample interval, s: it bounds what sampling costs. Measured on
core-link-failure's mrc run (16 ranks, 10 Mbit/s, 11.4 s, this 2-core machine, shared): at
2 ms instead of 20 ms the agents took 4.89 instead of 3.11 CPU s (61,154 more samples: ~29 us
each, 0.16 of a core for 16 agents), the machine's mean CPU rose from 83% to 99.8%, samples.jsonl
from 4.9 to 37.8 MB and the analysis from 0.4 to 1.9 s. At 5 ms 16 agents spend ~0.09 of a core.
Below a base RTT of 5 ms the KPIs' resolution is coarser than one RTT, and the report says so."""
ECMP_SRC_PORTS = (49152, 65535)   # IANA dynamic range, where RoCEv2 source-port entropy lives


def sample_interval_s(base_rtt: float) -> float:
    """The agents' sample interval for a fabric of base RTT ``base_rtt`` (s): one base RTT (down to
    whole 0.1 ms), at most :data:`SAMPLE_INTERVAL_S` and at least :data:`MIN_SAMPLE_INTERVAL_S`.
    The KPIs' bins are this wide (:func:`testbed.metrics.summary.kpi_bin_s`) and their stalls
    within this of the truth (:func:`testbed.metrics.kpis.sample_stalls`): a time in base RTTs
    is resolved to one RTT or better wherever the base RTT is at least the floor."""
    return max(MIN_SAMPLE_INTERVAL_S, math.floor(min(SAMPLE_INTERVAL_S, base_rtt) * 1e4) / 1e4)


def bind_address(topo: Topology, host: str) -> str:
    """``::``: a host receives on its plain (ECMP) address of every NIC *and* on its NICs'
    uSID locators, where SRv6 EVs end (the destination after the last End shift), so the
    agent binds the wildcard address."""
    del topo, host
    return "::"


MAX_BACKUP_EVS = 16
"""Backup EVs per MRC connection at most (the paths not in use, in :meth:`Topology.evs` order)."""


def _ev_dict(ev: EV, ev_id: int | None = None, topo: Topology | None = None) -> dict:
    out = {"ev_id": ev.ev_id if ev_id is None else ev_id, "address": str(ev.address),
           "links": list(ev.links), "plane": ev.plane}
    if topo is not None and (delay := path_delay_s(topo, ev.links)):
        out["delay_s"] = delay
    return out


def backup_evs(topo: Topology, src: str, dst: str, limit: int | None, exactly: int | None,
               oblivious: str | None = None) -> list[EV]:
    """The paths from ``src`` to ``dst`` an MRC QP does not use (:func:`qp_evs`), at most
    :data:`MAX_BACKUP_EVS`, with their own ids: what the controller may swap in by REPLACE_EV.
    None with ``exactly`` or ``oblivious`` (EV ids there are not path ids)."""
    if exactly is not None or oblivious is not None:
        return []
    used = {ev.ev_id for ev in qp_evs(topo, src, dst, limit)}
    return [ev for ev in topo.evs(src, dst) if ev.ev_id not in used][:MAX_BACKUP_EVS]


def qp_evs(topo: Topology, src: str, dst: str, limit: int | None = None,
           exactly: int | None = None, oblivious: str | None = None) -> list[EV]:
    """The EVs of an MRC QP from ``src`` to ``dst``: the paths of :meth:`Topology.evs` (at most
    ``limit``), or, with ``exactly``, that many EVs reusing the paths round-robin (EV k takes path
    k mod paths; ids 0..exactly-1). The MRC spec's EV count is independent of the path count.

    ``oblivious`` (a seed text; ``workload.ev_paths: oblivious``): the same number of EVs, ids
    0..n-1, but EV k takes path :func:`oblivious_path` of every path from ``src`` to ``dst``, so
    EVs collide on a path as a hashing fabric's would (uet-htsim's oblivious spraying: each EV's
    entropy value hashed to a path), instead of covering the paths evenly."""
    if exactly is None:
        chosen = topo.evs(src, dst, limit=limit)
    else:
        paths = topo.evs(src, dst)
        chosen = [dataclasses.replace(paths[k % len(paths)], ev_id=k) for k in range(exactly)]
    if oblivious is None:
        return chosen
    paths = topo.evs(src, dst)
    return [dataclasses.replace(paths[oblivious_path(oblivious, src, dst, k, len(paths))], ev_id=k)
            for k in range(len(chosen))]


def oblivious_path(seed: str, src: str, dst: str, ev_id: int, paths: int) -> int:
    """The path index in ``[0, paths)`` of EV ``ev_id`` from ``src`` to ``dst`` under oblivious
    spraying: the first 8 bytes of SHA-256 of ``"seed:src:dst:ev_id"`` modulo ``paths``, uniform
    and independent per EV, so n EVs over P paths leave about P(1-1/P)^n of them unused."""
    digest = hashlib.sha256(f"{seed}:{src}:{dst}:{ev_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % paths


def mirrored_evs(topo: Topology, src: str, dst: str, limit: int | None,
                 exactly: int | None = None, forward: list[EV] | None = None,
                 oblivious: str | None = None) -> list[dict]:
    """Paths from ``dst`` back to ``src`` mirroring ``src``'s EVs towards ``dst`` (or the EVs
    ``forward``; ``oblivious`` as for :func:`qp_evs`), same ids.

    Raises ValueError if a path has no mirror (cannot happen on a symmetric fabric)."""
    back = {(ev.src.ifname, ev.dst.ifname, ev.switches): ev for ev in topo.evs(dst, src)}
    out = []
    for ev in (forward if forward is not None else qp_evs(topo, src, dst, limit, exactly, oblivious)):
        mirror = back.get((ev.dst.ifname, ev.src.ifname, tuple(reversed(ev.switches))))
        if mirror is None:
            raise ValueError(f"EV {ev.ev_id} {src}->{dst} via {'/'.join(ev.switches)} has no reverse path")
        out.append(_ev_dict(mirror, ev.ev_id, topo))
    return out


def _ev_spec(e: dict) -> EVSpec:
    return EVSpec(e["ev_id"], e["address"], tuple(e["links"]), e.get("src_port"), e.get("plane", 0),
                  e.get("delay_s", 0.0))


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
    """The agents' IPv6 MTU: ``workload.mtu``; else the MTU whose MRC/RC data packets carry
    ``workload.payload`` bytes (:func:`agents.mrc.packet.mtu_for_payload`; the loader checked it
    fits the fabric); else the fabric's smallest link MTU capped where a data packet carries
    :data:`ROCE_PMTU_BYTES` of payload (RoCEv2 on a jumbo fabric)."""
    from agents.mrc.packet import mtu_for_payload
    wl = scenario.workload
    if wl.mtu:
        return wl.mtu
    if wl.payload:
        return mtu_for_payload(wl.payload)
    link_mtu = min(link.params.mtu for link in scenario.topology.links)
    return min(link_mtu, mtu_for_payload(ROCE_PMTU_BYTES))


def job_payload_bytes(scenario: Scenario) -> int:
    """Payload bytes of an mrc/rc data packet of ``scenario.workload`` (of :func:`job_mtu`):
    ``workload.payload``, else :data:`ROCE_PMTU_BYTES` where the fabric carries it. Kernel tcp
    does not use it (its segments follow the interfaces' MTU)."""
    return payload_bytes_for_mtu(job_mtu(scenario))


def _ecmp_evs(topo: Topology, src: str, host: str, src_ports: list[int], delayed: bool = True) -> list[dict]:
    """RC EVs from ``src`` towards ``host``: one per QP of the connection, QP q's entropy
    ``src_ports[q]``, each with the ECMP paths' delay (:func:`ecmp_delay_s`; none when not
    ``delayed``)."""
    delay = ecmp_delay_s(topo, src, host) if delayed else 0.0
    return [{"ev_id": q, "address": str(topo.nics[host][0].address), "links": [], "src_port": port,
             **({"delay_s": delay} if delay else {})}
            for q, port in enumerate(src_ports)]


def connection_ports(seed: int | str, connections: list[tuple[int, int]], qps: int) -> dict[tuple[int, int, int], int]:
    """A distinct seeded UDP/TCP source port per (src rank, dst rank, QP): RoCEv2 entropy.

    ``connections`` lists (src, dst) rank pairs; ports are drawn from :data:`ECMP_SRC_PORTS` by
    ``random.Random(f"{seed}:ecmp")`` without replacement, QP 0 of every connection first, in
    ``connections`` order (for a ring, rank order: rank r's port is the r-th draw, as it always
    was). Raises ValueError when there are more QPs than ports."""
    low, high = ECMP_SRC_PORTS
    keys = [(a, b, q) for q in range(qps) for a, b in connections]
    if len(keys) > high - low:
        raise ValueError(f"{len(keys)} QPs need distinct source ports; only {high - low} exist")
    rng, taken, out = random.Random(f"{seed}:ecmp"), set(), {}
    for key in keys:                    # random.sample's set-based draw, one key at a time
        j = rng.randrange(high - low)
        while j in taken:
            j = rng.randrange(high - low)
        taken.add(j)
        out[key] = low + j
    return out


def build_all_jobs(scenario: Scenario, transport: str, *, run_id: str, control_socket: str,
                   qp_overrides: dict | None = None) -> list[dict]:
    """Job specs of every job of the scenario (:attr:`Scenario.all_jobs`), job after job, each
    job's ranks in rank order. An agent's ``agent`` id (its rank on the control socket) is its
    index in this list; job j's agents use UDP port ``UDP_PORT + j`` and TCP port
    ``TCP_PORT + j`` (two jobs on one host are two agents), and its ECMP entropy ports are drawn
    from a seed salted with its name (job 0: unsalted, as a single-job scenario's). An agent's
    ``linger_s`` is the run's timeout (``scenario.timeout_s``): the runner's ``stop``, sent once
    every agent is done, ends it; the bound only matters without a runner."""
    out: list[dict] = []
    for j, wl in enumerate(scenario.all_jobs):
        specs = build_job_specs(dataclasses.replace(scenario, workload=wl), transport, run_id=run_id,
                                control_socket=control_socket, qp_overrides=qp_overrides,
                                port_offset=j, ecmp_salt="" if j == 0 else f":{wl.name}")
        for spec in specs:
            # an agent done keeps answering its upstream until the runner's stop (every rank
            # done); a fixed 2 s fell short of one RTO at the paper's ratio (2.2 s on BDP 64), so
            # a lost last SACK left the upstream retransmitting into a closed port until ERR
            out.append(dataclasses.replace(spec, agent=len(out), job=wl.name,
                                           linger_s=max(spec.linger_s, scenario.timeout_s)).to_dict())
    return out


def build_jobs(scenario: Scenario, transport: str, **kw) -> list[dict]:
    """Job spec dicts of ``scenario.workload`` (:meth:`agents.jobspec.JobSpec.to_dict` of
    :func:`build_job_specs`), one per rank in rank order."""
    return [spec.to_dict() for spec in build_job_specs(scenario, transport, **kw)]


def build_job_specs(scenario: Scenario, transport: str, *, run_id: str, control_socket: str,
                    qp_overrides: dict | None = None, port_offset: int = 0,
                    ecmp_salt: str = "") -> list[JobSpec]:
    """Job specs (:class:`agents.jobspec.JobSpec`) of ``scenario.workload``, one per rank in
    rank order. ``transport`` may be a variant (``rc-x8``: RC with 8 QPs per
    connection; ``rc-dcqcn[-x<N>]``: with DCQCN, :func:`dcqcn_qp`). ``qp_overrides`` replace :data:`QP_DEFAULTS` keys; ``port_offset`` is added to
    the agents' UDP and TCP ports, ``ecmp_salt`` to the entropy ports' seed (see
    :func:`build_all_jobs`). Raises ValueError for an unknown transport."""
    from testbed.spec import parse_transport
    name = parse_transport(transport)
    base, qps = name.base, name.qps
    topo, wl = scenario.topology, scenario.workload
    hosts = list(wl.hosts)
    n = len(hosts)
    targets = wl.targets
    peer_sets = [wl.peers(r) for r in range(n)]
    sends = [(r, d) for r, (send_to, _) in enumerate(peer_sets) for d in send_to]
    # MRC's QP sprays over every plane's NIC; rc and tcp use the first NIC only.
    rate = host_bandwidth_bps(scenario) if base == "mrc" else host_link_rate_bps(scenario)
    mtu = job_mtu(scenario)
    hashed = str(scenario.seed) if wl.ev_paths == "oblivious" else None
    longest = max((ev.links for a, b in sends
                   for ev in qp_evs(topo, hosts[a], hosts[b], wl.evs, wl.evs_per_qp, hashed)), key=len)
    # kernel tcp is not held by any endpoint: no propagation delay in its RTT nor its routes
    delayed = base != "tcp"
    base_rtt = round(base_rtt_s(topo, longest, mtu, propagation=delayed), 6)
    settings = dict(scenario.qp)
    timeout = (qp_overrides or {}).get("timeout", qp_timeout(base_rtt, settings.pop("rto_base_rtts",
                                                                                   RTO_MARGIN_BASE_RTTS)))
    delay_filter = settings.pop("nscc_delay_filter", None)   # a CC parameter, not a QP key
    ev_select = settings.pop("ev_select", None)              # MRC's EV selection: mrc QPs only
    # min_rto_s 0: the RTO's floor is the mrc.h timeout's (>= 33.5 ms), which bounds the SACK hold.
    qp = {**QP_DEFAULTS, "timeout": timeout, "min_rto_s": 0.0,
          "ack_coalesce_s": ack_coalesce_s(mtu + ETHERNET_HEADER_BYTES, rate, mrc_timeout_s(timeout)),
          "cc_params": {"rate_bps": rate, "base_rtt_s": base_rtt},
          **(dcqcn_qp(rate, base_rtt, mtu) if name.cc == "dcqcn" else {}), **settings, **(qp_overrides or {})}
    if delay_filter is not None and qp["cc"] == "uet-1.0-nscc":
        qp["cc_params"] = {**qp["cc_params"], "delay_filter": delay_filter}
    if ev_select is not None and base == "mrc":
        qp["ev_select"] = ev_select
    if base in ("mrc", "rc") and any(link.params.ecn_threshold_pkts for link in topo.links):
        qp.setdefault("ecn", True)   # switches mark CE: send ECT(0), read CE, NSCC takes ECN
    if base in ("mrc", "rc") and any(link.params.control_priority and topo.nodes[end.node].role is Role.HOST
                                     for link in topo.links for end in (link.a, link.b)):
        qp.setdefault("control_priority", CONTROL_PRIORITY)   # the NICs' high class (LinkParams)

    # Ring order first (connection r = rank r -> its first peer), so a ring keeps its ports.
    order = sorted(sends, key=lambda c: (peer_sets[c[0]][0].index(c[1]), c[0]))
    ports = connection_ports(f"{scenario.seed}{ecmp_salt}", order, qps)

    def peer(me: int, other: int, towards: bool) -> PeerSpec:
        a, b = hosts[me], hosts[other]
        backups: list[dict] = []
        if base == "mrc":
            evs = ([_ev_dict(ev, topo=topo) for ev in qp_evs(topo, a, b, wl.evs, wl.evs_per_qp, hashed)] if towards
                   else mirrored_evs(topo, b, a, wl.evs, wl.evs_per_qp, oblivious=hashed))
            spare = backup_evs(topo, *((a, b) if towards else (b, a)), wl.evs, wl.evs_per_qp, hashed)
            backups = ([_ev_dict(ev, topo=topo) for ev in spare] if towards
                       else mirrored_evs(topo, b, a, None, forward=spare))
        else:  # towards a destination: our QPs' ports; back to a source: its QPs' ports
            conn = (me, other) if towards else (other, me)
            evs = _ecmp_evs(topo, a, b, [ports[(*conn, q)] for q in range(qps)], delayed)
        return PeerSpec(rank=other, host=b, ecmp_addr=str(topo.nics[b][0].address),
                        evs=tuple(_ev_spec(e) for e in evs), backup_evs=tuple(_ev_spec(e) for e in backups),
                        src_port=ports[(me, other, 0)] if base == "tcp" and towards else None)

    jobs = []
    for r, host in enumerate(hosts):
        send_to, recv_from = peer_sets[r]
        jobs.append(JobSpec(
            run_id=run_id, rank=r, agent=r, world=tuple(hosts), host=host, transport=base,
            collective=wl.collective, control_socket=control_socket, seed=scenario.seed,
            sizes=tuple(wl.sizes_bytes), iterations=wl.iterations, warmup=wl.warmup,
            sample_interval_s=sample_interval_s(base_rtt), port=UDP_PORT + port_offset,
            tcp_port=TCP_PORT + port_offset, mtu=mtu, bind_addr=bind_address(topo, host),
            send_to=tuple(peer(r, d, True) for d in send_to),
            recv_from=tuple(peer(r, s, False) for s in recv_from),
            qp=qp, connect_timeout_s=10.0, linger_s=2.0, rx_hold_s=round(RX_HOLD_BASE_RTTS * base_rtt, 6),
            rt_priority=AGENT_RT_PRIORITY if scenario.agent_realtime else 0, engine=scenario.engine,
            targets=tuple(targets) if targets is not None else None, qps=qps))
    return jobs
