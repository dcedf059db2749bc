"""nftables in a node's namespace: one JSON transaction through libnftables (Debian
``python3-nftables``), or ``nft -j -f -`` under ``nsenter`` without the binding.

libnftables opens its netlink socket when its context is created, so a fresh context is
created, used and freed inside :func:`testbed.fabric.netlink.netns` for every command.
The runners return ``(rc, output, error text)``; the caller decides what a failure means.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from testbed.fabric.netlink import netns


def have_nft_binding() -> bool:
    """True if Debian's python3-nftables (libnftables JSON API) is importable."""
    try:
        import nftables  # noqa: F401
    except ImportError:
        return False
    return True


def run_binding(fd: int, cmds: list[dict]) -> tuple[int, Any, str]:
    """(rc, parsed JSON output, error text) of one transaction in namespace ``fd``.

    libnftables 1.0.6 opens its netlink socket in nft_ctx_new (checked: a
    context made inside the namespace acts there even when used outside);
    the command runs inside too, so a socket reopened on EINTR stays there.
    """
    import nftables
    with netns(fd):
        ctx = nftables.Nftables()   # opens its netlink socket here, in the namespace
        try:
            ctx.set_json_output(True)
            return ctx.json_cmd({"nftables": cmds})
        finally:
            del ctx                 # nft_ctx_free: the socket must not pin the namespace


def run_nft_binary(fd: int, cmds: list[dict]) -> tuple[int, Any, str]:
    """As :func:`run_binding`, via ``nsenter --net=<fd> nft -j -f -`` (no binding installed)."""
    nft = shutil.which("nft") or "/usr/sbin/nft"
    proc = subprocess.run(["nsenter", f"--net=/proc/self/fd/{fd}", nft, "-j", "-f", "-"],
                          input=json.dumps({"nftables": cmds}), capture_output=True, text=True,
                          pass_fds=(fd,), timeout=30, check=False)
    out = json.loads(proc.stdout) if proc.stdout.strip() else ""
    return proc.returncode, out, proc.stderr


def runner():
    """The nftables runner to use here: :func:`run_binding` if python3-nftables is installed,
    else :func:`run_nft_binary`."""
    return run_binding if have_nft_binding() else run_nft_binary
