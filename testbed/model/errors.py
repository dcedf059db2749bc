"""The testbed's error families: every error the orchestrator raises derives from one of these,
so the CLI maps an error to its exit code in one place (:func:`testbed.commands.exit_code`).

* :class:`InputError` (exit 2): a file, key or argument is wrong; raised before anything is built.
* :class:`RecordsError` (exit 3): a run directory's records are damaged (exit 2 when the path
  is not a run directory at all).
* :class:`TestbedFailure` (exit 1): the testbed itself failed while running (the kernel refused a
  change, an agent crashed, a fault could not be applied).
"""

from __future__ import annotations


class TestbedError(Exception):
    """Base of every orchestrator error; ``exit_code`` is what ``testbed`` exits with."""

    __test__ = False  # a class named Test* is not a pytest test class
    exit_code = 1


class InputError(TestbedError, ValueError):
    """Bad input (a scenario, topology, servers file or CLI argument), found before building."""

    exit_code = 2


class RecordsError(TestbedError, ValueError):
    """A run directory whose records cannot be read as written."""

    exit_code = 3


class TestbedFailure(TestbedError, RuntimeError):
    """The testbed failed while building or running (kernel, agents, faults)."""

    __test__ = False
    exit_code = 1
