"""The gallery of the shipped scenarios (docs/gallery.md): each one run as a user runs it, then the page.

``python -m testbed.tools.gallery run [--only a,b] [--skip c] [--again] [--retry-failed] [--dry-run]``
runs every scenario under ``scenarios/*.yaml`` (top level only: ``scenarios/paper/`` is
``testbed reproduce``'s), one at a time, as ``python -m testbed run scenarios/NAME.yaml`` (the
command ``.venv/bin/testbed run`` and ``make run`` run), with its output captured as plain text
(``NO_COLOR=1``, ``COLUMNS=100``, a pipe: rich draws no colours and no live table). For each it
records in the index (``runs/gallery/index.json``, rewritten after every scenario, so a failure
or Ctrl-C keeps what was gathered) the run directory, the date, the commit (``git rev-parse
--short HEAD``, ``-dirty`` when tracked files differ from it), the wall time, the exit status,
what it printed (stdout: the progress lines and the report; stderr apart), each transport's
outcome and fidelity verdict (``manifest.json`` ``status``, ``summary.json`` ``valid`` and
``invalid_reasons``) and the machine (cores, memory, OS, kernel, load average before the run).
While a scenario runs its output is also echoed and written to ``runs/gallery/NAME.out`` and
``NAME.err``. A scenario already in the index is not run again (resume) unless ``--again``
(``--retry-failed``: the failed ones); an interrupted one always is. A scenario whose command
job needs PyTorch when the virtualenv lacks it is recorded as failed without running
(``make torch`` installs it). Needs root, as ``testbed run`` does.

``python -m testbed.tools.gallery write`` writes ``docs/gallery.md`` from the index: per
scenario (in :func:`shipped` order) its title, what it shows (the file's ``description:`` and its
leading comment block), the command, date, commit, wall time and validity (an invalid run is
shown with the fidelity check's reasons, a failed one with its error, one not run yet says so),
its picture (the run's most telling PNG, :data:`PICTURES`, scaled to ``--max-width`` pixels into
``docs/img/gallery/NAME.png``) and the report in a text block.

Exit status: 0 done (run: every scenario it ran is ``ok``); 1 a scenario failed; 2 bad
arguments, not root, or an index that cannot be read; 130 / 143 the gallery was interrupted
(the running scenario gets the signal, tears down and is recorded as interrupted).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT / "runs" / "gallery" / "index.json"
PAGE = ROOT / "docs" / "gallery.md"
IMG_DIR = ROOT / "docs" / "img" / "gallery"
FORMAT = 1
"""The index's format (``{"format": 1, "scenarios": {NAME: entry}}``)."""
FIRST = "core-link-failure"
"""Shown first: the default of ``make run``; the others follow by name."""
COLUMNS = 100
"""The report's width in characters (rich fits its tables to it)."""
MAX_WIDTH = 1000
"""A gallery picture's largest width in pixels (the plots are 1000-2500 wide at 110 dpi)."""
DONE = ("ok", "failed")
"""Statuses that are results: not run again on resume (``interrupted`` is not one)."""

PICTURES = {
    "fault-flows.png": "the goodput of each flow that crosses the faulted link, around each fault (red dashed: "
                       "fault applied; blue: link restored; green: routing reconverged; orange: detected, "
                       "the first EV retired; brown: the slowest flow recovered)",
    "goodput.png": "aggregate goodput over the run, one row per transport (grey: bins of one sample interval, "
                   "black: their rolling median), with a zoom on each fault window",
    "step-times.png": "every training step's time, per transport",
    "iteration-cdf.png": "the distribution of iteration times (slowest rank) per message size",
}
"""The plots of a run directory (:mod:`testbed.report`), most telling first, with what each shows."""


class GalleryError(Exception):
    """Bad arguments or an unreadable index: one line for the user (exit 2)."""


# -- the scenarios --------------------------------------------------------------------------

def shipped(scenarios_dir: Path = ROOT / "scenarios") -> list[Path]:
    """The shipped scenario files: ``scenarios_dir/*.yaml`` (not its subdirectories), :data:`FIRST`
    first, then by name."""
    files = sorted(Path(scenarios_dir).glob("*.yaml"))
    return sorted(files, key=lambda p: (p.stem != FIRST, p.name))


def select(files: list[Path], only: list[str], skip: list[str]) -> list[Path]:
    """``files`` limited to the names in ``only`` (all when empty) minus those in ``skip``; a name
    is a file's stem (``.yaml`` may be given). Raises GalleryError naming an unknown name."""
    by_name = {p.stem: p for p in files}
    wanted = [n.removesuffix(".yaml") for n in (*only, *skip)]
    if unknown := [n for n in wanted if n not in by_name]:
        raise GalleryError(f"no shipped scenario {', '.join(unknown)} (there are: {', '.join(by_name)})")
    keep = {n.removesuffix(".yaml") for n in only} or set(by_name)
    drop = {n.removesuffix(".yaml") for n in skip}
    return [p for p in files if p.stem in keep and p.stem not in drop]


def to_run(files: list[Path], index: dict, *, again: bool = False, retry_failed: bool = False) -> list[Path]:
    """The files still to run: those without a result in ``index`` (status ``ok`` or ``failed``),
    all of them with ``again``, the failed ones too with ``retry_failed``."""
    entries = index["scenarios"]

    def pending(p: Path) -> bool:
        status = entries.get(p.stem, {}).get("status")
        return again or status not in DONE or (retry_failed and status == "failed")
    return [p for p in files if pending(p)]


def describe(path: Path) -> tuple[str, list[str]]:
    """What a scenario file says of itself: (its ``description:`` or "", the paragraphs of its
    leading comment block, each one string). Raises OSError, yaml.YAMLError."""
    text = Path(path).read_text()
    doc = yaml.safe_load(text) or {}
    paragraphs, lines = [], []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        body = line[1:].strip()
        if body:
            lines.append(body)
        elif lines:
            paragraphs.append(" ".join(lines))
            lines = []
    if lines:
        paragraphs.append(" ".join(lines))
    return str(doc.get("description") or ""), paragraphs


def scenario_name(path: Path) -> str:
    """The scenario's ``name:`` (its run directories' prefix), else the file's stem."""
    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        doc = {}
    return str(doc.get("name") or Path(path).stem)


# -- the index ------------------------------------------------------------------------------

def load_index(path: Path) -> dict:
    """The index at ``path``, or an empty one if there is none. Raises GalleryError if it is not
    an index (bad JSON, another format)."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {"format": FORMAT, "scenarios": {}}
    except (OSError, ValueError) as exc:
        raise GalleryError(f"{path}: not a gallery index: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("scenarios"), dict):
        raise GalleryError(f"{path}: not a gallery index of format {FORMAT}")
    return doc


def save_index(path: Path, index: dict) -> None:
    """Write ``index`` to ``path`` atomically (a reader, or a crash, never leaves half a file);
    makes the directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(index, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- one run --------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What running one command gave: exit status (negative: killed by that signal), its
    stdout and stderr (decoded as UTF-8), wall seconds, and whether the gallery
    stopped it: ``timed_out`` (``--timeout``) or ``signal`` (the gallery's SIGINT / SIGTERM,
    forwarded)."""
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    timed_out: bool = False
    signal: int | None = None


ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _pump(stream, log, echo, chunks: list[str]) -> None:
    """Copy ``stream`` line by line to the file ``log``, to ``echo`` and into ``chunks``."""
    for raw in iter(stream.readline, b""):
        log.write(raw)
        log.flush()
        text = raw.decode("utf-8", "replace")
        chunks.append(text)
        if echo is not None:
            echo.write(text)
            echo.flush()


def run_command(argv: list[str], *, cwd: Path, env: dict, out_path: Path, err_path: Path,
                timeout_s: float | None = None, echo: bool = True) -> Outcome:
    """Run ``argv`` to its end, its stdout and stderr streamed to ``out_path`` and ``err_path``
    (and echoed when ``echo``) and kept. ``timeout_s``: SIGTERM after that many seconds (the
    testbed tears down and exits 143). The command runs in a session of its own so that a
    terminal's Ctrl-C reaches the gallery only, which forwards it once (SIGINT or SIGTERM) and
    waits for the command's teardown. Call from the main thread (signal handlers)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    out_chunks: list[str] = []
    err_chunks: list[str] = []
    with open(out_path, "wb") as out_log, open(err_path, "wb") as err_log:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        pumps = [threading.Thread(target=_pump, args=(proc.stdout, out_log, sys.stdout if echo else None, out_chunks)),
                 threading.Thread(target=_pump, args=(proc.stderr, err_log, sys.stderr if echo else None, err_chunks))]
        for p in pumps:
            p.start()
        got: list[int] = []

        def forward(signum, frame):
            if not got:   # once: a second Ctrl-C must not cut the command's teardown short
                got.append(signum)
                proc.send_signal(signum)
        old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        timed_out = False
        try:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.terminate()
                proc.wait()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            for p in pumps:
                p.join()
    return Outcome(proc.returncode, "".join(out_chunks), "".join(err_chunks), time.monotonic() - t0, timed_out,
                   got[0] if got else None)


def child_env(columns: int = COLUMNS) -> dict:
    """The environment the scenario runs in: ours, with plain output forced (no colour, a fixed
    width, unbuffered so the echo keeps up) and rich's colour forcing removed."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES")}
    env.update(NO_COLOR="1", COLUMNS=str(columns), PYTHONUNBUFFERED="1")
    return env


def commit(root: Path = ROOT) -> str:
    """``git rev-parse --short HEAD`` of ``root``, ``-dirty`` appended when a tracked file differs
    from it (as ``git describe --dirty``); "unknown" without git or a repository."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def machine() -> dict:
    """This machine: ``{"cores": int, "memory_gib": float | None, "os": str, "kernel": str,
    "load_1min": float}`` (load: the 1-minute load average now)."""
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 2**20, 1)   # kB -> GiB
    except OSError:
        pass
    try:
        os_name = platform.freedesktop_os_release().get("PRETTY_NAME", "")
    except OSError:
        os_name = ""
    return {"cores": os.cpu_count(), "memory_gib": mem, "os": os_name, "kernel": platform.release(),
            "load_1min": round(os.getloadavg()[0], 2)}


def needs_missing(python: str, scenario: Path, cwd: Path) -> list[str]:
    """What ``testbed validate --needs`` says the scenario needs that ``python`` cannot import
    (today only ``torch``: a command job run by the testbed's python); [] when the check itself
    fails (``testbed run`` then reports the problem)."""
    try:
        needs = subprocess.run([python, "-m", "testbed", "validate", "--needs", str(scenario)], cwd=cwd,
                               capture_output=True, text=True, timeout=300).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [n for n in needs if subprocess.run([python, "-c", f"import {n}"], cwd=cwd,
                                               capture_output=True).returncode != 0]


RUN_DIR_LINE = re.compile(r"^(?:run|trials|sweep) directory: (\S+)\s*$", re.M)


def find_run_dir(stdout: str, runs_dir: Path, name: str, since: float, cwd: Path) -> Path | None:
    """The run directory a ``testbed run`` made: the first ``run directory: PATH`` line it printed
    (also ``trials``/``sweep directory``), else the newest ``runs_dir/NAME-*`` made at or after
    ``since`` (epoch seconds); None if neither exists."""
    for m in RUN_DIR_LINE.finditer(stdout):
        path = Path(m[1]) if Path(m[1]).is_absolute() else cwd / m[1]
        if path.is_dir():
            return path
    stamp = re.compile(rf"{re.escape(name)}-(?:(?:trials|sweep)-)?\d{{8}}-\d{{6}}(?:-\d+)?")   # new_run_dir's names
    made = [p for p in Path(runs_dir).glob(f"{name}-*")
            if stamp.fullmatch(p.name) and p.is_dir() and p.stat().st_mtime >= since - 1]
    return max(made, key=lambda p: p.stat().st_mtime) if made else None


def _read_json(path: Path) -> dict | None:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def first_run(run_dir: Path) -> Path:
    """A run directory itself, or for a trials or sweep directory its first run (by path)."""
    if (run_dir / "manifest.json").is_file():
        return run_dir
    runs = sorted(p.parent for p in Path(run_dir).glob("**/manifest.json"))
    return runs[0] if runs else run_dir


def run_facts(run_dir: Path) -> dict:
    """What a run directory says of its run: ``{"transports": {NAME: {"status": str, "reason": str,
    "valid": bool | None, "invalid_reasons": [str]}}, "picture": path | None}``: each transport's
    outcome (manifest ``status``; "" when unrecorded), its fidelity verdict (summary.json ``valid``,
    ``invalid_reasons``; None without a summary) and the first of :data:`PICTURES` the directory
    holds (``fault-flows.png`` last unless every transport has flows over the fault: it leaves the
    others out). A trials or sweep directory: its first run's."""
    run = first_run(Path(run_dir))
    manifest = _read_json(run / "manifest.json") or {}
    summary = _read_json(run / "summary.json") or {}
    names = list(manifest.get("transports") or []) + [t for t in summary.get("transports") or {}
                                                      if t not in (manifest.get("transports") or [])]
    transports = {}
    for t in names:
        st = (manifest.get("status") or {}).get(t) or {}
        s = (summary.get("transports") or {}).get(t) or {}
        transports[t] = {"status": st.get("status", ""), "reason": st.get("reason", ""),
                         "valid": s.get("valid"), "invalid_reasons": list(s.get("invalid_reasons") or [])}
    # fault-flows.png compares only the transports with sampled flows over the fault (not gloo-tcp)
    partial = any(not s.get("fault_flows") for s in (summary.get("transports") or {}).values())
    order = [p for p in PICTURES if not (partial and p == "fault-flows.png")] + ["fault-flows.png"]
    picture = next((run / p for p in order if (run / p).is_file()), None)
    return {"transports": transports, "picture": str(picture) if picture else None}


def _rel(path: Path | str | None, root: Path) -> str | None:
    """``path`` relative to ``root`` when under it (the index's and the page's form)."""
    if path is None:
        return None
    path = Path(path)
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def _tail(text: str, n: int = 12) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-n:])


def run_one(scenario: Path, *, root: Path, python: str, runs_dir: Path, log_dir: Path, columns: int = COLUMNS,
            timeout_s: float | None = None, runner=run_command, echo: bool = True,
            check_needs=needs_missing) -> dict:
    """Run one scenario as ``python -m testbed run SCENARIO`` (``--runs-dir`` when not ``runs``)
    from ``root`` and return its index entry (keys: see the module docstring; ``status`` "ok":
    exit 0 and a summary.json, "failed", or "interrupted": the gallery was stopped). ``runner``
    and ``check_needs``: :func:`run_command` and :func:`needs_missing`, or fakes."""
    rel = _rel(scenario, root)
    argv = [python, "-m", "testbed", "run", rel]
    if Path(runs_dir).resolve() != (root / "runs").resolve():
        argv += ["--runs-dir", str(runs_dir)]
    entry = {"scenario": rel, "command": " ".join([".venv/bin/testbed", *argv[3:]]), "argv": argv,
             "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
             "commit": commit(root), "machine": machine()}
    if missing := check_needs(python, Path(rel), root):
        return {**entry, "status": "failed", "exit_status": None, "wall_s": 0.0, "run_dir": None, "report": "",
                "stderr": "", "transports": {}, "picture": None,
                "error": f"not run: the scenario needs {', '.join(missing)}, which {python} cannot import"
                         + (" (`make torch` installs PyTorch)" if "torch" in missing else "")}
    since = time.time()
    out = runner(argv, cwd=root, env=child_env(columns), out_path=log_dir / f"{scenario.stem}.out",
                 err_path=log_dir / f"{scenario.stem}.err", timeout_s=timeout_s, echo=echo)
    stdout, stderr = ANSI.sub("", out.stdout), ANSI.sub("", out.stderr)   # plain even if colour slipped through
    run_dir = find_run_dir(stdout, runs_dir, scenario_name(scenario), since, root)
    facts = run_facts(run_dir) if run_dir else {"transports": {}, "picture": None}
    has_summary = run_dir is not None and (first_run(run_dir) / "summary.json").is_file()
    if out.signal is not None:
        status = "interrupted"
        error = f"the gallery was interrupted (signal {out.signal}); exit status {out.returncode}"
    elif out.timed_out:
        status, error = "failed", f"stopped after {timeout_s:g} s (--timeout); exit status {out.returncode}"
    elif out.returncode == 0 and has_summary:
        status, error = "ok", ""
    else:
        why = _tail(stderr) or _tail(stdout)
        status = "failed"
        error = (f"exit status {out.returncode}" + ("" if has_summary else ", no summary.json")
                 + (f":\n{why}" if why else ""))
    return {**entry, "status": status, "exit_status": out.returncode, "error": error, "signal": out.signal,
            "finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"), "wall_s": round(out.wall_s, 1),
            "run_dir": _rel(run_dir, root), "report": stdout, "stderr": stderr,
            "transports": facts["transports"], "picture": _rel(facts["picture"], root)}


def run_all(files: list[Path], index_path: Path, *, again: bool = False, retry_failed: bool = False,
            say=print, **kw) -> int:
    """Run the ``files`` still to run (:func:`to_run`) one after another, writing the index after
    each; ``kw`` goes to :func:`run_one`. Stops after an interrupted one. Returns the exit status:
    0 every one ran ``ok``, 1 one failed, 128 + signal when interrupted."""
    index = load_index(index_path)
    todo = to_run(files, index, again=again, retry_failed=retry_failed)
    for p in files:
        if p not in todo:
            say(f"gallery: {p.stem}: in the index already ({index['scenarios'][p.stem]['status']}), not run "
                f"(--again runs it)")
    status = 0
    for n, p in enumerate(todo, 1):
        say(f"gallery: [{n}/{len(todo)}] {p.stem}: testbed run {_rel(p, kw.get('root', ROOT))}")
        entry = run_one(p, **kw)
        index["scenarios"][p.stem] = entry
        index["updated"] = entry.get("finished") or entry["started"]
        save_index(index_path, index)
        say(f"gallery: {p.stem}: {entry['status']}" + (f" in {fmt_wall(entry['wall_s'])}" if entry["wall_s"] else "")
            + (f" ({entry['error'].splitlines()[0]})" if entry["error"] else "") + f"; index: {index_path}")
        if entry["status"] == "interrupted":
            return 128 + int(entry.get("signal") or signal.SIGINT)
        if entry["status"] != "ok":
            status = 1
    return status


# -- the page -------------------------------------------------------------------------------

def fmt_wall(seconds: float | None) -> str:
    """``48 s``, ``6 min 5 s``, ``1 h 2 min``."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def fmt_date(iso: str | None) -> str:
    """``2026-11-28 18:46 UTC`` from an ISO timestamp with its offset."""
    if not iso:
        return "-"
    return dt.datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M %Z").strip()


def md(text: str) -> str:
    """``text`` as Markdown prose: ``<`` and ``*`` escaped outside code spans (a scenario's
    comments say ``runs/<run>/`` and ``2^timeout``, which would be HTML and emphasis)."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") and p.endswith("`") and len(p) > 1
                   else p.replace("<", "&lt;").replace("*", r"\*") for p in parts)


def cell(text: str) -> str:
    """``text`` for a Markdown table cell (:func:`md`, pipes escaped, one line)."""
    return md(" ".join(text.split())).replace("|", r"\|")


def fence(text: str, lang: str = "text") -> str:
    """``text`` in a fenced block longer than any backtick run in it, each line's trailing blanks
    dropped (rich pads centred titles)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    mark = "`" * max(3, longest + 1)
    body = "\n".join(line.rstrip() for line in text.rstrip().splitlines())
    return f"{mark}{lang}\n{body}\n{mark}"


def machine_line(m: dict | None) -> str:
    """``2 cores, 23.4 GiB, Debian GNU/Linux 12 (bookworm), Linux 6.18.44``."""
    if not m:
        return "unknown"
    parts = [f"{m.get('cores')} cores", f"{m['memory_gib']:g} GiB" if m.get("memory_gib") else None,
             m.get("os") or None, f"Linux {m['kernel']}" if m.get("kernel") else None]
    return ", ".join(p for p in parts if p)


def validity(entry: dict) -> str:
    """One phrase: ``valid (every transport)``, ``invalid: rc (reason; reason)``, or ``no verdict``."""
    ts = entry.get("transports") or {}
    verdicts = {t: v.get("valid") for t, v in ts.items()}
    if not verdicts or all(v is None for v in verdicts.values()):
        return "no fidelity verdict (no summary.json)"
    bad = [t for t, v in verdicts.items() if v is False]
    if not bad:
        return "valid (every transport)"
    return "**invalid**: " + "; ".join(f"{t} ({'; '.join(ts[t]['invalid_reasons']) or 'no reason given'})"
                                       for t in bad)


def copy_picture(src: Path, dst: Path, max_width: int = MAX_WIDTH) -> None:
    """``src`` (a PNG) as ``dst``, scaled down to ``max_width`` pixels wide when wider and reduced
    to 256 colours (plots have few; a third of the size). Raises OSError."""
    from PIL import Image   # matplotlib's own dependency: loaded only to write the page

    with Image.open(src) as im:
        im = im.convert("RGB")
        if im.width > max_width:
            im = im.resize((max_width, round(im.height * max_width / im.width)), Image.Resampling.LANCZOS)
        im = im.quantize(colors=256, dither=Image.Dither.NONE)
        dst.parent.mkdir(parents=True, exist_ok=True)
        im.save(dst, format="PNG", optimize=True)


def section(path: Path, entry: dict | None, *, root: Path, page_dir: Path, img_dir: Path,
            max_width: int = MAX_WIDTH) -> list[str]:
    """The page's Markdown lines for one scenario (and its picture copied into ``img_dir``)."""
    description, paragraphs = describe(path)
    rel = _rel(path, root)
    out = [f"## {path.stem}", ""]
    if description:
        out += [f"*{md(description)}*", ""]
    out += [f"{md(p)}\n" for p in paragraphs]
    out += [fence(f".venv/bin/testbed run {rel}", "sh"), "",
            f"(`make run SCENARIO={rel}` installs what it needs first, then runs the same.)", ""]
    dst = Path(img_dir) / f"{path.stem}.png"
    if entry is None or entry.get("status") == "interrupted":
        dst.unlink(missing_ok=True)   # an earlier run's picture
        out += ["**Not run yet** for the gallery: `.venv/bin/python -m testbed.tools.gallery run --only "
                f"{path.stem}`, then `write`.", ""]
        return out
    facts = [f"Run of {fmt_date(entry.get('started'))}", f"commit `{entry.get('commit', 'unknown')}`",
             f"wall time {fmt_wall(entry.get('wall_s'))}"]
    if entry.get("exit_status") is not None:
        facts.append(f"exit status {entry['exit_status']}")
    if (load := (entry.get("machine") or {}).get("load_1min")) is not None:
        facts.append(f"load average {load:g} before it")   # a busy machine starves the agents
    out += [", ".join(facts) + f"; {validity(entry)}.", ""]
    if entry.get("status") != "ok":
        out += ["**The run failed**:", "", fence(entry.get("error") or "no error recorded"), ""]
    if ts := entry.get("transports"):
        out += ["| transport | outcome | fidelity check |", "|---|---|---|"]
        for t, v in ts.items():
            outcome = v.get("status") or "-"
            if v.get("reason"):
                outcome += f": {v['reason']}"
            check = {True: "valid", False: "invalid: " + "; ".join(v.get("invalid_reasons") or []),
                     None: "-"}[v.get("valid")]
            out.append(f"| {t} | {cell(outcome)} | {cell(check)} |")
        out.append("")
    picture = Path(root / entry["picture"]) if entry.get("picture") else None
    if picture is None:
        dst.unlink(missing_ok=True)   # an earlier run's picture
    elif picture.is_file():
        copy_picture(picture, dst, max_width)   # else the copy made when the run directory was there
    if picture is not None and dst.is_file():
        what = PICTURES.get(picture.name, picture.name)
        link = os.path.relpath(dst, page_dir)
        out += [f"![{path.stem}: {picture.name}]({link})", "",
                f"*`{picture.name}` of `{entry.get('run_dir')}`: {md(what)}.*", ""]
    else:
        why = "the run directory holds no plot." if entry.get("run_dir") else "no run directory."
        out += [f"No picture: {why}", ""]
    if entry.get("report"):
        out += ["What it printed:", "", fence(entry["report"]), ""]
    if entry.get("stderr", "").strip():
        out += ["On stderr:", "", fence(entry["stderr"]), ""]
    return out


def write_page(files: list[Path], index: dict, *, out: Path = PAGE, img_dir: Path = IMG_DIR, root: Path = ROOT,
               max_width: int = MAX_WIDTH) -> str:
    """Write the gallery page ``out`` for ``files`` from ``index`` (pictures into ``img_dir``);
    returns its text. A scenario of the index that is not among ``files`` is left out."""
    entries = index["scenarios"]
    ran = [entries[p.stem] for p in files if p.stem in entries and entries[p.stem].get("status") in DONE]
    machines = {machine_line({k: v for k, v in (e.get("machine") or {}).items() if k != "load_1min"})
                for e in ran}
    total = sum(e.get("wall_s") or 0 for e in ran)
    lines = [
        "# Gallery of the shipped scenarios", "",
        "Every scenario under `scenarios/` run once as a user runs it (`.venv/bin/testbed run "
        "scenarios/NAME.yaml`, what `make run SCENARIO=...` runs): what it shows, in the scenario "
        "file's own words, its picture and the report it printed. Each section names its run's date, "
        "commit, wall time and whether the fidelity check found every transport valid (an invalid "
        "run is shown with the check's reasons, a failed one with its error). One run of one seed "
        "each: what the scenarios measured over several seeds is on [Results](results.md); the "
        "paper's claims (`scenarios/paper/`) are on [Reproducing the paper](reproducing.md).", "",
        ("Machine: " + "; ".join(sorted(machines)) + "." if machines else "No scenario has been run yet.")
        + (f" The {len(ran)} run{'s' if len(ran) > 1 else ''} took {fmt_wall(total)} together." if ran else ""), "",
        "## Regenerate it", "",
        "As root, from the repository, on a quiet machine (the runs above took the time they name):", "",
        fence(".venv/bin/python -m testbed.tools.gallery run     # each scenario in turn; resumes where it stopped\n"
              ".venv/bin/python -m testbed.tools.gallery write   # this page and docs/img/gallery/", "sh"), "",
        "`run` records each scenario in `runs/gallery/index.json` as it ends (its output also goes to "
        "`runs/gallery/NAME.out` and `.err`) and skips those already there: `--only a,b` and `--skip c` "
        "choose scenarios, `--again` runs them again, `--retry-failed` the failed ones, `--dry-run` "
        "prints the plan. The report is captured as plain text 100 columns wide (`--columns`). "
        "Run it on a quiet machine: the fidelity check calls a run invalid when the agents were "
        "starved of CPU. `write` needs no root and runs nothing.", "",
        "## The scenarios", "",
        "| scenario | what it does | run | wall time | valid |", "|---|---|---|---|---|",
    ]
    for p in files:
        description, _ = describe(p)
        e = entries.get(p.stem)
        if e is None or e.get("status") not in DONE:
            when, wall, ok = "not run yet", "-", "-"
        else:
            when, wall = fmt_date(e.get("started")).split(" ")[0], fmt_wall(e.get("wall_s"))
            ok = "failed" if e["status"] == "failed" else ("yes" if validity(e).startswith("valid") else "no")
        lines.append(f"| [{p.stem}](#{p.stem}) | {cell(description)} | {when} | {wall} | {ok} |")
    lines.append("")
    for p in files:
        lines += section(p, entries.get(p.stem), root=root, page_dir=Path(out).parent, img_dir=img_dir,
                         max_width=max_width)
    text = "\n".join(lines).rstrip() + "\n"
    Path(out).write_text(text)
    return text


# -- the command line -----------------------------------------------------------------------

def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.tools.gallery", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True, metavar="MODE")
    r = sub.add_parser("run", help="run the shipped scenarios one at a time into the index (root)")
    r.add_argument("--only", type=_names, default=[], metavar="A,B", help="only these scenarios (file stems)")
    r.add_argument("--skip", type=_names, default=[], metavar="A,B", help="not these scenarios")
    r.add_argument("--again", action="store_true", help="run scenarios already in the index again")
    r.add_argument("--retry-failed", action="store_true", help="run the index's failed scenarios again")
    r.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    r.add_argument("--runs-dir", type=Path, default=ROOT / "runs", help="testbed run's --runs-dir (default: runs)")
    r.add_argument("--columns", type=int, default=COLUMNS, help=f"the report's width (default {COLUMNS})")
    r.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="stop a scenario (SIGTERM) after this long (default: its own timeouts only)")
    r.add_argument("--python", default=sys.executable, help="the testbed's python (default: this one)")
    w = sub.add_parser("write", help="write docs/gallery.md and its pictures from the index")
    w.add_argument("--out", type=Path, default=PAGE, help="the page (default: docs/gallery.md)")
    w.add_argument("--img-dir", type=Path, default=IMG_DIR, help="its pictures (default: docs/img/gallery)")
    w.add_argument("--max-width", type=int, default=MAX_WIDTH, help=f"a picture's width in pixels at most "
                                                                    f"(default {MAX_WIDTH})")
    for p in (r, w):
        p.add_argument("--index", type=Path, default=INDEX, help="the index (default: runs/gallery/index.json)")
        p.add_argument("--scenarios", type=Path, default=ROOT / "scenarios", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        files = shipped(args.scenarios)
        if args.mode == "write":
            write_page(files, load_index(args.index), out=args.out, img_dir=args.img_dir, max_width=args.max_width)
            print(f"gallery: wrote {args.out} ({len(files)} scenarios; pictures in {args.img_dir})")
            return 0
        files = select(files, args.only, args.skip)
        if args.dry_run:
            todo = to_run(files, load_index(args.index), again=args.again, retry_failed=args.retry_failed)
            for p in files:
                print(f"{p.stem}: {'run' if p in todo else 'in the index, not run'}")
            return 0
        if os.geteuid() != 0:
            raise GalleryError("run needs root, as testbed run does (sudo, or a root shell)")
        return run_all(files, args.index, again=args.again, retry_failed=args.retry_failed, root=ROOT,
                       python=args.python, runs_dir=args.runs_dir.resolve(), log_dir=Path(args.index).parent,
                       columns=args.columns, timeout_s=args.timeout)
    except GalleryError as exc:
        print(f"gallery: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
