"""Constants and small helpers shared by the topology and scenario loaders."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace

from yaml.nodes import MappingNode, Node


from testbed.model.units import show
from testbed.spec.yamlread import Problem, Reader


KINDS = ("fat-tree", "leaf-spine", "explicit")
_KIND_KEYS = {"fat-tree": (["k"], []), "leaf-spine": (["leaves", "spines", "hosts_per_leaf"], ["planes"]),
              "explicit": (["nodes", "links"], [])}
_CLASS_KEYS = ["rate", "queue", "delay", "loss", "mtu", "ecn", "trim", "control_priority"]
#: Default queue of trimmed headers (packets) when ``trim`` gives no ``header_queue``.
TRIM_HEADER_QUEUE_PKTS = 64
#: Host NIC uSIDs 0x1000.. are limited to 0x8000 NICs (topology.py's plan).
MAX_HOST_NICS = 0x8000
ACTIONS = ("link_down", "link_up", "switch_down", "switch_up", "plane_down", "plane_up", "flap", "loss", "rate",
           "blackhole", "ev_deny", "ev_allow", "ev_replace")
SWITCH_ACTIONS = ("switch_down", "switch_up")
"""Timeline actions on every link of one switch at once (a switch restart)."""
PLANE_ACTIONS = ("plane_down", "plane_up")
"""Timeline actions on every link of one plane at once (its NICs' host links and its switch links),
resolved when the file is loaded; each link goes down or up as a ``link_down`` / ``link_up``."""
LINK_SET_ACTIONS = ("loss", "rate", "blackhole")
"""Timeline actions whose ``link`` may be a link set (``all``, ``all <role>-<role>``): the same
change on each of its links at once (the paper's random loss on every link)."""
EV_ACTIONS = ("ev_deny", "ev_allow", "ev_replace")
"""Timeline actions for the MRC controller: deny, allow or replace the EVs that cross a link."""
CONTROLLER_POLICIES = ("none", "replace")
SCENARIO_KEYS = ("transports", "timeline", "workload", "jobs")
_ACTION_KEYS = {"flap": (["link", "period", "count"], []), "loss": (["link", "percent"], ["duration", "direction"]),
                "rate": (["link", "rate"], ["duration"]), "blackhole": (["link"], ["duration"]),
                **{a: (["link"], []) for a in ("ev_deny", "ev_allow", "ev_replace")}}
_WORKLOAD_REQUIRED = ["hosts"]
#: A collective job's keys beside ``hosts`` (a command job has ``command`` instead).
COLLECTIVE_REQUIRED = ("collective", "min_bytes", "max_bytes")
#: Keys of a collective job that a command job does not take, and the other way round.
COLLECTIVE_ONLY = ("collective", "min_bytes", "max_bytes", "factor", "iterations", "warmup")
COMMAND_ONLY = ("command", "steps", "env")
#: Transports of a command job: the torch.distributed backend each runs (agents.jobs.spec.BACKENDS).
JOB_BACKENDS = {"gloo-tcp": "gloo", "mrc": "mrc"}

#: A scenario name names its run directory: no '/', no '..', nothing a shell would trip on.
SCENARIO_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: A job's name labels its flows and report rows.
JOB_NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
#: Kernel limit: a qdisc queue limit is a u32.
MAX_QUEUE_PKTS = 2**32 - 1
#: A link's one-way delay at most, s: the agents' endpoints hold a path's sum of them
#: (agents.net.udp.MAX_ROUTE_DELAY_S, 10 s); a second per link is already a unit error.
MAX_DELAY_S = 1.0
#: Workload elements are float32: sizes are whole multiples of this.
ELEMENT_BYTES = 4
#: Largest buffer per rank: every host's agent holds a few copies in memory.
MAX_WORKLOAD_BYTES = 1 << 30
MAX_ITERATIONS = 100_000
MAX_EVS = 4096
#: ``workload.collective`` values (the agents/collectives package implements them).
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permutation", "incast")
#: ``workload.order``: ``listed`` (the hosts as given, ``all`` in topology order), ``random``
#: (seeded shuffle) or ``rail`` (hosts grouped by their position under their edge switch).
ORDERS = ("listed", "random", "rail")
EV_PATHS = ("spread", "oblivious")
"""``workload.ev_paths``: how an MRC QP's EV ids map to paths (:class:`testbed.spec.model.WorkloadSpec`)."""
#: RC variants: N QPs per connection (NCCL_IB_QPS_PER_CONNECTION) ``rc-x<N>``, and RoCE's DCQCN
#: congestion control ``rc-dcqcn`` / ``rc-dcqcn-x<N>``.
RC_VARIANT_RE = re.compile(r"rc(?P<dcqcn>-dcqcn)?(?:-x(?P<qps>[1-9][0-9]?))?")
MAX_RC_QPS = 64
TRANSPORT_FORMS = "rc-x<N> for RC with N QPs per connection, rc-dcqcn[-x<N>] for RC with DCQCN"


@dataclass(frozen=True)
class TransportName:
    """A parsed transport name: ``base`` (what the agents run: one of
    :data:`agents.protocol.TRANSPORTS`), ``qps`` per connection, and ``cc``: the congestion
    control it implies (``"dcqcn"``), or None for the job's default."""

    base: str
    qps: int = 1
    cc: str | None = None
    #: a command job's torch.distributed backend (``gloo-tcp``: ``"gloo"``), None for the agents'
    backend: str | None = None


def parse_transport(name: str) -> TransportName:
    """The one parser of transport names: ``"rc-x8"`` -> ``TransportName("rc", 8)``,
    ``"rc-dcqcn-x4"`` -> ``TransportName("rc", 4, "dcqcn")``, ``"mrc"`` -> ``TransportName("mrc")``.
    Raises ValueError for a name that is neither a transport of :data:`agents.protocol.TRANSPORTS`
    nor an RC variant with 1 <= N <= :data:`MAX_RC_QPS`."""
    from agents.protocol import TRANSPORTS
    if name in TRANSPORTS:
        return TransportName(name)
    if name in JOB_BACKENDS:   # Gloo's kernel TCP between the ECMP addresses, as the tcp agents'
        return TransportName("tcp", backend=JOB_BACKENDS[name])
    m = RC_VARIANT_RE.fullmatch(name)
    if m and (m["dcqcn"] or m["qps"]) and int(m["qps"] or 1) <= MAX_RC_QPS:
        return TransportName("rc", int(m["qps"] or 1), "dcqcn" if m["dcqcn"] else None)
    raise ValueError(f"{name!r} is not a transport ({', '.join(TRANSPORTS)}, or {TRANSPORT_FORMS}, "
                     f"1 <= N <= {MAX_RC_QPS}; a command job's: {', '.join(JOB_BACKENDS)})")


def transport_variant(name: str) -> tuple[str, int]:
    """``(base transport, QPs per connection)`` of a transport name (:func:`parse_transport`):
    ``"rc-x8"`` -> ``("rc", 8)``, ``"mrc"`` -> ``("mrc", 1)``. Raises ValueError."""
    t = parse_transport(name)
    return t.base, t.qps


#: Timeline bounds: more events than this is a generated file gone wrong; a flap
#: toggles a link through tc/ip (~ms each), so a period below 10ms is not a flap.
MAX_TIMELINE_EVENTS = 1000
MAX_FLAP_COUNT = 10_000
MIN_FLAP_PERIOD_S = 0.01
#: Fabric size bounds checked before anything is built (a k beyond this cannot fit
#: MAX_HOST_NICS anyway), and the share of this machine's memory a fabric may use.
MAX_COUNT = 4096
MEMORY_SHARE = 0.75
#: Problems shown from a scenario's topology file (a wrong file gives one per line).
MAX_REFERRED_PROBLEMS = 20


def _sorted(r: Reader) -> list[Problem]:
    """This file's problems by line, then those of files it refers to."""
    return sorted(r.problems, key=lambda p: (p.file != r.file, p.file, p.line))


def _not_a_mapping(r: Reader, root: Node, taken_for: str) -> bool:
    """Record that the document is not a mapping, saying what it was taken for; True if so."""
    if isinstance(root, MappingNode):
        return False
    r.error(root, "", f"expected a mapping ({taken_for} document), got {r.describe(root)}")
    return True




def _did_you_mean(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1)
    return f" (did you mean {show(close[0])}?)" if close else ""


def _explain_missing(r: Reader, why: str) -> None:
    """Append ``(why)`` to the document's "missing required key" problems."""
    r.problems[:] = [replace(p, message=f"{p.message} ({why})")
                     if p.file == r.file and not p.key_path and p.message.startswith("missing required key")
                     else p for p in r.problems]
