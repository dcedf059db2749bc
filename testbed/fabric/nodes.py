"""The fabric's Mininet nodes and their shells: switches are :class:`Router` s and hosts
:class:`FabricHost` s, each a bash under ``mnexec`` in its own namespaces; every shell is
spawned at once and then awaited (:func:`await_shells`) instead of one after another.
"""

from __future__ import annotations

import os
import pty
import select
import time

from mininet.node import Host, Node

from testbed.fabric.backend import FabricError


class _ParallelStart:
    """Mininet node whose shell is spawned now and awaited later (see :func:`await_shells`)."""

    def startShell(self, mnopts=None):  # noqa: N802 (Mininet's name)
        cmd = ["mnexec", "-cdn", "env", "PS1=" + chr(127), "bash", "--norc", "--noediting",
               "-is", "mininet:" + self.name]
        self.master, self.slave = pty.openpty()
        self.shell = self._popen(cmd, stdin=self.slave, stdout=self.slave, stderr=self.slave,
                                 close_fds=False)
        self.stdin = os.fdopen(self.master, "r")
        self.stdout = self.stdin
        self.pid = self.shell.pid
        self.pollOut = select.poll()
        self.pollOut.register(self.stdout)
        self.outToNode[self.stdout.fileno()] = self
        self.inToNode[self.stdin.fileno()] = self
        self.execed, self.lastCmd, self.lastPid, self.readbuf = False, None, None, ""
        self.waiting = True


class Router(_ParallelStart, Node):
    """A switch: a Linux IPv6 router in its own namespace."""


class FabricHost(_ParallelStart, Host):
    """A host with one NIC per plane."""


def await_shells(nodes: list[Node], timeout_s: float = 30.0) -> None:
    """Wait for every node's shell prompt (FabricError naming the first late ones after
    ``timeout_s``), then quiet the shells: no history, no echo, no job control."""
    pending = {n.stdout.fileno(): n for n in nodes}
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise FabricError(f"{len(pending)} node shells did not start within {timeout_s}s: "
                              + ", ".join(n.name for n in list(pending.values())[:5]))
        for fd, _ in poller.poll(100):
            node = pending[fd]
            data = node.read(1024)
            if data and data[-1] == chr(127):
                node.waiting = False
                poller.unregister(fd)
                del pending[fd]
    for node in nodes:
        node.sendCmd("unset HISTFILE; stty -echo; set +m")
    for node in nodes:
        node.waitOutput()

