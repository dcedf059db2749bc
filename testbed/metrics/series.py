"""Time series on fixed bins: counters -> per-bin increments, per-flow samples, aggregate
goodput and link throughput. All vectorised (``np.interp`` per flow or link end)."""

from __future__ import annotations


import numpy as np

from testbed.metrics.definitions import BIN_S, SMOOTH_BINS
from testbed.rundir.tables import FlowKey, FlowSeries, LinkTable, SampleTable


def bin_edges(t0_s: float, t1_s: float, bin_s: float = BIN_S) -> np.ndarray:
    """Edges ``t0, t0+bin, ...`` covering ``[t0, t1]``; shape (nbins+1,), at least one bin."""
    n = max(1, int(np.ceil((t1_s - t0_s) / bin_s - 1e-9)))
    return t0_s + bin_s * np.arange(n + 1)


def binned_increments(t_s: np.ndarray, counter: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per-bin increments of a cumulative counter sampled at ``t_s``: the counter is
    linearly interpolated at the edges (flat outside the samples); counter resets
    clip to 0. Shape (len(edges)-1,), the counter's unit per bin."""
    if len(t_s) == 0:
        return np.zeros(len(edges) - 1)
    order = np.argsort(t_s, kind="stable")
    at = np.interp(edges, np.asarray(t_s, float)[order], np.asarray(counter, float)[order])
    return np.clip(np.diff(at), 0.0, None)


def last_in_bin(t_s: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Value of the last sample inside each bin, NaN for bins without one; shape (nbins,)."""
    out = np.full(len(edges) - 1, np.nan)
    if len(t_s) == 0:
        return out
    idx = np.searchsorted(t_s, edges[1:], side="left") - 1
    ok = (idx >= 0) & (t_s[np.clip(idx, 0, None)] >= edges[:-1])
    out[ok] = np.asarray(values, float)[idx[ok]]
    return out


def rolling_median(values: np.ndarray, window_bins: int = SMOOTH_BINS) -> np.ndarray:
    """Centred rolling median (edges padded with the end values); same shape as ``values``."""
    half = window_bins // 2
    if len(values) == 0 or half == 0:
        return np.asarray(values, float)
    padded = np.pad(np.asarray(values, float), half, mode="edge")
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1), axis=1)




def flow_samples(samples: SampleTable | list[dict], t0_s: float) -> dict[FlowKey, FlowSeries]:
    """Group agent samples (a :class:`SampleTable`, or the records as dicts) into flows keyed
    ``(rank, peer, dir)``, times relative to ``t0_s``. Raises MetricsError on a sample
    without ``t``/``rank``/``flows``."""
    if not isinstance(samples, SampleTable):
        samples = SampleTable.from_records(samples)
    return samples.flows(t0_s)


def aggregate_goodput_bps(flows: dict[FlowKey, FlowSeries], edges: np.ndarray) -> np.ndarray:
    """Sum over rx flows of received bits per bin / bin width; shape (nbins,), bits/s."""
    total = np.zeros(len(edges) - 1)
    for (_, _, direction), fs in flows.items():
        if direction == "rx":
            total += binned_increments(fs.t_s, fs.bytes, edges)
    return total * 8 / np.diff(edges)


def link_series(links: LinkTable | list[dict], t0_s: float, edges: np.ndarray) -> dict[tuple, dict]:
    """Per ``(link, end)``: arrays over ``edges`` bins: ``tx_bytes``, ``drops`` (increments),
    ``throughput_bps``, ``rate_bps`` (configured, last sample in bin, NaN if none).
    ``links``: a :class:`LinkTable` or the records as dicts."""
    if not isinstance(links, LinkTable):
        links = LinkTable.from_records(links)
    out = {}
    width = np.diff(edges)
    for key, c in links.ends.items():
        t = c["t"] - t0_s
        tx = binned_increments(t, c["tx_bytes"], edges)
        out[key] = {"tx_bytes": tx, "throughput_bps": tx * 8 / width,
                    "drops": binned_increments(t, c["drops"], edges),
                    "rate_bps": last_in_bin(t, c["rate_bps"], edges)}
    return out
