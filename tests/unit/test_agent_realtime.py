"""``python -m agents`` with a job's ``rt_priority``: SCHED_RR asked for, a refusal is exit 2."""
from __future__ import annotations

import json
import os

import agents.__main__ as agent_main
from tests.unit.test_agent import make_jobs


def test_an_agent_with_rt_priority_asks_for_sched_rr_and_exits_2_if_refused(tmp_path, monkeypatch):
    calls = []

    def refuse(pid, policy, param):
        calls.append((pid, policy, param.sched_priority))
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    job = make_jobs(tmp_path, "mrc", world_size=2)[0]
    job["rt_priority"] = 1
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    assert agent_main.main(["--job", str(path)]) == 2
    assert calls == [(0, os.SCHED_RR, 1)]
