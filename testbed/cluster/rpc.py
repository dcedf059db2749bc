"""The runner's RPC client of one server's ``testbed worker`` over SSH (``fabric``: paramiko
underneath): :func:`connect` opens the connection, :class:`RemoteShard` starts the worker and
calls it (JSON lines, see :mod:`testbed.cluster.worker`); a reader thread separates the
replies from the lines the worker pushes (its agents' messages and exits).
"""

from __future__ import annotations

import json
import logging
import queue
import shlex
import sys
import threading
from pathlib import Path
from typing import Callable

from testbed.model.cluster import Server
from testbed.model.errors import TestbedFailure

REPO = Path(__file__).resolve().parents[2]
log = logging.getLogger(__name__)


class RemoteError(TestbedFailure):
    """A worker refused a request, or its channel closed."""


def connect(server: Server, **connect_kwargs):
    """``fabric.Connection`` to ``server`` (its user, port and key; ``connect_kwargs`` are
    paramiko's, e.g. ``sock=`` a socket already connected)."""
    from fabric import Connection
    kwargs = {"look_for_keys": server.key is None, "allow_agent": server.key is None, **connect_kwargs}
    if server.key:
        kwargs["key_filename"] = server.key
    return Connection(str(server.address), user=server.user, port=server.port, connect_kwargs=kwargs)


class RemoteShard:
    """``testbed worker`` on ``server`` over ``connection``; :meth:`call` sends one request.

    A reader thread takes the worker's lines: replies go to the caller waiting in
    :meth:`call`, pushed lines (``{"push": ...}``: the agents' messages and exits) to
    ``on_push(server_name, line)`` (set it before agents start; unset: dropped)."""

    def __init__(self, server: Server, connection, *, timeout_s: float = 120.0):
        self.server = server
        self.connection = connection
        self.timeout_s = timeout_s
        self.on_push: Callable[[str, dict], None] | None = None
        self._lock = threading.Lock()
        self._replies: queue.Queue = queue.Queue()
        connection.open()
        self.channel = connection.client.get_transport().open_session()
        repo = server.repo or str(REPO)
        python = server.python or sys.executable
        self.channel.exec_command(f"cd {shlex.quote(repo)} && exec {shlex.quote(python)} -m testbed worker")
        self._rfile = self.channel.makefile("rb")
        self._wfile = self.channel.makefile_stdin("wb")
        self._reader = threading.Thread(target=self._read, name=f"worker-{server.name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for line in self._rfile:
                msg = json.loads(line)
                if "push" in msg:
                    if self.on_push is not None:
                        self.on_push(self.server.name, msg)
                else:
                    self._replies.put(msg)
        except Exception as exc:  # noqa: BLE001 - a broken channel ends the worker for the caller
            log.debug("%s: worker channel: %s", self.server.name, exc)
        finally:
            self._replies.put(None)   # end of output: every waiting and later call fails
            if self.on_push is not None:
                self.on_push(self.server.name, {"push": "gone"})

    def call(self, op: str, **args) -> dict:
        """One request; the reply without ``ok``. Raises RemoteError naming the server."""
        with self._lock:
            try:
                self._wfile.write(json.dumps({"op": op, **args}).encode() + b"\n")
                self._wfile.flush()
            except OSError as exc:
                raise RemoteError(f"{self.server.name}: worker gone before {op}: {exc}") from None
            try:
                reply = self._replies.get(timeout=self.timeout_s)
            except queue.Empty:
                raise RemoteError(f"{self.server.name}: no reply to {op} within {self.timeout_s:g} s") from None
            if reply is None:
                self._replies.put(None)
        if reply is None:
            err = self.channel.recv_stderr(65536).decode(errors="replace") if self.channel.recv_stderr_ready() else ""
            raise RemoteError(f"{self.server.name}: worker gone during {op} "
                              f"(exit {self.channel.exit_status if self.channel.exit_status_ready() else '?'})"
                              + (f": {err.strip()[-500:]}" if err else ""))
        if not reply.pop("ok", False):
            raise RemoteError(f"{self.server.name}: {op}: {reply.get('error')}")
        return reply

    def close(self) -> None:
        try:
            self.channel.close()
        finally:
            self.connection.close()

