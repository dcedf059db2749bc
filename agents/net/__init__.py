"""The I/O adapter: the only code under ``agents/`` that touches sockets.

* :mod:`agents.net.loop` — :class:`EventLoop`, the single-threaded ``selectors`` loop of an
  agent or a host runtime (readers and timers, with timer lateness measured);
* :mod:`agents.net.udp` — :class:`Endpoint`, the UDP/IPv6 sockets of the sans-I/O MRC QPs
  (:mod:`agents.mrc`), demultiplexed by QPN, and :class:`Route`, where one EV's datagrams go;
* :mod:`agents.net.control` — :class:`ControlClient`, the agent's end of the Unix control
  socket to its runner (:mod:`agents.protocol`);
* :mod:`agents.net.bench` — MRC packets per CPU-second over :class:`Endpoint` against a
  plain socket loop (``python -m agents.net.bench``).

The protocol cores (:mod:`agents.mrc`, :mod:`agents.collectives`) never import from here;
the channels (:mod:`agents.channels`) join the two.
"""
from .loop import EventLoop, TimerHandle
from .udp import Endpoint, Route

__all__ = ["Endpoint", "EventLoop", "Route", "TimerHandle"]
