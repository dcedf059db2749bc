"""A scenario's regime: the inputs of :func:`testbed.model.regime.regime` read from the job specs
the agents would get (:func:`testbed.spec.jobs.build_job_specs`), so the numbers describe what
runs, not a second copy of its formulas.

* rate: an MRC QP's line rate (``cc_params.rate_bps``: the host's NIC bandwidth over every plane,
  :func:`testbed.spec.jobs.host_bandwidth_bps`; one NIC on one plane);
* base RTT: ``cc_params.base_rtt_s`` (:func:`testbed.spec.jobs.base_rtt_s` of the longest path);
* frame: a data packet on the wire (the job's MTU + the Ethernet header); payload per packet;
* EVs per QP: the fewest and the most EVs of the MRC QPs of every rank (a pair under one edge
  switch has one path, so with ``evs:`` its QP has one EV); None when the scenario runs no mrc;
* queue: the smallest link queue of the fabric (``queue_pkts``), packets;
* RTO: the QP ``timeout`` as a time (:func:`agents.mrc.rto.mrc_timeout_s`);
* reconvergence: ``reconverge_after`` (None without it);
* message: the first job's largest size (None for a command job: its messages are its own); ranks: its hosts; planes: the fabric's;
* sample: the agents' sample interval (``sample_interval_s``), the KPIs' resolution.
"""

from __future__ import annotations

from dataclasses import dataclass

from yaml.nodes import SequenceNode

from agents.mrc.packet import mtu_for_payload
from agents.mrc.rto import mrc_timeout_s

from testbed.model import units
from testbed.model.regime import Inputs, Span, regime, to_json
from testbed.model.units import UnitError, show
from testbed.spec.common import parse_transport
from testbed.spec.jobs import ETHERNET_HEADER_BYTES, build_job_specs, job_payload_bytes
from testbed.spec.model import Scenario
from testbed.spec.yamlread import Reader, join, line_of, unknown_key


def scenario_inputs(scenario: Scenario) -> Inputs:
    """The regime's inputs of ``scenario`` (module docstring). Raises ValueError where the job
    specs cannot be built (as the run would)."""
    jobs = build_job_specs(scenario, "mrc", run_id="regime", control_socket="-")
    job = jobs[0]
    evs = [len(peer.evs) for j in jobs for peer in j.send_to]
    mrc = any(parse_transport(t).base == "mrc" for t in scenario.transports)
    topo, wl = scenario.topology, scenario.workload
    cc = job.qp["cc_params"]
    return Inputs(
        rate_bps=cc["rate_bps"], base_rtt_s=cc["base_rtt_s"], frame_bytes=job.mtu + ETHERNET_HEADER_BYTES,
        payload_bytes=job_payload_bytes(scenario), evs_per_qp=(min(evs), max(evs)) if mrc and evs else None,
        queue_pkts=min(link.params.queue_pkts for link in topo.links), rto_s=mrc_timeout_s(job.qp["timeout"]),
        reconverge_s=scenario.reconverge_after_s, message_bytes=None if wl.is_command else max(wl.sizes_bytes), ranks=len(wl.hosts),
        planes=len(topo.planes), sample_s=job.sample_interval_s)


def scenario_regime(scenario: Scenario) -> dict:
    """:func:`testbed.model.regime.regime` of :func:`scenario_inputs`, as JSON (a run's manifest
    and summary keep it as ``regime``)."""
    return to_json(regime(scenario_inputs(scenario)))


# -- the paper's regime, as the claims file gives it ---------------------------------------------
def _count(value: object) -> float:
    """A positive plain number (a count or a ratio). Raises UnitError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise UnitError(f"{show(value)} is not a positive number")
    return float(value)


PAPER_KEYS = {
    "rate": ("rate_bps", units.parse_rate, "a NIC's line rate (e.g. 800Gbit)"),
    "base_rtt": ("base_rtt_s", units.parse_duration, "the unloaded RTT (e.g. 8us)"),
    "payload": ("payload_bytes", units.parse_size, "payload bytes per data packet (e.g. 4096)"),
    "evs_per_qp": ("evs_per_qp", _count, "EVs per QP"),
    "buffer_bdps": ("buffer_bdps", _count, "a switch port's buffer in BDPs"),
    "rto": ("rto_s", units.parse_duration, "the QP's retransmission timeout (e.g. 262us)"),
    "detect": ("detect_s", units.parse_duration, "time to detect a failed path"),
    "reconverge": ("reconverge_s", units.parse_duration, "routing's reconvergence time"),
    "message": ("message_bytes", units.parse_size, "the collective's message size (e.g. 1GiB)"),
    "ranks": ("ranks", _count, "ranks (GPUs) of the job"),
    "planes": ("planes", _count, "network planes"),
}
"""The keys of a claims file's ``regime:`` block: key -> (:class:`Inputs` field, parser, meaning)."""


@dataclass(frozen=True)
class PaperValue:
    """One value of the paper's regime: ``span`` in the unit of its :class:`Inputs` field, the
    ``source`` (a section or figure of the paper, or ``assumption: ...`` where it gives none) and
    the claims file's ``line``."""

    key: str
    span: Span
    source: str
    line: int


def read_paper_regime(r: Reader, node, where: str) -> dict[str, PaperValue]:
    """A ``regime:`` block: ``KEY: {value: V, source: TEXT}`` for keys of :data:`PAPER_KEYS`, ``V``
    one value or ``[low, high]`` (low <= high, both > 0). Every problem goes to ``r`` at its line."""
    out: dict[str, PaperValue] = {}
    for key, key_node, value_node in r.entries(node, where) or []:
        path = join(where, key)
        if key not in PAPER_KEYS:
            r.error(key_node, path, unknown_key(key, list(PAPER_KEYS)))
            continue
        m = r.mapping(value_node, path, ["value", "source"])
        if m is None or len(m) != 2:
            continue
        source = r.text(m["source"], join(path, "source"))
        if source is not None and not source.strip():
            r.error(m["source"], join(path, "source"), "must not be empty: a section or figure of the paper, "
                                                       "or 'assumption: ...' where it gives none")
            source = None
        span = _paper_span(r, m["value"], join(path, "value"), PAPER_KEYS[key])
        if span is not None and source is not None:
            out[key] = PaperValue(key, span, source.strip(), line_of(key_node))
    return out


def _paper_span(r: Reader, node, path: str, spec: tuple) -> Span | None:
    _, parse, meaning = spec
    if isinstance(node, SequenceNode):
        items = node.value
        if len(items) != 2:
            r.error(node, path, f"a range is [low, high], got {len(items)} items")
            return None
        lo, hi = (r.unit(n, path, parse) for n in items)
        if lo is None or hi is None:
            return None
        if not 0 < lo <= hi:
            r.error(node, path, f"a range needs 0 < low <= high, got [{items[0].value}, {items[1].value}]")
            return None
        return Span(float(lo), float(hi))
    value = r.unit(node, path, parse)
    if value is None:
        return None
    if not value > 0:
        r.error(node, path, f"{meaning} must be > 0, got {show(r.value(node))}")
        return None
    return Span(float(value), float(value))


def paper_inputs(values: dict[str, PaperValue]) -> Inputs:
    """The paper's :class:`Inputs` from its regime values; the paper's data frame is its payload
    with this testbed's per-packet headers (:func:`agents.mrc.packet.mtu_for_payload` + Ethernet),
    so both sides count BDPs in the same frames."""
    kw = {PAPER_KEYS[k][0]: v.span for k, v in values.items()}
    if "payload" in values:
        p = values["payload"].span
        kw["frame_bytes"] = Span(mtu_for_payload(int(p.lo)) + ETHERNET_HEADER_BYTES,
                                 mtu_for_payload(int(p.hi)) + ETHERNET_HEADER_BYTES)
    return Inputs(**kw)


def paper_regime(values: dict[str, PaperValue]) -> dict:
    """The paper's regime numbers as JSON (:func:`testbed.model.regime.to_json`)."""
    return to_json(regime(paper_inputs(values)))
