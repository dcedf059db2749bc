"""The runner's scheduler autogroup (root): set for the run, restored after."""
from __future__ import annotations

import os

import pytest

from testbed.run import lifecycle


def _nice() -> int:
    with open(lifecycle.AUTOGROUP) as f:
        return int(f.read().split("nice")[1])


@pytest.mark.skipif(not os.path.exists(lifecycle.AUTOGROUP), reason="kernel without sched autogroup")
def test_autogroup_nice_is_set_and_restored():
    before = _nice()
    prev = lifecycle._autogroup_nice(-7)
    try:
        assert prev == before and _nice() == -7
    finally:
        assert lifecycle._autogroup_nice(before) == -7
    assert _nice() == before
