"""``testbed worker``: build and serve one server's shard of a fabric over stdin/stdout.

Started by the runner over SSH on each server of a ``servers.yaml`` (one per server);
speaks the JSON-lines protocol of :mod:`testbed.cluster.worker`. Not for interactive use.
"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="serve one server's shard over stdin/stdout (started by the runner over SSH)",
                       description=__doc__.splitlines()[0])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from testbed.cluster.worker import main
    return main()
