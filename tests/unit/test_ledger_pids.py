"""testbed.fabric.ledger.pid_alive: the recorded process, running; not a reused PID, not a zombie."""
from __future__ import annotations

import subprocess
import sys
import time

from testbed.fabric.ledger import pid_alive, proc_starttime


def test_a_running_process_is_alive_and_a_zombie_or_a_reused_pid_is_not():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = proc_starttime(p.pid)
        assert pid_alive(p.pid, start) and pid_alive(p.pid, None)
        assert not pid_alive(p.pid, start + 1)          # same PID, another process
        p.kill()
        deadline = time.monotonic() + 5
        while proc_starttime(p.pid) is not None and pid_alive(p.pid, start) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc_starttime(p.pid) is not None       # exited, not reaped yet: a zombie
        assert not pid_alive(p.pid, start)
    finally:
        p.kill()
        p.wait()
    assert not pid_alive(p.pid, start)                 # reaped: gone
