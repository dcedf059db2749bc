"""CLI verbs, one module each (``add_parser(subparsers)`` sets ``func=run``)."""
