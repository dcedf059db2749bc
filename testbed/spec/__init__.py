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
