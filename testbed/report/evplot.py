"""EV state timelines: one row per EV of one rank, coloured by state, from events.jsonl."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from testbed import metrics  # noqa: E402
from testbed.report.plots import controller_lost_lines, fault_lines, save_plot  # noqa: E402

STATE_COLOURS = {"GOOD": "tab:green", "ASSUMED_BAD": "tab:red", "DENIED": "black",
                 "UNKNOWN": "tab:gray", "SKIP": "tab:cyan"}


def ev_segments(transitions: list[dict], t_end: float) -> list[tuple[float, float, str]]:
    """(start, duration, state) segments of one EV from its sorted transitions."""
    state = transitions[0]["old"] if transitions and transitions[0]["old"] else "GOOD"
    t, out = 0.0, []
    for e in transitions:
        out.append((t, max(0.0, e["t_s"] - t), state))
        t, state = e["t_s"], e["new"]
    out.append((t, max(0.0, t_end - t), state))
    return out


def evs_per_flow(s: dict, transitions: list[dict]) -> int:
    """The largest number of EVs of one flow (summary ``flows``; else the EV ids seen in
    transitions per rank, peer and direction). rc's single-path QP has 1."""
    n = max((len(f.get("evs") or ()) for f in s.get("flows") or ()), default=0)
    seen: dict[tuple, set] = {}
    for e in transitions:
        seen.setdefault((e["rank"], e.get("peer"), e.get("dir")), set()).add(e["ev_id"])
    return max([n] + [len(v) for v in seen.values()])


def _busiest_rank(transitions: list[dict]) -> int:
    counts: dict = {}
    for e in transitions:
        counts[e["rank"]] = counts.get(e["rank"], 0) + 1
    return max(sorted(counts), key=lambda r: counts[r]) if counts else 0


def _plot_rank(path: Path, summary: dict, transport: str, trans: list[dict], rank: int,
               crossing: set[tuple[str, object, object]]) -> Path:
    s = summary["transports"][transport]
    sampled = {(f["dir"], f.get("peer"), ev["ev_id"]) for f in s.get("flows") or () if f["rank"] == rank
               for ev in f.get("evs") or ()}
    moved = {(e["dir"] or "tx", e.get("peer"), e["ev_id"]) for e in trans if e["rank"] == rank}
    evs = sampled | moved | crossing
    evs = sorted(evs, key=lambda v: (v[0] != "tx", v[0], str(v[1]), str(type(v[2])), v[2]))
    several = len({(d, p) for d, p, _ in evs}) > 2     # more than one peer per direction: name them
    t_end = max([s["workload_window_s"][1]] + [e["t_s"] for e in trans])
    fig, ax = plt.subplots(figsize=(11, 1.5 + 0.24 * max(1, len(evs))))
    for y, (direction, peer, ev) in enumerate(evs):
        if (direction, peer, ev) not in sampled | moved:     # crossing the fault, but no state ever recorded
            ax.broken_barh([(0, t_end)], (y - 0.4, 0.8), facecolor="white", edgecolor="tab:gray", hatch="//")
            ax.annotate("no EV state recorded", (t_end / 2, y), ha="center", va="center", fontsize=7,
                        bbox={"facecolor": "white", "edgecolor": "none"})
            continue
        mine = [e for e in trans if e["rank"] == rank and (e["dir"] or "tx") == direction
                and e.get("peer") == peer and e["ev_id"] == ev]
        for start, dur, state in ev_segments(mine, t_end):
            ax.broken_barh([(start, dur)], (y - 0.4, 0.8), color=STATE_COLOURS.get(state, "tab:purple"))
    fault_lines(ax, s.get("faults") or [], label=False)
    controller_lost_lines(ax, s, label=True)
    ax.set_yticks(range(len(evs)), [f"{d} {f'{p} ' if several else ''}{ev}" + (" *" if (d, p, ev) in crossing else "")
                                    for d, p, ev in evs], fontsize=7)
    for tick, v in zip(ax.get_yticklabels(), evs):
        if v in crossing:
            tick.set_color("tab:red")
            tick.set_fontweight("bold")
    ax.set_ylabel("EV (tx: requester,\nrx: responder)", fontsize=8)
    ax.set_xlabel("time since run start (s)  (dashed: red = fault applied, blue = restored)")
    ax.set_xlim(0, t_end)
    handles = [matplotlib.patches.Patch(color=c, label=st) for st, c in STATE_COLOURS.items()]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), title="state",
              title_fontsize=7)
    note = "; * = path crosses the faulted link" if crossing else ""
    ax.set_title(f"{summary.get('scenario', '?')} / {transport}: EV states of rank {rank}{note}", fontsize=10)
    fig.tight_layout()
    return save_plot(fig, path)


def plot_ev_timelines(run_dir: Path, summary: dict, transport: str, rank: int | None = None) -> list[Path]:
    """EV state timelines of a transport whose flows have more than one EV (none for tcp, and
    none for rc: one EV per QP says nothing a goodput plot does not).

    With ``rank``: ev-timeline-<transport>.png of that rank. Else, when the summary lists
    ``evs_crossing_fault`` ({rank, dir, peer, ev_id}: EVs whose path crosses the faulted link), one
    ev-timeline-<transport>-rank<r>.png per rank listed there, those EVs starred; else
    ev-timeline-<transport>.png of the rank with the most transitions. Earlier timelines of
    the transport are removed first. EVs start in the ``old`` state of their first
    transition (GOOD without one)."""
    run_dir = Path(run_dir)
    s = summary["transports"][transport]
    for old in run_dir.glob(f"ev-timeline-{transport}.png"):
        old.unlink()
    for old in run_dir.glob(f"ev-timeline-{transport}-rank*.png"):
        old.unlink()
    events = run_dir / transport / "events.jsonl"
    if not s.get("has_evs") or not events.is_file():
        return []
    trans = metrics.ev_transitions(metrics.load_jsonl(events), s["t0_wall_s"])
    if evs_per_flow(s, trans) <= 1:
        return []
    crossing_list = s.get("evs_crossing_fault") or []
    if rank is not None or not crossing_list:
        r = _busiest_rank(trans) if rank is None else rank
        crossing = {(c.get("dir") or "tx", c.get("peer"), c["ev_id"]) for c in crossing_list if c["rank"] == r}
        return [_plot_rank(run_dir / f"ev-timeline-{transport}.png", summary, transport, trans, r, crossing)]
    out = []
    for r in sorted({c["rank"] for c in crossing_list}):
        crossing = {(c.get("dir") or "tx", c.get("peer"), c["ev_id"]) for c in crossing_list if c["rank"] == r}
        out.append(_plot_rank(run_dir / f"ev-timeline-{transport}-rank{r}.png", summary, transport, trans, r,
                              crossing))
    return out
