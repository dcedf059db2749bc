"""A run's manifest before any transport ran: the scenario, versions, kernel features, seeds."""

from __future__ import annotations

import dataclasses
import hashlib
import platform
import sys
import time
from pathlib import Path

from testbed import __version__
from testbed.fabric.kernel import features
from testbed.spec import Scenario
from testbed.rundir.upgrade import FORMAT
from testbed.spec.jobs import host_bandwidth_bps, host_link_rate_bps, job_payload_bytes
from testbed.spec.regime import scenario_regime


def versions() -> dict:
    """Versions of the testbed, Python, the kernel and the libraries a run depends on."""
    out = {"testbed": __version__, "python": platform.python_version(), "kernel": platform.release()}
    for mod in ("pyroute2", "numpy", "rich", "yaml"):
        try:
            out[mod] = getattr(__import__(mod), "__version__", "?")
        except ImportError:
            pass
    return out


def base_manifest(scenario: Scenario) -> dict:
    """The manifest before any transport ran: ``transports`` (run so far, in order),
    ``planned_transports``, ``status`` ({transport: {"status", "reason"}}) fill in as it goes;
    ``kernel_fallbacks``: :meth:`KernelFeatures.fallbacks` (what this kernel changed).
    Its keys are typed in :data:`MANIFEST_FIELDS`."""
    topo_bytes = Path(scenario.topology_path).read_bytes() if Path(scenario.topology_path).is_file() else b""
    hosts = scenario.workload.hosts
    kernel = features()
    return {
        "format": FORMAT, "scenario": scenario.to_dict(), "transports": [], "planned_transports": list(scenario.transports),
        "world_size": len(hosts), "host_link_rate_bps": host_link_rate_bps(scenario),
        "host_bandwidth_bps": host_bandwidth_bps(scenario),
        "host_nics": min(len(scenario.topology.nics[h]) for h in hosts), "seed": scenario.seed,
        "payload_bytes": job_payload_bytes(scenario), "engines": scenario.engines(),
        "regime": scenario_regime(scenario),
        "workload": scenario.to_dict()["workload"],
        "topology_sha256": hashlib.sha256(topo_bytes).hexdigest(),
        "versions": versions(), "kernel_features": dataclasses.asdict(kernel),
        # what the fabric did without (one line each, what it changes): the report prints them
        "kernel_fallbacks": list(kernel.fallbacks()), "started_at": time.time(),
        "status": {}, "argv": sys.argv,
    }
