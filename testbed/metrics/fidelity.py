"""Fidelity of the emulation: host CPU busy fraction (a starved emulator measures itself) and
achieved vs configured rate of the busiest link ends."""

from __future__ import annotations

import numpy as np

from .definitions import ACHIEVED_WINDOW_S, BUSIEST_LINKS, CPU_SATURATED_P95, LINK_BIN_S


def cpu_fidelity(cpu: list[dict], t0_s: float, window: tuple[float, float]) -> dict | None:
    """``{mean, p95, samples, saturated}`` of busy_fraction inside ``window``; None without samples."""
    v = np.array([float(c["busy_fraction"]) for c in cpu if window[0] <= c["t"] - t0_s <= window[1]])
    if len(v) == 0:
        return None
    p95 = float(np.percentile(v, 95))
    return {"mean": float(v.mean()), "p95": p95, "samples": int(len(v)), "saturated": p95 >= CPU_SATURATED_P95}


def busiest_links(series: dict[tuple, dict], edges: np.ndarray, window: tuple[float, float],
                  top: int = BUSIEST_LINKS) -> list[dict]:
    """The ``top`` link ends by bytes sent in ``window``: ``achieved_bps``, ``peak_bin_bps``,
    ``mean_bps``, configured ``rate_bps`` (median of samples), ``achieved_fraction`` and ``drops``.

    ``achieved_bps`` is the best mean over ``ACHIEVED_WINDOW_S`` of consecutive bins (the whole
    window's mean if shorter): one 100 ms bin is too short to judge a shaper, since HTB lets a
    burst of frames through (at 5 Mbit/s one 9000-byte frame is 14 ms, 14% of a bin) and the
    counters are read a few ms apart. ``peak_bin_bps`` keeps the single-bin peak."""
    inside = (edges[:-1] >= window[0] - 1e-9) & (edges[1:] <= window[1] + LINK_BIN_S)
    rows = []
    for (link, end), s in series.items():
        thr = s["throughput_bps"][inside]
        rate = s["rate_bps"][~np.isnan(s["rate_bps"])]
        rate_bps = float(np.median(rate)) if len(rate) else None
        k = max(1, round(ACHIEVED_WINDOW_S / LINK_BIN_S))
        if len(thr) > k:
            achieved = float(np.convolve(thr, np.full(k, 1.0 / k), mode="valid").max())
        else:
            achieved = float(thr.mean()) if len(thr) else 0.0
        rows.append({"link": link, "end": end, "tx_bytes": float(s["tx_bytes"][inside].sum()),
                     "achieved_bps": achieved, "peak_bin_bps": float(thr.max()) if len(thr) else 0.0,
                     "mean_bps": float(thr.mean()) if len(thr) else 0.0, "rate_bps": rate_bps,
                     "achieved_fraction": achieved / rate_bps if rate_bps else None,
                     "drops": float(s["drops"].sum())})
    return sorted(rows, key=lambda r: -r["tx_bytes"])[:top]
