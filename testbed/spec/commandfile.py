"""A command job's ``workload`` keys -> :class:`testbed.spec.model.WorkloadSpec` (see :mod:`testbed.spec`).

::

    workload:
      command: [python, jobs/ddp_train.py, --steps, "200"]   # or one string, split as a shell would
      hosts: [h0_0_0, h1_0_0, ...]                             # or all; rank order as for collectives
      steps: 200                                               # step reports expected (optional)
      env: {DDP_HIDDEN: "256"}                                 # extra environment (optional)

``command[0]`` ``python`` (or ``python3``) is the testbed's own interpreter (its virtualenv, where
``make setup`` puts PyTorch); any other name is looked up on ``PATH`` or taken as a path.
Relative paths run from the scenario file's directory. ``evs``, ``evs_per_qp``, ``mtu``,
``payload`` and ``order`` mean what they mean for a collective (the mrc backend's QPs).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from yaml.nodes import MappingNode, Node, ScalarNode

from testbed.model.topology import Topology
from testbed.model.units import show
from testbed.spec.common import COLLECTIVE_ONLY, ELEMENT_BYTES, MAX_EVS, MAX_ITERATIONS, ORDERS
from testbed.spec.model import WorkloadSpec
from testbed.spec.yamlread import Reader, join

PYTHON_NAMES = ("python", "python3")
"""``command[0]`` values that mean the testbed's own interpreter."""
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME")
"""Variables the testbed sets for every rank (torchrun's and Gloo's), which ``env`` may not change;
nor may it set any ``TESTBED_*``."""


def command_workload(r: Reader, m: dict[str, Node], topo: Topology | None, seed: int | None, where: str,
                     name: str, scenario_dir: Path) -> WorkloadSpec | None:
    """The command job of mapping ``m`` at ``where``; None after recording its problems."""
    from testbed.spec.scenfile import _hosts, order_hosts
    for key in COLLECTIVE_ONLY:
        if key in m:
            r.error(m[key], f"{where}.{key}", f"{key!r} is a collective's key: a command job runs its own "
                                              "traffic (drop it, or drop 'command')")
    argv = _argv(r, m["command"], f"{where}.command", scenario_dir)
    hosts = _hosts(r, m["hosts"], topo, where)
    order = r.choice(m["order"], f"{where}.order", ORDERS) if "order" in m else "listed"
    steps = r.integer(m["steps"], f"{where}.steps", minimum=1, maximum=MAX_ITERATIONS) if "steps" in m else None
    env = _env(r, m["env"], f"{where}.env") if "env" in m else ()
    evs = r.integer(m.get("evs"), f"{where}.evs", minimum=1, maximum=MAX_EVS)
    evs_per_qp = r.integer(m.get("evs_per_qp"), f"{where}.evs_per_qp", minimum=1, maximum=MAX_EVS)
    if "evs" in m and "evs_per_qp" in m:
        r.error(m["evs_per_qp"], f"{where}.evs_per_qp", "give either evs or evs_per_qp, not both")
    mtu = r.integer(m.get("mtu"), f"{where}.mtu", minimum=1280, maximum=65535)
    from testbed.spec.scenfile import _payload, ev_paths_key
    ev_paths = ev_paths_key(r, m, where)
    payload = _payload(r, m, topo, where)
    if r.problems or None in (argv, hosts, order, env) or (topo is None):
        return None
    n = len(hosts)
    # the mrc backend's ring (all_reduce peers); one float32 per rank is the smallest valid ring job
    return WorkloadSpec("all_reduce", order_hosts(hosts, order, topo, seed), ELEMENT_BYTES * n, ELEMENT_BYTES * n,
                        2, steps or 1, 0, evs=evs, mtu=mtu, order=order, evs_per_qp=evs_per_qp, name=name,
                        payload=payload, command=argv, cwd=str(scenario_dir.resolve()), env=env, steps=steps,
                        ev_paths=ev_paths or "spread")


def _argv(r: Reader, node: Node, path: str, cwd: Path) -> tuple[str, ...] | None:
    """The command as argv: a list of strings, or one string split by :func:`shlex.split`; its
    program must exist (on ``PATH``, as a path from the scenario's directory, or ``python``), and a
    ``python`` command's script (its first argument ending in ``.py``) too."""
    if isinstance(node, ScalarNode):
        text = r.text(node, path)
        try:
            argv = shlex.split(text) if text is not None else None
        except ValueError as exc:
            r.error(node, path, f"cannot split {show(text)} into words: {exc}")
            return None
    else:
        items = r.seq(node, path)
        if items is None:
            return None
        argv = [r.text(item, join(path, i)) for i, item in enumerate(items)]
        if None in argv:
            return None
    if not argv:
        r.error(node, path, "needs at least the program to run")
        return None
    program = argv[0]
    if program not in PYTHON_NAMES and shutil.which(program, path=None) is None \
            and not (cwd / program).is_file():
        r.error(node, path, f"program {show(program)} not found (not on PATH, nor a file in {cwd})")
        return None
    if program in PYTHON_NAMES and len(argv) > 1 and argv[1].endswith(".py") and not (cwd / argv[1]).is_file():
        r.error(node, path, f"script {show(argv[1])} not found (relative paths start in {cwd})")
        return None
    return tuple(argv)


def _env(r: Reader, node: Node, path: str) -> tuple[tuple[str, str], ...] | None:
    """``env``: a mapping of variable names to strings or numbers, none of :data:`RESERVED_ENV`."""
    if not isinstance(node, MappingNode):
        r.error(node, path, f"expected a mapping of variable names to values, got {r.describe(node)}")
        return None
    out = []
    for key_node, value_node in node.value:
        key = key_node.value if isinstance(key_node, ScalarNode) else None
        where = join(path, str(key))
        value = r.value(value_node) if isinstance(value_node, ScalarNode) else None
        if not isinstance(key, str) or not ENV_NAME_RE.fullmatch(key):
            r.error(key_node, where, f"{show(str(key))} is not an environment variable name")
        elif key in RESERVED_ENV or key.startswith("TESTBED_"):
            r.error(key_node, where, f"{key} is set by the testbed for every rank (torchrun's contract)")
        elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
            r.error(value_node, where, f"expected a string or a number, got {r.describe(value_node)}")
        else:
            out.append((key, str(value)))
    return tuple(sorted(out)) if len(out) == len(node.value) else None


def command_controller_problem(r: Reader, node) -> None:
    """A command job takes no ``controller``: the mrc backend runs inside the user's process, with
    no control socket for the controller's commands (DENY, REPLACE_EV) to reach its QPs."""
    if node is not None:
        r.error(node, "controller", "a command job's mrc backend takes no controller commands yet (it has no "
                                    "control socket): remove 'controller' and the ev_* actions")


def command_timeline_problems(r: Reader, timeline, transports: tuple[str, ...]) -> None:
    """A command job's flow targets (``crossed_by``) name Gloo's TCP flows (``gloo-tcp``), which
    exist only once the job runs: the runner traces those busy between the first two step reports
    (:mod:`testbed.fabric.hoptrace`), so such an event needs ``at_iteration`` >= 2, and the
    gloo-tcp run must come before the transports that reuse its choice. MRC's paths are its EVs:
    aim at a link by name for them."""
    for i, e in enumerate(timeline or ()):
        if e.target is None:
            continue
        path = join(join("timeline", i), e.action)
        line = r.line_for(path)
        if e.target.transports != ["gloo-tcp"]:
            r.error(line, path, "a command job's flow targets name its Gloo TCP flows ('gloo-tcp' or "
                                "'gloo-tcp <r>-><r+1>'); MRC's paths are its EVs: name a link for them")
        elif e.at_iteration is None or e.at_iteration < 2:
            r.error(line, path, "a target on Gloo's flows needs 'at_iteration' >= 2: the runner traces the "
                                "job's TCP flows busy between its first two step reports, and resolves it then")
        elif "gloo-tcp" not in transports:
            r.error(line, path, "the target names Gloo's flows: add gloo-tcp to transports (before mrc)")
        elif "mrc" in transports and transports.index("mrc") < transports.index("gloo-tcp"):
            r.error(line, path, "the target names Gloo's flows, which the gloo-tcp run traces and the "
                                "mrc run reuses: list gloo-tcp before mrc in transports")
