"""The :class:`~testbed.fabric.backend.FabricBackend` operations that run in a namespace of this
machine, shared by the local fabric and the fabric of shards built by this process."""

from __future__ import annotations

import dataclasses
from typing import Any

from testbed.fabric import nft, routing, shaping, verify
from testbed.fabric.counters import LinkCounters
from testbed.fabric.netlink import Batch
from testbed.fabric.paths import send_probes
from testbed.model.topology import Link


def set_port_rate(fabric, lk: Link, node: str, rate_bps: int, nsfd: int) -> None:
    """Set the HTB rate of ``node``'s end of ``lk`` to ``rate_bps`` (ceil and burst follow,
    :func:`testbed.fabric.shaping.plan`) in the namespace ``nsfd``, and the virtual queues of its
    switch program (if any) to drain at that rate. Raises NetlinkBatchError if the kernel
    refuses, OSError if the namespace is gone."""
    tc = shaping.plan(dataclasses.replace(lk.params, rate_bps=rate_bps), have_netem=fabric.have_netem,
                      header_queue_pkts=lk.params.header_class_pkts(shaping.CONTROL_QUEUE_PKTS))
    batch = Batch(f"{lk.name}: rate {rate_bps} bit/s on {node}")
    shaping.compile_into(batch, routing.port_ifindex(fabric.topo, node, lk), tc, replace=True)
    batch.send(nsfd)
    handle = fabric.switch_handles.get((lk.name, node))
    if handle is not None:   # the switch program's virtual queues drain at the link's rate too
        handle.program.reconfigure(dataclasses.replace(handle.program.config, rate_bps=rate_bps))


class LocalOps:
    """Mixin: ``run_nft``, ``set_htb``, ``link_rate_bps``, ``link_counters``,
    ``send_trace_probes``, ``probe`` and ``start_agents`` for a fabric whose namespaces this
    process holds (it needs ``topo``, ``have_netem``, ``nsfd(node)``, ``inside(node)``,
    ``rtnl_socket(node)``, ``switch_handles`` and a ``_rates_bps`` dict: link -> rate set here,
    where not the topology's)."""

    def run_nft(self, node: str, cmds: list[dict]) -> tuple[int, Any, str]:
        return nft.runner()(self.nsfd(node), cmds)

    def set_htb(self, link: str, node: str, rate_bps: int) -> None:
        lk = self.topo.link_by_name[link]
        set_port_rate(self, lk, node, rate_bps, self.nsfd(node))
        if rate_bps == lk.params.rate_bps:
            self._rates_bps.pop(link, None)
        else:
            self._rates_bps[link] = rate_bps

    def link_rate_bps(self, link: Link) -> int:
        return self._rates_bps.get(link.name, link.params.rate_bps)

    def link_counters(self) -> LinkCounters:
        return LinkCounters(self)

    def send_trace_probes(self, host: str, t, probes: int) -> None:
        send_probes(self, host, t, probes)

    def probe(self, pairs=None, **kwargs):
        return verify.probe(self, pairs, **kwargs)

    def start_agents(self, jobs: list[dict], processes: int | None = 0):
        return None
