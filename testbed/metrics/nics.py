"""The NIC bandwidth a transport's jobs actually use: busbw is compared with it
(``busbw_fraction_of_nics``) beside the host's whole NIC bandwidth (``busbw_fraction_of_host``).

On a multi-plane fabric a host has one NIC per plane. rc, rc-x16 and tcp send and receive on
the first NIC only (:func:`testbed.spec.jobs.build_job_specs`: their EVs are ECMP entropy on
``nics[host][0]``), MRC on the planes of its EVs (every plane with ``evs`` >= planes; one with a
single EV). Normalised by the host's four NICs, rc could reach at most a quarter on four
planes, so a rule comparing it with mrc would measure the plane count, not ECMP collisions.
"""

from __future__ import annotations


def planes_used(job: dict) -> set[int]:
    """Planes of every EV of one job spec dict (``send_to`` and ``recv_from`` peers' ``evs``;
    an EV without ``plane`` is on plane 0, :class:`agents.jobspec.EVSpec`)."""
    return {int(ev.get("plane") or 0) for side in ("send_to", "recv_from")
            for peer in job.get(side) or () for ev in peer.get("evs") or ()}


def nic_bandwidth_bps(jobs: list[dict], topo=None, link_rate_bps: float | None = None) -> float | None:
    """The slowest host's bandwidth over the NICs its job uses, bits/s: per job spec, the sum of
    the host-link rates of its host's NICs on :func:`planes_used` (``topo``: the run's
    :class:`testbed.model.topology.Topology`; without it, ``link_rate_bps`` (one NIC's rate,
    the manifest's ``host_link_rate_bps``) times the number of planes). None without jobs, or
    without either source of rates."""
    rates = []
    for job in jobs:
        planes = planes_used(job) or {0}
        nics = topo.nics.get(job.get("host")) if topo is not None else None
        if nics:
            rates.append(sum(topo.link_by_name[n.link].params.rate_bps for n in nics if n.plane in planes))
        elif link_rate_bps:
            rates.append(link_rate_bps * len(planes))
    return float(min(rates)) if rates else None
