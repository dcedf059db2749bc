"""Command line: ``testbed validate|up|run|report|compare|reproduce|clean|worker`` (also ``python -m testbed``).

One module per verb in :mod:`testbed.commands`; each defines ``add_parser(subparsers)``
and ``run(args) -> int``. Exit status: 0 ok; otherwise the ``exit_code`` of the
:class:`testbed.model.errors.TestbedError` family that ended the verb (1 the testbed failed,
2 bad input, 3 a damaged run directory), mapped here, in one place; 130 / 143 interrupted by
SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys

from testbed.model.errors import TestbedError

VERBS = ("validate", "up", "run", "report", "compare", "reproduce", "clean", "worker")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="testbed", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb in VERBS:
        try:
            module = importlib.import_module(f"testbed.commands.{verb}")
        except ModuleNotFoundError as exc:
            if exc.name != f"testbed.commands.{verb}":
                raise
            continue
        module.add_parser(sub)
    _plain_help(parser)
    return parser


_RST = re.compile(r"(?::[a-z]+)+:`~?([^`]+)`|``([^`]+)``|`([^`]+)`")


def plain(text: str | None) -> str | None:
    """``text`` without reStructuredText markup: ````x````, ```x```, ``:func:`x``` -> ``x``
    (the verbs' descriptions come from their docstrings)."""
    return _RST.sub(lambda m: next(g for g in m.groups() if g is not None), text) if text else text


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Strip markup from a parser's description and help texts, and its sub-parsers'."""
    parser.description = plain(parser.description)
    for action in parser._actions:
        if isinstance(action.help, str):
            action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help)
            for sub in action.choices.values():
                _plain_help(sub)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return int(args.func(args) or 0)
    except TestbedError as exc:   # every verb's errors end here: the message, no traceback
        print(f"testbed {args.verb}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:   # Ctrl-C (or the runner's SIGTERM) outside a run: no traceback
        print("testbed: interrupted", file=sys.stderr)
        return 128 + int(getattr(exc, "signum", 2))


if __name__ == "__main__":
    sys.exit(main())
