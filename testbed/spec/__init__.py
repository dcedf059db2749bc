"""YAML spec files -> validated frozen dataclasses (topologies and scenarios).

Strict, in the containerlab way: raw YAML -> strict parse (unknown keys
rejected) -> validate, collecting *every* problem -> resolved objects. Each
problem names file, line and key path::

    topologies/x.yaml:12: links[3].rate: '10 Mbps' is not a rate (examples: 10Mbit, 1Gbit)

Loaders raise :class:`SpecError` (all problems) and have no side effects;
units are parsed here (:mod:`testbed.model.units`), nothing downstream sees strings.

Topology file
-------------
Common keys: ``name`` (optional, default: the file stem), ``kind``
(``fat-tree`` | ``leaf-spine`` | ``explicit``), ``link_classes`` (required,
with at least ``host`` and ``fabric``; explicit files may add more classes).
A class is ``{rate: 20Mbit, queue: 64, delay: 50us, loss: 0.1%, mtu: 9000}``:
``rate`` required, ``queue`` in packets (default 100), ``delay``/``loss``
optional and only where the kernel has sch_netem, ``mtu`` bytes (default 1500).

* ``kind: fat-tree``: ``k`` (even, >= 2).
* ``kind: leaf-spine``: ``leaves``, ``spines``, ``hosts_per_leaf`` (>= 1),
  ``planes`` (optional, default 1).
* ``kind: explicit``: ``nodes`` (name -> ``{role, plane?, pod?}``; roles host
  edge aggregation core leaf spine; names are letters, digits and ``_``, short
  enough that ``<node>-eth<n>`` fits 15 characters) and ``links`` (a list of
  ``{endpoints, class?, rate?, queue?, delay?, loss?}``; ``endpoints`` is
  ``[h0, l0]`` or the full form ``["h0:h0-eth0", "l0:l0-eth1"]``; ``class``
  defaults to ``host`` when an endpoint is a host, else ``fabric``; the other
  keys override the class for that link).

Scenario file
-------------
``name``?, ``description``?, ``topology`` (path, relative to the scenario's
directory first, then the current directory), ``transports`` (non-empty,
unique, from ``mrc rc tcp``, or ``rc-x<N>``: RC with N QPs per connection, 1 <= N <= 64, or
``rc-dcqcn``/``rc-dcqcn-x<N>``: the same with DCQCN, :func:`parse_transport`), ``seed`` (int >= 0), ``timeout`` (duration),
``reconverge_after``? (duration), ``trials``? (int >= 1: seeds seed, seed+1, ..., each on
fresh fabrics), ``agent_processes``? (int 1..256: that many host runtimes serve every agent,
each on one loop, :mod:`agents.runtime`; ``per-host``: one process per agent; absent: one
runtime per core), ``agent_realtime``? (bool, default false: the agents' processes run at
SCHED_RR priority 1, ahead of every normal task), ``workload`` (``collective``: all_reduce, all_gather, reduce_scatter,
all_to_all or permutation; ``hosts: all`` or a list of >= 2 hosts; ``order``?:
listed (default), random (seeded) or rail; ``min_bytes``, ``max_bytes``,
``factor`` (int >= 2), ``iterations`` (>= 1), ``warmup`` (>= 0), ``evs``? (at most
one EV per path) or ``evs_per_qp``? (exactly that many, reusing paths), ``mtu``? (the agents' IPv6
MTU) or ``payload``? (a size: payload bytes per mrc/rc data packet, a multiple of 4, >= 256, whose
MTU, payload + IPv6/UDP + MRC headers, fits the fabric's smallest link MTU; default 4096, RoCEv2's
largest path MTU, capped by the fabric; kernel tcp is unaffected: :func:`testbed.spec.jobs.job_mtu`)) and ``timeline``? (a list; each item has exactly one trigger, ``at:
<duration>`` or ``at_iteration: N`` with optional ``after: <duration>``, and
exactly one action: ``link_down: LINK``, ``link_up: LINK``, ``flap: {link,
period, count}``, ``loss: {link, percent, duration?}``, ``rate: {link, rate,
duration?}``, ``blackhole: {link, duration?}``). LINK is a link name
(``a0_0-c0_0``, either direction), a selector ``random <role>-<role>``,
resolved with ``random.Random(seed)`` in timeline order at load time, or a flow
target ``{crossed_by: "rc 3->4" | [rc, tcp], hop?: core-aggregation | unrepaired}``
(``3->4`` a sender and receiver of the collective)
(:mod:`testbed.faults.targets`), checked here and resolved by the runner on the fabric.

Bounds
------
Every value is checked against what the kernel and this machine accept, by key
and line: rates <= 10Tbit (:mod:`testbed.model.units`), ``queue`` a u32, ``delay``
<= 4294s (netem's u32 microseconds), durations <= 24h, ``plane`` <= 65535 (16
bits of the address), interface names <= 15 bytes of UTF-8, workload sizes
whole float32 elements and <= 1GiB, ``flap`` count <= 10,000 and period >=
10ms, at most 1,000 timeline events. A scenario ``name`` (default: the file
stem) names its run directory, so it is 1-64 of ``[A-Za-z0-9._-]`` without
``..``. A fabric whose estimated memory (:func:`testbed.model.topology.footprint`)
exceeds 75% of this machine's is refused from its counts, before it is built;
explicit fabrics must let every pair of hosts meet on a plane within 5
switches (an EV's 6 uSIDs). Suspicious but valid timelines give
:attr:`Scenario.warnings` (see :func:`timeline_warnings`).
"""

from __future__ import annotations

import os
from pathlib import Path

from yaml.nodes import MappingNode

from agents.protocol import TRANSPORTS

from testbed.model.kernel import KernelFeatures
from testbed.model.topology import Topology
from testbed.spec.yamlread import Problem, Reader, SpecError
from testbed.spec.common import (ACTIONS, COLLECTIVES, MAX_REFERRED_PROBLEMS, ORDERS, SCENARIO_KEYS, TransportName,
                                 parse_transport, transport_variant)
from testbed.spec.model import Scenario, TimelineEvent, WorkloadSpec
from testbed.spec.scenfile import load_scenario
from testbed.spec.timelinefile import timeline_warnings
from testbed.spec.topofile import load_topology

__all__ = ["Problem", "SpecError", "Scenario", "WorkloadSpec", "TimelineEvent", "load_topology",
           "load_scenario", "load_file", "is_scenario", "timeline_warnings", "TRANSPORTS", "ACTIONS",
           "COLLECTIVES", "ORDERS", "transport_variant", "parse_transport", "TransportName",
           "MAX_REFERRED_PROBLEMS", "Path"]

# -- either -------------------------------------------------------------------

def is_scenario(path: str | os.PathLike) -> bool:
    """True if the file's top-level mapping has a scenario key (transports, timeline, workload)."""
    root = Reader(str(path)).compose(Path(path))
    return isinstance(root, MappingNode) and any(k.value in SCENARIO_KEYS for k, _ in root.value)


def load_file(path: str | os.PathLike, *, features: KernelFeatures) -> Topology | Scenario:
    """Load a topology or a scenario, told apart by content (:func:`is_scenario`). Raises SpecError."""
    loader = load_scenario if is_scenario(path) else load_topology
    return loader(path, features=features)
