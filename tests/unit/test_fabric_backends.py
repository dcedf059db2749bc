"""Every fabric implements the whole :class:`testbed.fabric.backend.FabricBackend` the runner
uses (containerlab's rule for its runtimes), and the runner reaches a fabric only through it.
Backends are registered by name: every module of the testbed is imported first, so a backend
registered anywhere is held to the interface here."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

import pytest

import testbed
from testbed.cluster.sharded import ShardedFabric
from testbed.cluster.ssh_fabric import SshShardedFabric
from testbed.fabric.backend import FabricBackend, backend, backends, register_backend
from testbed.fabric.local import Fabric
from testbed.run.agents import agent_command

for _mod in pkgutil.walk_packages(testbed.__path__, "testbed."):   # every registration runs
    if not _mod.name.endswith("__main__"):
        importlib.import_module(_mod.name)
BACKENDS = tuple(backends().values())
MEMBERS = sorted({n for n in vars(FabricBackend) if not n.startswith("_")} | set(FabricBackend.__annotations__))


@pytest.mark.parametrize("cls", BACKENDS, ids=lambda c: c.__name__)
def test_every_backend_implements_every_member_with_its_parameters(cls):
    fields = {f.name for f in dataclasses.fields(cls)}
    for name in MEMBERS:
        assert hasattr(cls, name) or name in fields, f"{cls.__name__} lacks {name}"
        want = inspect.getattr_static(FabricBackend, name, None)
        if not inspect.isfunction(want):
            continue
        # callers pass positionals by position and keyword-only ones by name
        have = inspect.signature(getattr(cls, name)).parameters.values()
        want_params = list(inspect.signature(want).parameters.values())[1:]
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        n_have = sum(p.kind in positional for p in have) - 1
        assert n_have >= sum(p.kind in positional for p in want_params) or \
            any(p.kind is p.VAR_POSITIONAL for p in have), f"{cls.__name__}.{name}: too few parameters"
        names = {p.name for p in have}
        for p in want_params:
            if p.kind is p.KEYWORD_ONLY:
                assert p.name in names or any(q.kind is q.VAR_KEYWORD for q in have), \
                    f"{cls.__name__}.{name} lacks keyword {p.name}"


def test_backends_are_registered_by_name_once():
    assert backends() == {"local": Fabric, "sharded": ShardedFabric, "ssh": SshShardedFabric}
    assert backend("ssh") is SshShardedFabric and Fabric.backend_name == "local"
    with pytest.raises(KeyError, match=r"no fabric backend 'docker' \(registered: local, sharded, ssh\)"):
        backend("docker")
    with pytest.raises(ValueError, match="'local' is testbed.fabric.local.Fabric already"):
        register_backend("local")(type("Other", (), {}))
    assert register_backend("local")(Fabric) is Fabric      # re-registering the same class is harmless


def test_the_runner_names_a_hosts_namespace_through_the_interface():
    class OneHost:
        def host_pid(self, node: str) -> int:
            return {"h0": 4321}[node]
    argv = agent_command("py", OneHost(), [{"host": "h0"}], ["/j/rank0.json"], [0], runtime=True)
    assert argv == ["py", "-m", "agents", "--job", "/j/rank0.json", "--netns", "/proc/4321/ns/net"]
