"""The leak checks count what this test process started, orphans included, and nothing else."""
from __future__ import annotations

import os
import signal
import subprocess

from tests.conftest import net_namespaces, own_processes


def test_an_orphaned_process_in_its_own_namespace_is_still_counted_as_ours():
    # the shell exits at once: its background job is orphaned and adopted by the test process
    shell = subprocess.run(["sh", "-c", "unshare -n sleep 30 >/dev/null 2>&1 & echo $!"],
                           capture_output=True, text=True, check=True)
    pid = int(shell.stdout)
    try:
        assert pid in own_processes()
        assert os.stat(f"/proc/{pid}/ns/net").st_ino in net_namespaces()
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)          # adopted: ours to reap
    assert pid not in own_processes()


def test_processes_outside_this_one_are_not_counted():
    ours = own_processes()
    assert os.getpid() not in ours and os.getppid() not in ours and 1 not in ours
