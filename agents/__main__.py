"""``python -m agents --job JOB.json``: one rank of one collective job, run by the testbed runner.

Started by the runner inside a host's network namespace. With several ``--job`` (each with
its ``--netns``), one process serves them all on one loop, each agent's sockets in its own
host's namespace: a host runtime (:mod:`agents.runtime`; scenario key ``agent_processes``).
Contract:

Job spec: a JSON object whose keys are the fields of :class:`agents.jobspec.JobSpec` (peers:
:class:`agents.jobspec.PeerSpec`, EVs: :class:`agents.jobspec.EVSpec`; the ``qp`` keys:
:data:`agents.jobspec.QP_ATTR_KEYS`, :data:`~agents.jobspec.QP_CONFIG_KEYS`,
:data:`~agents.jobspec.QP_CHANNEL_KEYS`), read by :func:`agents.jobspec.parse_job` (unknown keys
rejected, every problem reported with its key path) and written by the runner with
:meth:`agents.jobspec.JobSpec.to_dict`.

The ranks of ``send_to`` and ``recv_from`` are exactly
``agents.collectives.peers(collective, rank, len(world), targets)``, in that
order (ring collectives: the next and the previous rank; all_to_all: every
other rank both ways; permutation: targets[rank] and the rank that targets us).

EVs per transport:

* mrc: ``send_to[i].evs`` are the paths to that peer (uSID addresses ending
  at it; a path may repeat, EVs > paths); the QP sprays over them.
  ``recv_from[i].evs`` are the reverse paths (ending at that peer) with the
  same EV ids it uses towards us; our SACKs and probe responses for its QP
  leave on them.
* rc with ``qps`` N: every peer has exactly N EVs, ev_id 0..N-1; QP q of a
  connection uses EV q only (``send_to``: the peer's ECMP address with QP
  q's own ``src_port``; ``recv_from``: the peer's QP q's EV towards us). A
  message is striped over the N QPs (agents.channels.qp).
* tcp ignores EVs: it connects to ``send_to[i].ecmp_addr`` and accepts one
  connection per ``recv_from`` peer.

ECN (``qp.ecn: true``; mrc and rc, tcp ignores it): every UDP packet of the
job is sent ECT(0) (IPV6_TCLASS), the traffic class of every datagram
received is read (IPV6_RECVTCLASS) and a CE mark on a data packet reaches the
QP, whose SACK then echoes it (mrc: the EV goes to SKIP); the congestion
controller is built with ``ecn_capable`` true unless ``cc_params`` sets it
(NSCC then decreases on ECN echo with delay above target, not on delay alone).
Off by default: the packets are then byte for byte those of a job without
the key (traffic class 0). See :mod:`agents.net.udp`.

Control: a Unix stream socket at ``control_socket``, newline-delimited JSON; the
messages (``ready``, ``start``, ``iteration``, ``sample``, ``event``, ``done``,
``failed``, ``stop``) and their framing are defined once in :mod:`agents.protocol`.

After ``done`` the agent lingers (still acknowledging its recv_from peers)
until ``stop``, EOF on the control socket, or ``linger_s``.

Exit status: 0 done; 1 failed (peer unreachable, QP ERR = "job crash",
control socket lost); 2 bad job spec or arguments; 3 stopped before done.
Wrong results are reported (``wrong`` counts), not fatal. Every non-zero
exit prints one clear line on stderr.
"""
from __future__ import annotations

import argparse
import os
import logging
import sys

from .jobspec import JobSpecError, load_job


def realtime(priority: int) -> None:
    """Run this process at SCHED_RR ``priority`` (sched(7)): a runnable agent then takes a core
    from every normal task (the runner, the other runtime's kernel work) at once instead of
    waiting out CFS's wake-up granularity, which made its timers ms late on a busy machine.
    The kernel still keeps 5% of each second for normal tasks (sched_rt_runtime_us).
    OSError (EPERM without CAP_SYS_NICE) if refused."""
    os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(priority))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents",
                                     description="collective agent (one rank of one job), or a host runtime "
                                                 "(several, each in its host's network namespace)")
    parser.add_argument("--job", required=True, action="append", help="path of the job spec JSON (repeat: "
                        "a host runtime serving every job on one loop, agents.runtime)")
    parser.add_argument("--netns", action="append", default=[],
                        help="with several --job: the network namespace file of each job's host, in order "
                             "(e.g. /proc/PID/ns/net)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s agent %(levelname)s %(name)s: %(message)s")
    if len(args.job) > 1 or args.netns:
        if len(args.netns) != len(args.job):
            print(f"agent: error: {len(args.job)} --job but {len(args.netns)} --netns (one each)", file=sys.stderr)
            return 2
    specs = []
    for path in args.job:
        try:
            specs.append(load_job(path))
        except JobSpecError as exc:
            print(f"agent: error: {exc}", file=sys.stderr)
            return 2
    priority = max(spec.rt_priority for spec in specs)
    if priority:
        try:
            realtime(priority)
        except OSError as exc:
            print(f"agent: error: cannot run at SCHED_RR priority {priority}: {exc}", file=sys.stderr)
            return 2
    if args.netns:
        from . import runtime
        try:
            status = runtime.run(specs, args.netns, max(spec.rx_hold_s for spec in specs))
        except OSError as exc:
            print(f"agent: error: host runtime: {exc}", file=sys.stderr)
            return 1
        if status != 0:
            print(f"agent: host runtime of {len(specs)} agents ended with status {status}; see the log above",
                  file=sys.stderr)
        return status
    spec = specs[0]
    from .agent import Agent
    status = Agent(spec).run()
    if status == 1:
        print(f"agent: error: {spec.job} rank {spec.rank} ({spec.host}) failed; see the log above",
              file=sys.stderr)
    elif status == 3:
        print(f"agent: {spec.job} rank {spec.rank} ({spec.host}) stopped by the runner before done",
              file=sys.stderr)
    return status


def profiled(argv: list[str] | None = None) -> int:
    """:func:`main` under cProfile when ``MRC_AGENTS_PROFILE`` names a directory (the stats go to
    ``<dir>/agents-<pid>.prof``, for ``python -m pstats``): where an agent's CPU goes."""
    out = os.environ.get("MRC_AGENTS_PROFILE")
    if not out:
        return main(argv)
    import cProfile
    prof = cProfile.Profile()
    try:
        return prof.runcall(main, argv)
    finally:
        prof.dump_stats(os.path.join(out, f"agents-{os.getpid()}.prof"))


if __name__ == "__main__":
    sys.exit(profiled())
