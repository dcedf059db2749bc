"""``testbed clean``: remove what crashed runs left, from their ledgers only.

Every process (by PID and start time), named namespace and root-namespace
interface a run records goes; nothing is matched by name pattern. Ledgers
whose owner still runs are left alone unless ``--include-live``.
"""

from __future__ import annotations

import argparse

from rich.console import Console

from testbed.fabric.ledger import LEDGER_DIR, clean, ledgers


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("clean", help="remove what crashed runs left (from their ledgers)",
                       description=__doc__.splitlines()[0])
    p.add_argument("--include-live", action="store_true",
                   help="also clean runs whose owner process still runs")
    p.add_argument("--list", action="store_true", help="only list the ledgers")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console()
    if args.list:
        for ledger in ledgers():
            state = "live" if ledger.owner_alive() else "orphaned"
            console.print(f"{ledger.run_id} {ledger.label}: {len(ledger.processes)} processes ({state})")
        return 0
    done = clean(include_live=args.include_live)
    for run_id, killed in done:
        console.print(f"cleaned {run_id}: {killed} processes killed")
    if not done:
        console.print(f"nothing to clean (ledgers in {LEDGER_DIR})")
    return 0
