"""``python -m agents --job JOB.json``: one rank of a ring all-reduce, run by the testbed runner.

Started by the runner inside a host's network namespace. Contract:

Job spec (JSON object; unknown keys rejected, every problem reported)::

    {"run_id": str, "rank": int, "world": [host, ...]  (ring order, >= 2, distinct),
     "host": str (== world[rank]), "transport": "mrc" | "rc" | "tcp" (protocol.TRANSPORTS),
     "control_socket": "/abs/path.sock", "seed": int,
     "sizes": [bytes, ...]  (each >= 4 * len(world); rounded down to float32 elements),
     "iterations": int >= 1, "warmup": int >= 0,
     "sample_interval_s": 0.01, "port": 4791 (this agent's UDP port, protocol.UDP_PORT), "mtu": 1500,
     "bind_addr": this host's ECMP address, "tcp_port": 5201 (this agent's TCP port, protocol.TCP_PORT),
     "next": PEER, "prev": PEER,
     "qp": {"mpr", "mpr_dest", "max_wimm", "max_wimm_dest", "timeout", "retry_linear",
            "retry_exp" (mrc.h attributes), "ev_min_active", and QPConfig emulation
            parameters "time_scale", "min_rto_s", "cc", "cc_params", "sack_every",
            "ack_delay_s", "reorder_threshold", "probe_interval_s", "probe_timeout_s",
            "probe_successes", "skip_timeout_s", "max_burst"},
     "connect_timeout_s": 10.0, "linger_s": 2.0}
    PEER = {"host", "ecmp_addr", "evs": [{"ev_id", "address", "links": [...],
            "src_port" (optional: ECMP entropy as UDP source port)}],
            "port" (optional, default: ours), "tcp_port" (optional, default: ours),
            "src_port" (optional, ``next`` only: the TCP source port to connect from)}

``next.evs``: the paths to ``next`` (uSID addresses ending at next); the
requester sprays over them. ``prev.evs``: the reverse paths (ending at
prev) with the same EV ids prev uses towards us; our SACKs and probe
responses for prev's QP leave on them. rc uses EV 0 (the first) only;
tcp ignores EVs and connects to ``next.ecmp_addr``.

Control: a Unix stream socket at ``control_socket``, newline-delimited JSON; the
messages (``ready``, ``start``, ``iteration``, ``sample``, ``event``, ``done``,
``failed``, ``stop``) and their framing are defined once in :mod:`agents.protocol`.

After ``done`` the agent lingers (still acknowledging the previous rank)
until ``stop``, EOF on the control socket, or ``linger_s``.

Exit status: 0 done; 1 failed (peer unreachable, QP ERR = "job crash",
control socket lost); 2 bad job spec or arguments; 3 stopped before done.
Wrong results are reported (``wrong`` counts), not fatal. Every non-zero
exit prints one clear line on stderr.
"""
from __future__ import annotations

import argparse
import logging
import sys

from .jobspec import JobSpecError, load_job


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents",
                                     description="ring all-reduce agent (one rank)")
    parser.add_argument("--job", required=True, help="path of the job spec JSON")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s agent %(levelname)s %(name)s: %(message)s")
    try:
        spec = load_job(args.job)
    except JobSpecError as exc:
        print(f"agent: error: {exc}", file=sys.stderr)
        return 2
    from .agent import Agent
    status = Agent(spec).run()
    if status == 1:
        print(f"agent: error: rank {spec.rank} ({spec.host}) failed; see the log above",
              file=sys.stderr)
    elif status == 3:
        print(f"agent: rank {spec.rank} ({spec.host}) stopped by the runner before done",
              file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
