"""The controller process: ``python -m testbed.controller --socket S --jobs DIR --policy P --log F [--resync]``.

Started by the runner for a transport run of a scenario that names a controller. It reads the
run's job specs (the paths of every connection), connects to the runner's control socket
(:mod:`testbed.run.control`; the runner started it, so its peer credentials pass), says
``hello``, then turns every forwarded agent event and operator action into commands through
:class:`testbed.controller.policy.Controller`. Each decision is a JSON line in its log (``t``
wall clock); the runner journals the commands it relays. It exits on ``stop`` or when the
runner closes the socket. With ``--resync`` (the runner restarted it after its predecessor was
lost) it first asks every agent for its connections' EV profiles and decides nothing until its
model is resynchronised (:meth:`testbed.controller.policy.Controller.resync`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import select
import socket
import sys
import time
from pathlib import Path

from agents.jobspec import JobSpecError, load_job
from agents.protocol import TO_CONTROLLER, Event, Hello, LineFramer, Operator, ControlProtocolError, Stop, encode
from testbed.controller.policy import POLICIES, Controller, connections_of

log = logging.getLogger("testbed.controller")


def load_jobs(directory: Path) -> list:
    """The job specs (``*.json``) of a run's jobs directory, by file name."""
    return [load_job(p) for p in sorted(directory.glob("*.json"))]


def serve(sock: socket.socket, controller: Controller, decisions, clock=time.time, *, resync: bool = False) -> int:
    """Say hello (and with ``resync``, send one query per connection), then read messages until
    ``stop`` or EOF, sending each decision's command, and wake for the controller's deadlines
    (:meth:`Controller.next_deadline`: confirmations, unanswered commands, the resync's end);
    0 on a clean end, 1 on a protocol error from the runner."""
    framer = LineFramer(TO_CONTROLLER)
    sock.sendall(encode(Hello("controller")))
    if resync:
        for query in controller.resync(clock()):
            sock.sendall(encode(query))
    while True:
        deadline = controller.next_deadline()
        wait = None if deadline is None else max(deadline - clock(), 0.0)
        readable, _, _ = select.select([sock], [], [], wait)
        msgs = []
        if readable:
            data = sock.recv(1 << 20)
            if not data:
                return 0
            try:
                msgs = framer.feed(data)
            except ControlProtocolError as exc:
                log.error("runner sent a bad message: %s", exc)
                return 1
        cmds = []
        for msg in msgs:
            if isinstance(msg, Stop):
                return 0
            now = clock()
            cmds += controller.on_operator(msg, now) if isinstance(msg, Operator) else \
                controller.on_event(msg, now) if isinstance(msg, Event) else []
        cmds += controller.on_timer(clock())
        _log_decisions(controller, decisions)
        for cmd in cmds:
            sock.sendall(encode(cmd))


def _log_decisions(controller: Controller, decisions) -> None:
    """The decisions not yet in the log, one JSON line each; journaled ones are dropped from
    memory so that a long run does not grow the list."""
    for d in controller.decisions:
        decisions.write(json.dumps(d) + "\n")
    decisions.flush()
    controller.decisions.clear()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.controller", description=__doc__.splitlines()[0])
    p.add_argument("--socket", required=True, help="the runner's control socket")
    p.add_argument("--jobs", required=True, type=Path, help="the run's jobs directory")
    p.add_argument("--policy", choices=POLICIES, default="none")
    p.add_argument("--log", required=True, type=Path, help="decisions, one JSON line each")
    p.add_argument("--resync", action="store_true",
                   help="a restart: resynchronise from the agents' EV profiles before deciding")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        jobs = load_jobs(args.jobs)
    except (OSError, JobSpecError) as exc:
        log.error("cannot read the job specs: %s", exc)
        return 2
    controller = Controller(connections_of(jobs), args.policy)
    log.info("policy %s, %d connections", args.policy, len(controller.conns))
    with open(args.log, "a", opener=lambda path, flags: os.open(path, flags, 0o600)) as decisions, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(args.socket)
        except OSError as exc:
            log.error("cannot connect to %s: %s", args.socket, exc)
            return 1
        return serve(sock, controller, decisions, resync=args.resync)


if __name__ == "__main__":
    sys.exit(main())
