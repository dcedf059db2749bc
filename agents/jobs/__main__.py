"""``python -m agents.jobs --job rank<r>.json``: one rank of a command job (:mod:`agents.jobs.launcher`),
started by the runner in the rank's host namespace. Exit status: see the launcher."""
from __future__ import annotations

import argparse
import logging
import sys

from agents.jobs.launcher import EXIT_BAD_SPEC, Launcher
from agents.jobs.spec import CommandSpecError, load_command_spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agents.jobs", description="launcher of one rank of a command job")
    parser.add_argument("--job", required=True, help="path of the launcher spec JSON")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s launcher %(levelname)s %(name)s: %(message)s")
    try:
        spec = load_command_spec(args.job)
    except CommandSpecError as exc:
        print(f"launcher: error: {exc}", file=sys.stderr)
        return EXIT_BAD_SPEC
    return Launcher(spec).run()


if __name__ == "__main__":
    sys.exit(main())
