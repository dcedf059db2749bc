"""Root tier: ``testbed up`` driven through tmux as a user drives it.

A detached tmux session on a private tmux server (its own socket, killed at the end) runs
``python -m testbed up topologies/fat-tree-k4.yaml --no-verify``; the test types
``pingall``, ``evs``, ``path``, ``down``, ``path``, ``exit`` with send-keys and reads
the screen with capture-pane. The fabric's ledger goes to a temporary directory, so the
test knows every process the fabric recorded (and their namespaces) and checks that none
survives the exit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from testbed.fabric.ledger import pid_alive
from tests.conftest import net_namespaces

REPO = Path(__file__).resolve().parents[2]
TMUX = shutil.which("tmux")
PROMPT = "mininet> "
SRC, DST = "h0_0_0", "h3_1_1"

pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (`make setup` installs it)")


class Screen:
    """One tmux session on a private server (``tmux -L socket``)."""

    def __init__(self, socket: str, session: str):
        self.socket, self.session = socket, session

    def tmux(self, *args: str, check: bool = True) -> str:
        return subprocess.run([TMUX, "-L", self.socket, *args], capture_output=True, text=True,
                              check=check, timeout=10).stdout

    def start(self, shell_line: str) -> None:
        self.tmux("-f", "/dev/null", "start-server", ";", "set-option", "-g", "history-limit", "50000", ";",
                  "new-session", "-d", "-s", self.session, "-x", "250", "-y", "50",
                  "bash --norc --noprofile")
        self.type(shell_line)

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", self.session, "-l", line)
        self.tmux("send-keys", "-t", self.session, "Enter")

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", self.session)

    def wait_for(self, predicate, timeout_s: float, what: str) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.text()
            if predicate(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; screen:\n{text[-3000:]}")
            time.sleep(0.1)   # the poll interval of this wait helper

    def command(self, line: str, timeout_s: float = 30.0) -> str:
        """Type ``line`` at the CLI prompt; return what it printed (up to the next prompt)."""
        n = self.text().count(PROMPT)
        self.type(line)
        text = self.wait_for(lambda t: t.count(PROMPT) > n, timeout_s, f"the prompt after {line!r}")
        echoed_and_output = text.split(PROMPT)[n]
        assert echoed_and_output.startswith(line), echoed_and_output
        return echoed_and_output[len(line):].strip("\n")

    def kill(self) -> None:
        self.tmux("kill-server", check=False)


def recorded(ledger_dir: Path) -> dict:
    """The fabric's ledger (one file while it is up): owner PID, recorded processes."""
    files = list(ledger_dir.glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


@pytest.fixture
def cli(tmp_path):
    """``testbed up`` on k4 in a tmux pane, at its first prompt: (screen, ledger dir, ledger).
    If the test did not see it exit, leave the CLI as a user would (Ctrl-C, exit), then kill
    the tmux server."""
    ledger_dir = tmp_path / "ledger"
    screen = Screen(f"mrc-test-{os.getpid()}-{uuid.uuid4().hex[:6]}", "cli")
    cmd = (f"cd {REPO} && HOME={tmp_path} MRC_TESTBED_LEDGER_DIR={ledger_dir} "
           f"{sys.executable} -m testbed up topologies/fat-tree-k4.yaml --no-verify; echo EXIT=$?")
    try:
        screen.start(cmd)
        screen.wait_for(lambda t: PROMPT in t, 90, "the CLI prompt")
        yield screen, ledger_dir, recorded(ledger_dir)
    finally:
        if not exit_status(screen.text()):
            _stop(screen)
        screen.kill()


def assert_torn_down(ledger_dir: Path, ledger: dict, spaces: set[int]) -> None:
    """The fabric's owner, every process it recorded, their namespaces and the ledger are gone."""
    assert not pid_alive(ledger["owner_pid"], ledger.get("owner_starttime"))
    assert [p["pid"] for p in ledger["processes"] if pid_alive(p["pid"], p["starttime"])] == []
    assert not spaces & net_namespaces()
    assert list(ledger_dir.glob("*.json")) == []


def namespaces_of(ledger: dict) -> set[int]:
    spaces = {netns_inode(p["pid"]) for p in ledger["processes"]} - {None}
    assert len(ledger["processes"]) == 36 and len(spaces) == 36   # k4: 16 hosts + 20 switches
    return spaces


def test_a_user_session_pingall_evs_down_path_exit(cli):
    screen, ledger_dir, ledger = cli
    spaces = namespaces_of(ledger)

    out = screen.command("pingall")
    assert "*** Results: 0% dropped (240/240 received)" in out, out
    assert re.search(rf"^{SRC} -> (h\d_\d_\d ?){{15}}$", out, re.M), out

    out = screen.command(f"evs {SRC} {DST}")
    assert f"{SRC} -> {DST}: 4 EV(s)" in out
    assert len(re.findall(r"fcbb:bb00:e000:a00[01]:c00[0-3]:a00[67]:e007:100f", out)) == 4, out

    before = _hops(screen.command(f"path {SRC} {DST} udp 40000 4791"))
    assert before["outcome"] == "delivered", before
    failed = before["links"][1]            # edge -> aggregation: the first fabric link
    out = screen.command(f"down {failed}")
    assert out.startswith(f"{failed}: down"), out
    after = _hops(screen.command(f"path {SRC} {DST} udp 40000 4791"))
    assert failed not in after["links"] or after["outcome"] == "dropped", (before, after)
    assert f"DOWN: {failed}" in screen.command(f"evs {SRC} {DST}")

    assert screen.command("down no-such-link").startswith("*** unknown link 'no-such-link'")
    screen.type("exit")
    text = screen.wait_for(exit_status, 60, "the exit status")
    assert exit_status(text) == "0", text[-2000:]
    assert f"*** reverted 1 fault(s): {failed}" in text
    assert "torn down in" in text
    assert "Traceback" not in text
    assert "mininet Level" not in text and text.count("*** Results:") == 1   # printed once
    assert_torn_down(ledger_dir, ledger, spaces)


def test_sigterm_at_the_prompt_reverts_and_tears_down(cli):
    """Mininet's CLI loop takes every KeyboardInterrupt for Ctrl-C and carries on; SIGTERM
    (which testbed up turns into one) must end it."""
    screen, ledger_dir, ledger = cli
    spaces = namespaces_of(ledger)
    screen.command("rate e0_0-a0_0 20Mbit")   # not the link's own rate (10 Mbit/s): a fault to revert
    os.kill(ledger["owner_pid"], signal.SIGTERM)
    text = screen.wait_for(exit_status, 30, "the exit status")
    assert "*** reverted 1 fault(s): e0_0-a0_0" in text and "torn down in" in text, text[-2000:]
    assert "Traceback" not in text
    assert_torn_down(ledger_dir, ledger, spaces)


def exit_status(text: str) -> str | None:
    """The ``EXIT=N`` line the pane's shell prints when ``testbed up`` has exited."""
    m = re.search(r"^EXIT=(\d+)$", text, re.M)
    return m and m.group(1)


def _hops(out: str) -> dict:
    m = re.search(r"^  hops  (.*) \((delivered|dropped|loop)[^)]*\)$", out, re.M)
    links = re.search(r"^  links (.*)$", out, re.M)
    assert m and links, out
    return {"nodes": m.group(1).split(" -> "), "outcome": m.group(2), "links": links.group(1).split()}


def _stop(screen: Screen) -> None:
    """Leave the CLI the way a user would (Ctrl-C, exit) so the fabric tears itself down."""
    try:
        n = screen.text().count(PROMPT)
        screen.tmux("send-keys", "-t", screen.session, "C-c", check=False)
        try:
            screen.wait_for(lambda t: t.count(PROMPT) > n, 5, "the prompt after Ctrl-C")
        except AssertionError:
            pass   # no new prompt (e.g. the CLI had exited): type exit anyway
        screen.type("exit")
        screen.wait_for(exit_status, 30, "the exit status")
    except Exception:  # noqa: BLE001 - kill-server follows; its SIGHUP kills the node shells
        pass
