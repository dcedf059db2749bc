"""Command jobs: a user's command (a torchrun script) run on each host of the fabric.

* :mod:`agents.jobs.spec` — the launcher spec the runner writes per rank;
* :mod:`agents.jobs.launcher` — one rank's launcher: starts the command with torchrun's
  environment, relays its step reports, reports its exit (``python -m agents.jobs``);
* :mod:`agents.jobs.reports` — the report pipe's lines, sans-I/O;
* ``agents/jobs/lib/testbed_job.py`` — what a script imports to report its steps (stdlib only).

No testbed imports here: the launcher runs in the host's namespace beside the agents.
"""
