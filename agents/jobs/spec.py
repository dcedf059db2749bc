"""A command job's launcher spec (JSON written by the runner): strict parse into :class:`CommandSpec`.

One rank of a command job is one launcher process in the rank's host namespace
(:mod:`agents.jobs.launcher`), which runs the user's command with torchrun's environment.
The runner writes this spec with :meth:`CommandSpec.to_dict`; :func:`parse_command_spec`
reads it back (unknown keys rejected, every problem reported with its key), so
``parse_command_spec(spec.to_dict()) == spec``.
"""
from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields

KIND = "command"
"""The ``kind`` of a command job's spec (an agent's job spec has none)."""
BACKENDS = ("gloo", "mrc")
"""``torch.distributed`` backends a command job may be run under: PyTorch's Gloo over kernel TCP
(ECMP routes) or the testbed's ``mrc`` backend (:mod:`agents.torch_mrc`) over the MRC engine."""


class CommandSpecError(ValueError):
    """The launcher spec is unreadable or invalid; ``problems`` lists every ``key: message``."""

    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        super().__init__(f"bad command job spec {source}: " + "; ".join(problems))


@dataclass(frozen=True)
class CommandSpec:
    """One rank of a command job.

    ``argv``: the command (argv[0] a path or a name on ``PATH``); ``env``: the variables set on
    top of the launcher's environment (torchrun's ``RANK``, ``WORLD_SIZE``, ... and the testbed's
    ``TESTBED_*``: :func:`testbed.spec.commandjobs.command_env`); ``cwd``: its working directory;
    ``stdout``/``stderr``: absolute paths its output goes to; ``steps_path``: where the step
    reports are copied (JSON lines); ``steps``: step reports expected (None: unknown);
    ``agent``: the id of this rank on the control socket; ``backend``: :data:`BACKENDS`;
    ``stop_grace_s``: how long the command gets between SIGTERM and SIGKILL, s."""

    run_id: str
    job: str
    rank: int
    agent: int
    world_size: int
    host: str
    transport: str
    backend: str
    control_socket: str
    argv: tuple[str, ...]
    cwd: str
    stdout: str
    stderr: str
    steps_path: str
    env: dict = field(default_factory=dict)
    steps: int | None = None
    stop_grace_s: float = 3.0
    kind: str = KIND

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["argv"], out["env"] = list(self.argv), dict(self.env)
        return out


_TYPES = {"run_id": str, "job": str, "rank": int, "agent": int, "world_size": int, "host": str, "transport": str,
          "backend": str, "control_socket": str, "argv": list, "cwd": str, "stdout": str, "stderr": str,
          "steps_path": str, "env": dict, "steps": (int, type(None)), "stop_grace_s": (int, float), "kind": str}
_REQUIRED = [f.name for f in fields(CommandSpec) if f.default is MISSING and f.default_factory is MISSING]


def parse_command_spec(obj, source: str = "<spec>") -> CommandSpec:
    """A :class:`CommandSpec` from a JSON object; raises :class:`CommandSpecError` listing every
    missing, unknown or mistyped key and every bad value."""
    if not isinstance(obj, dict):
        raise CommandSpecError(source, [f"expected a JSON object, got {type(obj).__name__}"])
    problems = [f"{k}: unknown key" for k in obj if k not in _TYPES]
    problems += [f"{k}: missing" for k in _REQUIRED if k not in obj]
    for k, v in obj.items():
        want = _TYPES.get(k)
        if want is not None and (not isinstance(v, want) or isinstance(v, bool)):
            problems.append(f"{k}: expected {getattr(want, '__name__', 'a number or null')}, got {type(v).__name__}")
    if problems:
        raise CommandSpecError(source, problems)
    if obj.get("kind", KIND) != KIND:
        problems.append(f"kind: expected {KIND!r}, got {obj['kind']!r}")
    if not obj["argv"] or not all(isinstance(a, str) and a for a in obj["argv"]):
        problems.append("argv: expected a non-empty list of non-empty strings")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in obj["env"].items()):
        problems.append("env: expected string keys and values")
    if obj["backend"] not in BACKENDS:
        problems.append(f"backend: expected one of {', '.join(BACKENDS)}, got {obj['backend']!r}")
    if not 0 <= obj["rank"] < obj["world_size"]:
        problems.append(f"rank: {obj['rank']} is not in a world of {obj['world_size']}")
    if obj.get("steps") is not None and obj["steps"] < 1:
        problems.append("steps: must be >= 1")
    if obj.get("stop_grace_s", 0) < 0:
        problems.append("stop_grace_s: must be >= 0")
    if problems:
        raise CommandSpecError(source, problems)
    return CommandSpec(**{**obj, "argv": tuple(obj["argv"])})


def load_command_spec(path: str) -> CommandSpec:
    """Read and parse a launcher spec file; CommandSpecError if unreadable or invalid."""
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read())
    except (OSError, ValueError) as exc:
        raise CommandSpecError(path, [str(exc)]) from None
    return parse_command_spec(obj, path)
