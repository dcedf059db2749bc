"""A run's agents on the servers, as the runner sees them (:class:`RemoteAgents`): started by
each server's worker, their control channel relayed, their times moved onto this machine's
clock, their records fetched at the end; :class:`RemoteProcess` is one of them for the
runner's process checks.
"""

from __future__ import annotations

import json
import logging
import queue
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed.cluster.rpc import RemoteError

log = logging.getLogger(__name__)


class RemoteProcess:
    """An agent on a server, as the runner's process checks see it: ``pid`` (on its server)
    and :meth:`poll` (its exit status once its worker pushed it, else None)."""

    def __init__(self, pid: int, server: str):
        self.pid, self.server = pid, server
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


class RemoteAgents:
    """A run's agents started by the workers of ``fabric`` (each job on its host's server; an
    :class:`testbed.cluster.ssh_fabric.SshShardedFabric`: its ``shards`` and ``placement``), as
    the runner sees them: the :class:`testbed.run.control.ControlServer` calls (:meth:`poll`,
    :meth:`send`, :meth:`broadcast`, :meth:`close`; the controller's, :attr:`has_controller` and
    the rest, as with no controller connected) and ``procs`` ({agent: RemoteProcess}).

    ``processes``: how each server runs its agents (None one process per agent, N host
    runtimes, 0 one runtime per core of that server). ``offsets``: each server's clock
    offset from this machine's, s
    (:meth:`testbed.cluster.ssh_fabric.SshShardedFabric.clock_offsets`); every time an agent reports (a sample's ``t``, an
    event's ``t``, an iteration's ``t_start``/``t_end``) is moved onto this machine's clock
    (t - offset), so records from every server share one timeline. A worker that goes away
    makes its agents exit with status -1 (the runner reports them ``crashed``).
    """

    GONE = -1

    def __init__(self, fabric, jobs: list[dict], offsets: dict[str, float],
                 processes: int | None = 0):
        from agents.protocol import AGENT_MESSAGES, LineFramer
        self.fabric, self.offsets = fabric, offsets
        self._inbox: queue.Queue = queue.Queue()
        self._framers = {name: LineFramer(AGENT_MESSAGES) for name in fabric.shards}
        self.where = {job["agent"]: fabric.placement.where[job["host"]] for job in jobs}
        self.procs: dict[int, RemoteProcess] = {}
        for shard in fabric.shards.values():
            shard.on_push = self._on_push
        by_server = {name: [j for j in jobs if self.where[j["agent"]] == name] for name in fabric.shards}
        try:
            with ThreadPoolExecutor(max_workers=len(by_server)) as pool:
                started = dict(zip(by_server, pool.map(
                    lambda name: fabric.shards[name].call("agents_start", jobs=by_server[name],
                                                          processes=processes)["pids"]
                    if by_server[name] else {}, by_server)))
        except BaseException:
            self.close()
            raise
        for name, pids in started.items():
            for rank, pid in pids.items():
                self.procs[int(rank)] = RemoteProcess(pid, name)

    def _on_push(self, server: str, push: dict) -> None:   # a worker's reader thread
        self._inbox.put((server, push))

    def poll(self, timeout_s: float) -> list:
        """The agents' messages that arrive within ``timeout_s`` (after the first, no waiting),
        times on this machine's clock; exits update ``procs``."""
        out: list = []
        try:
            item = self._inbox.get(timeout=max(timeout_s, 0.0)) if timeout_s > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return out
        while item is not None:
            self._take(*item, out)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                item = None
        return out

    def _take(self, server: str, push: dict, out: list) -> None:
        from agents.protocol import ControlProtocolError
        kind = push.get("push")
        if kind == "agent":
            try:
                msgs = self._framers[server].feed(str(push["line"]).encode())
            except ControlProtocolError as exc:
                log.warning("%s: a relayed agent message was not one: %s", server, exc)
                msgs = exc.messages
            out.extend(self._on_clock(msg, self.offsets.get(server, 0.0)) for msg in msgs)
        elif kind == "exit":
            proc = self.procs.get(int(push["rank"]))
            if proc is not None:
                proc.returncode = int(push["code"])
        elif kind == "gone":
            for proc in self.procs.values():
                if proc.server == server and proc.returncode is None:
                    proc.returncode = self.GONE

    @staticmethod
    def _on_clock(msg, offset_s: float):
        import dataclasses
        if not offset_s:
            return msg
        moved = {f: getattr(msg, f) - offset_s for f in ("t", "t_start", "t_end") if hasattr(msg, f)}
        return dataclasses.replace(msg, **moved) if moved else msg

    def send(self, rank: int, msg) -> bool:
        from agents.protocol import encode
        try:
            self.fabric.shards[self.where[rank]].call("agents_send", line=encode(msg).decode(), rank=rank)
            return True
        except (KeyError, RemoteError):
            return False

    def broadcast(self, msg) -> None:
        """``msg`` to every agent, each server's at once (one request per server, in parallel)."""
        from agents.protocol import encode
        line = encode(msg).decode()
        names = sorted(set(self.where.values()))
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
            for name, exc in zip(names, pool.map(lambda n: _try(self.fabric.shards[n].call, "agents_send",
                                                                line=line, rank=None), names)):
                if exc is not None:
                    log.warning("%s: %s", name, exc)

    # -- the controller's side of ControlServer: no controller runs over servers --------------
    # (:func:`testbed.spec.servers_problem` refuses a scenario with one before any server is
    # contacted, and the runner refuses it too); these answer the runner's calls as
    # :class:`testbed.run.control.ControlServer` answers them with no controller connected.
    dropped = 0
    """``ev_stats`` dropped for back-pressure on the way to a controller: none (there is none)."""

    @property
    def has_controller(self) -> bool:
        return False

    def stalled_s(self, rank: int) -> float:
        """No queue waits here for a controller: 0."""
        return 0.0

    def disconnect(self, rank: int) -> None:
        """Nothing to close: only a controller is ever disconnected, and none runs over servers."""

    def to_controller(self, msg) -> bool:
        """False: no controller is connected."""
        return False

    def collect(self, transport_dir: Path) -> dict[str, dict]:
        """Fetch every server's records into ``transport_dir`` as one machine's run leaves them:
        ``samples/rank<a>.jsonl`` and ``logs/rank<a>.log`` per agent (times moved onto this
        clock). Returns ``{server: {"cpu": [records], "sched": [records]}}`` (moved too; each CPU
        record tagged with its ``server``). A server that cannot answer is logged and skipped."""
        from testbed.rundir.write import agent_log, samples_file, write_text
        out = {}
        for name in sorted(set(self.where.values())):
            try:
                got = self.fabric.shards[name].call("agents_collect")
            except RemoteError as exc:
                log.warning("records of %s: %s", name, exc)
                continue
            offset = self.offsets.get(name, 0.0)
            for rank, files in got["ranks"].items():
                rank = int(rank)
                write_text(samples_file(transport_dir, rank),
                           "".join(_moved_line(line, offset) for line in files["samples"].splitlines(True)),
                           f"rank {rank}'s samples from {name}")
                write_text(agent_log(transport_dir, rank), files["log"], f"rank {rank}'s log from {name}")
            out[name] = {kind: [json.loads(_moved_line(line, offset)) for line in got[kind].splitlines()
                                if line.strip()] for kind in ("cpu", "sched")}
            for rec in out[name]["cpu"]:
                rec["server"] = name
        return out

    def close(self) -> None:
        """Stop what still runs on every server (agents_stop); errors are logged."""
        for name, shard in list(self.fabric.shards.items()):
            exc = _try(shard.call, "agents_stop")
            if exc is not None:
                log.warning("%s: agents_stop: %s", name, exc)
            shard.on_push = None


def _try(fn, *args, **kwargs) -> Exception | None:
    try:
        fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the caller logs it
        return exc
    return None


def _moved_line(line: str, offset_s: float) -> str:
    """A JSON-lines record with its ``t`` moved by ``-offset_s``; a line that is not a JSON
    object with a number ``t`` (a killed agent's torn last line) is kept as it is."""
    if not offset_s:
        return line
    try:
        obj = json.loads(line)
        obj["t"] = float(obj["t"]) - offset_s
    except (ValueError, TypeError, KeyError):
        return line
    return json.dumps(obj) + "\n"
