"""agents.net.loop.EventLoop timer lateness (the agent's measure of emulation starvation), on a fake clock."""
from __future__ import annotations

import pytest

from agents.net import EventLoop


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lateness_is_counted_when_the_callback_runs():
    clock = FakeClock()
    loop = EventLoop(clock)
    fired = []
    loop.call_at(100.010, lambda: fired.append("a"))
    loop.call_at(100.020, lambda: fired.append("b"))
    cancelled = loop.call_at(100.015, lambda: fired.append("x"))
    cancelled.cancel()
    clock.now = 100.050                       # the loop woke 40 ms and 30 ms late
    loop.run_once(0)
    assert fired == ["a", "b"]
    assert loop.timers_fired == 2             # a cancelled timer does not count
    assert loop.timer_late_sum_s == pytest.approx(0.040 + 0.030)
    assert loop.take_timer_late_max_s() == pytest.approx(0.040)
    assert loop.take_timer_late_max_s() == 0.0    # reset when read
    loop.close()


def test_time_spent_in_earlier_callbacks_makes_later_timers_late():
    clock = FakeClock()
    loop = EventLoop(clock)

    def slow():
        clock.now += 0.005

    loop.call_at(100.0, slow)
    loop.call_at(100.0, lambda: None)
    loop.run_once(0)
    assert loop.timer_late_sum_s == pytest.approx(0.005)
    assert loop.take_timer_late_max_s() == pytest.approx(0.005)
    assert loop.timers_fired == 2
    loop.close()


def test_counters_are_cumulative_and_the_max_is_per_read():
    clock = FakeClock()
    loop = EventLoop(clock)
    for late in (0.001, 0.004, 0.002):
        loop.call_at(clock.now, lambda: None)
        clock.now += late
        loop.run_once(0)
    assert loop.timers_fired == 3
    assert loop.timer_late_sum_s == pytest.approx(0.007)
    assert loop.take_timer_late_max_s() == pytest.approx(0.004)
    loop.call_at(clock.now, lambda: None)
    clock.now += 0.0015
    loop.run_once(0)
    assert loop.timers_fired == 4 and loop.take_timer_late_max_s() == pytest.approx(0.0015)
    loop.close()
