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


class _Datagrams:
    """A connected pair of Unix datagram sockets; ``b`` is registered with the loop."""

    def __init__(self, loop):
        import socket
        self.a, self.b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.b.setblocking(False)
        self.got = []
        loop.add_reader(self.b, self._read)

    def _read(self):
        while True:
            try:
                self.got.append(self.b.recv(64))
            except BlockingIOError:
                return

    def close(self):
        self.a.close()
        self.b.close()


def _moderated(hold_s):
    clock = FakeClock()
    slept = []

    def sleep(s):
        slept.append(s)
        clock.now += s
    loop = EventLoop(clock, sleep=sleep)
    loop.hold_s = hold_s
    return clock, loop, slept


def test_receive_moderation_holds_the_next_wake_up_and_serves_what_arrived_in_one_pass():
    clock, loop, slept = _moderated(0.001)
    io = _Datagrams(loop)
    io.a.send(b"1")
    loop.run_once(1.0)                   # the first wake-up is not held
    assert io.got == [b"1"] and slept == []
    clock.now += 0.0002
    io.a.send(b"2")
    io.a.send(b"3")
    loop.run_once(1.0)                   # 0.2 ms after the last wake-up: held 0.8 ms, both in one pass
    assert io.got == [b"1", b"2", b"3"]
    assert slept == [pytest.approx(0.0008)]
    assert (loop.holds, loop.hold_sum_s) == (1, pytest.approx(0.0008))
    clock.now += 0.002                   # longer than the hold since the last wake-up: no hold
    io.a.send(b"4")
    loop.run_once(1.0)
    assert io.got[-1] == b"4" and loop.holds == 1
    loop.close()
    io.close()


def test_receive_moderation_never_makes_a_timer_late_nor_outlasts_max_wait():
    clock, loop, slept = _moderated(0.001)
    io = _Datagrams(loop)
    io.a.send(b"1")
    loop.run_once(1.0)
    fired = []
    loop.call_at(clock.now + 0.0003, lambda: fired.append(clock.now))
    loop.run_once(1.0)                   # the hold ends at the timer's deadline
    assert slept == [pytest.approx(0.0003)] and len(fired) == 1
    assert loop.take_timer_late_max_s() == pytest.approx(0.0)
    io.a.send(b"2")
    loop.run_once(0.0)                   # a runtime with agents ready polls: no hold
    assert len(slept) == 1 and io.got[-1] == b"2"
    loop.close()
    io.close()


def test_without_a_hold_the_loop_never_sleeps():
    clock, loop, slept = _moderated(0.0)
    io = _Datagrams(loop)
    for i in range(3):
        io.a.send(b"x")
        loop.run_once(1.0)
    assert slept == [] and loop.holds == 0 and len(io.got) == 3
    loop.close()
    io.close()


def test_the_receive_hold_counts_against_the_scheduling_delay_bound():
    from testbed.metrics.fidelity import emulation_validity
    sched = [{"t": 1.0 + i * 0.1, "ranks": {"0": [0, i * 3_000_000, i * 1000]}} for i in range(10)]   # 3 us/slice
    link_t = [i * 0.1 for i in range(101)]                           # the runner's samplers on time
    args = (sched, [], link_t, None, 0.0, (0.0, 10.0), 0.001)      # base RTT 1 ms: bound 100 us
    assert emulation_validity(*args)["valid"]
    v = emulation_validity(*args, rx_hold_s=0.0001)
    assert not v["valid"] and "receive hold 0.10 ms" in v["reasons"][0]


def test_timer_sources_count_in_the_loops_lateness():
    class Source:
        timers_fired, timer_late_sum_s = 5, 0.02

        def __init__(self):
            self.maxes = [0.004, 0.0, 0.003]

        def take_timer_late_max_s(self):
            return self.maxes.pop(0)

    loop = EventLoop(clock=lambda: 0.0)
    src = Source()
    loop.add_timer_source(src)
    assert loop.timers_fired == 5 and loop.timer_late_sum_s == pytest.approx(0.02)
    assert loop.take_timer_late_max_s() == pytest.approx(0.004)
    loop.run_once(0)                    # sources are read once per wake-up
    assert loop.take_timer_late_max_s() == 0.0
    loop.remove_timer_source(src)       # what it counted stays; what it counts later does not
    src.timers_fired, src.timer_late_sum_s = 9, 1.0
    assert loop.timers_fired == 5 and loop.timer_late_sum_s == pytest.approx(0.02)
    assert loop.take_timer_late_max_s() == pytest.approx(0.003)


class _Source:
    """A timer source (the native endpoint's role) that counts how often it is read."""

    def __init__(self, fired: int, late_sum: float, late_max: float):
        self.fired, self.late_sum, self.late_max, self.reads = fired, late_sum, late_max, 0

    @property
    def timers_fired(self):
        self.reads += 1
        return self.fired

    @property
    def timer_late_sum_s(self):
        self.reads += 1
        return self.late_sum

    def take_timer_late_max_s(self):
        self.reads += 1
        late, self.late_max = self.late_max, 0.0
        return late


def test_timer_sources_are_read_once_per_wake_up_whatever_the_agents_sampling_it():
    clock = FakeClock()
    loop = EventLoop(clock)
    sources = [_Source(2, 0.002, 0.001), _Source(3, 0.003, 0.004)]
    for src in sources:
        loop.add_timer_source(src)
    loop.run_once(0)
    for _ in range(64):                      # 64 agents of one runtime sample in this wake-up
        stats = (loop.timers_fired, loop.timer_late_sum_s, loop.take_timer_late_max_s())
    assert [s.reads for s in sources] == [3, 3]
    assert stats[:2] == (5, pytest.approx(0.005))
    sources[1].fired, sources[1].late_sum, sources[1].late_max = 4, 0.0035, 0.0005   # a timer fires
    assert loop.timers_fired == 5 and loop.take_timer_late_max_s() == 0.0   # counted at the next wake-up
    loop.run_once(0)
    assert (loop.timers_fired, loop.take_timer_late_max_s()) == (6, pytest.approx(0.0005))
    loop.remove_timer_source(sources[1])     # its figures move into the loop's own: never counted twice
    assert loop.timers_fired == 6 and loop.timer_late_sum_s == pytest.approx(0.0055)
    loop.close()
