"""The run directory's file names and modes (the record schemas: :mod:`testbed.rundir.schemas`).

Layout (docs/architecture.md, "The run directory contract")::

    runs/<scenario>-<YYYYmmdd-HHMMSS>[-N]/
        manifest.json            versions, kernel, seed, topology hash, resolved spec,
                                 per-transport status (rewritten atomically as the run goes)
        <transport>/
            events.jsonl         the run's journal (below)
            samples.jsonl        agent flow samples
            links.jsonl          kernel link counters
            cpu.jsonl            host CPU use
            sched.jsonl          the agent processes' scheduler statistics
            jobs/rank<r>.json    the agents' job specs (:mod:`testbed.spec.jobs`)
            samples/rank<r>.jsonl  while agents run: each agent's own samples, merged
                                 into samples.jsonl at the end (:func:`merge_samples`)
            agents/rank<r>.log   each agent's stdout and stderr

:func:`testbed.report.render` adds summary.json, CSV files and plots at the top level.
"""

from __future__ import annotations

import re

MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
SAMPLES = "samples.jsonl"
SAMPLES_DIR = "samples"
LINKS = "links.jsonl"
CPU = "cpu.jsonl"
SCHED = "sched.jsonl"
JOBS_DIR = "jobs"
AGENT_LOGS_DIR = "agents"
TRANSPORT_FILES = (EVENTS, SAMPLES, LINKS, CPU, SCHED)
"""The JSONL files of every transport's directory."""
PATHS = "paths.json"
SUMMARY = "summary.json"
DIR_MODE = 0o700            # run directories: other local users kept out
FILE_MODE = 0o600           # the files in them, the ledger, the control socket
SAFE_NAME = r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}"
"""A transport name: it names a subdirectory, so no separator, no ``..``."""



def safe_name(v: str) -> bool:
    """True if ``v`` is a :data:`SAFE_NAME` (and not ``.`` or ``..``)."""
    return re.fullmatch(SAFE_NAME, v) is not None and v not in (".", "..")
