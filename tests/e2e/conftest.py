"""e2e tier: whole scenarios through the runner on real fabrics (root)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from testbed.fabric.kernel import features
from testbed.report import load_summary
from testbed.run import run_scenario
from testbed.spec import load_scenario
from tests.conftest import net_namespaces, root_interfaces, tier_timeout
from tests.netns.conftest import no_leaks, wait_for  # noqa: F401 (autouse leak check for this tier)

REPO = Path(__file__).resolve().parents[2]

# A scenario here has a 60 s run timeout plus bring-up, trials and teardown, and the first
# test of a module also pays its module fixture's whole run; the sharded run waits up to
# 300 s for its CLI then 120 s for the workers. 900 s covers the slowest with room.
E2E_TIMEOUT_S = 900


def pytest_collection_modifyitems(config, items):
    tier_timeout(items, "e2e", E2E_TIMEOUT_S)


def run_small(tmp_path: Path, text: str) -> tuple[object, dict, set, set]:
    """Write scenario ``text`` (topology paths relative to the repo), run it, return
    (RunResult, summary, namespaces left, interfaces left)."""
    path = tmp_path / "scenario.yaml"
    path.write_text(text.replace("@REPO@", str(REPO)))
    scenario = load_scenario(path, features=features())
    ns_before, if_before = net_namespaces(), root_interfaces()
    console = Console(file=(tmp_path / "console.txt").open("w"), width=120)
    result = run_scenario(scenario, runs_root=tmp_path / "runs", console=console, live=False)
    summary = load_summary(result.run_dir, recompute=True)
    wait_for(lambda: net_namespaces() <= ns_before)
    return result, summary, net_namespaces() - ns_before, root_interfaces() - if_before
