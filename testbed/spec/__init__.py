"""YAML spec files -> validated frozen dataclasses (topologies and scenarios).

Strict, in the containerlab way: raw YAML -> strict parse (unknown keys
rejected) -> validate, collecting *every* problem -> resolved objects. Each
problem names file, line and key path::

    topologies/x.yaml:12: links[3].rate: '10 Mbps' is not a rate (examples: 10Mbit, 1Gbit)

Loaders raise :class:`SpecError` (all problems) and have no side effects;
units are parsed here (:mod:`testbed.model.units`), nothing downstream sees strings.

The keys of both files are listed once, in :mod:`testbed.spec.schema` (the tables the loaders
read their mappings through), and documented on ``docs/scenarios.md`` and ``docs/topologies.md``
(with the bounds every value is checked against: rates, queues, durations, sizes, names, the
fabric's memory estimate); ``tests/unit/test_docs.py`` holds the pages to the tables.
Suspicious but valid timelines give :attr:`Scenario.warnings` (see :func:`timeline_warnings`).
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
           "MAX_REFERRED_PROBLEMS", "Path", "key_line", "servers_problem"]

# -- either -------------------------------------------------------------------

def is_scenario(path: str | os.PathLike) -> bool:
    """True if the file's top-level mapping has a scenario key (transports, timeline, workload)."""
    root = Reader(str(path)).compose(Path(path))
    return isinstance(root, MappingNode) and any(k.value in SCENARIO_KEYS for k, _ in root.value)


def key_line(path: str | os.PathLike, key_path: str) -> int:
    """The line of a dotted ``key_path`` (``controller.policy``) in the file, else of its nearest
    present ancestor; 0 when not even the first key is there (e.g. set by ``--set``)."""
    node, line = Reader(str(path)).compose(Path(path)), 0
    for key in key_path.split("."):
        if not isinstance(node, MappingNode):
            break
        found = next(((k, v) for k, v in node.value if getattr(k, "value", None) == key), None)
        if found is None:
            break
        line, node = found[0].start_mark.line + 1, found[1]
    return line


def servers_problem(scenario: Scenario, path: str | os.PathLike, transports) -> Problem | None:
    """Why ``scenario`` cannot run on a fabric over servers (``--servers``), or None. The MRC
    controller runs on one machine only: a controller on an mrc run there would be silently
    missing, its ``replace`` policy and ``ev_*`` actions ignored, so it is refused up front."""
    if scenario.workload.is_command:
        return Problem(str(path), key_line(path, "workload.command"), "workload.command",
                       "a command job runs on one machine's fabric only, not on --servers (its launchers "
                       "start in this machine's namespaces)")
    if scenario.controller is None or not any(transport_variant(t)[0] == "mrc" for t in transports):
        return None
    return Problem(str(path), key_line(path, "controller.policy"), "controller.policy",
                   f"the MRC controller (policy {scenario.controller}) does not run on --servers runs yet; "
                   "remove the controller key (and the ev_* timeline actions) or run on one machine")


def load_file(path: str | os.PathLike, *, features: KernelFeatures) -> Topology | Scenario:
    """Load a topology or a scenario, told apart by content (:func:`is_scenario`). Raises SpecError."""
    loader = load_scenario if is_scenario(path) else load_topology
    return loader(path, features=features)
