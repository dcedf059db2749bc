"""Collective channels: how one rank's workload reaches its peers, one class per transport
family behind one :class:`Channel` protocol.

* :class:`agents.channels.qp.QPChannel` — MRC or the RC baseline: sans-I/O QPs
  (:mod:`agents.mrc`) on one UDP :class:`agents.net.udp.Endpoint`;
* :class:`agents.channels.tcp.TCPChannel` — kernel TCP, one connection per peer.

The agent (:mod:`agents.agent`) builds one with :func:`open_channel` and drives it only
through :class:`Channel`, whether it runs in a process of its own or in a host runtime.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    import numpy as np

    from ..collectives import Send
    from ..jobspec import JobSpec
    from ..mrc import EVEvent
    from ..net.loop import EventLoop


class Channel(Protocol):
    """What the agent needs of a transport (every method runs on the agent's loop).

    * ``connected`` — every peer connection is up (UDP: at once; TCP: after the handshakes);
    * ``wants_poll`` — the channel has output it could not write yet and wants a turn soon
      without a socket event (TCP's full send buffers);
    * ``idle`` — every posted message has been acknowledged by its peer;
    * :meth:`post` — send one :class:`agents.collectives.Send` (a WRITE_WITH_IMM);
    * :meth:`service` — deliver what the transport produced since the last turn into the
      callbacks given at construction; raises the channel's error (``QPChannelError``,
      ``TCPChannelError``) when a connection has failed for good;
    * :meth:`flows` — cumulative per-connection counters for a sample (the ``flows`` of
      :class:`agents.protocol.Sample`);
    * :meth:`summary` — the ``channel`` item of the done summary;
    * :meth:`command` — a controller command (:class:`agents.protocol.Command`) on the
      connection to a peer: "ok" or why it was refused;
    * :meth:`query` — a restarted controller's query of the connection to a peer: its EV
      profile's EVs with their states, and "ok" (or no EVs and why);
    * :meth:`close` — close every socket; idempotent.
    """

    @property
    def connected(self) -> bool: ...

    @property
    def wants_poll(self) -> bool: ...

    @property
    def idle(self) -> bool: ...

    def post(self, send: Send) -> None: ...

    def service(self, now: float) -> None: ...

    def flows(self) -> list[dict]: ...

    def summary(self) -> dict: ...

    def command(self, peer_host: str, op: str, ev_id: int, new_ev_id: int | None, now: float) -> str: ...

    def query(self, peer_host: str) -> tuple[list[dict], str]: ...

    def close(self) -> None: ...


def open_channel(loop: EventLoop, spec: JobSpec, recv_region: np.ndarray, *,
                 on_arrival: Callable[[int, int], None],
                 on_send_complete: Callable[[int, int], None],
                 on_ev_event: Callable[[EVEvent, str, str], None]) -> Channel:
    """The channel of ``spec.transport`` (``tcp``: :class:`TCPChannel`; ``mrc``/``rc``:
    :class:`QPChannel`, which alone reports EV transitions to ``on_ev_event``). Opens its
    sockets, so call it in the rank's network namespace. Raises what the channel's
    constructor raises (OSError for a socket, ValueError for bad QP parameters)."""
    if spec.transport == "tcp":
        from .tcp import TCPChannel
        return TCPChannel(loop, spec, recv_region, on_arrival=on_arrival,
                          on_send_complete=on_send_complete)
    from .qp import QPChannel
    return QPChannel(loop, spec, recv_region, on_arrival=on_arrival,
                     on_send_complete=on_send_complete, on_ev_event=on_ev_event)
