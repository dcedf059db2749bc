"""The keys of every mapping of a scenario and a topology file: the one list of them.

Each loader reads its mappings with ``Reader.mapping(node, path, *SCENARIO[pattern])`` (or
:data:`TOPOLOGY`), so what the validator accepts is exactly what these tables say. A pattern
is a key path with ``[]`` for any list index and ``<name>`` for a key the user chooses
(``link_classes.<class>``, ``nodes.<node>``); ``<flow target>`` is the mapping form of a
timeline LINK (:mod:`testbed.faults.targets`). The reference pages ``docs/scenarios.md`` and
``docs/topologies.md`` document every key, held by ``tests/unit/test_docs.py``.

:data:`SCENARIO_DEFAULTS` are the values a scenario's optional keys take when absent (the
timeout's is computed: :func:`testbed.spec.scenfile.derived_timeout_s`).
"""

from __future__ import annotations

from testbed.spec.common import _ACTION_KEYS, _CLASS_KEYS, _KIND_KEYS, _WORKLOAD_REQUIRED, ACTIONS, COMMAND_ONLY

#: (required keys, optional keys) of one mapping.
Keys = tuple[tuple[str, ...], tuple[str, ...]]

WORKLOAD_OPTIONAL = ("collective", "min_bytes", "max_bytes", "command", "steps", "env", "factor", "iterations",
                     "warmup", "evs", "evs_per_qp", "ev_paths", "mtu", "payload", "order")
FLOW_TARGET = "<flow target>"

SCENARIO: dict[str, Keys] = {
    "": (("topology", "transports"),
         ("name", "description", "seed", "timeout", "reconverge_after", "timeline", "trials", "workload", "jobs",
          "agent_processes", "agent_realtime", "engine", "controller", "qp", "sweep")),
    "qp": ((), ("loss_inference", "ecn", "rto_base_rtts", "nscc_delay_filter", "ev_select")),
    "controller": (("policy",), ("restart",)),
    "workload": (tuple(_WORKLOAD_REQUIRED), WORKLOAD_OPTIONAL),
    "jobs[]": (tuple(_WORKLOAD_REQUIRED), ("name", *(k for k in WORKLOAD_OPTIONAL if k not in COMMAND_ONLY))),
    "timeline[]": ((), ("at", "at_iteration", "after", *ACTIONS)),
    **{f"timeline[].{action}": (tuple(req), tuple(opt)) for action, (req, opt) in _ACTION_KEYS.items()},
    FLOW_TARGET: (("crossed_by",), ("hop", "repairable")),
}
"""Scenario file mappings. ``sweep`` maps key paths of the file itself (:mod:`testbed.spec.overrides`)."""

_SWITCH = {"ecn": (("threshold",), ()), "trim": (("threshold",), ("header_queue",))}

TOPOLOGY: dict[str, Keys] = {
    "": (("kind", "link_classes"), ("name",)),
    **{f"<kind {kind}>": (tuple(req), tuple(opt)) for kind, (req, opt) in _KIND_KEYS.items()},
    "link_classes.<class>": (("rate",), tuple(_CLASS_KEYS[1:])),
    **{f"link_classes.<class>.{k}": v for k, v in _SWITCH.items()},
    "nodes.<node>": (("role",), ("plane", "pod")),
    "links[]": (("endpoints",), ("class", *_CLASS_KEYS)),
    **{f"links[].{k}": v for k, v in _SWITCH.items()},
}
"""Topology file mappings. ``<kind K>`` are the top-level keys that ``kind: K`` adds."""

SCENARIO_DEFAULTS: dict[str, object] = {"seed": 1, "workload.factor": 2, "workload.iterations": 5,
                                         "workload.warmup": 1, "engine": "native"}
"""Values of absent scenario keys (a job of ``jobs:`` takes the workload's); ``timeout`` is derived."""

#: The timeout when absent: a fixed allowance for start-up and teardown plus this many times the
#: time the workload's bytes take at the host link's rate (:func:`testbed.spec.scenfile.derived_timeout_s`).
TIMEOUT_BASE_S = 30.0
TIMEOUT_MARGIN = 4.0


def key_paths(table: dict[str, Keys]) -> set[str]:
    """Every accepted key as a full pattern path: ``workload.min_bytes``, ``timeline[].loss.percent``,
    ``link_classes.<class>.ecn.threshold``; a ``<kind K>`` key is top-level (``k``)."""
    return {f"{pattern}.{key}" if pattern and not pattern.startswith("<kind ") else key
            for pattern, (req, opt) in table.items() for key in req + opt}
