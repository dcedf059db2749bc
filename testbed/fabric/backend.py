"""What the runner, the faults, the path tracer and the counters need of a fabric.

:class:`FabricBackend` is the one interface (containerlab's ``runtime.ContainerRuntime`` is the
shape: one interface, several implementations). Three fabrics implement it:
:class:`testbed.fabric.local.Fabric` (one machine), :class:`testbed.cluster.sharded.ShardedFabric`
(several shards built by this process) and :class:`testbed.cluster.ssh_fabric.SshShardedFabric`
(shards built by workers on other servers). The first two share :class:`testbed.fabric.ops.LocalOps`
for the operations that run in a namespace of this machine; the SSH fabric sends them to the
worker of the server that holds the node.

Backends are registered by name, as containerlab registers its runtimes:
:func:`register_backend` (``local``, ``sharded``, ``ssh``; each registers when its module is
imported), :func:`backends`, :func:`backend`. ``tests/unit/test_fabric_backends.py`` imports
every module of the testbed and holds every registered backend to the whole interface.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol, TypeVar, runtime_checkable

from testbed.model.cluster import Placement
from testbed.model.errors import TestbedFailure
from testbed.model.topology import Link, Topology


class FabricError(TestbedFailure):
    """Bring-up or a runtime change of the fabric failed."""


class CounterSource(Protocol):
    """Link-end counters: :meth:`testbed.fabric.counters.LinkCounters.read` records."""

    def read(self) -> list[dict]: ...


@runtime_checkable
class FabricBackend(Protocol):
    """A built (or buildable) fabric for ``topo``.

    Attributes: ``backend_name`` (the name it is registered by, :func:`register_backend`);
    ``topo``; ``have_netem`` (sch_netem exists where the links are shaped);
    ``timings`` (seconds per bring-up phase); ``placement`` (None on one machine);
    ``switch_handles`` (``(link, node) -> EgressHandle`` of the switch programs this process
    holds; empty where they live elsewhere).
    """

    backend_name: str
    topo: Topology
    have_netem: bool
    timings: dict[str, float]

    @property
    def placement(self) -> Placement | None: ...

    @property
    def switch_handles(self) -> dict: ...

    def start(self) -> Any: ...

    def stop(self) -> Any: ...

    def is_local(self, node: str) -> bool:
        """True when a namespace of this process holds ``node`` (a shard holds its own)."""

    def set_link(self, name: str, up: bool) -> None:
        """Take link ``name`` administratively down or up (routers re-plan their routes)."""

    def reconverge(self, failed: Iterable[str] | None = None) -> None:
        """Recompute the ECMP routes around ``failed`` links (default: those down)."""

    @property
    def links_down(self) -> frozenset[str]: ...

    def run_nft(self, node: str, cmds: list[dict]) -> tuple[int, Any, str]:
        """One nftables JSON transaction in ``node``'s namespace: ``(rc, output, error text)``.
        KeyError if the node's namespace is gone."""

    def set_htb(self, link: str, node: str, rate_bps: int) -> None:
        """Shape ``node``'s end of ``link`` to ``rate_bps`` bits/s (HTB, and the switch program's
        virtual queues). KeyError if the namespace is gone, RuntimeError if the kernel refuses."""

    def link_rate_bps(self, link: Link) -> int:
        """The HTB rate now in force on ``link``, bits/s (:meth:`set_htb`'s, else the topology's)."""

    def link_counters(self) -> CounterSource:
        """Every link end's counters, read where the ends live."""

    def send_trace_probes(self, host: str, t, probes: int) -> None:
        """``probes`` trace packets with five-tuple ``t`` from ``host`` (:mod:`testbed.fabric.paths`)."""

    def probe(self, pairs: list[tuple[str, str]] | None = None, *, srv6: bool = True, ecmp: bool = True,
              **kwargs):
        """Reachability of the host pairs (:func:`testbed.fabric.verify.probe`)."""

    def host_pid(self, node: str) -> int:
        """PID of a process of this machine in ``node``'s namespaces (its shell):
        ``/proc/<pid>/ns/net`` is the node's network namespace. KeyError if no namespace of this
        machine holds ``node`` (a fabric over servers starts its agents through its workers)."""

    def popen(self, node: str, argv: list[str], **kwargs):
        """Start ``argv`` inside ``node`` on this machine (a :class:`subprocess.Popen`), recorded
        for cleanup and killed on stop(). KeyError as for :meth:`host_pid`."""

    def start_agents(self, jobs: list[dict], processes: int | None = 0):
        """Start the agents where the hosts live and relay their messages (a
        :class:`testbed.cluster.remote_agents.RemoteAgents`), or None: the runner starts them on this
        machine."""


_BACKENDS: dict[str, type] = {}
_T = TypeVar("_T", bound=type)


def register_backend(name: str) -> Callable[[_T], _T]:
    """Class decorator: the class is the fabric backend called ``name`` (its ``backend_name``).
    ValueError if another class has that name already."""
    def register(cls: _T) -> _T:
        other = _BACKENDS.get(name)
        if other is not None and other is not cls:
            raise ValueError(f"fabric backend {name!r} is {other.__module__}.{other.__qualname__} already")
        _BACKENDS[name] = cls
        cls.backend_name = name
        return cls
    return register


def backends() -> dict[str, type]:
    """The backends registered so far, by name (those of the modules imported)."""
    return dict(_BACKENDS)


def backend(name: str) -> type:
    """The backend class called ``name``; KeyError naming the registered ones."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise KeyError(f"no fabric backend {name!r} (registered: {', '.join(sorted(_BACKENDS)) or 'none'})") from None
