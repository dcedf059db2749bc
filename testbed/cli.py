"""Command line: ``testbed validate|up|run|report|clean`` (also ``python -m testbed``)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testbed")
    parser.add_subparsers(dest="verb", required=True)
    parser.parse_args(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
